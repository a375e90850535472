#include "harness/report/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.hpp"
#include "core/text.hpp"
#include "h5/atomic_file.hpp"
#include "h5/h5.hpp"
#include "harness/io/results_file.hpp"
#include "harness/io/results_schema.hpp"
#include "harness/report/svg_chart.hpp"

namespace remat {
namespace {

double mb(std::int64_t b) { return double(b) / (1 << 20); }
std::string shape(const RunSummary& r) {
  return "L" + std::to_string(r.L) + " S" + std::to_string(r.S) + " B" + std::to_string(r.B);
}

// A setting's fields ("model=gpt2;L=2;..." as key=value pairs).
std::map<std::string, std::string> fields_of(const std::string& setting) {
  std::map<std::string, std::string> out;
  std::size_t at = 0;
  while (at <= setting.size()) {
    const std::size_t end = std::min(setting.find(';', at), setting.size());
    const std::string field = setting.substr(at, end - at);
    if (const auto eq = field.find('='); eq != std::string::npos) out[field.substr(0, eq)] = field.substr(eq + 1);
    at = end + 1;
  }
  return out;
}

// The setting without the named fields (a depth sweep's runs share one
// without L).
std::string setting_without(const std::string& setting, const std::set<std::string>& names) {
  std::string out;
  for (const auto& [k, v] : fields_of(setting))
    if (!names.count(k)) out += k + "=" + v + ";";
  return out.empty() ? setting : out;
}

// The runs compared in one panel: one setting (every option but the
// strategy), in order of first appearance.
std::vector<std::pair<std::string, std::vector<const RunSummary*>>> by_setting(const std::vector<RunSummary>& runs) {
  std::vector<std::pair<std::string, std::vector<const RunSummary*>>> out;
  for (const auto& r : runs) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& g) { return g.first == r.setting; });
    if (it == out.end()) it = out.insert(out.end(), {r.setting, {}});
    it->second.push_back(&r);
  }
  return out;
}

// A panel's title: the model and shape, its fine-tuning (the label its
// strategies carry), and every option in which this setting differs from
// another of the same model (data, seed, attention...), so that no two
// panels read alike.
std::string panel_title(const RunSummary& r, const std::vector<RunSummary>& runs) {
  static const std::set<std::string> options = {"preset", "D", "H", "Hkv", "F", "V", "dropout", "attention", "precision", "data",
                                                "seed", "mem_limit", "weights", "theta", "E", "K", "tp", "sp",
                                                "ep", "cp"};
  const auto mine = fields_of(r.setting);
  std::set<std::string> differ;
  for (const auto& other : runs)
    if (other.model == r.model && other.setting != r.setting) {
      const auto theirs = fields_of(other.setting);
      for (const auto& k : options) {
        const bool a = mine.count(k), b = theirs.count(k);
        if (a != b || (a && mine.at(k) != theirs.at(k))) differ.insert(k);
      }
    }
  std::string title = r.model + " " + shape(r);
  if (const auto open = r.strategy.find(" ("); open != std::string::npos) title += " " + r.strategy.substr(open + 1);
  for (const auto& k : differ)
    if (mine.count(k)) title += ", " + k + " " + mine.at(k);
  return title;
}

}  // namespace

double loglog_slope(const std::vector<double>& x, const std::vector<double>& y) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = double(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double a = std::log(x[i]), b = std::log(y[i]);
    sx += a, sy += b, sxx += a * a, sxy += a * b;
  }
  return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

