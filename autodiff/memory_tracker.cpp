#include "autodiff/memory_tracker.hpp"

#include <algorithm>

#include <Kokkos_Core.hpp>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.hpp"

namespace remat {
namespace {

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// Not counted: Kokkos' own scratch for reductions and team kernels on a
// device ("Kokkos::InternalScratchSpace", ...), made when an instance is,
// grown when a kernel first needs more and kept for the process (the
// runtime's, like the CUDA context's memory, not a step's: counted, it would
// land in whichever step first grew it, as seen on an H100); and what an owner
// reports itself (kUntrackedLabel).
bool untracked(const char* label) {
  return label && (std::strncmp(label, "Kokkos::Internal", 16) == 0 ||
                   std::strncmp(label, kUntrackedLabel, std::strlen(kUntrackedLabel)) == 0);
}

void allocate_callback(Kokkos::Profiling::SpaceHandle space, const char* label, const void* ptr,
                       std::uint64_t bytes) {
  if (!untracked(label)) MemoryTracker::instance().on_allocate(space.name, ptr, bytes, label ? label : "");
}

void deallocate_callback(Kokkos::Profiling::SpaceHandle space, const char* label, const void* ptr,
                         std::uint64_t bytes) {
  if (!untracked(label)) MemoryTracker::instance().on_deallocate(space.name, ptr, bytes, label ? label : "");
}

}  // namespace

MemoryTracker& MemoryTracker::instance() {
  static MemoryTracker tracker;
  return tracker;
}

void MemoryTracker::install() {
  Kokkos::Tools::Experimental::set_allocate_data_callback(&allocate_callback);
  Kokkos::Tools::Experimental::set_deallocate_data_callback(&deallocate_callback);
  installed_ = true;
}

std::string MemoryTracker::default_pool() {
  return Kokkos::DefaultExecutionSpace::memory_space::name();
}

void MemoryTracker::record(const std::string& pool, std::int64_t delta, bool allocation) {
  PoolStats& s = pools_[pool];
  s.live += delta;
  if (allocation) ++s.allocations;
  if (s.live > s.peak) s.peak = s.live;
  if (recording_) timeline_.push_back({now_seconds() - t0_, pool, s.live, phase_});
}

void MemoryTracker::pool_for_label(const std::string& label, const std::string& pool) {
  std::lock_guard<std::mutex> lock(mutex_);
  label_pools_[label] = pool;
}

void MemoryTracker::notify() {
  std::size_t event = 0;
  std::function<void(std::size_t)> observer;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!recording_ || !observer_ || timeline_.empty()) return;
    event = timeline_.size() - 1;
    observer = observer_;
  }
  observer(event);
}

void MemoryTracker::observe_timeline(std::function<void(std::size_t event)> observer) {
  std::lock_guard<std::mutex> lock(mutex_);
  observer_ = std::move(observer);
}

void MemoryTracker::on_allocate(const std::string& pool, const void* ptr, std::uint64_t bytes,
                                const std::string& label) {
  record_allocation(pool, ptr, bytes, label);
  notify();
}

void MemoryTracker::record_allocation(const std::string& pool, const void* ptr, std::uint64_t bytes,
                                      const std::string& label) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto named = label.empty() ? label_pools_.end() : label_pools_.find(label);
  record(named == label_pools_.end() ? pool : named->second, std::int64_t(bytes), true);
  if (ledger_on_)
    ledger_[ptr] = {++ledger_serial_, {named == label_pools_.end() ? pool : named->second, label,
                                       phases_[std::size_t(phase_)], std::int64_t(bytes)}};
  if (counting_) {
    LabelStats& l = census_[label];
    ++l.allocations;
    l.bytes += std::int64_t(bytes);
  }
}

void MemoryTracker::on_deallocate(const std::string& pool, const void* ptr, std::uint64_t bytes,
                                  const std::string& label) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (ledger_on_) ledger_.erase(ptr);
    const auto named = label.empty() ? label_pools_.end() : label_pools_.find(label);
    record(named == label_pools_.end() ? pool : named->second, -std::int64_t(bytes));
  }
  notify();
}

