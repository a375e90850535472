// The one renderer of command results: aligned text for people, JSON for
// programs, from the same cells.
#include "catch.hpp"
#include "harness/check_table.hpp"
#include "harness/matrix_table.hpp"
#include "harness/report/table.hpp"
#include "zoo/sizes.hpp"

using namespace remat;

TEST_CASE("a table renders as aligned text and as JSON from the same cells", "[table]") {
  Table t;
  t.columns = {{"strategy", "strategy"}, {"bytes", "act MiB", decimals(2, 1 << 20)}, {"count", ""},
               {"share", "recompute", percent(1)}, {"fits", "fits"}};
  t.add({std::string("full"), std::int64_t(3 << 20), std::int64_t(7), 0.0, true});
  t.add({std::string("offload-checkpoint"), std::int64_t(1 << 19), Cell{}, 0.25, Cell{}});
  CHECK(render_text(t) ==
        "strategy            act MiB  recompute  fits\n"
        "full                   3.00       0.0%   yes\n"
        "offload-checkpoint     0.50      25.0%\n");
  const auto j = render_json(t);
  REQUIRE(j.size() == 2);
  CHECK(j[0]["bytes"] == 3 << 20);
  CHECK(j[0]["count"] == 7);  // in JSON though not in the text
  CHECK(j[0]["fits"] == true);
  CHECK(j[1]["share"] == 0.25);
  CHECK_FALSE(j[1].contains("count"));  // empty cells are left out
  CHECK_FALSE(j[1].contains("fits"));
}

TEST_CASE("a column marked left aligns its text left", "[table]") {
  Table t;
  t.columns = {{"model", "model"}, {"shape", "shape", nullptr, true}, {"n", "n"}};
  t.add({std::string("gpt2"), std::string("L2 S16"), std::int64_t(5)});
  t.add({std::string("llama"), std::string("L12 S256"), std::int64_t(12)});
  CHECK(render_text(t) ==
        "model  shape      n\n"
        "gpt2   L2 S16     5\n"
        "llama  L12 S256  12\n");
}

TEST_CASE("matrix's summary: a row per run against full on its shape, out of memory named", "[table][matrix]") {
  auto record = [](const std::string& strategy, double seconds, std::int64_t peak, bool oom) {
    RunRecord r;
    r.key.model = "gpt2";
    r.key.strategy = strategy;
    r.key.sizes = preset_sizes("tiny");
    r.step_times = {seconds};
    r.check.step.activation_peak = peak;
    r.check.vs_full.bitwise = true;
    r.check.oom = oom;
    return r;
  };
  const MatrixSummary s = matrix_summary({record("full", 0.5, 4 << 20, false), record("sqrt", 0.75, 1 << 20, false),
                                          record("offload", 0, 0, true)});
  const std::string text = render_text(s.table);
  INFO(text);
  CHECK(text.find("0.500") != std::string::npos);  // full's step time
  CHECK(text.find("1.50x") != std::string::npos);  // sqrt's time against full's
  CHECK(text.find("OUT OF MEMORY") != std::string::npos);
  REQUIRE(s.notes.size() == 1);
  CHECK(s.notes[0].find("offload L2 S16 B2: out of memory") != std::string::npos);
  const auto j = render_json(s.table);
  CHECK(j[1]["vs_full"] == 1.5);
  CHECK(j[1]["activation_peak_bytes"] == 1 << 20);
  CHECK(j[1]["bitwise"] == true);
}

TEST_CASE("check's summary: a row per strategy against full, an exact one that differs named", "[table][check]") {
  CheckReport report;
  report.full.loss = 2.5;
  report.full.activation_peak = 4 << 20;
  const auto row = [](const std::string& strategy, std::int64_t peak, bool bitwise) {
    CheckRow r;
    r.strategy = strategy;
    r.step.loss = 2.5;
    r.step.activation_peak = peak;
    r.step.flops = 100;
    r.step.recompute_flops = 25;
    r.vs_full.bitwise = bitwise;
    r.predicted.device = peak;
    return r;
  };
  report.rows = {row("full", 4 << 20, true), row("sqrt", 1 << 20, true), row("per-layer", 1 << 20, false)};
  const CheckSummary s = check_summary(report, ops::AttentionKernel::fused);
  const std::string text = render_text(s.table);
  INFO(text);
  CHECK(text.find("act MiB") != std::string::npos);
  CHECK(text.find("0.250") != std::string::npos);  // sqrt's peak against full's
  CHECK(text.find("25.0%") != std::string::npos);  // its recomputed share
  CHECK(s.failures == 1);
  REQUIRE(!s.notes.empty());
  CHECK(s.notes.back() == "per-layer: NOT BITWISE EQUAL TO full (an exact strategy)");
  const auto j = render_json(s.table);
  CHECK(j[1]["strategy"] == "sqrt");
  CHECK(j[1]["activation_peak_bytes"] == 1 << 20);
  CHECK(j[1]["vs_full"] == 0.25);
  CHECK(j[2]["bitwise"] == false);
  CHECK(j[2]["exact"] == true);
}
