#include "harness/io/results_file.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>

#include "autodiff/error.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/runtime.hpp"
#include "harness/step.hpp"

#ifndef REMAT_GIT_REVISION
#define REMAT_GIT_REVISION "unknown"
#endif

namespace remat {
namespace {

std::string now_iso() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  return gethostname(buf, sizeof buf - 1) == 0 ? buf : "unknown";
}

}  // namespace

ResultsFile::ResultsFile(const std::string& path) : path_(path) {
  if (!std::filesystem::exists(path)) {
    h5::AtomicOutput out(path);
    {
      h5::File f = h5::File::create(out.temp_path());
      h5::write_attr(f, "remat_results", kSchemaVersion);
      h5::write_attr(f, "created", now_iso());
      h5::create_group(f, "/runs");
    }
    out.commit();
    return;
  }
  h5::File f = h5::File::open(path);  // read-only: a foreign file is refused untouched
  if (!h5::read_attr_int(f, "remat_results"))
    throw UserError(path + ": not a remat results file (no 'remat_results' attribute); refusing to modify it");
  for (const auto& id : h5::list(f, "/runs")) runs_.insert(id);
}

std::string ResultsFile::run_id(const std::string& model, const std::string& strategy, const Sizes& s) {
  return model + " " + strategy + " L" + std::to_string(s.L) + " S" + std::to_string(s.S) + " B" + std::to_string(s.B);
}

void ResultsFile::append(const RunRecord& r) {
  h5::AtomicOutput out(path_);
  std::error_code ec;
  std::filesystem::copy_file(path_, out.temp_path(), std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) throw UserError(path_ + ": cannot copy for appending (" + ec.message() + ")");
  {
    h5::File f = h5::File::open(out.temp_path(), /*writable=*/true);
    write_run(f, r);
  }
  out.commit();
  runs_.insert(run_id(r.model, r.strategy, r.sizes));
}

void ResultsFile::write_run(const h5::File& file_, const RunRecord& r) const {
  const std::string id = run_id(r.model, r.strategy, r.sizes), g = "/runs/" + id;
  h5::create_group(file_, g);
  auto attr_s = [&](const char* n, const std::string& v) { h5::write_attr(file_, n, v, g); };
  auto attr_i = [&](const char* n, std::int64_t v) { h5::write_attr(file_, n, v, g); };
  auto attr_d = [&](const char* n, double v) { h5::write_attr(file_, n, v, g); };
  const Sizes& z = r.sizes;
  const StepResult& st = r.check.step;
  attr_s("model", r.model);
  attr_s("preset", r.preset);
  attr_s("strategy", r.strategy);
  attr_s("data", r.data);
  for (auto [n, v] : {std::pair{"L", z.L}, {"D", z.D}, {"H", z.H}, {"Hkv", z.Hkv}, {"F", z.F}, {"S", z.S},
                      {"S_max", z.S_max}, {"V", z.V}, {"B", z.B}})
    attr_i(n, v);
  attr_d("dropout", z.dropout);
  attr_s("attention", ops::attention_kernel_name(ops::attention_kernel()));
  attr_s("backend", Runtime::describe());
  attr_i("threads", Kokkos::DefaultExecutionSpace().concurrency());
  attr_s("kokkos_version", std::to_string(KOKKOS_VERSION));
  attr_s("git_revision", REMAT_GIT_REVISION);
  attr_s("host", host_name());
  attr_s("time", now_iso());
  attr_s("status", r.check.oom ? "oom" : "ok");
  if (r.check.oom) return;  // nothing was measured

  const auto [fastest, slowest] = std::minmax_element(r.step_times.begin(), r.step_times.end());
  const double step_median = median(r.step_times);
  attr_d("step_time_median", step_median);
  attr_d("step_time_min", r.step_times.empty() ? 0 : *fastest);
  attr_d("step_time_max", r.step_times.empty() ? 0 : *slowest);
  attr_d("tokens_per_second", step_median > 0 ? double(z.B) * z.S / step_median : 0);
  attr_d("loss", st.loss);
  attr_i("activation_peak_bytes", st.activation_peak);
  attr_i("predicted_activation_bytes", r.check.predicted.device);
  attr_i("offload_peak_bytes", st.offload_peak);
  attr_i("predicted_offload_bytes", r.check.predicted.offload);
  attr_d("gemm_flops", st.flops);
  attr_d("recompute_flops_share", st.flops > 0 ? st.recompute_flops / st.flops : 0);
  attr_d("grad_max_abs_error", r.check.vs_full.max_abs);
  attr_d("grad_max_rel_error", r.check.vs_full.max_rel);
  attr_i("bitwise_equal_to_full", r.check.vs_full.bitwise ? 1 : 0);

  const Shape n{std::int64_t(r.step_times.size())};
  h5::write(file_, g + "/step_times", r.step_times, n);
  h5::write(file_, g + "/losses", r.losses, Shape{std::int64_t(r.losses.size())});
  std::vector<double> t;
  std::vector<std::int64_t> bytes;
  std::vector<std::int32_t> phase;
  std::vector<std::string> phases;
  for (const auto& p : st.timeline) {
    auto it = std::find(phases.begin(), phases.end(), p.phase);
    if (it == phases.end()) it = phases.insert(phases.end(), p.phase);
    t.push_back(p.seconds);
    bytes.push_back(p.bytes);
    phase.push_back(std::int32_t(it - phases.begin()));
  }
  const Shape e{std::int64_t(t.size())};
  h5::write(file_, g + "/timeline/seconds", t, e);
  h5::write(file_, g + "/timeline/bytes", bytes, e);
  h5::write(file_, g + "/timeline/phase", phase, e);
  h5::write(file_, g + "/timeline/phase_names", phases);
  h5::write(file_, g + "/grad_error/names", r.param_names);
  const Shape p{std::int64_t(r.param_names.size())};
  h5::write(file_, g + "/grad_error/max_abs", r.check.vs_full.abs_by_param, p);
  h5::write(file_, g + "/grad_error/max_rel", r.check.vs_full.rel_by_param, p);
}

}  // namespace remat
