#include "optim/schedule.hpp"

#include <cmath>

#include "core/error.hpp"

namespace remat {

void Schedule::validate() const {
  if (!(lr > 0) || !std::isfinite(lr)) throw UserError("--lr must be a positive number");
  if (kind != "cosine" && kind != "constant") throw UserError("unknown schedule '" + kind + "' (cosine, constant)");
  if (warmup < 0 || warmup > steps) throw UserError("--warmup must be between 0 and --steps");
}

double Schedule::at(int step) const {
  if (step < warmup) return lr * double(step + 1) / double(warmup);
  if (kind == "constant" || steps <= warmup) return lr;
  const double progress = double(step - warmup) / double(steps - warmup);
  return lr * 0.5 * (1 + std::cos(M_PI * progress));
}

}  // namespace remat
