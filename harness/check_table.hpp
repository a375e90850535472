#pragma once
// `remat check`'s result as a table (harness/report/table.hpp): a row per
// strategy, each against `full` on the same weights and batch.
#include <string>
#include <vector>

#include "autodiff/ops/ops.hpp"
#include "harness/check.hpp"
#include "harness/report/table.hpp"

namespace remat {

struct CheckSummary {
  Table table;
  std::vector<std::string> notes;  // where a strategy ran as full does ("= full here"), and each failure
  int failures = 0;                // exact strategies that are not bitwise full
  std::string legend;              // what the text table's columns mean (kCheckLegend, and more where they show)
};

CheckSummary check_summary(const CheckReport& report, ops::AttentionKernel attention);

// What the text table's columns mean, for a person.
extern const char* const kCheckLegend;

}  // namespace remat
