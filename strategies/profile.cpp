#include "strategies/profile.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <optional>
#include <set>

namespace remat {
namespace {

// Keeps a tensor and reports it to the tracker as pool `pool` while any
// handle holds it, each storage once.
class ReportedKept final : public Packed {
 public:
  // `first_read`: set, if unset, to the timeline's event count when the
  // tensor is first read (a block's backward reads it).
  using FirstRead = std::shared_ptr<std::optional<std::size_t>>;
  // `any_read`: the same for any read, the block's inputs' included.
  ReportedKept(Tensor t, std::string pool, FirstRead first_read = nullptr, FirstRead any_read = nullptr)
      : t_(std::move(t)), pool_(std::move(pool)), first_read_(std::move(first_read)), any_read_(std::move(any_read)) {
    if (handles()[t_.id()]++ == 0) MemoryTracker::instance().on_allocate(pool_, t_.id(), t_.nbytes());
  }
  ~ReportedKept() override {
    if (--handles()[t_.id()] == 0) {
      handles().erase(t_.id());
      MemoryTracker::instance().on_deallocate(pool_, t_.id(), t_.nbytes());
    }
  }
  Tensor unpack() override {
    for (const FirstRead& r : {first_read_, any_read_})
      if (r && !*r) *r = MemoryTracker::instance().timeline_events();
    return t_;
  }
  const void* storage() const { return t_.id(); }
  // Whether only saved copies hold the tensor (the model's code let it go).
  bool held_only_saved() const { return t_.holders() <= handles()[t_.id()]; }

 private:
  // Handles to each tensor kept, per thread: a profile runs on the thread
  // whose tape it records, as every step does.
  static std::map<const void*, int>& handles() {
    thread_local std::map<const void*, int> h;
    return h;
  }
  Tensor t_;
  std::string pool_;
  FirstRead first_read_, any_read_;
};

std::string block_pool(const std::string& block) { return std::string(SaveProfiler::kSavedPool) + " " + block; }

class BlockProbe final : public SavedTensorHooks {
 public:
  BlockProbe(BlockSaves& b, const Tensors& inputs, std::size_t context, ReportedKept::FirstRead first_read,
             ReportedKept::FirstRead any_read, std::size_t& last_save, std::vector<SaveProfiler::Copies>& copies)
      : block_(b), pool_(block_pool(b.name)), first_read_(std::move(first_read)), any_read_(std::move(any_read)),
        last_save_(last_save), copies_(copies) {
    for (std::size_t i = 0; i < inputs.size(); ++i)
      (i + context < inputs.size() ? inputs_ : context_).insert(inputs[i].id());
  }
  std::shared_ptr<Packed> pack(const Tensor& t) override {
    // Context is kept once for every block (SaveProfile's `context`), in a pool of its own.
    if (context_.count(t.id())) return std::make_shared<ReportedKept>(t, SaveProfiler::kContextPool);
    const bool input = inputs_.count(t.id()) > 0;
    auto kept = std::make_shared<ReportedKept>(t, pool_, input ? nullptr : first_read_, any_read_);
    const auto [seen, first] = seen_.emplace(t.id(), copies_.size());
    if (first) {
      block_.saved += std::int64_t(t.nbytes());
      block_.tensors.push_back({t.tag(), t.shape(), std::int64_t(t.nbytes()), t.recipe() != nullptr, 0, input});
      copies_.emplace_back();
    }
    copies_[seen->second].push_back(kept);
    last_save_ = MemoryTracker::instance().timeline_events();
    return kept;
  }
  // Which of the block's saved tensors only their saved copies hold now.
  std::vector<int> held_only_saved() const {
    std::vector<int> out;
    for (std::size_t k = 0; k < copies_.size(); ++k)  // its first copy tells for every copy of the storage
      if (const auto kept = std::static_pointer_cast<ReportedKept>(copies_[k].front().lock());
          kept && kept->held_only_saved())
        out.push_back(int(k));
    return out;
  }

