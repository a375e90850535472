// remat matrix: a small matrix into a temporary file, read back through the
// HDF5 API; appending, resuming and refusing foreign files.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>

#include "autodiff/memory_tracker.hpp"
#include "catch.hpp"
#include "core/error.hpp"
#include "harness/check.hpp"
#include "harness/matrix.hpp"
#include "harness/matrix_timing.hpp"
#include "fixtures.hpp"
#include "strategies/registry.hpp"
#include "harness/report/report.hpp"

using namespace remat;
namespace fs = std::filesystem;

namespace {

struct TempFile {
  std::string path = (fs::temp_directory_path() / ("remat-matrix-" + std::to_string(::getpid()) + ".h5")).string();
  ~TempFile() { fs::remove(path); }
};

MatrixOptions small_matrix(const std::string& out) {
  MatrixOptions o;
  o.preset = "tiny";
  o.strategies = "full,per-layer";
  o.layers = {2, 3};
  o.steps = 2;
  o.max_steps = 2;
  o.out = out;
  return o;
}

}  // namespace

TEST_CASE("a 2 x 2 matrix is recorded with every documented field", "[matrix]") {
  TempFile tmp;
  const auto records = run_matrix(small_matrix(tmp.path), {});
  REQUIRE(records.size() == 4);
  h5::File f = h5::File::open(tmp.path);
  CHECK(h5::read_attr_int(f, "remat_results") == ResultsFile::kSchemaVersion);
  const auto runs = h5::list(f, "/runs");
  CHECK(runs.size() == 4);
  const std::string g = "/runs/gpt2 per-layer L3 S16 B2";
  REQUIRE(h5::exists(f, g));
  h5::Handle group(H5Gopen2(f.id(), g.c_str(), H5P_DEFAULT), H5Gclose);
  for (const char* a : {"model", "preset", "strategy", "L", "D", "H", "Hkv", "F", "S", "S_max", "V", "B", "dropout",
                        "attention", "backend", "threads", "kokkos_version", "git_revision", "host", "time", "status",
                        "step_time_median", "step_time_min", "step_time_max", "tokens_per_second", "loss",
                        "activation_peak_bytes", "predicted_activation_bytes", "offload_peak_bytes",
                        "predicted_offload_bytes", "gemm_flops", "recompute_flops_share", "grad_max_abs_error",
                        "grad_max_rel_error", "bitwise_equal_to_full", "time_vs_full", "time_vs_full_spread",
                        "timing_capped"}) {
    INFO(a);
    CHECK(H5Aexists(group.id(), a) > 0);
  }
  CHECK(h5::info(f, g + "/step_times").shape == Shape{2});
  CHECK(h5::info(f, g + "/losses").shape == Shape{2});
  const auto events = h5::info(f, g + "/timeline/bytes").shape;
  REQUIRE(events.size() == 1);
  CHECK(events[0] > 10);
  CHECK(h5::info(f, g + "/timeline/seconds").shape == events);
  CHECK(h5::info(f, g + "/timeline/phase").shape == events);
  CHECK(h5::info(f, g + "/grad_error/max_abs").shape == Shape{std::int64_t(records[3].param_names.size())});
  CHECK(h5::info(f, g + "/grad_error/max_rel").kind == h5::Kind::float64);
}

TEST_CASE("matrix runs append, resume without repeating, and refuse foreign files", "[matrix]") {
  TempFile tmp;
  MatrixOptions o = small_matrix(tmp.path);
  o.layers = {2};
  CHECK(run_matrix(o, {}).size() == 2);
  CHECK_THROWS_WITH(run_matrix(o, {}), test::Contains("--resume"));
  o.layers = {2, 3};
  o.resume = true;
  const auto more = run_matrix(o, {});
  CHECK(more.size() == 2);  // only the L3 runs
  for (const auto& r : more) CHECK(r.key.sizes.L == 3);
  CHECK(h5::list(h5::File::open(tmp.path), "/runs").size() == 4);

  TempFile foreign;
  h5::File::create(foreign.path).save();
  const auto before = fs::last_write_time(foreign.path);
  o.out = foreign.path;
  CHECK_THROWS_WITH(run_matrix(o, {}), test::Contains("not a remat results file"));
  CHECK(fs::last_write_time(foreign.path) == before);
}

