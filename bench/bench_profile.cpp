// Where a step's time goes, and how far it is from its floor.
//
// BM_gemm_floor/<model>: the GEMMs one `full` step at `small` runs (logged at
// the front door: shapes, transposes, batch counts), replayed alone through
// cblas_sgemm on buffers of their sizes. Its FLOP/s is the BLAS's rate at the
// model's own shapes; the summary divides the step's model FLOPs (6 x params
// x tokens plus attention) by it for the floor, and the floor by the step's
// time for the share of the ceiling the step reaches.
//
// BM_profile/<model>: the same step with every Kokkos kernel timed through
// Kokkos' tool callbacks and every front-door GEMM timed by its log; each
// counter is a category's share of the step (%), "outside" what no kernel
// or GEMM accounts for (the tape, allocation, hooks, copies).
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "autodiff/ops/ops.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tensor.hpp"
#include "step/step.hpp"
#include "strategies/registry.hpp"
#include "zoo/model.hpp"

namespace {

struct SmallStep {
  remat::Sizes z = remat::preset_sizes("small");
  std::unique_ptr<remat::Model> model;
  std::unique_ptr<remat::ParamStore> params;
  remat::Batch batch;
  std::unique_ptr<remat::Strategy> strategy = remat::make_strategy("full");
  explicit SmallStep(const std::string& name) {
    model = remat::models().find(name).make(z);
    params = std::make_unique<remat::ParamStore>(model->params(), remat::DType::f32);
    remat::initialize(*params, 1, z.L);
    batch = remat::random_batch(z.B, z.S, z.V, 1);
  }
  double run() {
    const auto t0 = std::chrono::steady_clock::now();
    remat::forward_backward(*model, *params, batch, remat::StepOptions{strategy.get(), 1, 0});
    remat::ExecSpace().fence();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

void BM_gemm_floor(benchmark::State& state, const std::string& name) {
  std::vector<remat::stats::GemmCall> calls;
  {
    SmallStep step(name);
    step.run();  // warm-up
    remat::stats::GemmLogScope log(calls);
    step.run();
  }
  std::int64_t most = 0;
  double flops = 0;
  for (const auto& c : calls) {
    most = std::max({most, c.m * c.k * c.count, c.k * c.n * c.count, c.m * c.n * c.count});
    flops += 2.0 * double(c.m) * double(c.n) * double(c.k) * double(c.count);
  }
  std::vector<float> a(std::size_t(most), 0.5f), b(a), c(a);
  for (auto _ : state)
    for (const auto& g : calls)
      for (std::int64_t i = 0; i < g.count; ++i)
        cblas_sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans,
                    int(g.m), int(g.n), int(g.k), 1.0f, a.data() + i * g.m * g.k, int(g.trans_a ? g.m : g.k),
                    b.data() + i * g.k * g.n, int(g.trans_b ? g.k : g.n), 0.0f, c.data() + i * g.m * g.n, int(g.n));
  state.counters["FLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GEMM calls"] = double(calls.size());
}

// Kernel seconds by category, from Kokkos' tool callbacks (host kernels run
// to completion inside the call, so begin to end is the kernel's time).
struct KernelClock {
  std::map<std::uint64_t, std::pair<std::string, double>> open;
  std::map<std::string, double> seconds;
  std::uint64_t next = 0;
};
KernelClock* clock_ = nullptr;

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

std::string category(const std::string& kernel) {
  auto has = [&](const char* s) { return kernel.find(s) != std::string::npos; };
  if (has("gemm_batched")) return "";  // inside a front-door GEMM: counted by the GEMM log
  if (has("attention")) return "attention";
  if (has("norm")) return "norms";
  if (has("cross_entropy") || has("embedding") || has("softmax")) return "embedding+loss";
  if (has("column_sums") || has("bias")) return "bias/gain sums";
  return "elementwise";
}

void begin_kernel(const char* name, std::uint32_t, std::uint64_t* id) {
  *id = clock_->next++;
  clock_->open[*id] = {name, now()};
}
void end_kernel(std::uint64_t id) {
  const auto it = clock_->open.find(id);
  if (it == clock_->open.end()) return;
  const std::string what = category(it->second.first);
  if (!what.empty()) clock_->seconds[what] += now() - it->second.second;
  clock_->open.erase(it);
}

void BM_profile(benchmark::State& state, const std::string& name) {
  namespace tools = Kokkos::Tools::Experimental;
  SmallStep step(name);
  step.run();  // warm-up
  KernelClock kernels;
  std::vector<remat::stats::GemmCall> calls;
  double total = 0;
  clock_ = &kernels;
  tools::set_begin_parallel_for_callback(&begin_kernel);
  tools::set_end_parallel_for_callback(&end_kernel);
  tools::set_begin_parallel_reduce_callback(&begin_kernel);
  tools::set_end_parallel_reduce_callback(&end_kernel);
  tools::set_begin_parallel_scan_callback(&begin_kernel);
  tools::set_end_parallel_scan_callback(&end_kernel);
  {
    remat::stats::GemmLogScope log(calls);
    for (auto _ : state) total += step.run();
  }
  tools::set_begin_parallel_for_callback(nullptr);
  tools::set_end_parallel_for_callback(nullptr);
  tools::set_begin_parallel_reduce_callback(nullptr);
  tools::set_end_parallel_reduce_callback(nullptr);
  tools::set_begin_parallel_scan_callback(nullptr);
  tools::set_end_parallel_scan_callback(nullptr);
  clock_ = nullptr;
  double accounted = 0;
  for (const auto& c : calls) kernels.seconds["GEMM"] += c.seconds;
  for (const auto& [what, s] : kernels.seconds) {
    state.counters[what + " %"] = 100.0 * s / total;
    accounted += s;
  }
  state.counters["outside %"] = 100.0 * (total - accounted) / total;
}

[[maybe_unused]] const bool registered = [] {
  for (const char* m : {"gpt2", "llama", "bert"}) {
    benchmark::RegisterBenchmark((std::string("BM_gemm_floor/") + m).c_str(), BM_gemm_floor, std::string(m))
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(2.0);
    benchmark::RegisterBenchmark((std::string("BM_profile/") + m).c_str(), BM_profile, std::string(m))
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(2.0);
  }
  return true;
}();

}  // namespace
