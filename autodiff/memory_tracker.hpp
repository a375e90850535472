#pragma once
// Exact live and peak bytes per memory pool, from Kokkos Tools' allocate and
// deallocate callbacks (every View allocation is seen), plus pools that code
// reports to directly (an offload pool). A phase label marks what the program
// was doing, and an optional timeline records live bytes after every event.
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace remat {

// Allocations whose label starts with this are not counted: their owner
// reports the bytes it uses (the pinned-buffer cache, autodiff/pinned_cache.hpp).
inline constexpr const char* kUntrackedLabel = "untracked: ";

class MemoryTracker {
 public:
  struct PoolStats {
    std::int64_t live = 0;
    std::int64_t peak = 0;
    std::int64_t allocations = 0;  // since the last reset
  };
  struct Event {
    double seconds;       // since the timeline was started
    std::string pool;
    std::int64_t live;    // in that pool, after the event
    int phase;            // index into phases()
  };

  static MemoryTracker& instance();

  // Allocations with this label (in whatever memory space) are counted in
  // pool `pool` rather than their space's: the module that owns a kind of
  // buffer names its pool (the offload pool of strategies/storage.hpp, the
  // gathered parameters of train/param_shards.hpp). Idempotent.
  void pool_for_label(const std::string& label, const std::string& pool);

  // Registers the Kokkos Tools callbacks; call after Kokkos::initialize.
  void install();
  bool installed() const { return installed_; }

  // An allocation counted in `pool` (its memory space's name, or a pool a
  // module reports to directly), unless its label was given a pool.
  void on_allocate(const std::string& pool, const void* ptr, std::uint64_t bytes, const std::string& label = "");
  void on_deallocate(const std::string& pool, const void* ptr, std::uint64_t bytes, const std::string& label = "");
  // The bytes Kokkos reports for a View of `bytes` (rounded up to 8): what an
  // allocation counted by hand (shape-only, pinned buffers) reports too.
  static std::uint64_t counted_bytes(std::uint64_t bytes) { return (bytes + 7) & ~std::uint64_t(7); }
  // Bytes that change pools without being copied (an offload pool that is the
  // device's own memory): live and peak move, nothing is allocated.
  void transfer(const std::string& from, const std::string& to, std::uint64_t bytes);

  PoolStats stats(const std::string& pool) const;
  // The pool Tensors live in (the default memory space's name, e.g. "Host").
  static std::string default_pool();

  // A cap on the live bytes of the default pool (0: none), as on a smaller
  // device: Tensor allocations that would pass it throw OutOfMemory. Set
  // only by a MemoryLimitScope, so no cap outlives the run that set it.
  std::int64_t limit() const { return limit_; }
  void check_allocation(std::int64_t bytes) const;

  // Peaks are counted in windows that nest (a step's: step/step_scope.hpp).
  // begin_peaks() starts every pool's peak (:= live) and allocation count
  // afresh and returns the enclosing window's; end_peaks(those) closes the
  // window, the enclosing peaks taking the window's in (memory live inside
  // it was live inside them too). Nothing resets them otherwise.
  std::map<std::string, PoolStats> begin_peaks();
  void end_peaks(const std::map<std::string, PoolStats>& enclosing);
  // Every pool's figures now.
  std::map<std::string, PoolStats> all_stats() const;

  void set_phase(const std::string& phase);
  std::string phase() const;
  std::vector<std::string> phases() const;

  // Allocations by label (the View's label: the op that produced a tensor,
  // "grad", or a named workspace), counted while a census runs: the audit
  // that a step allocates nothing it cannot name.
  struct LabelStats {
    std::int64_t allocations = 0;
    std::int64_t bytes = 0;
  };
  void start_census();  // clears and starts counting
  void stop_census();
  std::map<std::string, LabelStats> census() const;

  // Every allocation still live, with the label and phase it was made in,
  // while a ledger runs: what a step leaves behind (REMAT_LEFT_BEHIND, step/step.cpp).
  struct LiveAllocation {
    std::string pool, label, phase;
    std::int64_t bytes = 0;
  };
  void start_ledger();  // clears and starts recording
  void stop_ledger();
  std::vector<LiveAllocation> ledger() const;  // in allocation order

  void start_timeline();  // clears and starts recording
  void stop_timeline();
  std::vector<Event> timeline() const;
  std::size_t timeline_events() const;  // recorded so far: the next event's index
  // Called after each event a running timeline records, with its index
  // there (outside the tracker's lock; none: {}): a profile notes what else
  // holds the tensors it keeps at every moment (strategies/profile.cpp).
  void observe_timeline(std::function<void(std::size_t event)> observer);

 private:
  friend class MemoryLimitScope;
  MemoryTracker() = default;
  void record(const std::string& pool, std::int64_t delta, bool allocation = false);
  void record_allocation(const std::string& pool, const void* ptr, std::uint64_t bytes, const std::string& label);

  mutable std::mutex mutex_;
  bool installed_ = false;
  std::int64_t limit_ = 0;
  std::map<std::string, PoolStats> pools_;
  std::map<std::string, std::string> label_pools_;
  std::vector<std::string> phases_{"idle"};  // append-only: the timeline holds indices into it
  std::unordered_map<std::string, int> phase_index_{{"idle", 0}};  // a step of L blocks names ~5L phases
  int phase_ = 0;
  bool recording_ = false;
  double t0_ = 0;
  std::vector<Event> timeline_;
  std::function<void(std::size_t)> observer_;
  void notify();  // observer_ of the last event, if a timeline records
  bool counting_ = false;
  bool ledger_on_ = false;
  std::uint64_t ledger_serial_ = 0;
  std::unordered_map<const void*, std::pair<std::uint64_t, LiveAllocation>> ledger_;
  std::map<std::string, LabelStats> census_;
};

// Caps the default pool at `bytes` (0: none) for the scope's lifetime.
class MemoryLimitScope {
 public:
  explicit MemoryLimitScope(std::int64_t bytes);
  ~MemoryLimitScope();
  MemoryLimitScope(const MemoryLimitScope&) = delete;
  MemoryLimitScope& operator=(const MemoryLimitScope&) = delete;

 private:
  std::int64_t previous_;
};

// Labels the phase for the scope's lifetime.
class MemoryPhase {
 public:
  explicit MemoryPhase(const std::string& phase);
  ~MemoryPhase();
  MemoryPhase(const MemoryPhase&) = delete;
  MemoryPhase& operator=(const MemoryPhase&) = delete;

 private:
  std::string previous_;
};


}  // namespace remat