TEST_CASE("the report summarises a results file and draws its plots", "[matrix][report]") {
  TempFile tmp;
  MatrixOptions o = small_matrix(tmp.path);
  run_matrix(o, {});
  const auto results = read_results(tmp.path);
  const auto& runs = results.runs;
  REQUIRE(runs.size() == 4);
  CHECK(results.damaged.empty());
  CHECK(runs[0].strategy == "full");  // full first in each shape
  // The values, not just the fields: read back as the matrix measured them.
  const auto records = run_matrix([&] {
    MatrixOptions again = o;
    again.out = tmp.path + ".2";
    return again;
  }(), {});
  fs::remove(tmp.path + ".2");
  for (const auto& r : runs) {
    INFO(r.name);
    CHECK(r.model == "gpt2");
    CHECK(r.S == 16);
    CHECK(r.B == 2);
    CHECK(r.step_time > 0);
    CHECK(r.tokens_per_second == test::Approx(32 / r.step_time).epsilon(1e-9));
    CHECK(r.bitwise);
    CHECK(r.activation > 0);
    CHECK(r.timeline_seconds.size() == r.timeline_mb.size());
    for (const auto& rec : records)  // memory is deterministic: the same on a second run
      if (rec.key.strategy == r.strategy && rec.key.sizes.L == r.L) CHECK(rec.check.step.activation_peak == r.activation);
  }
  CHECK(runs[1].activation < runs[0].activation);  // per-layer below full at L2
  const std::string md = markdown_summary(results);
  CHECK(md.find("## gpt2") != std::string::npos);
  CHECK(md.find("| full | L2 S16 B2 |") != std::string::npos);
  CHECK(md.find("| per-layer | L3 S16 B2 |") != std::string::npos);
  CHECK(md.find("| 1.00x |") != std::string::npos);  // full against itself
  const std::string dir = tmp.path + ".plots";
  const auto files = write_plots(runs, dir);
  CHECK(files.size() == 3);  // tradeoff, timeline-gpt2, depth (two depths)
  for (const auto& f : files) {
    std::ifstream in(f);
    const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(svg.rfind("<svg", 0) == 0);
    CHECK(svg.find("</svg>") != std::string::npos);
    // What each plot draws: every strategy of the matrix, by name.
    for (const char* strategy : {"full", "per-layer"}) CHECK(svg.find(strategy) != std::string::npos);
  }
  std::ifstream tradeoff(dir + "/tradeoff.svg");
  const std::string svg((std::istreambuf_iterator<char>(tradeoff)), std::istreambuf_iterator<char>());
  CHECK(svg.find("Pareto front") != std::string::npos);
  CHECK(svg.find("<circle") != std::string::npos);
  CHECK_THROWS_WITH(read_results(dir + "/none.h5"), test::Contains("no such file"));
  fs::remove_all(dir);
}

TEST_CASE("a run that passes --mem-limit is recorded as out of memory and the matrix goes on", "[matrix][oom]") {
  TempFile tmp;
  MatrixOptions o = small_matrix(tmp.path);
  o.preset = "deep";
  o.layers = {4};
  o.seq = {64};
  o.steps = 1;
  o.strategies = "full,per-layer";
  const auto probe = run_matrix(o, {});
  const std::int64_t full = probe[0].check.step.activation_peak, per_layer = probe[1].check.step.activation_peak;
  REQUIRE(per_layer < full);
  fs::remove(tmp.path);
  // A device with room for the parameters, gradients, batch and per-layer's
  // activations, but not full's.
  Sizes z = preset_sizes("deep");
  z.L = 4;
  z.S = z.S_max = 64;
  const std::int64_t weights = 2 * 4 * count_params(models().find("gpt2").make(z)->params());
  const std::int64_t batch = 3 * std::int64_t(z.B) * z.S * 4;
  o.mem_limit = MemoryTracker::instance().stats(MemoryTracker::default_pool()).live + weights + batch +
                (full + per_layer) / 2;
  const auto records = run_matrix(o, {});
  REQUIRE(records.size() == 2);
  CHECK(records[0].check.oom);
  CHECK_FALSE(records[1].check.oom);
  CHECK(h5::read_attr_string(h5::File::open(tmp.path), "status", "/runs/gpt2 full L4 S64 B4") == "oom");
  // The limit is part of the run: another limit runs it again.
  o.mem_limit *= 4;
  o.resume = true;
  const auto retried = run_matrix(o, {});
  REQUIRE(retried.size() == 2);
  CHECK_FALSE(retried[0].check.oom);
  CHECK(MemoryTracker::instance().limit() == 0);  // lifted afterwards
}

TEST_CASE("resume skips a run only when every option that changes it matches", "[matrix][resume]") {
  TempFile tmp;
  MatrixOptions o = small_matrix(tmp.path);
  o.layers = {2};
  o.strategies = "full";
  REQUIRE(run_matrix(o, {}).size() == 1);
  o.resume = true;
  CHECK(run_matrix(o, {}).empty());  // the same: skipped
  auto rerun = [&](const std::function<void(MatrixOptions&)>& change) {
    MatrixOptions c = o;
    change(c);
    return run_matrix(c, {}).size();
  };
  CHECK(rerun([](MatrixOptions& c) { c.seed = 2; }) == 1);
  CHECK(rerun([](MatrixOptions& c) { c.attention = ops::AttentionKernel::plain; }) == 1);
  CHECK(rerun([](MatrixOptions& c) { c.data = "copy"; }) == 1);
  CHECK(rerun([](MatrixOptions& c) { c.dropout = 0.1; }) == 1);
  CHECK(rerun([](MatrixOptions& c) { c.preset = "deep"; c.seq = {16}; c.batch = {2}; }) == 1);
  CHECK(rerun([](MatrixOptions& c) { c.seed = 2; }) == 0);  // now recorded too
  const auto results = read_results(tmp.path);
  CHECK(results.runs.size() == 6);
  CHECK(results.damaged.empty());
}