namespace {

// A strategy that kept full's bytes, moved none and recomputed nothing is
// full in all but name on this run (selective:attn-core under the fused
// attention, which keeps no scores): said so, never shown as a result.
bool full_in_all_but_name(const RunSummary& r, const RunSummary* full) {
  return full && !r.full && !r.oom && r.activation == full->activation && r.offload == 0 && r.recompute_share == 0;
}

// Per setting: full's run, and the names of the runs that equal it there.
struct FullOf {
  const RunSummary* run = nullptr;
  std::vector<std::string> same;
  std::string name() const {  // full's legend: "full (= selective:attn-core here)"
    std::string n = "full";
    for (std::size_t i = 0; i < same.size(); ++i) n += (i ? ", " : " (= ") + same[i];
    return same.empty() ? n : n + " here)";
  }
};

std::map<std::string, FullOf> full_of_settings(const std::vector<RunSummary>& runs) {
  std::map<std::string, FullOf> full;
  for (const auto& r : runs)
    if (r.full && !r.oom) full[r.setting].run = &r;
  for (const auto& r : runs)
    if (full.count(r.setting) && full_in_all_but_name(r, full[r.setting].run)) full[r.setting].same.push_back(r.strategy);
  return full;
}

void write_file(const std::string& path, const std::string& text, std::vector<std::string>& written) {
  write_file_atomically(path, text);
  written.push_back(path);
}

}  // namespace

// Seconds as a person reads them off an axis: milliseconds where the whole
// axis stays under a second (0.0004 s reads 0.4 ms).
struct TimeUnit {
  double scale;
  const char* name;
};
TimeUnit time_unit(double max_seconds) { return max_seconds < 1 ? TimeUnit{1e3, "ms"} : TimeUnit{1, "s"}; }

std::string copy_cost(double copy_seconds, double wait_seconds) {
  if (copy_seconds <= 0) return "-";
  const double hidden = std::max(0.0, 1 - wait_seconds / copy_seconds);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3gs %.0f%%", copy_seconds, 100 * hidden);
  return buf;
}

namespace {

// The measured step's memory timeline, checked: two series of one length, finite times.
void read_timeline(const h5::File& f, const std::string& g, RunSummary& r) {
  namespace R = results;
  r.timeline_seconds = R::timeline_seconds.read(f, g);
  const auto bytes = R::timeline_bytes.read(f, g);
  if (bytes.size() != r.timeline_seconds.size())
    throw UserError("timeline/seconds and timeline/bytes differ in length (" + std::to_string(r.timeline_seconds.size()) +
                    " and " + std::to_string(bytes.size()) + ")");
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (!std::isfinite(r.timeline_seconds[i])) throw UserError("timeline/seconds holds a non-finite time");
    r.timeline_mb.push_back(mb(bytes[i]));
  }
}