 private:
  BlockSaves& block_;
  std::string pool_;
  std::map<const void*, std::size_t> seen_;  // storage -> index in block_.tensors
  std::set<const void*> inputs_, context_;
  ReportedKept::FirstRead first_read_, any_read_;
  std::size_t& last_save_;  // the timeline's event count after the latest save
  std::vector<SaveProfiler::Copies>& copies_;  // each of block_.tensors' saved copies (ReportedKept)
};

// Of a block's forward moments, those that can be its peak under some set of
// drops, among all of them or among those a recomputation reaches: a moment
// whose live bytes are at most another's with every drop it allows taken is
// never above that one.
void keep_possible_peaks(BlockSaves& b) {
  const auto freed_all = [&](const BlockSaves::Moment& m) {
    std::int64_t live = m.live;
    for (const int k : m.held_only_saved) live -= b.tensors[std::size_t(k)].bytes;
    return live;
  };
  std::vector<bool> keep(b.forward_moments.size(), false);
  for (const bool recomputed_only : {false, true}) {
    std::int64_t floor = std::numeric_limits<std::int64_t>::min();
    std::size_t lowest = b.forward_moments.size();
    for (std::size_t i = 0; i < b.forward_moments.size(); ++i)
      if (const auto& m = b.forward_moments[i]; !recomputed_only || m.recomputed)
        if (const std::int64_t f = freed_all(m); f > floor) floor = f, lowest = i;
    for (std::size_t i = 0; i < b.forward_moments.size(); ++i)
      if (const auto& m = b.forward_moments[i]; !recomputed_only || m.recomputed)
        keep[i] = keep[i] || i == lowest || m.live > floor;
  }
  std::vector<BlockSaves::Moment> kept;
  for (std::size_t i = 0; i < b.forward_moments.size(); ++i)
    if (keep[i]) kept.push_back(std::move(b.forward_moments[i]));
  b.forward_moments = std::move(kept);
}

// Takes out of a block's saves those marked `gone` (let go before backward:
// held by no strategy), renumbering the moments' references to the rest.
std::vector<int> forget_let_go(BlockSaves& b, const std::vector<bool>& gone) {
  std::vector<int> index(b.tensors.size(), -1);
  std::vector<SavedRecord> kept;
  for (std::size_t k = 0; k < b.tensors.size(); ++k) {
    if (k < gone.size() && gone[k]) {
      b.saved -= b.tensors[k].bytes;
      continue;
    }
    index[k] = int(kept.size());
    kept.push_back(std::move(b.tensors[k]));
  }
  b.tensors = std::move(kept);
  for (BlockSaves::Moment& m : b.forward_moments) {
    std::vector<int> held;
    for (const int k : m.held_only_saved)
      if (index[std::size_t(k)] >= 0) held.push_back(index[std::size_t(k)]);
    m.held_only_saved = std::move(held);
  }
  return index;
}

// The same for every block, and the earlier saves blocks' inputs refer to
// renumbered (-1: let go, kept by no strategy).
void forget_let_go(std::vector<BlockSaves>& blocks, const std::vector<std::vector<bool>>& let_go) {
  std::vector<std::vector<int>> renumbered(blocks.size());
  for (std::size_t i = 0; i < blocks.size() && i < let_go.size(); ++i) renumbered[i] = forget_let_go(blocks[i], let_go[i]);
  for (BlockSaves& b : blocks)
    for (auto& e : b.inputs_saved_earlier)
      if (const auto& index = renumbered[e.block]; !index.empty()) e.index = index[std::size_t(e.index)];
}

// Each block's index by its saves' pool and by its forward's and backward's phase names.
struct BlockNames {
  std::map<std::string, std::size_t> pool, forward, backward;
};
BlockNames block_names(const std::vector<BlockSaves>& blocks) {
  BlockNames names;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    names.pool[block_pool(blocks[i].name)] = i;
    names.forward["forward " + blocks[i].name] = i;
    names.backward["backward " + blocks[i].name] = i;
  }
  return names;
}

// Events after the last one in a block's backward are the tail (tail_peak).
std::size_t tail_start(const std::vector<MemoryTracker::Event>& timeline, const std::vector<std::string>& phases,
                       const std::map<std::string, std::size_t>& block_of_backward) {
  for (std::size_t i = timeline.size(); i-- > 0;)
    if (block_of_backward.count(phases[std::size_t(timeline[i].phase)])) return i + 1;
  return timeline.size();
}

}  // namespace

