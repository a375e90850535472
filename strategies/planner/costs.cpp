#include "strategies/planner/costs.hpp"

#include <algorithm>
#include <set>

namespace remat::planner {
namespace {

// Untimed profiles: a byte saved stands for this many seconds of compute
// (only ratios matter to the solver).
constexpr double kSecondsPerByte = 1e-9;

// Subsets of at most this many tags are tried per block (2^6 variants);
// beyond, only the single tags and all of them.
constexpr std::size_t kMaxTagsEnumerated = 6;

}  // namespace

double recipe_seconds(const BlockSaves& b, const std::vector<std::string>& tags, bool timed) {
  double s = 0;
  for (const auto& x : b.tensors)
    if (x.recomputable && !x.block_input && std::find(tags.begin(), tags.end(), x.tag) != tags.end())
      s += timed ? x.recompute_seconds : kSecondsPerByte * double(x.bytes);
  return s;
}

namespace {

// A block's variants: which of its tags' saved tensors it drops (recomputing
// them in backward), those on the Pareto front of bytes kept, time spent
// and forward peak.
std::vector<Variant> variants(const BlockSaves& b, bool timed) {
  std::set<std::string> tag_set;
  for (const auto& x : b.tensors)
    if (x.recomputable && !x.block_input) tag_set.insert(x.tag);
  const std::vector<std::string> tags(tag_set.begin(), tag_set.end());
  std::vector<std::vector<std::string>> subsets;
  if (tags.size() <= kMaxTagsEnumerated) {
    for (std::size_t mask = 0; mask < (std::size_t(1) << tags.size()); ++mask) {
      std::vector<std::string> s;
      for (std::size_t i = 0; i < tags.size(); ++i)
        if (mask >> i & 1) s.push_back(tags[i]);
      subsets.push_back(s);
    }
  } else {
    subsets.push_back({});
    for (const auto& t : tags) subsets.push_back({t});
    subsets.push_back(tags);
  }
  std::vector<Variant> all;
  for (const auto& s : subsets) {
    Variant v{s, 0, recipe_seconds(b, s, timed)};
    std::vector<bool> dropped(b.tensors.size(), false);
    for (std::size_t i = 0; i < b.tensors.size(); ++i) {
      const auto& x = b.tensors[i];
      dropped[i] = x.recomputable && !x.block_input && std::find(s.begin(), s.end(), x.tag) != s.end();
      if (dropped[i]) v.dropped += x.bytes;
    }
    v.forward_peak = forward_peak_dropping(b, dropped);
    v.recompute_peak = forward_peak_dropping(b, dropped, /*recomputed=*/true);
    all.push_back(std::move(v));
  }
  // Keep the Pareto front (the empty subset always survives: it costs nothing).
  std::vector<Variant> front;
  for (std::size_t i = 0; i < all.size(); ++i) {
    bool dominated = false;
    for (std::size_t j = 0; j < all.size() && !dominated; ++j)
      dominated = j != i && all[j].dropped >= all[i].dropped && all[j].seconds <= all[i].seconds &&
                  all[j].forward_peak <= all[i].forward_peak && all[j].recompute_peak <= all[i].recompute_peak &&
                  (all[j].dropped > all[i].dropped || all[j].seconds < all[i].seconds ||
                   all[j].forward_peak < all[i].forward_peak || all[j].recompute_peak < all[i].recompute_peak ||
                   j < i);
    if (!dominated) front.push_back(all[i]);
  }
  std::sort(front.begin(), front.end(), [](const Variant& a, const Variant& b) { return a.dropped < b.dropped; });
  return front;
}

}  // namespace

ChainCosts chain_costs(const SaveProfile& p, bool allow_offload) {
  ChainCosts c;
  c.allow_offload = allow_offload;
  c.outside_peak = p.outside_peak;
  c.tail_peak = p.tail_peak;
  c.copies_in_flight = p.copies_in_flight;
  c.timed = p.timed;
  std::int64_t all_saved = 0;
  for (const auto& b : p.blocks) all_saved += b.saved;
  c.step_seconds = p.timed ? p.step_seconds : 3 * kSecondsPerByte * double(all_saved);
  for (const auto& b : p.blocks) {
    BlockCosts k;
    k.name = b.name;
    k.saved = b.saved;
    k.input = b.input;
    // A block's inputs that the block before saved (revformer's first
    // stream) are live beside its forward wherever that block does not keep
    // them: the solver, which does not follow what the block before kept,
    // counts them always (over by them where it does; predict() is exact).
    const std::int64_t earlier = earlier_saved_input(b);
    k.forward_peak = b.forward_peak + earlier;
    k.backward_peak = b.backward_peak;
    k.recompute_beside = b.recompute_beside;
    k.context = b.context;
    k.outside_before = b.outside_before;
    k.unsaved_input = unsaved_input(b);
    k.segment_first_forward = segment_forward_peak(b, true);
    k.segment_forward = segment_forward_peak(b, false) + earlier;
    k.new_stack = b.new_stack;
    k.forward_seconds = p.timed ? b.forward_seconds : kSecondsPerByte * double(b.saved);
    k.offload_seconds = p.offload_seconds_per_byte * double(b.saved);
    k.variants = variants(b, p.timed);
    for (Variant& v : k.variants) v.forward_peak += earlier, v.recompute_peak += earlier;
    c.blocks.push_back(std::move(k));
  }
  return c;
}

}  // namespace remat::planner
