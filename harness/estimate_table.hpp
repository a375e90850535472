#pragma once
// `remat estimate`'s result as a table (harness/report/table.hpp): a row per
// strategy at one grid point. Its columns' keys are the fields of `estimate
// --json`, as docs/results-schema.md lists them (a test holds the two equal).
#include "harness/estimate_grid.hpp"
#include "harness/report/table.hpp"

namespace remat {

// Every field for JSON; for text, sizes in `unit_bits` (30: GiB, 20: MiB),
// FLOPs in T or M, the columns a person reads.
Table point_table(const EstimateRequest& r, const EstimatePoint& p, int unit_bits);

}  // namespace remat
