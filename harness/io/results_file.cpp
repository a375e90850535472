#include "harness/io/results_file.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <initializer_list>

#include "autodiff/runtime.hpp"
#include "core/error.hpp"
#include "h5/atomic_file.hpp"
#include "harness/io/file_lock.hpp"
#include "step/step.hpp"
#include "zoo/model.hpp"

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

void write_run(const h5::File& f, const std::string& group, const RunRecord& r);

// The sizes and settings only some models read (mixtral's experts, a rotary
// base), in a key only for those models: keys of the others stay as they were.
std::string model_attributes(const std::string& model, const Sizes& z) {
  auto exact = [](double v) {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", v);
    return std::string(text);
  };
  std::string text;
  for (const auto& a : models().find(model).attributes) {
    if (a == "E") text += ";E=" + std::to_string(z.E) + ";router_aux=" + exact(z.router_aux);
    if (a == "K") text += ";K=" + std::to_string(z.K);
    if (a == "theta") text += ";theta=" + exact(z.theta);
  }
  return text;
}

}  // namespace

std::string RunKey::text() const {
  const Sizes& z = sizes;
  char dropout[32];
  std::snprintf(dropout, sizeof dropout, "%.17g", z.dropout);
  return "model=" + model + ";preset=" + preset + ";strategy=" + strategy + ";L=" + std::to_string(z.L) +
         ";D=" + std::to_string(z.D) + ";H=" + std::to_string(z.H) + ";Hkv=" + std::to_string(z.Hkv) +
         ";F=" + std::to_string(z.F) + ";S=" + std::to_string(z.S) + ";S_max=" + std::to_string(z.S_max) +
         ";V=" + std::to_string(z.V) + ";B=" + std::to_string(z.B) + ";dropout=" + dropout + ";attention=" + attention +
         ";data=" + data + ";seed=" + std::to_string(seed) + ";mem_limit=" + std::to_string(mem_limit) +
         (finetune.empty() ? "" : ";finetune=" + finetune) + model_attributes(model, z) +
         (weights.empty() ? "" : ";weights=" + weights) + (precision == "fp32" ? "" : ";precision=" + precision);
}

std::string RunKey::name() const {
  return model + " " + strategy + (finetune_label.empty() ? "" : " (" + finetune_label + ")") + " L" + std::to_string(sizes.L) + " S" + std::to_string(sizes.S) + " B" +
         std::to_string(sizes.B) + (precision == "fp32" ? "" : " " + precision);
}

void check_results_schema(const h5::File& f, bool for_append) {
  const auto version = h5::read_attr_int(f, "remat_results");
  if (!version)
    throw UserError(f.path() + ": not a remat results file (no 'remat_results' attribute); refusing to " +
                    (for_append ? "modify" : "read") + " it");
  if (*version < 1 || *version > ResultsFile::kSchemaVersion)
    throw UserError(f.path() + ": results schema version " + std::to_string(*version) + ", this remat reads 1 to " +
                    std::to_string(ResultsFile::kSchemaVersion) + " (written by a newer remat?); refusing to " +
                    (for_append ? "modify" : "read") + " it");
  if (h5::exists(f, "/runs") && !h5::is_group(f, "/runs")) throw UserError(f.path() + ": /runs is not a group");
}

namespace {

// A run merged must be one that `matrix` could have written: its status and,
// unless it ran out of memory, every series a report reads. A damaged or
// hand-edited run is refused by name rather than copied on.
void require_complete_run(const h5::File& src, const std::string& name) {
  const std::string g = "/runs/" + name;
  const auto refuse = [&](const std::string& what) {
    return UserError(src.path() + ": run '" + name + "' lacks " + what +
                     " (a damaged or edited results file); nothing was merged");
  };
  const auto status = h5::read_attr_string(src, "status", g);
  if (!status || (*status != "ok" && *status != "oom")) throw refuse("a status of ok or oom");
  if (*status == "oom") return;
  for (const char* attr : {"step_time_median", "loss"})
    if (!h5::read_attr_double(src, attr, g)) throw refuse(std::string("the attribute ") + attr);
  if (!h5::read_attr_int(src, "activation_peak_bytes", g)) throw refuse("the attribute activation_peak_bytes");
  for (const char* d : {"step_times", "losses", "timeline/seconds", "timeline/bytes", "timeline/phase",
                        "timeline/phase_names", "grad_error/names", "grad_error/max_abs", "grad_error/max_rel"})
    if (!h5::exists(src, g + "/" + d)) throw refuse(std::string("/") + d);
}

}  // namespace

ResultsFile::ResultsFile(std::string path) : path_(std::move(path)) {
  if (!std::filesystem::exists(path_)) return;
  read_keys(h5::File::open(path_));
}

// Runs recorded before schema 2 carry no key: they are never taken for a
// run asked now, which is therefore made again.
void ResultsFile::read_keys(const h5::File& f) {
  check_results_schema(f, true);
  keys_.clear();
  for (const auto& name : h5::list(f, "/runs"))
    if (const auto key = h5::read_attr_string(f, "key", "/runs/" + name)) keys_.insert(*key);
}

