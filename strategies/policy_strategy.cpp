#include "strategies/policy_strategy.hpp"

#include <algorithm>

#include "autodiff/saved_tensor.hpp"

namespace remat {
namespace {

std::string segment_name(const Segment& s, const BlockInfo& info) {
  return s.first == s.last ? info.name : "blocks " + std::to_string(s.first) + "-" + std::to_string(s.last);
}

}  // namespace

// Where each tensor a block saves goes: asks the policy, then keeps it on
// the device, hands it to the offload pool's group for this block, or
// replaces it by its recipe. Also the storage a segment's inputs are saved
// through (its `segment_input` set while they are).
class PolicyStrategy::Router final : public Storage {
 public:
  explicit Router(const Policy& policy) : policy_(policy) {}
  void enter(const BlockInfo& block, bool segment_input, const Tensors& inputs) {
    block_ = &block;
    segment_input_ = segment_input;
    inputs_.clear();
    context_.clear();
    const std::size_t carried = inputs.size() - std::size_t(block.context);
    for (std::size_t i = 0; i < inputs.size(); ++i) (i < carried ? inputs_ : context_).push_back(inputs[i].id());
  }
  void leave() {
    block_ = nullptr;
    inputs_.clear();
    context_.clear();
  }
  std::shared_ptr<Packed> pack(const Tensor& t) override {
    if (!block_) return device_.pack(t);
    // Context is kept, once for every block (BlockInfo::context).
    if (std::count(context_.begin(), context_.end(), t.id()) > 0) return device_.pack(t);
    const bool input = std::count(inputs_.begin(), inputs_.end(), t.id()) > 0;
    const SavedTensorInfo info{t.tag(), *block_, t.shape(), std::int64_t(t.nbytes()), t.recipe() != nullptr,
                               segment_input_, input};
    switch (policy_.decision(info)) {
      case Decision::recompute:
        if (t.recipe()) return recompute(t);
        return device_.pack(t);  // no recipe: it cannot be recomputed alone
      case Decision::offload: return pool().pack(t);
      default: return device_.pack(t);
    }
  }
  void begin_group(const std::string& name, RegionTrace* trace) override {
    trace_ = trace;
    device_.begin_group(name, trace);
    pool().begin_group(name, trace);
  }
  void end_group() override {
    device_.end_group();
    pool().end_group();
    trace_ = nullptr;
    block_ = nullptr;
  }
  void reset() override {
    if (pool_) pool_->reset();
  }
  void forward_over() {
    if (pool_) pool_->settle_in_flight();
  }

 private:
  OffloadStorage& pool() {
    if (!pool_) pool_ = std::make_unique<OffloadStorage>();
    return *pool_;
  }
  std::shared_ptr<Packed> recompute(const Tensor& t) {
    if (trace_) {
      trace_->saved += std::int64_t(t.nbytes());
      trace_->dropped += std::int64_t(t.nbytes());
      trace_->saves.push_back(std::string(current_op()) + ": recompute " + t.tag() + " " + to_string(t.shape()) + " " +
                              human_bytes(double(t.nbytes())));
    }
    return recompute_later(t, "block " + block_->name + ", " + t.tag() + " saved by " + current_op(), trace_);
  }

