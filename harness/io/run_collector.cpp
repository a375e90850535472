#include "harness/io/run_collector.hpp"

#include <chrono>

#include "comm/comm.hpp"

namespace remat {
namespace {

constexpr int kRunTag = 7101;  // a run's image; an empty message: that rank is done

}  // namespace

RunCollector::RunCollector(const std::string& path) : file_(path) {
  if (comm::size() > 1 && comm::rank() == 0 && comm::any_thread()) receiver_ = std::thread([this] { receive_loop(); });
}

RunCollector::~RunCollector() {
  stop_ = true;
  if (receiver_.joinable()) receiver_.join();
}

bool RunCollector::put(const RunRecord& r) {
  if (comm::rank() != 0) {
    comm::send(0, kRunTag, ResultsFile::run_image(r));
    return true;  // rank 0 decides; a duplicate there is skipped
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const bool appended = file_.append(r);
  if (!receiver_.joinable())  // no receiver thread: take in what arrived meanwhile
    while (receive_one(false)) {
    }
  return appended;
}

// One message, under mutex_; false if none was waiting (and !block).
bool RunCollector::receive_one(bool block) {
  if (!block && !comm::waiting(kRunTag)) return false;
  std::vector<char> bytes;
  const int from = comm::receive(kRunTag, bytes);
  if (bytes.empty()) {
    ++done_ranks_;
    return true;
  }
  std::vector<h5::File> run;
  run.push_back(h5::File::from_image(bytes, "a run from rank " + std::to_string(from)));
  received_ += file_.append_runs(run);
  return true;
}

// Polls rather than blocks in MPI, so that it neither holds the lock nor
// spins a core the computing threads need.
void RunCollector::receive_loop() {
  while (!stop_) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (done_ranks_ == comm::size() - 1) return;
      if (receive_one(false)) continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::size_t RunCollector::finish() {
  if (finished_ || comm::size() == 1) return received_;
  finished_ = true;
  if (comm::rank() != 0) {
    comm::send(0, kRunTag, {});
    return 0;
  }
  if (receiver_.joinable()) {
    receiver_.join();
  } else {
    std::lock_guard<std::mutex> lock(mutex_);
    while (done_ranks_ < comm::size() - 1) receive_one(true);
  }
  return received_;
}

}  // namespace remat