TEST_CASE("a split over ranks is part of each cell's key and name, and each model must take it", "[matrix][split]") {
  TempFile tmp;
  MatrixOptions o = small_matrix(tmp.path);
  o.strategies = "full";
  const RunKey whole = matrix_cells(o).at(0);
  CHECK(whole.layout().empty());
  CHECK(whole.text().find("cp=") == std::string::npos);  // keys of unsplit runs read as before
  o.cp = RankGroup::context(2);
  const RunKey split = matrix_cells(o).at(0);
  CHECK(split.layout() == "cp=2");
  CHECK(split.text() == whole.text() + ";cp=2");
  CHECK(split.name() == whole.name() + " cp=2");
  o.cp = RankGroup::context();
  o.tp = RankGroup::tensor(2, 0, true);
  CHECK(matrix_cells(o).at(0).name() == whole.name() + " tp=2 sp=1");
  o.tp = RankGroup::tensor();
  o.ep = RankGroup::expert(2);
  CHECK_THROWS_WITH(matrix_cells(o), test::Contains("gpt2 has none"));
  o.models = {"mixtral"};
  o.strategies = "budget:min";
  CHECK(matrix_cells(o).at(0).layout() == "ep=2");  // one plan bounds every rank's peak on the probe's routing
  o.dropout = 0.1;  // dropout too: the probe draws the step's masks, so routes as the step does
  CHECK(matrix_cells(o).at(0).layout() == "ep=2");
}

TEST_CASE("duplicates run once and everything is validated before the first run", "[matrix][errors]") {
  TempFile tmp;
  MatrixOptions o = small_matrix(tmp.path);
  o.models = {"gpt2", "gpt2"};
  o.layers = {2, 2};
  o.strategies = "full,per-layer,full";
  CHECK(matrix_cells(o).size() == 2);
  o.data = "text:/nonexistent/file";
  CHECK_THROWS_WITH(run_matrix(o, {}), test::Contains("no such file"));
  CHECK_FALSE(fs::exists(tmp.path));  // nothing created for a matrix that never ran
  o.data = "text:" + fs::temp_directory_path().string();
  CHECK_THROWS_WITH(run_matrix(o, {}), test::Contains("not a regular file"));
}

TEST_CASE("results files of another schema or with damaged runs", "[matrix][report][errors]") {
  TempFile tmp;
  MatrixOptions o = small_matrix(tmp.path);
  o.layers = {2};
  run_matrix(o, {});
  SECTION("a newer schema is refused, for appending and for reading") {
    { h5::File f = h5::File::edit(tmp.path); h5::write_attr(f, "remat_results", std::int64_t(99)); f.save(); }
    o.resume = true;
    o.seed = 5;
    CHECK_THROWS_WITH(run_matrix(o, {}), test::Contains("schema version 99"));
    CHECK_THROWS_WITH(read_results(tmp.path), test::Contains("schema version 99"));
  }
  SECTION("a damaged run is named and left out; the others are reported") {
    {
      h5::File f = h5::File::edit(tmp.path);
      H5Adelete_by_name(f.id(), "/runs/gpt2 per-layer L2 S16 B2", "step_time_median", H5P_DEFAULT);
      f.save();
    }
    const auto results = read_results(tmp.path);
    CHECK(results.runs.size() == 1);
    REQUIRE(results.damaged.size() == 1);
    CHECK(results.damaged[0] == "'gpt2 per-layer L2 S16 B2': no 'step_time_median' attribute");
    CHECK(markdown_summary(results).find("Damaged runs") != std::string::npos);
  }
  SECTION("timeline arrays of different lengths") {
    {
      h5::File f = h5::File::edit(tmp.path);
      const std::string g = "/runs/gpt2 full L2 S16 B2/timeline/bytes";
      H5Ldelete(f.id(), g.c_str(), H5P_DEFAULT);
      h5::write(f, g, std::vector<std::int64_t>(3), {3});
      f.save();
    }
    const auto results = read_results(tmp.path);
    REQUIRE(results.damaged.size() == 1);
    CHECK(results.damaged[0].find("differ in length") != std::string::npos);
  }
}