Tensors SaveProfiler::run(const BlockInfo& info, const Tensors& inputs, const BlockBody& body) {
  BlockSaves& b = profile_.blocks.emplace_back();
  b.name = info.name;
  b.new_stack = info.new_stack;
  b.input_requires_grad = std::any_of(inputs.begin(), inputs.end(), [](const Tensor& x) { return x.requires_grad(); });
  const std::size_t carried = inputs.size() - std::size_t(info.context);
  // From the first block that reads a context tensor it is counted as kept
  // (in the context pool, held here while the block runs and by every op
  // that saves it after), so no block's working set counts it.
  std::vector<std::shared_ptr<Packed>> held;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (i >= carried) {
      if (std::find(context_.begin(), context_.end(), x.id()) == context_.end()) {
        context_.push_back(x.id());
        b.context += std::int64_t(x.nbytes());
      }
      held.push_back(std::make_shared<ReportedKept>(x, kContextPool));
      continue;
    }
    // One storage given as two inputs (revformer's first block takes the
    // embeddings as both streams) is held once.
    const bool again = std::any_of(inputs.begin(), inputs.begin() + std::ptrdiff_t(i),
                                   [&](const Tensor& y) { return y.id() == x.id(); });
    if (again) continue;
    if (const auto earlier = saved_earlier(x.id()))
      b.inputs_saved_earlier.push_back({earlier->first, earlier->second, b.inputs.size(), std::int64_t(x.nbytes())});
    b.input += std::int64_t(x.nbytes());
    b.inputs.push_back({x.tag(), x.shape(), std::int64_t(x.nbytes()), false, 0, true});
  }
  first_read_.push_back(std::make_shared<std::optional<std::size_t>>());
  any_read_.push_back(std::make_shared<std::optional<std::size_t>>());
  last_save_.push_back(0);
  saved_copies_.emplace_back();
  BlockProbe probe(b, inputs, std::size_t(info.context), first_read_.back(), any_read_.back(), last_save_.back(),
                   saved_copies_.back());
  SavedTensorHooksScope scope(probe);
  MemoryTracker::instance().observe_timeline(
      [this, &probe](std::size_t event) { held_only_saved_[event] = probe.held_only_saved(); });
  struct StopObserving {
    ~StopObserving() { MemoryTracker::instance().observe_timeline({}); }
  } stop;
  return body(inputs);
}

void SaveProfiler::forward_over() {
  let_go_.clear();
  for (const auto& block : saved_copies_) {
    auto& gone = let_go_.emplace_back();
    for (const Copies& copies : block)
      gone.push_back(std::all_of(copies.begin(), copies.end(), [](const auto& c) { return c.expired(); }));
  }
}

std::optional<std::pair<std::size_t, int>> SaveProfiler::saved_earlier(const void* storage) const {
  for (std::size_t j = 0; j < saved_copies_.size(); ++j)
    for (std::size_t k = 0; k < saved_copies_[j].size(); ++k)
      if (const auto kept = std::static_pointer_cast<ReportedKept>(saved_copies_[j][k].front().lock());
          kept && kept->storage() == storage)
        return std::pair{j, int(k)};
  return std::nullopt;
}

std::shared_ptr<Packed> SaveProfiler::pack(const Tensor& t) {
  return std::make_shared<ReportedKept>(t, kSavedPool);
}

SaveProfile SaveProfiler::finish(const std::vector<MemoryTracker::Event>& timeline,
                                 const std::vector<std::string>& phases, const std::string& pool, std::int64_t base) {
  const auto [block_of_pool, block_of_forward, block_of_backward] = block_names(profile_.blocks);
  std::int64_t context = 0;  // the context pool's live bytes: kept, like every block's saves
  std::vector<std::int64_t> saved(profile_.blocks.size(), 0);
  std::int64_t live = base, all_saved = 0;
  // The pool of what operations outside blocks save: live beyond all_saved,
  // as every block's working set counts it; as its forward ran, per block.
  std::int64_t outside = 0;
  std::vector<std::int64_t> outside_at_forward(profile_.blocks.size(), 0);
  std::map<std::size_t, std::size_t> first_read_after;  // event index -> block (recompute_beside)
  for (std::size_t b = 0; b < first_read_.size(); ++b)
    if (const auto& n = *first_read_[b]; n && *n > 0) first_read_after[*n - 1] = b;
  const std::size_t tail = tail_start(timeline, phases, block_of_backward);
  std::size_t next = 0;  // the block whose forward comes next (outside_before)
  for (std::size_t i = 0; i < timeline.size(); ++i) {
    const auto& e = timeline[i];
    bool counted = true;  // an event that moves live or all_saved
    if (e.pool == pool) {
      live = e.live;
    } else if (e.pool == kContextPool) {
      all_saved += e.live - context;
      context = e.live;
    } else if (auto it = block_of_pool.find(e.pool); it != block_of_pool.end()) {
      all_saved += e.live - saved[it->second];
      saved[it->second] = e.live;
    } else {
      if (e.pool == kSavedPool) outside = e.live;
      counted = false;
    }
    if (const auto r = first_read_after.find(i); r != first_read_after.end())
      profile_.blocks[r->second].recompute_beside = live - base - all_saved - outside_at_forward[r->second];
    if (!counted) continue;
    const std::string& phase = phases[std::size_t(e.phase)];
    if (auto f = block_of_forward.find(phase); f != block_of_forward.end()) {
      auto& b = profile_.blocks[f->second];
      next = std::max(next, f->second + 1);
      outside_at_forward[f->second] = outside;
      b.forward_peak = std::max(b.forward_peak, live - base - (all_saved - saved[f->second]));
      const auto held = held_only_saved_.find(i);  // none: no drop frees anything then
      b.forward_moments.push_back({live - base - (all_saved - saved[f->second]),
                                   held == held_only_saved_.end() ? std::vector<int>{} : held->second,
                                   i < last_save_[f->second]});
    } else if (auto g = block_of_backward.find(phase); g != block_of_backward.end()) {
      auto& b = profile_.blocks[g->second];
      const std::optional<std::size_t>& read = *any_read_[g->second];  // events before it came before the read
      std::int64_t& part = read && i >= *read ? b.backward_after_read : b.backward_before_read;
      part = std::max(part, live - base - (all_saved - saved[g->second]));
      b.backward_peak = std::max(b.backward_peak, part);
    } else {
      std::int64_t& peak = i >= tail                       ? profile_.tail_peak
                           : next < profile_.blocks.size() ? profile_.blocks[next].outside_before
                                                           : profile_.outside_peak;
      peak = std::max(peak, live - base - all_saved);
    }
  }
  forget_let_go(profile_.blocks, let_go_);
  for (BlockSaves& b : profile_.blocks) keep_possible_peaks(b);
  return profile_;
}

