#include "autodiff/transfer.hpp"

#include "core/error.hpp"

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace remat::transfer {
namespace {

std::optional<ExecSpace>& instance() {
  static std::optional<ExecSpace> space;
  return space;
}

CopyTimes& times() {
  static CopyTimes t;
  return t;
}

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

#ifdef KOKKOS_ENABLE_CUDA
cudaStream_t copy_stream = nullptr;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw EnvironmentError(std::string(what) + ": " + cudaGetErrorString(e));
}
#endif

}  // namespace

ExecSpace copy_space() {
  auto& space = instance();
  if (!space) {
#ifdef KOKKOS_ENABLE_CUDA
    // A stream that does not wait for the legacy default stream either.
    check(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    space.emplace(copy_stream);  // the stream lives as long as the process
#else
    space.emplace();
#endif
  }
  return *space;
}

void release() { instance().reset(); }

namespace {
CopyListener*& listener_slot() {
  thread_local CopyListener* listener = nullptr;
  return listener;
}
}  // namespace

CopyListener* copy_listener() { return listener_slot(); }
CopyListener* exchange_copy_listener(CopyListener* listener) {
  std::swap(listener_slot(), listener);
  return listener;
}

CopyTimes copy_times() { return times(); }
void reset_copy_times() { times() = {}; }
CopyTimes exchange_copy_times(CopyTimes fresh) {
  std::swap(times(), fresh);
  return fresh;
}

// On a device, events on the copy stream time the copies themselves (they
// run while the host does other things); on the host the copies are done
// when issued, so a wall clock from start to issued is their time.
#ifdef KOKKOS_ENABLE_CUDA
struct CopyBatch::Clock {
  cudaEvent_t start = nullptr, stop = nullptr;
};

CopyBatch::CopyBatch() : clock_(std::make_unique<Clock>()) {
  copy_space();  // creates the stream on first use
  check(cudaEventCreate(&clock_->start), "cudaEventCreate");
  check(cudaEventCreate(&clock_->stop), "cudaEventCreate");
  check(cudaEventRecord(clock_->start, copy_stream), "cudaEventRecord");
}

CopyBatch::~CopyBatch() {
  cudaEventDestroy(clock_->start);
  cudaEventDestroy(clock_->stop);
}

void CopyBatch::issued() { check(cudaEventRecord(clock_->stop, copy_stream), "cudaEventRecord"); }

void CopyBatch::finished() {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, clock_->start, clock_->stop), "cudaEventElapsedTime");
  times().copy_seconds += ms / 1000.0;
}
#else
struct CopyBatch::Clock {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  double seconds = 0;
};

CopyBatch::CopyBatch() : clock_(std::make_unique<Clock>()) {}
CopyBatch::~CopyBatch() = default;
void CopyBatch::issued() { clock_->seconds = since(clock_->start); }
void CopyBatch::finished() { times().copy_seconds += clock_->seconds; }
#endif

WaitClock::WaitClock() : start_(std::chrono::steady_clock::now()) {}
WaitClock::~WaitClock() { times().wait_seconds += since(start_); }

}  // namespace remat::transfer