TEST_CASE("a step out of memory, over --mem-limit or for real (a failed device allocation), is a run out of memory",
          "[matrix][errors]") {
  auto& tracker = MemoryTracker::instance();
  // Kokkos reports a failed device allocation as a std::bad_alloc.
  CHECK_FALSE(within_limit(0, [] { throw std::bad_alloc(); }));
  CHECK_FALSE(within_limit(1024, [] { Tensor::empty({1 << 20}, DType::f32); }));
  CHECK(tracker.limit() == 0);  // the limit goes with the step
  CHECK(within_limit(0, [] { Tensor::empty({16}, DType::f32); }));
  CHECK_THROWS_AS(within_limit(0, [] { throw UserError("not memory"); }), UserError);
}


TEST_CASE("shards get consecutive cells of about equal work, each cell once", "[matrix][shard]") {
  TempFile tmp;
  MatrixOptions o = small_matrix(tmp.path);
  o.models = {"gpt2", "llama"};
  o.layers = {2, 4};
  const auto cells = matrix_cells(o);  // 2 models x 2 depths x 2 strategies
  REQUIRE(cells.size() == 8);
  CHECK(deal_cells(cells, 1) == std::vector<int>(8, 0));
  // Two shards: each model's shallow and deep cells have a quarter and three
  // quarters of its work, so each shard gets one model, whole: one `full`
  // reference per shape, none computed twice.
  CHECK(deal_cells(cells, 2) == std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1});
  for (int n : {3, 5, 8, 11}) {
    const auto shard_of = deal_cells(cells, n);
    REQUIRE(shard_of.size() == cells.size());
    CHECK(std::is_sorted(shard_of.begin(), shard_of.end()));  // consecutive runs
    CHECK(shard_of.front() == 0);
    CHECK(shard_of.back() < n);
  }
  // As many shards as cells of equal work: one each.
  o.layers = {2};
  const auto same = matrix_cells(o);
  CHECK(deal_cells(same, 4) == std::vector<int>{0, 1, 2, 3});
}

TEST_CASE("a step time's spread is half the interquartile range of the sample", "[matrix][timing]") {
  CHECK(spread_of({}).median == 0);
  CHECK(spread_of({5}).half_iqr == 0);
  const Spread s = spread_of({5, 1, 4, 2, 3});  // quartiles 2 and 4
  CHECK(s.median == 3);
  CHECK(s.half_iqr == 1);
  CHECK(s.relative() == Approx(1.0 / 3));
  CHECK(spread_of({1, 3}).half_iqr == 0.5);  // quartiles 1.5 and 2.5
}

TEST_CASE("a shape's strategies are timed in rounds, the order rotated, until their ratios settle or the cap",
          "[matrix][timing]") {
  test::TinyModel s = test::tiny_model("gpt2", 2, 1);
  const std::vector<std::string> specs = {"full", "per-layer", "offload"};
  std::vector<RunRecord> records(specs.size());
  std::vector<RunRecord*> timed;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    records[i].key.strategy = specs[i];
    timed.push_back(&records[i]);
  }
  const TimingShape shape{*s.model, *s.params, s.batch, {}, nullptr};
  std::vector<std::string> order;  // the strategy of each timed step
  const auto say = [&](const RunRecord& r, const std::string& what) {
    if (what.rfind("round", 0) == 0) order.push_back(r.key.strategy);
  };
  TimingOptions o;
  o.min_rounds = 2;
  o.max_rounds = 4;
  // (Spreads no timing can meet, or miss: the verdict is the clock's in neither.)
  SECTION("a spread no timing meets: the cap") {
    o.spread = -1;
    time_interleaved(o, shape, timed, say);
    CHECK(order == std::vector<std::string>{"full", "per-layer", "offload", "per-layer", "offload", "full", "offload",
                                            "full", "per-layer", "full", "per-layer", "offload"});
    for (const auto& r : records) {
      CHECK(r.step_times.size() == 4);
      CHECK(r.losses.size() == 4);
      CHECK(r.timing_capped);
      CHECK(r.time_vs_full.median > 0);
    }
    CHECK(records[0].time_vs_full.median == 1);  // full over itself, round by round
    CHECK(records[0].time_vs_full.half_iqr == 0);
  }
  SECTION("a spread any timing meets: the minimum") {
    o.spread = std::numeric_limits<double>::infinity();
    time_interleaved(o, shape, timed, say);
    CHECK(order.size() == 6);
    for (const auto& r : records) {
      CHECK(r.step_times.size() == 2);
      CHECK_FALSE(r.timing_capped);
    }
  }
  SECTION("without full beside them, each run's own times must settle, and no ratio is recorded") {
    o.spread = -1;
    timed.erase(timed.begin());
    time_interleaved(o, shape, timed, say);
    CHECK(records[1].step_times.size() == 4);
    CHECK(records[1].time_vs_full.median == 0);
  }
}