  const Policy& policy_;
  const BlockInfo* block_ = nullptr;
  bool segment_input_ = false;
  std::vector<const void*> inputs_;   // the block's inputs' storage
  std::vector<const void*> context_;  // and its context inputs' 
  RegionTrace* trace_ = nullptr;
  KeepStorage device_;
  std::unique_ptr<OffloadStorage> pool_;  // made on first use: most policies never offload
};

PolicyStrategy::PolicyStrategy(std::string spec, Policy policy)
    : Strategy(std::move(spec)), policy_(std::move(policy)), router_(std::make_unique<Router>(policy_)) {}

PolicyStrategy::~PolicyStrategy() = default;

void PolicyStrategy::forward_over() { router_->forward_over(); }

void PolicyStrategy::reset() {
  region_.reset();
  router_->reset();
}

Tensors PolicyStrategy::run(const BlockInfo& info, const Tensors& inputs, const BlockBody& body) {
  Tensors out = run_block(info, inputs, body);
  // After the last block's forward (run() is the forward's alone: a
  // recomputation replays the bodies) the offload copies still in flight are
  // waited for (the last block ran meanwhile) and their device tensors let
  // go: the head and every backward run without them.
  if (info.index == info.count - 1) forward_over();
  return out;
}

Tensors PolicyStrategy::run_block(const BlockInfo& info, const Tensors& inputs, const BlockBody& body) {
  if (const auto segment = policy_.segment_of(info)) {
    const std::string name = segment_name(*segment, info);
    RegionTrace* trace = trace_region(name);
    // The region saves its inputs through the router when it begins, or
    // later, in a block of its own, if they need no gradient.
    router_->enter(info, /*segment_input=*/true, inputs);
    // A new stack starts a region of its own: a region's recomputation feeds
    // each block the outputs of the one before.
    if (info.index == segment->first || !region_ || info.new_stack)
      region_ = RecomputeRegion::begin(name, inputs, *router_, trace, segment->inner, info.context);
    Tensors out = run_traced(trace, [&] { return region_->run(info, inputs, body); });
    router_->leave();
    return out;
  }
  region_.reset();
  RegionTrace* trace = trace_region(info.name);
  router_->begin_group(info.name, trace);
  router_->enter(info, /*segment_input=*/false, inputs);
  Tensors out = run_traced(trace, [&] {
    SavedTensorHooksScope hooks(*router_);
    return body(inputs);
  });
  router_->end_group();
  if (trace && trace->saved == 0 &&
      std::none_of(inputs.begin(), inputs.end(), [](const Tensor& x) { return x.requires_grad(); }))
    trace->saves.push_back("nothing saved: no input needs a gradient and its parameters are frozen");
  return out;
}

int PolicyStrategy::reruns(const BlockInfo& block) const {
  int n = 0;
  for (const Policy* p = &policy_; p;) {
    const auto segment = p->segment_of(block);
    if (!segment) break;
    ++n;
    p = segment->inner.get();  // a sub-segment inside runs the block once more
  }
  return n;
}

MemoryPrediction PolicyStrategy::predict(const SaveProfile& p) const { return predict_policy(p, policy_); }

namespace {

// Which of each block's saved tensors (BlockSaves::tensors) are on the
// device at a moment of the walk: none of a segment's block (placeholders).
using OnDevice = std::vector<std::vector<bool>>;

// Whether the earlier block that saved an input keeps it on the device now.
bool kept_there(const BlockSaves::EarlierSave& e, const OnDevice& on_device) {
  const auto& kept = on_device[e.block];
  return e.index >= 0 && std::size_t(e.index) < kept.size() && kept[std::size_t(e.index)];
}

// A block's inputs that an earlier block saved but does not keep on the
// device now: live beside its forward, and in no count but this one.
std::int64_t unkept_earlier(const BlockSaves& b, const OnDevice& on_device) {
  std::int64_t bytes = 0;
  for (const auto& e : b.inputs_saved_earlier)
    if (!kept_there(e, on_device)) bytes += e.bytes;
  return bytes;
}

// The peak while a segment's blocks [first, last] are recomputed and run
// backward, with `held` on the device from before: a block the recomputation
// keeps plainly is re-run (its forward's working set, beside what the
// segment's earlier blocks saved, the segment's input and what the last
// block's backward had made when it asked for the recomputation) and keeps
// what it saves, less what `inner` drops, until its backward; a sub-segment
// keeps only its input, its blocks re-run without saving (unless it ends the
// segment), and is recomputed the same way in its turn. `on_device`: which
// saves each block keeps as the recomputation starts (a copy: it re-runs some).
std::int64_t recompute_peak(const SaveProfile& p, int first, int last, const Policy* inner, std::int64_t held,
                            OnDevice on_device) {
  const int L = int(p.blocks.size());
  const std::int64_t beside = p.blocks[std::size_t(last)].recompute_beside;
  std::int64_t peak = 0, saved = 0;
  // The segment's input, held while the recomputation runs (not after: what
  // the backward needs of it, the first block saved): the first block's
  // forward counts it (live then), later blocks' do not, nor does `saved`
  // unless the first block saves it (a sub-segment there keeps it: `saved`).
  std::int64_t input = 0;
  for (int k = first; k <= last; ++k) {
    const BlockSaves& b = p.blocks[std::size_t(k)];
    const BlockInfo info{k, L, b.name, 0, b.new_stack};
    if (const auto seg = inner ? inner->segment_of(info) : std::nullopt) {
      const int end = std::min(seg->last, last);
      // Recomputed in the backward, after this recomputation let go of its input.
      for (int j = k; j <= end; ++j) on_device[std::size_t(j)].clear();
      peak = std::max(peak, recompute_peak(p, k, end, seg->inner.get(), held + saved, on_device));
      if (end < last)
        for (int j = k; j <= end; ++j)
          peak = std::max(peak, held + input + saved + beside + b.input + segment_forward_peak(p.blocks[std::size_t(j)], j == k));
      saved += b.input;
      k = end;
      continue;
    }
    std::int64_t dropped = 0;
    std::vector<bool> drops(b.tensors.size(), false);
    if (inner)
      for (std::size_t t = 0; t < b.tensors.size(); ++t) {
        const auto& x = b.tensors[t];
        drops[t] = x.recomputable &&
                   inner->decision({x.tag, info, x.shape, x.bytes, true, false, x.block_input}) == Decision::recompute;
        if (drops[t]) dropped += x.bytes;
      }
    // The last block's recomputation stops at its last save.
    peak = std::max({peak, held + input + saved + beside + forward_peak_dropping(b, drops, k == last) +
                               unkept_earlier(b, on_device),
                     held + saved + b.backward_peak});
    on_device[std::size_t(k)].assign(b.tensors.size(), true);
    for (std::size_t t = 0; t < b.tensors.size(); ++t) on_device[std::size_t(k)][t] = !drops[t];
    if (k == first) input = unsaved_input(b);
    saved += b.saved - dropped;
  }
  return peak;
}

// The offload groups a forward makes, as predict_policy walks it: the last
// one's bytes (a fetch brings it along with its own group's) and, where
// offloading copies, its device bytes, in flight until the next group starts
// its copies or the last block's forward ends.
struct OffloadGroups {
  bool copies = false;
  std::int64_t last = 0, in_flight = 0;
  void made(std::int64_t bytes) {
    if (bytes > 0) last = bytes, in_flight = copies ? bytes : 0;
  }
};

// A segment's kept and offloaded input bytes, as it starts at block b: an
// input an earlier block keeps on the device is counted there, not here.
std::pair<std::int64_t, std::int64_t> segment_inputs(const BlockSaves& b, const BlockInfo& info, const Policy& policy,
                                                     const OnDevice& on_device) {
  std::int64_t kept = 0, offloaded = 0;
  for (std::size_t q = 0; q < b.inputs.size(); ++q) {
    const auto& x = b.inputs[q];
    const bool there = std::any_of(b.inputs_saved_earlier.begin(), b.inputs_saved_earlier.end(),
                                   [&](const auto& e) { return e.input == q && kept_there(e, on_device); });
    if (there) continue;
    const bool off = policy.decision({x.tag, info, x.shape, x.bytes, false, true, true}) == Decision::offload;
    (off ? offloaded : kept) += x.bytes;
  }
  return {kept, offloaded};
}

// What a plain block does with its saves under the policy: bytes kept on
// the device and offloaded, which it recomputes, which stay on the device.
struct PlainSaves {
  std::int64_t kept = 0, offloaded = 0;
  std::vector<bool> recomputed, on_device;
};
PlainSaves plain_saves(const BlockSaves& b, const BlockInfo& info, const Policy& policy) {
  PlainSaves s{0, 0, std::vector<bool>(b.tensors.size(), false), std::vector<bool>(b.tensors.size(), false)};
  for (std::size_t k = 0; k < b.tensors.size(); ++k) {
    const auto& x = b.tensors[k];
    const Decision d = policy.decision({x.tag, info, x.shape, x.bytes, x.recomputable, false, x.block_input});
    if (d == Decision::recompute && x.recomputable) s.recomputed[k] = true;
    else if (d == Decision::offload) s.offloaded += x.bytes;
    else s.kept += x.bytes, s.on_device[k] = true;
  }
  return s;
}

// A plain block's backward peak beside what earlier blocks keep. Offloading,
// its group is fetched at the backward's first read of a save and the group
// before it sent for then (the fetch brings it along): from that read on,
// that group is beside it. Before it, the block's own group is there (the
// block after it sent for it), unless no block after it offloaded: counted
// as there (over by it for the last offloaded block, never under). Profiles
// made up without the split (0, 0) peak after the read.
std::int64_t offloaded_backward(const BlockSaves& b, std::int64_t offloaded, std::int64_t previous_group) {
  if (offloaded == 0) return b.backward_peak;
  const std::int64_t after = b.backward_before_read + b.backward_after_read > 0 ? b.backward_after_read : b.backward_peak;
  return std::max(b.backward_before_read, previous_group + after);
}

}  // namespace

// The moments of a step, in order, with what is on the device at each:
// - a plain block's forward: what earlier blocks keep on the device, the
//   offload group in flight (SaveProfile::copies_in_flight; none after the
//   last block's forward), and its own working set less what it recomputes
//   instead of saving;
// - a segment block's forward: earlier blocks' kept bytes, the segment's kept
//   inputs, the group in flight (its own offloaded inputs, once the segment
//   has offloaded them) and its working set without its saves (they are
//   placeholders);
// - the end of forward: everything kept and the head's working set;
// - a plain block's backward: earlier blocks' kept bytes, the previous
//   offload group if this block's own group is fetched (the fetch brings the
//   previous one with it), and its backward working set;
// - a segment's recomputation and backward: earlier blocks' kept bytes and
//   what recompute_peak says.
MemoryPrediction predict_policy(const SaveProfile& p, const Policy& policy) {
  const int L = int(p.blocks.size());
  MemoryPrediction m;
  std::int64_t device = 0;  // kept on the device by the blocks so far
  OffloadGroups groups{p.copies_in_flight};
  std::int64_t segment_input = 0;   // the current segment's kept inputs
  std::int64_t segment_held = 0;    // on the device during the current segment's backward, from before it
  int segment_first = 0;
  bool segment_open = false;  // the current segment has started keeping its input
  std::int64_t open_input = 0;  // segment_input while that segment runs its forward, not yet in `device`
  OnDevice on_device(std::size_t(L), std::vector<bool>{});
  for (int i = 0; i < L; ++i) {
    const BlockSaves& b = p.blocks[std::size_t(i)];
    const BlockInfo info{i, L, b.name, 0, b.new_stack};
    // Before its forward (the embeddings; between an encoder and a decoder).
    m.device = std::max(m.device, device + open_input + groups.in_flight + b.outside_before);
    device += b.context;  // kept by every strategy from the first block that reads it
    if (const auto seg = policy.segment_of(info)) {
      if (i == seg->first || b.new_stack) segment_open = false;
      // A block that saves nothing from inputs that need no gradient (frozen,
      // below every trainable parameter) is left out of its region.
      if (!segment_open && b.saved == 0 && !b.input_requires_grad) {
        m.device = std::max(m.device, device + b.forward_peak);
        continue;
      }
      if (!segment_open) {
        segment_open = true;
        const auto [kept, offloaded] = segment_inputs(b, info, policy, on_device);
        segment_held = device + (offloaded > 0 ? groups.last : 0);
        groups.made(offloaded);
        m.offload += offloaded;
        segment_input = open_input = kept, segment_first = i;
      }
      const std::int64_t earlier = i == segment_first ? 0 : unkept_earlier(b, on_device);
      m.device = std::max(m.device, device + segment_input + groups.in_flight + segment_forward_peak(b, i == segment_first) + earlier);
      if (i == seg->last || i == L - 1 || p.blocks[std::size_t(i) + 1].new_stack) {
        m.device = std::max(m.device, recompute_peak(p, segment_first, i, seg->inner.get(), segment_held, on_device));
        device += segment_input;
        open_input = 0;
      }
      continue;
    }
    PlainSaves saves = plain_saves(b, info, policy);
    m.device = std::max({m.device, device + groups.in_flight + forward_peak_dropping(b, saves.recomputed) +
                                       unkept_earlier(b, on_device),
                         device + offloaded_backward(b, saves.offloaded, groups.last)});
    on_device[std::size_t(i)] = std::move(saves.on_device);
    groups.made(saves.offloaded);
    m.offload += saves.offloaded;
    device += saves.kept;
  }
  m.device = std::max({m.device, device + p.outside_peak, p.tail_peak});
  return m;
}

}  // namespace remat