namespace {

// Keeps what a block saves (each storage once) and its recipes, in order.
class RecipeCollector final : public SavedTensorHooks {
 public:
  std::shared_ptr<Packed> pack(const Tensor& t) override {
    if (seen_.insert(t.id()).second) recipes.push_back(t.recipe());
    return keep_.pack(t);
  }
  std::vector<std::shared_ptr<const Tensor::Recipe>> recipes;

 private:
  std::set<const void*> seen_;
  KeepHooks keep_;
};

}  // namespace

double CostTimer::now() const {
  if (clock_) return clock_();
  ExecSpace().fence();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Tensors CostTimer::run(const BlockInfo&, const Tensors& inputs, const BlockBody& body) {
  BlockTimes& t = times_.emplace_back();
  RecipeCollector collector;
  Tensors out;
  double t0 = now();
  {
    SavedTensorHooksScope hooks(collector);
    out = body(inputs);
  }
  t.forward = now() - t0;
  for (const auto& recipe : collector.recipes) {
    if (!recipe) {
      t.recipes.push_back(0);
      continue;
    }
    t0 = now();
    run_recipe(*recipe);
    t.recipes.push_back(now() - t0);
  }
  return out;
}

std::int64_t unsaved_input(const BlockSaves& b) {
  std::int64_t saved = 0;
  for (const SavedRecord& x : b.tensors)
    if (x.block_input) saved += x.bytes;
  return b.input - saved;
}

std::int64_t earlier_saved_input(const BlockSaves& b) {
  std::int64_t bytes = 0;
  for (const auto& e : b.inputs_saved_earlier) bytes += e.bytes;
  return bytes;
}

std::int64_t segment_forward_peak(const BlockSaves& b, bool first) {
  std::vector<bool> dropped(b.tensors.size());
  for (std::size_t k = 0; k < b.tensors.size(); ++k) dropped[k] = !(first && b.tensors[k].block_input);
  // (The first block's inputs that an earlier block saved are not in its
  // moments: that block's saves were left out of them.)
  return forward_peak_dropping(b, dropped) - (first ? b.input - earlier_saved_input(b) : 0);
}

std::int64_t forward_peak_dropping(const BlockSaves& b, const std::vector<bool>& dropped, bool recomputed) {
  const auto is_dropped = [&](std::size_t k) { return k < dropped.size() && dropped[k]; };
  const bool any = std::any_of(b.forward_moments.begin(), b.forward_moments.end(),
                               [&](const BlockSaves::Moment& m) { return !recomputed || m.recomputed; });
  if (!any) {
    std::int64_t peak = b.forward_peak;
    for (std::size_t k = 0; k < b.tensors.size(); ++k)
      if (is_dropped(k)) peak -= b.tensors[k].bytes;
    return peak;
  }
  std::int64_t peak = std::numeric_limits<std::int64_t>::min();
  for (const BlockSaves::Moment& m : b.forward_moments) {
    if (recomputed && !m.recomputed) continue;
    std::int64_t live = m.live;
    for (const int k : m.held_only_saved)
      if (is_dropped(std::size_t(k))) live -= b.tensors[std::size_t(k)].bytes;
    peak = std::max(peak, live);
  }
  return peak;
}

}  // namespace remat
