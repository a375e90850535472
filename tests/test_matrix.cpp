// remat matrix: a small matrix into a temporary file, read back through the
// HDF5 API; appending, resuming and refusing foreign files.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "autodiff/error.hpp"
#include "autodiff/memory_tracker.hpp"
#include "catch.hpp"
#include "harness/matrix.hpp"
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
                        "grad_max_rel_error", "bitwise_equal_to_full"}) {
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
  for (const auto& r : more) CHECK(r.sizes.L == 3);
  CHECK(h5::list(h5::File::open(tmp.path), "/runs").size() == 4);

  TempFile foreign;
  { h5::File f = h5::File::create(foreign.path); }
  const auto before = fs::last_write_time(foreign.path);
  o.out = foreign.path;
  CHECK_THROWS_WITH(run_matrix(o, {}), test::Contains("not a remat results file"));
  CHECK(fs::last_write_time(foreign.path) == before);
}

TEST_CASE("the report summarises a results file and draws its plots", "[matrix][report]") {
  TempFile tmp;
  MatrixOptions o = small_matrix(tmp.path);
  run_matrix(o, {});
  const auto runs = read_results(tmp.path);
  REQUIRE(runs.size() == 4);
  CHECK(runs[0].strategy == "full");  // full first in each shape
  const std::string md = markdown_summary(runs);
  CHECK(md.find("## gpt2") != std::string::npos);
  CHECK(md.find("| per-layer | L3 S16 B2 |") != std::string::npos);
  const std::string dir = tmp.path + ".plots";
  const auto files = write_plots(runs, dir);
  CHECK(files.size() == 3);  // tradeoff, timeline-gpt2, depth (two depths)
  for (const auto& f : files) {
    std::ifstream in(f);
    const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(svg.rfind("<svg", 0) == 0);
    CHECK(svg.find("</svg>") != std::string::npos);
  }
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
  CHECK(MemoryTracker::instance().limit() == 0);  // lifted afterwards
}
