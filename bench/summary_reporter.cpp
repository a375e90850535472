#include "summary_reporter.hpp"

#include <cstdio>
#include <vector>

namespace remat::bench {

void SummaryReporter::ReportRuns(const std::vector<Run>& runs) {
  ConsoleReporter::ReportRuns(runs);
  for (const Run& r : runs) {
    if (r.error_occurred || !(r.aggregate_name.empty() || r.aggregate_name == "median")) continue;
    Figure f;
    f.seconds = r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit);
    if (auto it = r.counters.find("FLOP/s"); it != r.counters.end()) f.flops = it->second.value;
    if (auto it = r.counters.find("GEMM FLOP/s"); it != r.counters.end()) f.gemm_flops = it->second.value;
    for (const auto& [name, c] : r.counters)
      if (name.size() > 2 && name.compare(name.size() - 2, 2, " %") == 0) f.shares[name.substr(0, name.size() - 2)] = c.value;
    const std::string& args = r.run_name.args;
    figures_[r.run_name.function_name + (args.empty() ? "" : "/" + args)] = f;
  }
}

void SummaryReporter::Finalize() {
  ConsoleReporter::Finalize();
  std::FILE* out = stdout;
  const auto sgemm = figures_.find("BM_cblas_sgemm/2048");
  std::fprintf(out, "\nSummary of this run\n");
  if (sgemm != figures_.end()) {
    std::fprintf(out, "  sgemm n=2048: %.1f GFLOP/s (the ceiling)\n", sgemm->second.flops / 1e9);
    if (auto d = figures_.find("BM_gemm_dispatch/2048"); d != figures_.end())
      std::fprintf(out, "  remat's GEMM dispatch: %.2fx the raw sgemm rate\n", d->second.flops / sgemm->second.flops);
  }
  if (auto a = figures_.find("BM_adamw_10M"); a != figures_.end())
    std::fprintf(out, "  AdamW update of 10M parameters: %.1f ms\n", a->second.seconds * 1e3);
  const auto train = figures_.find("BM_train_step"), bare = figures_.find("BM_bare_step");
  if (train != figures_.end() && bare != figures_.end())
    std::fprintf(out, "  training step / bare step (gpt2 small): %.3f (overhead %.1f%%)\n",
                 train->second.seconds / bare->second.seconds,
                 100.0 * (train->second.seconds / bare->second.seconds - 1));
  // Step rows: BM_step[_plain]/<model>/<strategy>. Ratios to the same
  // family's and model's full step.
  for (const char* family : {"BM_step/", "BM_step_plain/"}) {
    std::map<std::string, std::vector<std::pair<std::string, Figure>>> by_model;
    for (const auto& [name, f] : figures_) {
      if (name.rfind(family, 0) != 0) continue;
      const std::string rest = name.substr(std::string(family).size());
      const auto slash = rest.find('/');
      if (slash != std::string::npos) by_model[rest.substr(0, slash)].push_back({rest.substr(slash + 1), f});
    }
    for (const auto& [model, rows] : by_model) {
      const Figure* full = nullptr;
      for (const auto& [s, f] : rows)
        if (s == "full") full = &f;
      if (!full) continue;
      std::fprintf(out, "  %s%s full: %.3f s/step", model.c_str(), family[7] == '_' ? " (plain attention)" : "",
                   full->seconds);
      if (sgemm != figures_.end() && full->flops > 0)
        std::fprintf(out, ", %.0f%% of the sgemm rate", 100.0 * full->flops / sgemm->second.flops);
      std::fprintf(out, "\n    step time / full:");
      for (const auto& [s, f] : rows)
        if (s != "full") std::fprintf(out, " %s %.2f;", s.c_str(), f.seconds / full->seconds);
      std::fprintf(out, "\n");
    }
  }
  // Each model's full step against its floor: its model FLOPs at the BLAS's
  // rate on the model's own GEMM shapes (BM_gemm_floor), and where the rest
  // of the step goes (BM_profile).
  for (const char* model : {"gpt2", "llama"}) {
    const auto step = figures_.find(std::string("BM_step/") + model + "/full");
    const auto floor = figures_.find(std::string("BM_gemm_floor/") + model);
    if (step != figures_.end() && floor != figures_.end() && floor->second.flops > 0 && step->second.flops > 0) {
      const double floor_s = step->second.flops * step->second.seconds / floor->second.flops;
      std::fprintf(out,
                   "  %s full: %.3f s/step; its GEMMs alone run at %.1f GFLOP/s, so its FLOPs need %.3f s: %.0f%% of "
                   "that ceiling\n",
                   model, step->second.seconds, floor->second.flops / 1e9, floor_s,
                   100.0 * floor_s / step->second.seconds);
    }
    if (const auto p = figures_.find(std::string("BM_profile/") + model); p != figures_.end()) {
      std::fprintf(out, "    where %s's step goes:", model);
      for (const auto& [what, share] : p->second.shares) std::fprintf(out, " %s %.1f%%;", what.c_str(), share);
      std::fprintf(out, "\n");
    }
  }
  // Models against the model they extend, per GEMM FLOP they run: a mixture
  // of experts per routed FLOP, an encoder-decoder per FLOP.
  for (const auto& [model, base] : std::vector<std::pair<std::string, std::string>>{{"mixtral", "llama"}, {"encdec", "gpt2"}}) {
    const auto a = figures_.find("BM_step/" + model + "/full"), b = figures_.find("BM_step/" + base + "/full");
    if (a == figures_.end() || b == figures_.end() || a->second.gemm_flops <= 0 || b->second.gemm_flops <= 0) continue;
    std::fprintf(out, "  %s full / %s full, time per GEMM FLOP: %.2f (%.1f vs %.1f GFLOP/s)\n", model.c_str(),
                 base.c_str(), b->second.gemm_flops / a->second.gemm_flops, a->second.gemm_flops / 1e9,
                 b->second.gemm_flops / 1e9);
  }
}

}  // namespace remat::bench
