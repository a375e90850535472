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
#include "harness/io/results_schema.hpp"
#include "step/step.hpp"
#include "weights/weights_file.hpp"
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
    if (a == "qkv_bias" && z.qkv_bias) text += ";qkv_bias=1";
    if (a == "rope_scaling" && z.rope_factor > 0)
      text += ";rope=" + exact(z.rope_factor) + "," + exact(z.rope_low_freq) + "," + exact(z.rope_high_freq) + "," +
              exact(z.rope_original);
    if (a == "eps" && z.eps != 1e-5) text += ";eps=" + exact(z.eps);  // absent: the default (earlier files' keys)
  }
  return text;
}

}  // namespace

std::string RunKey::layout() const {
  const Sizes& z = sizes;
  std::string text;
  const auto add = [&text](const std::string& part) { text += (text.empty() ? "" : ";") + part; };
  if (z.tp.split() || z.tp.sequence) add("tp=" + std::to_string(z.tp.size) + (z.tp.sequence ? ";sp=1" : ""));
  if (z.ep.split()) add("ep=" + std::to_string(z.ep.size));
  if (z.cp.split()) add("cp=" + std::to_string(z.cp.size));
  return text;
}

std::string RunKey::text() const {
  const Sizes& z = sizes;
  char dropout[32];
  std::snprintf(dropout, sizeof dropout, "%.17g", z.dropout);
  return "model=" + model + ";preset=" + preset + ";strategy=" + strategy + ";L=" + std::to_string(z.L) +
         ";D=" + std::to_string(z.D) + ";H=" + std::to_string(z.H) + ";Hkv=" + std::to_string(z.Hkv) +
         ";F=" + std::to_string(z.F) + ";S=" + std::to_string(z.S) + ";S_max=" + std::to_string(z.S_max) +
         ";V=" + std::to_string(z.V) + ";B=" + std::to_string(z.B) + ";dropout=" + dropout + ";attention=" + ops::attention_kernel_name(run.attention) +
         ";data=" + data + ";seed=" + std::to_string(run.seed) + ";mem_limit=" + std::to_string(mem_limit) +
         (finetune.empty() ? "" : ";finetune=" + finetune) + model_attributes(model, z) +
         (weights.empty() ? "" : ";weights=" + weights) + (run.precision == Precision::fp32 ? "" : ";precision=" + std::string(precision_name(run.precision))) +
         (layout().empty() ? "" : ";" + layout());
}

std::string RunKey::name() const {
  std::string split = layout();  // "tp=2 sp=1" in a name
  std::replace(split.begin(), split.end(), ';', ' ');
  return model + " " + strategy + (finetune_label.empty() ? "" : " (" + finetune_label + ")") + " L" + std::to_string(sizes.L) + " S" + std::to_string(sizes.S) + " B" +
         std::to_string(sizes.B) + (run.precision == Precision::fp32 ? "" : " " + std::string(precision_name(run.precision))) +
         (split.empty() ? "" : " " + split);
}

void check_results_schema(const h5::File& f, bool for_append) {
  const auto version = results::root::version.read(f, "/");
  if (!version)
    throw UserError(f.path() + ": not a remat results file (no 'remat_results' attribute); refusing to " +
                    (for_append ? "modify" : "read") + " it");
  if (*version < 1 || *version > ResultsFile::kSchemaVersion)
    throw UserError(f.path() + ": results schema version " + std::to_string(*version) + ", this remat reads 1 to " +
                    std::to_string(ResultsFile::kSchemaVersion) + " (written by a newer remat?); refusing to " +
                    (for_append ? "modify" : "read") + " it");
  if (h5::exists(f, results::kRunsGroup) && !h5::is_group(f, results::kRunsGroup)) throw UserError(f.path() + ": " + results::kRunsGroup + " is not a group");
}

