#pragma once
// Where the finished runs of a matrix go. One process appends them to the
// results file itself. Under MPI, rank 0 alone writes: every other rank
// sends each run to it as soon as it is done (as a results file in memory,
// ResultsFile::run_image), and rank 0 appends it as it arrives, from a
// thread of its own while it runs its own cells. So a rank that dies loses
// only the run it was making; the file on disk always holds every run
// finished and received so far.
#include <atomic>
#include <cstddef>
#include <mutex>
#include <thread>

#include "harness/io/results_file.hpp"

namespace remat {

class RunCollector {
 public:
  explicit RunCollector(const std::string& path);
  ~RunCollector();  // finish() if not called (an exception): stops the receiver
  RunCollector(const RunCollector&) = delete;
  RunCollector& operator=(const RunCollector&) = delete;

  // Records a run of this process; false if the file held its key already.
  bool put(const RunRecord& r);
  // Waits until every other rank has sent its last run (rank 0), or says
  // this rank is done (the others). Returns how many runs other ranks sent.
  std::size_t finish();

 private:
  void receive_loop();
  bool receive_one(bool block);
  ResultsFile file_;
  std::mutex mutex_;  // file_ and MPI calls, between the two threads
  std::thread receiver_;
  std::atomic<bool> stop_{false};
  int done_ranks_ = 0;
  std::size_t received_ = 0;
  bool finished_ = false;
};

}  // namespace remat
