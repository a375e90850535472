#pragma once
// `remat matrix`'s summary as a table (harness/report/table.hpp): a row per
// run, each compared with `full` on the same model and shape.
#include <string>
#include <vector>

#include "harness/io/results_file.hpp"
#include "harness/report/table.hpp"

namespace remat {

struct MatrixSummary {
  Table table;
  std::vector<std::string> notes;  // where a strategy ran as full does ("= full here")
};

MatrixSummary matrix_summary(const std::vector<RunRecord>& records);

}  // namespace remat
