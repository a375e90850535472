#pragma once
// The cross-entropy's backward, one for the op over a whole vocabulary and
// the one over a rank's part of it (tensor parallelism): from the saved
// logits z[M, V] (ids [first, first + V)) and each row's log-sum-exp,
//   d loss / d z[r, j] = (exp(z[r, j] - lse[r]) - [first + j == target r]) dy / M.
#include "autodiff/fast_math.hpp"
#include "autodiff/ops/kernel.hpp"
#include "autodiff/saved_tensor.hpp"
#include "autodiff/tape.hpp"

namespace remat::ops::detail {

// Internal linkage, as kernel.hpp explains for functions holding a KOKKOS_LAMBDA.
namespace {

BackwardFn cross_entropy_backward(SavedTensor sz, SavedTensor sl, Tensor targets, std::int64_t M, std::int64_t V,
                                  std::int64_t first) {
  return [sz, sl, targets, M, V, first](BackwardContext& ctx) {
    Tensor dy = ctx.grad_out(), zv = sz.unpack(), lv = sl.unpack();
    GradTarget dz = ctx.grad_in(0);
    REMAT_DISPATCH_COMPUTE(zv.dtype(), T, {
      const T* z = zv.data<T>();
      const A *pl = lv.data<A>(), *gy = dy.data<A>();
      const std::int32_t* t = targets.data<std::int32_t>();
      T* gz = dz.t.data<T>();
      const A inv_m = A(1) / A(M);
      write_gradient("cross_entropy_backward", M * V, gz, dz.fresh, KOKKOS_LAMBDA(std::int64_t i) {
        const std::int64_t r = i / V, j = i % V;
        return (fast_exp(A(z[i]) - pl[r]) - (j + first == t[r] ? A(1) : A(0))) * gy[0] * inv_m;
      });
    });
  };
}

}  // namespace

}  // namespace remat::ops::detail
