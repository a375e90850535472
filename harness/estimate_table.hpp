#pragma once
// `remat estimate`'s result as a table (harness/report/table.hpp): a row per
// strategy at one grid point. Its columns' keys are the fields of `estimate
// --json`, as docs/results-schema.md lists them (a test holds the two equal).
#include "estimate/pipeline_stages.hpp"
#include "harness/estimate_grid.hpp"
#include "harness/report/table.hpp"

namespace remat {

// Every field for JSON; for text, sizes in `unit_bits` (30: GiB, 20: MiB),
// FLOPs in T or M, the columns a person reads. `refits`: what_would_fit's
// answers, for JSON (text says them below the table).
Table point_table(const EstimateRequest& r, const EstimatePoint& p, int unit_bits,
                  const std::vector<Refit>& refits = {});

// Under --pp: a row per (strategy, stage) at one grid point: what the stage
// reads of the model (weights, gradients, optimizer state), its activation
// and offload peaks with the micro-batches in flight, and whether it fits;
// `refits` as point_table's (a strategy's, on each of its stages' rows).
Table stage_table(const EstimateRequest& r, const ModelSetup& setup, const std::vector<PipelineEstimate>& stages,
                  int unit_bits, const std::vector<Refit>& refits = {});

}  // namespace remat
