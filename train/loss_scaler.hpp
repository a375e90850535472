#pragma once
// Dynamic loss scaling for fp16 training, with PyTorch GradScaler's
// semantics: the loss is multiplied by the scale before backward (so that
// float16 activation gradients do not underflow), the summed gradients are
// divided by it again; a step whose gradients overflowed (an infinity or a
// NaN) is skipped and the scale halved, and after 2000 steps in a row
// without one the scale doubles. The scale is a power of two, so scaling
// and unscaling are exact. bf16 has float32's range and needs none.
#include "zoo/params.hpp"

namespace remat {

struct LossScaler {
  static constexpr double kGrowth = 2.0, kBackoff = 0.5;
  static constexpr int kGrowthInterval = 2000;

  double scale = kInitialLossScale;
  int good_steps = 0;  // steps in a row without an overflow since the scale last changed

  // After a step at this scale: whether its gradients overflowed.
  void update(bool overflow) {
    if (overflow) {
      scale *= kBackoff;
      good_steps = 0;
    } else if (++good_steps == kGrowthInterval) {
      scale *= kGrowth;
      good_steps = 0;
    }
  }
};

}  // namespace remat