namespace {

// A run merged must be one that `matrix` could have written: its status and,
// unless it ran out of memory, every series a report reads. A damaged or
// hand-edited run is refused by name rather than copied on.
void require_complete_run(const h5::File& src, const std::string& name) {
  const std::string g = results::run_group(name);
  const auto refuse = [&](const std::string& what) {
    return UserError(src.path() + ": run '" + name + "' lacks " + what +
                     " (a damaged or edited results file); nothing was merged");
  };
  namespace R = results;
  const auto status = R::status.read(src, g);
  if (!status || (*status != "ok" && *status != "oom")) throw refuse("a status of ok or oom");
  if (*status == "oom") return;
  const auto lacks = [&](std::string_view name) { return refuse("the attribute " + std::string(name)); };
  for (const auto* attr : {&R::step_time_median, &R::loss})
    if (!attr->read(src, g)) throw lacks(attr->name);
  if (!R::activation_peak.read(src, g)) throw lacks(R::activation_peak.name);
  for (const std::string_view d : {R::step_times.name, R::losses.name, R::timeline_seconds.name, R::timeline_bytes.name,
                                   R::timeline_phase.name, R::timeline_phase_names.name, R::grad_names.name,
                                   R::grad_abs.name, R::grad_rel.name})
    if (!h5::exists(src, g + "/" + std::string(d))) throw refuse("/" + std::string(d));
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
  for (const auto& name : h5::list(f, results::kRunsGroup))
    if (const auto key = results::key.read(f, results::run_group(name))) keys_.insert(*key);
}

bool ResultsFile::append(const RunRecord& r) { return add({{r.key.text(), r.key.name(), [&](const h5::File& f, const std::string& g) { write_run(f, g, r); }}}) == 1; }

std::size_t ResultsFile::append_runs(const std::vector<h5::File>& sources) {
  std::vector<Entry> entries;
  for (const h5::File& src : sources) {
    check_results_schema(src, false);
    for (const auto& name : h5::list(src, results::kRunsGroup)) {
      const auto key = results::key.read(src, results::run_group(name));
      if (!key) throw UserError(src.path() + ": run '" + name + "' has no key (written before schema 2)");
      require_complete_run(src, name);
      entries.push_back({*key, name, [&src, name](const h5::File& f, const std::string& g) { h5::copy(src, results::run_group(name), f, g); }});
    }
  }
  return add(entries);
}

std::vector<char> ResultsFile::run_image(const RunRecord& r) {
  h5::File f = h5::File::create(r.key.name());
  results::root::version.write(f, "/", kSchemaVersion);
  h5::create_group(f, results::kRunsGroup);
  write_run(f, results::run_group(r.key.name()), r);
  return f.image();
}

std::size_t ResultsFile::add(const std::vector<Entry>& entries) {
  FileLock lock(path_, [&] { std::fprintf(stderr, "waiting for another remat writing %s\n", path_.c_str()); });
  const bool fresh = !std::filesystem::exists(path_);
  h5::File f = fresh ? h5::File::create(path_) : h5::File::edit(path_);
  if (fresh) {
    results::root::created.write(f, "/", now_iso());
    h5::create_group(f, results::kRunsGroup);
  } else {
    read_keys(f);  // another process may have appended since we last looked
  }
  std::size_t added = 0;
  for (const auto& e : entries) {
    if (has_key(e.key)) continue;
    std::string name = e.name;
    for (int n = 2; h5::exists(f, results::run_group(name)); ++n) name = e.name + " #" + std::to_string(n);
    e.write(f, results::run_group(name));
    keys_.insert(e.key);
    ++added;
  }
  if (added == 0) return 0;
  results::root::version.write(f, "/", kSchemaVersion);
  f.save();
  return added;
}

namespace {

// What ran and where: the key's fields, the build and the machine.
void write_setting(const h5::File& f, const std::string& g, const RunRecord& r) {
  namespace R = results;
  const RunKey& k = r.key;
  const Sizes& z = k.sizes;
  R::key.write(f, g, k.text());
  write_model_setup(f, {k.model, k.preset, z}, g);
  R::strategy.write(f, g, k.strategy);
  R::data.write(f, g, k.data);
  if (!k.weights.empty()) R::weights.write(f, g, k.weights);
  if (!k.layout().empty()) R::layout.write(f, g, k.layout());
  R::seed.write(f, g, std::int64_t(k.run.seed));
  R::mem_limit.write(f, g, k.mem_limit);
  R::dropout.write(f, g, z.dropout);
  for (const auto& a : models().find(k.model).attributes)
    if (a == "E") R::router_aux.write(f, g, z.router_aux);
  R::attention.write(f, g, ops::attention_kernel_name(k.run.attention));
  R::precision.write(f, g, precision_name(k.run.precision));
  if (!k.finetune.empty()) {
    R::finetune.write(f, g, k.finetune);
    R::finetune_label.write(f, g, k.finetune_label);
    std::string frozen;
    for (const auto& n : r.frozen) frozen += (frozen.empty() ? "" : ",") + n;
    R::frozen_parameters.write(f, g, frozen);
  }
  R::backend.write(f, g, Runtime::describe());
  R::threads.write(f, g, Kokkos::DefaultExecutionSpace().concurrency());
  R::kokkos_version.write(f, g, std::to_string(KOKKOS_VERSION));
  R::git_revision.write(f, g, REMAT_GIT_REVISION);
  R::host.write(f, g, host_name());
  R::run_time.write(f, g, now_iso());
}

// What the run measured: times, loss, memory, FLOPs, the gradients' errors.
void write_measures(const h5::File& f, const std::string& g, const RunRecord& r) {
  namespace R = results;
  const Sizes& z = r.key.sizes;
  const StepResult& st = r.check.step;
  const auto [fastest, slowest] = std::minmax_element(r.step_times.begin(), r.step_times.end());
  const double step_median = median(r.step_times);
  R::step_time_median.write(f, g, step_median);
  R::step_time_min.write(f, g, r.step_times.empty() ? 0 : *fastest);
  R::step_time_max.write(f, g, r.step_times.empty() ? 0 : *slowest);
  R::tokens_per_second.write(f, g, step_median > 0 ? double(z.B) * z.S / step_median : 0);
  if (r.time_vs_full.median > 0) {
    R::time_vs_full.write(f, g, r.time_vs_full.median);
    R::time_vs_full_spread.write(f, g, r.time_vs_full.half_iqr);
  }
  R::timing_capped.write(f, g, r.timing_capped ? 1 : 0);
  R::loss.write(f, g, st.loss);
  for (const auto& [name, value] : st.loss_parts) h5::write_attr(f, R::loss_part.at(name), value, g);
  R::activation_peak.write(f, g, st.activation_peak);
  R::predicted_activation.write(f, g, r.check.predicted.device);
  R::offload_peak.write(f, g, st.offload_peak);
  R::predicted_offload.write(f, g, r.check.predicted.offload);
  R::offload_copy_seconds.write(f, g, st.offload_copy_seconds);
  R::offload_wait_seconds.write(f, g, st.offload_wait_seconds);
  R::gemm_flops.write(f, g, st.flops);
  R::recompute_share.write(f, g, st.flops > 0 ? st.recompute_flops / st.flops : 0);
  R::dequantize_flops.write(f, g, st.dequantize_flops);
  R::recompute_dequantize_flops.write(f, g, st.recompute_dequantize_flops);
  R::dequantize_seconds.write(f, g, st.dequantize_seconds);
  R::recompute_dequantize_seconds.write(f, g, st.recompute_dequantize_seconds);
  R::grad_max_abs.write(f, g, r.check.vs_full.max_abs);
  R::grad_max_rel.write(f, g, r.check.vs_full.max_rel);
  R::bitwise.write(f, g, r.check.vs_full.bitwise ? 1 : 0);
}

// The series: each timed step, the measured step's memory timeline, the
// per-parameter gradient errors, the model's statistics.
void write_series(const h5::File& f, const std::string& g, const RunRecord& r) {
  namespace R = results;
  const StepResult& st = r.check.step;
  R::step_times.write(f, g, r.step_times);
  R::losses.write(f, g, r.losses);
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
  R::timeline_seconds.write(f, g, t);
  R::timeline_bytes.write(f, g, bytes);
  R::timeline_phase.write(f, g, phase);
  R::timeline_phase_names.write(f, g, phases);
  R::grad_names.write(f, g, r.param_names);
  R::grad_abs.write(f, g, r.check.vs_full.abs_by_param);
  R::grad_rel.write(f, g, r.check.vs_full.rel_by_param);
  for (const auto& stat : st.stats) h5::write(f, g + "/" + R::stat.at(stat.name), stat.values, stat.shape);
}

void write_run(const h5::File& f, const std::string& g, const RunRecord& r) {
  h5::create_group(f, g);
  write_setting(f, g, r);
  results::status.write(f, g, r.check.oom ? "oom" : "ok");
  if (r.check.oom) return;  // nothing was measured
  write_measures(f, g, r);
  write_series(f, g, r);
}

}  // namespace

}  // namespace remat