// One run's record, every field checked; UserError saying what is wrong.
RunSummary read_run(const h5::File& f, const std::string& name) {
  namespace R = results;
  const std::string g = remat::results::run_group(name);
  if (!h5::is_group(f, g)) throw UserError("not a group");
  auto count = [&](const h5::Attr<std::int64_t>& a, std::int64_t lo, std::int64_t hi) {
    const std::int64_t v = a.require(f, g);
    if (v < lo || v > hi) throw UserError("'" + std::string(a.name) + "' = " + std::to_string(v) + " is out of range");
    return v;
  };
  auto measure = [&](const h5::Attr<double>& a) {
    const double v = a.require(f, g);
    if (!std::isfinite(v)) throw UserError("'" + std::string(a.name) + "' is not a finite number");
    if (v < 0) throw UserError("'" + std::string(a.name) + "' = " + std::to_string(v) + " is negative");
    return v;
  };
  RunSummary r;
  r.name = name;
  r.model = R::model.require(f, g);
  r.strategy = R::strategy.require(f, g);
  r.full = r.strategy == "full";
  const std::string status = R::status.require(f, g);
  if (status != "ok" && status != "oom") throw UserError("status '" + status + "' is neither ok nor oom");
  r.oom = status == "oom";
  if (const auto precision = R::precision.read(f, g)) r.precision = *precision;
  r.L = int(count(R::L, 1, INT32_MAX));
  r.S = int(count(R::S, 1, INT32_MAX));
  r.B = int(count(R::B, 1, INT32_MAX));
  // Runs compare with full's run of the same setting: the key without the
  // strategy (model and shape for files written before keys existed).
  if (const auto key = R::key.read(f, g)) {
    const std::string strategy_field = ";strategy=" + r.strategy + ";";
    const auto at = key->find(strategy_field);
    r.setting = at == std::string::npos ? *key : key->substr(0, at) + ";" + key->substr(at + strategy_field.size());
    // Fine-tuned runs show beside the others, under their own label.
    if (const auto label = R::finetune_label.read(f, g)) r.strategy += " (" + *label + ")";
  } else {
    r.setting = r.model + " " + shape(r);
  }
  if (r.oom) return r;
  r.step_time = measure(R::step_time_median);
  r.tokens_per_second = measure(R::tokens_per_second);
  r.recompute_share = measure(R::recompute_share);
  r.activation = count(R::activation_peak, 0, INT64_MAX);
  r.predicted = count(R::predicted_activation, 0, INT64_MAX);
  r.offload = count(R::offload_peak, 0, INT64_MAX);
  r.bitwise = count(R::bitwise, 0, 1) != 0;
  if (R::offload_copy_seconds.read(f, g)) {
    r.copy_seconds = measure(R::offload_copy_seconds);
    r.wait_seconds = measure(R::offload_wait_seconds);
  }
  if (R::time_vs_full.read(f, g)) {
    r.time_vs_full = {measure(R::time_vs_full), measure(R::time_vs_full_spread)};
  }
  if (R::timeline_seconds.exists_in(f, g)) read_timeline(f, g, r);
  return r;
}

}  // namespace

Results read_results(const std::string& path) {
  h5::File f = h5::File::open(path);
  check_results_schema(f, false);
  Results results;
  for (const auto& name : h5::list(f, remat::results::kRunsGroup)) {
    try {
      results.runs.push_back(read_run(f, name));
    } catch (const UserError& e) {
      std::string why = e.what();
      if (why.rfind(path + ": ", 0) == 0) why = why.substr(path.size() + 2);
      results.damaged.push_back("'" + name + "': " + why);
    }
  }
  // Run order: by model, shape, then as recorded.
  std::stable_sort(results.runs.begin(), results.runs.end(), [](const RunSummary& a, const RunSummary& b) {
    const bool fa = !a.full, fb = !b.full;  // full first in each shape
    return std::tie(a.model, a.L, a.S, a.B, fa) < std::tie(b.model, b.L, b.S, b.B, fb);
  });
  return results;
}

namespace {

// "1.24x +-0.02" from the rounds' ratios, "~ full (1.01x +-0.03)" where
// their spread holds 1.00; the ratio of medians for files from before.
std::string time_vs_full(const RunSummary& r, const RunSummary* f) {
  if (r.full) return "1.00x";
  const Spread& v = r.time_vs_full;
  if (v.median <= 0) return f && f->step_time > 0 ? fixed(r.step_time / f->step_time, 2) + "x" : "-";
  const std::string ratio = fixed(v.median, 2) + "x +-" + fixed(v.half_iqr, 2);
  return v.holds(1) ? "~ full (" + ratio + ")" : ratio;
}

}  // namespace