void MemoryTracker::transfer(const std::string& from, const std::string& to, std::uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  record(from, -std::int64_t(bytes));
  record(to, std::int64_t(bytes));
}

MemoryTracker::PoolStats MemoryTracker::stats(const std::string& pool) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = pools_.find(pool);
  return it == pools_.end() ? PoolStats{} : it->second;
}

MemoryLimitScope::MemoryLimitScope(std::int64_t bytes) : previous_(MemoryTracker::instance().limit_) {
  MemoryTracker::instance().limit_ = bytes;
}
MemoryLimitScope::~MemoryLimitScope() { MemoryTracker::instance().limit_ = previous_; }

void MemoryTracker::check_allocation(std::int64_t bytes) const {
  if (limit_ <= 0) return;
  const std::int64_t live = stats(default_pool()).live;
  if (live + bytes > limit_)
    throw OutOfMemory("out of memory: " + std::to_string(bytes) + " more bytes with " + std::to_string(live) +
                      " live would pass the limit of " + std::to_string(limit_));
}

void MemoryTracker::start_ledger() {
  std::lock_guard<std::mutex> lock(mutex_);
  ledger_.clear();
  ledger_on_ = true;
}

void MemoryTracker::stop_ledger() {
  std::lock_guard<std::mutex> lock(mutex_);
  ledger_on_ = false;
}

std::vector<MemoryTracker::LiveAllocation> MemoryTracker::ledger() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::pair<std::uint64_t, LiveAllocation>> entries;
  for (const auto& [ptr, entry] : ledger_) entries.push_back(entry);
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<LiveAllocation> out;
  for (auto& e : entries) out.push_back(std::move(e.second));
  return out;
}

void MemoryTracker::start_census() {
  std::lock_guard<std::mutex> lock(mutex_);
  census_.clear();
  counting_ = true;
}

void MemoryTracker::stop_census() {
  std::lock_guard<std::mutex> lock(mutex_);
  counting_ = false;
}

std::map<std::string, MemoryTracker::LabelStats> MemoryTracker::census() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return census_;
}

std::map<std::string, MemoryTracker::PoolStats> MemoryTracker::all_stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return pools_;
}

std::map<std::string, MemoryTracker::PoolStats> MemoryTracker::begin_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, PoolStats> enclosing = pools_;
  for (auto& [name, s] : pools_) {
    s.peak = s.live;
    s.allocations = 0;
  }
  return enclosing;
}

void MemoryTracker::end_peaks(const std::map<std::string, PoolStats>& enclosing) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [name, s] : pools_) {
    const auto it = enclosing.find(name);
    if (it == enclosing.end()) continue;  // a pool the window made: its figures stand
    s.peak = std::max(s.peak, it->second.peak);
    s.allocations += it->second.allocations;
  }
}

void MemoryTracker::set_phase(const std::string& phase) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto [it, fresh] = phase_index_.emplace(phase, int(phases_.size()));
  if (fresh) phases_.push_back(phase);
  phase_ = it->second;
}

std::string MemoryTracker::phase() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return phases_[phase_];
}

std::vector<std::string> MemoryTracker::phases() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return phases_;
}

void MemoryTracker::start_timeline() {
  std::lock_guard<std::mutex> lock(mutex_);
  timeline_.clear();
  recording_ = true;
  t0_ = now_seconds();
}

void MemoryTracker::stop_timeline() {
  std::lock_guard<std::mutex> lock(mutex_);
  recording_ = false;
}

std::size_t MemoryTracker::timeline_events() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return timeline_.size();
}

std::vector<MemoryTracker::Event> MemoryTracker::timeline() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return timeline_;
}

MemoryPhase::MemoryPhase(const std::string& phase) : previous_(MemoryTracker::instance().phase()) {
  MemoryTracker::instance().set_phase(phase);
}
MemoryPhase::~MemoryPhase() { MemoryTracker::instance().set_phase(previous_); }


}  // namespace remat
