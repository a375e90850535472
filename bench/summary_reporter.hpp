#pragma once
// The console reporter, plus a closing summary of the figures the
// performance targets are stated in, all from this one run: the sgemm
// ceiling, each model's full step as a fraction of it, and every strategy's
// step time as a ratio to its model's full step.
#include <benchmark/benchmark.h>

#include <map>
#include <string>

namespace remat::bench {

class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  using ConsoleReporter::ConsoleReporter;
  void ReportRuns(const std::vector<Run>& runs) override;
  void Finalize() override;

 private:
  struct Figure {
    double seconds = 0;  // per iteration
    double flops = 0;    // the FLOP/s counter, if any
    double gemm_flops = 0;  // the GEMM FLOP/s counter (FLOPs the step ran), if any
    std::map<std::string, double> shares;  // BM_profile's "<category> %" counters
  };
  std::map<std::string, Figure> figures_;  // by benchmark name (a single run, or the median of repetitions)
};

}  // namespace remat::bench