bool ResultsFile::append(const RunRecord& r) { return add({{r.key.text(), r.key.name(), [&](const h5::File& f, const std::string& g) { write_run(f, g, r); }}}) == 1; }

std::size_t ResultsFile::append_runs(const std::vector<h5::File>& sources) {
  std::vector<Entry> entries;
  for (const h5::File& src : sources) {
    check_results_schema(src, false);
    for (const auto& name : h5::list(src, "/runs")) {
      const auto key = h5::read_attr_string(src, "key", "/runs/" + name);
      if (!key) throw UserError(src.path() + ": run '" + name + "' has no key (written before schema 2)");
      require_complete_run(src, name);
      entries.push_back({*key, name, [&src, name](const h5::File& f, const std::string& g) { h5::copy(src, "/runs/" + name, f, g); }});
    }
  }
  return add(entries);
}

std::vector<char> ResultsFile::run_image(const RunRecord& r) {
  h5::File f = h5::File::create(r.key.name());
  h5::write_attr(f, "remat_results", kSchemaVersion);
  h5::create_group(f, "/runs");
  write_run(f, "/runs/" + r.key.name(), r);
  return f.image();
}

std::size_t ResultsFile::add(const std::vector<Entry>& entries) {
  FileLock lock(path_, [&] { std::fprintf(stderr, "waiting for another remat writing %s\n", path_.c_str()); });
  const bool fresh = !std::filesystem::exists(path_);
  h5::File f = fresh ? h5::File::create(path_) : h5::File::edit(path_);
  if (fresh) {
    h5::write_attr(f, "created", now_iso());
    h5::create_group(f, "/runs");
  } else {
    read_keys(f);  // another process may have appended since we last looked
  }
  std::size_t added = 0;
  for (const auto& e : entries) {
    if (has_key(e.key)) continue;
    std::string name = e.name;
    for (int n = 2; h5::exists(f, "/runs/" + name); ++n) name = e.name + " #" + std::to_string(n);
    e.write(f, "/runs/" + name);
    keys_.insert(e.key);
    ++added;
  }
  if (added == 0) return 0;
  h5::write_attr(f, "remat_results", kSchemaVersion);
  f.save();
  return added;
}

namespace {

void write_run(const h5::File& file_, const std::string& g, const RunRecord& r) {
  h5::create_group(file_, g);
  auto attr_s = [&](const char* n, const std::string& v) { h5::write_attr(file_, n, v, g); };
  auto attr_i = [&](const char* n, std::int64_t v) { h5::write_attr(file_, n, v, g); };
  auto attr_d = [&](const char* n, double v) { h5::write_attr(file_, n, v, g); };
  const RunKey& k = r.key;
  const Sizes& z = k.sizes;
  const StepResult& st = r.check.step;
  attr_s("key", k.text());
  attr_s("model", k.model);
  attr_s("preset", k.preset);
  attr_s("strategy", k.strategy);
  attr_s("data", k.data);
  if (!k.weights.empty()) attr_s("weights", k.weights);
  attr_i("seed", std::int64_t(k.seed));
  attr_i("mem_limit_bytes", k.mem_limit);
  for (auto [n, v] : std::initializer_list<std::pair<const char*, int>>{{"L", z.L}, {"D", z.D}, {"H", z.H}, {"Hkv", z.Hkv}, {"F", z.F}, {"S", z.S},
                      {"S_max", z.S_max}, {"V", z.V}, {"B", z.B}})
    attr_i(n, v);
  attr_d("dropout", z.dropout);
  for (const auto& a : models().find(k.model).attributes) {
    if (a == "E") attr_i("E", z.E), attr_i("K", z.K), attr_d("router_aux", z.router_aux);
    if (a == "theta") attr_d("theta", z.theta);
  }
  attr_s("attention", k.attention);
  attr_s("precision", k.precision);
  if (!k.finetune.empty()) {
    attr_s("finetune", k.finetune);
    attr_s("finetune_label", k.finetune_label);
    std::string frozen;
    for (const auto& n : r.frozen) frozen += (frozen.empty() ? "" : ",") + n;
    attr_s("frozen_parameters", frozen);
  }
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
  for (const auto& [name, value] : st.loss_parts) h5::write_attr(file_, "loss." + name, value, g);
  attr_i("activation_peak_bytes", st.activation_peak);
  attr_i("predicted_activation_bytes", r.check.predicted.device);
  attr_i("offload_peak_bytes", st.offload_peak);
  attr_i("predicted_offload_bytes", r.check.predicted.offload);
  attr_d("offload_copy_seconds", st.offload_copy_seconds);
  attr_d("offload_wait_seconds", st.offload_wait_seconds);
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
  for (const auto& stat : st.stats) h5::write(file_, g + "/stats/" + stat.name, stat.values, stat.shape);
}

}  // namespace

}  // namespace remat
