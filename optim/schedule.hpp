#pragma once
// Learning-rate schedules: linear warm-up from 0, then constant or a
// cosine decay to 0 at the last step.
#include <string>

namespace remat {

struct Schedule {
  std::string kind = "cosine";  // cosine | constant
  double lr = 1e-3;
  int warmup = 0;  // steps
  int steps = 1;   // total
  // The rate of step `step` (0-based). UserError-free: validate() first.
  double at(int step) const;
  void validate() const;  // UserError for a bad setting
};

}  // namespace remat