std::string markdown_summary(const Results& results) {
  const auto& runs = results.runs;
  std::ostringstream o;
  std::map<std::string, const RunSummary*> full;  // setting -> full's run
  for (const auto& r : runs)
    if (r.full && !r.oom) full[r.setting] = &r;
  std::string model;
  char buf[512];
  bool any_same = false;
  for (const auto& r : runs) {
    if (r.model != model) {
      model = r.model;
      o << "\n## " << model << "\n\n"
        << "| strategy | shape | step s | time vs full | act MiB | memory vs full | predicted MiB | offload MiB | "
           "copies (hidden) | recompute | bitwise | precision |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    }
    if (r.oom) {
      o << "| " << r.strategy << " | " << shape(r) << " | out of memory | | | | | | | | | " << r.precision << " |\n";
      continue;
    }
    const auto it = full.find(r.setting);
    const RunSummary* f = it == full.end() ? nullptr : it->second;
    const bool same = full_in_all_but_name(r, f);
    if (same) any_same = true;
    std::string label = r.strategy;
    // Runs that differ only in data or seed must not read alike.
    const auto options = fields_of(r.setting);
    if (options.count("data") && options.at("data") != "random") label += " [" + options.at("data") + "]";
    if (options.count("seed") && options.at("seed") != "1") label += " [seed " + options.at("seed") + "]";
    std::string layout;  // split over ranks (rank 0's memory): "tp 2 sp, cp 2"
    for (const char* split : {"tp", "ep", "cp"})
      if (options.count(split))
        layout += (layout.empty() ? "" : ", ") + std::string(split) + " " + options.at(split) +
                  (split == std::string("tp") && options.count("sp") ? " sp" : "");
    if (!layout.empty()) label += " [" + layout + "]";
    if (same) label += " (= full here)";
    std::snprintf(buf, sizeof buf, "| %s | %s | %.3f | %s | %.1f | %s | %.1f | %.1f | %s | %.1f%% | %s | %s |\n", label.c_str(),
                  shape(r).c_str(), r.step_time,
                  time_vs_full(r, f).c_str(),
                  mb(r.activation),
                  f && f->activation > 0 ? (fixed(double(r.activation) / f->activation, 3) + "x").c_str() : "-",
                  mb(r.predicted), mb(r.offload), copy_cost(r.copy_seconds, r.wait_seconds).c_str(), 100 * r.recompute_share, r.bitwise ? "yes" : "no",
                  r.precision.c_str());
    o << buf;
  }
  if (any_same)
    o << "\n(= full here): the strategy kept full's activation bytes, offloaded nothing and recomputed no GEMM on "
         "this run: it is full in all but name (selective:attn-core under the fused attention kernel, which keeps "
         "no attention scores to drop; run it with --attention plain to see Megatron's trade).\n";
  if (!results.damaged.empty()) {
    o << "\n## Damaged runs, left out\n\n";
    for (const auto& d : results.damaged) o << "- " << d << "\n";
  }
  return o.str();
}

namespace {

// What every plot of one report shares: the runs by setting, one colour per
// strategy in every panel and file, and each setting's full.
struct PlotContext {
  const std::vector<RunSummary>& runs;
  std::vector<std::pair<std::string, std::vector<const RunSummary*>>> groups = by_setting(runs);
  std::map<std::string, FullOf> full = full_of_settings(runs);
  mutable svg::Palette palette;

  explicit PlotContext(const std::vector<RunSummary>& r) : runs(r) {
    for (const auto& run : runs) palette(run.strategy);
  }
  // A run that is full in all but name is no point of its own: full's legend names it instead.
  bool same_as_full(const RunSummary& r) const {
    const auto it = full.find(r.setting);
    return it != full.end() && full_in_all_but_name(r, it->second.run);
  }
  std::string legend(const RunSummary& r) const { return r.full ? full.at(r.setting).name() : r.strategy; }
};

// The points no other point matches or beats in both time and bytes (by
// bytes, then time: of two with the same bytes the faster comes first, and
// the slower is not on the front), ringed.
svg::Series pareto_front(std::vector<const RunSummary*> runs, const TimeUnit& unit) {
  std::sort(runs.begin(), runs.end(), [](auto* a, auto* b) {
    return a->activation != b->activation ? a->activation < b->activation : a->step_time < b->step_time;
  });
  svg::Series front{"Pareto front", {}, {}, true, false, true, true};
  double best = std::numeric_limits<double>::max();
  for (const RunSummary* r : runs)  // lowest time so far, by growing memory
    if (r->step_time < best) {
      best = r->step_time;
      front.x.push_back(mb(r->activation));
      front.y.push_back(r->step_time * unit.scale);
    }
  return front;
}

// A point's error bar: the spread of its ratio to full (the rounds'
// half-IQR) at full's step time; none for files from before.
double time_error(const PlotContext& p, const RunSummary& r) {
  const auto it = p.full.find(r.setting);
  return it == p.full.end() ? 0 : r.time_vs_full.half_iqr * it->second.run->step_time;
}

// Step time against activation memory for one setting (model, shape, data,
// seed, fine-tuning...), with its own Pareto front; the planner's budgets
// form one line beside the fixed strategies' points.
svg::Chart tradeoff_panel(const PlotContext& p, const std::vector<const RunSummary*>& rs) {
  double slowest = 0;
  for (const RunSummary* r : rs) slowest = std::max(slowest, r->oom ? 0.0 : r->step_time);
  const TimeUnit unit = time_unit(slowest);
  svg::Chart c{panel_title(*rs.front(), p.runs), "activation memory (MiB)", std::string("step time (") + unit.name + ")",
               false, false, {}};
  std::vector<const RunSummary*> drawn, planned;
  for (const RunSummary* r : rs)
    if (!r->oom && !p.same_as_full(*r)) {
      if (r->strategy.rfind("budget:", 0) == 0) planned.push_back(r);
      else c.series.push_back({p.legend(*r), {mb(r->activation)}, {r->step_time * unit.scale}, false, true, false,
                               false, p.palette(r->strategy), {time_error(p, *r) * unit.scale}});
      drawn.push_back(r);
    }
  if (!planned.empty()) {
    std::sort(planned.begin(), planned.end(), [](auto* a, auto* b) { return a->activation < b->activation; });
    svg::Series plan{"planner (budget:...)", {}, {}, true, true, false, false, p.palette("planner (budget:...)")};
    for (const RunSummary* r : planned) {
      plan.x.push_back(mb(r->activation));
      plan.y.push_back(r->step_time * unit.scale);
    }
    c.series.push_back(plan);
  }
  c.series.push_back(pareto_front(drawn, unit));
  return c;
}

// One setting's row of timeline panels, one per strategy, on one scale,
// with full's line faint behind each; `columns` grows to the widest row.
void timeline_row(const PlotContext& p, const std::vector<const RunSummary*>& rs, std::vector<svg::Chart>& panels,
                  std::size_t& columns) {
  double t_max = 0, m_max = 0;
  const RunSummary* full = nullptr;
  std::vector<const RunSummary*> drawn;
  for (const RunSummary* r : rs)
    if (!r->timeline_seconds.empty() && !p.same_as_full(*r)) {
      drawn.push_back(r);
      if (r->full) full = r;
      for (double t : r->timeline_seconds) t_max = std::max(t_max, t);
      for (double m : r->timeline_mb) m_max = std::max(m_max, m);
    }
  columns = std::max(columns, std::min<std::size_t>(drawn.size(), 4));
  const std::string title = panel_title(*rs.front(), p.runs);
  const TimeUnit unit = time_unit(t_max);
  const auto in_unit = [&](std::vector<double> seconds) {
    for (double& t : seconds) t *= unit.scale;
    return seconds;
  };
  for (const RunSummary* r : drawn) {
    svg::Chart c{p.legend(*r) + ": " + title, std::string("time in the step (") + unit.name + ")",
                 "activation memory (MiB)", false, false, {}};
    c.x_max = t_max * unit.scale, c.y_max = m_max;
    if (full && full != r)
      c.series.push_back({"full (reference)", in_unit(full->timeline_seconds), full->timeline_mb, true, false, true,
                          false, 8});  // grey
    c.series.push_back({r->strategy, in_unit(r->timeline_seconds), r->timeline_mb, true, false, false, false,
                        p.palette(r->strategy)});
    panels.push_back(std::move(c));
  }
}

// One panel of the depth sweep: activation memory against L, log-log, with
// fitted slopes. A line that coincides with one drawn before it is dashed,
// and its legend says so.
svg::Chart depth_panel(const PlotContext& p, const std::string& title,
                       const std::map<std::string, std::map<int, std::int64_t>>& strategies) {
  svg::Chart c{title, "blocks L", "activation memory (MiB)", true, true, {}};
  std::vector<std::pair<std::string, std::map<int, std::int64_t>>> drawn;
  for (const auto& [strategy, points] : strategies) {
    if (points.size() < 2) continue;
    svg::Series s{strategy, {}, {}, true, true, false, false, p.palette(strategy)};
    for (const auto& [L, bytes] : points) s.x.push_back(L), s.y.push_back(std::max(mb(bytes), 1e-3));
    char label[160];
    std::snprintf(label, sizeof label, "%s (slope %.2f)", strategy.c_str(), loglog_slope(s.x, s.y));
    s.name = label;
    for (const auto& [other, other_points] : drawn)
      if (other_points == points) {
        s.dashed = true;
        s.name += ", = " + other;
        break;
      }
    drawn.push_back({strategy, points});
    c.series.push_back(std::move(s));
  }
  return c;
}

// The depth sweep: a panel per setting but L.
std::vector<svg::Chart> depth_panels(const PlotContext& p) {
  std::vector<std::pair<std::string, std::map<std::string, std::map<int, std::int64_t>>>> sweep;  // strategy -> L -> bytes
  std::map<std::string, const RunSummary*> first_of;
  for (const auto& r : p.runs) {
    if (r.oom) continue;
    const std::string key = setting_without(r.setting, {"L"});
    auto it = std::find_if(sweep.begin(), sweep.end(), [&](const auto& g) { return g.first == key; });
    if (it == sweep.end()) it = sweep.insert(sweep.end(), {key, {}}), first_of[key] = &r;
    it->second[r.strategy][r.L] = r.activation;
  }
  std::vector<svg::Chart> depth;
  for (const auto& [key, strategies] : sweep) {
    std::string title = panel_title(*first_of[key], p.runs);
    title = title.substr(0, title.find(' ')) + title.substr(title.find(' ') + shape(*first_of[key]).size() + 1);
    svg::Chart c = depth_panel(p, title, strategies);
    if (!c.series.empty()) depth.push_back(std::move(c));
  }
  return depth;
}

}  // namespace

std::vector<std::string> write_plots(const std::vector<RunSummary>& runs, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw UserError(dir + ": cannot create (" + ec.message() + ")");
  std::vector<std::string> written;
  const PlotContext p(runs);
  // 1. Step time against activation memory, one panel per setting.
  std::vector<svg::Chart> tradeoff;
  for (const auto& [setting, rs] : p.groups) tradeoff.push_back(tradeoff_panel(p, rs));
  if (!tradeoff.empty())
    write_file(dir + "/tradeoff.svg", svg::render("Step time against activation memory (Pareto front ringed)", tradeoff),
               written);
  // 2. The memory timeline of one step as small multiples: per model a file, per setting a row.
  std::vector<std::string> model_order;
  for (const auto& r : runs)
    if (std::find(model_order.begin(), model_order.end(), r.model) == model_order.end()) model_order.push_back(r.model);
  for (const auto& model : model_order) {
    std::vector<svg::Chart> panels;
    std::size_t columns = 1;
    for (const auto& [setting, rs] : p.groups)
      if (rs.front()->model == model) timeline_row(p, rs, panels, columns);
    if (!panels.empty())
      write_file(dir + "/timeline-" + model + ".svg",
                 svg::render("Memory during one training step: " + model + " (one scale per setting)", panels, columns),
                 written);
  }
  // 3. Depth sweep: activation memory against L.
  const std::vector<svg::Chart> depth = depth_panels(p);
  if (!depth.empty())
    write_file(dir + "/depth.svg", svg::render("Activation memory against depth (log-log, fitted slopes)", depth), written);
  return written;
}

}  // namespace remat
