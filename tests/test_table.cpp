// The one renderer of command results: aligned text for people, JSON for
// programs, from the same cells.
#include "catch.hpp"
#include "harness/report/table.hpp"

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
