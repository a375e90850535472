#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/ops/row_kernel.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"

namespace remat::ops {
using namespace detail;

namespace {

struct RmsNormalized {
  Tensor out, rstd;
};

RmsNormalized rms_norm_forward(const Tensor& x, const Tensor& weight, double eps) {
  stats::count_forward("rms_norm");
  const std::int64_t D = x.dim(-1), M = rows_of(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), "rms_norm");
  Tensor rstd = Tensor::empty({M}, compute_dtype(x.dtype()), "rms_norm_rstd");
  out.set_tag("rms_norm");
  rstd.set_tag("rms_norm");
  REMAT_DISPATCH_COMPUTE(x.dtype(), T, {
    const T *px = x.data<T>(), *w = weight.data<T>();
    T* y = out.data<T>();
    A* pr = rstd.data<A>();
    const A e = A(eps);
    for_each_row("rms_norm_forward", M, D, KOKKOS_LAMBDA(std::int64_t r, const Row& row) {
      const T* xr = px + r * D;
      const A ss = row.sum<A>([&](std::int64_t j) { return A(xr[j]) * A(xr[j]); });
      const A s = A(1) / kmath::sqrt(ss / A(D) + e);
      row.each([&](std::int64_t j) { y[r * D + j] = T(A(xr[j]) * s * A(w[j])); });
      row.once([&] { pr[r] = s; });
    });
  });
  return {out, rstd};
}

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps) {
  require_float("rms_norm", x, "x");
  const std::int64_t D = x.dim(-1), M = rows_of(x);
  require(weight.shape() == Shape{D}, [&] { return "rms_norm: weight " + to_string(weight.shape()) + " must be [" +
                                          std::to_string(D) + "]"; });
  auto [out, rstd] = rms_norm_forward(x, weight, eps);
  OpRecorder rec("rms_norm", {&x, &weight});
  if (!rec) return out;
  const SavedTensor sx = save(x);
  out.set_recipe([sx, weight, eps] { return rms_norm_forward(sx.unpack(), weight, eps).out; });
  const SavedTensor sr = save(rstd);  // named: see saved_tensor.hpp on saves in temporaries
  rec.finish({&out}, [sx, sr, weight, M, D](BackwardContext& ctx) {
    Tensor dy = ctx.grad_out(), xv = sx.unpack(), rv = sr.unpack();
    REMAT_DISPATCH_COMPUTE(dy.dtype(), T, {
      const T *gy = dy.data<T>(), *px = xv.data<T>(), *w = weight.data<T>();
      const A* pr = rv.data<A>();
      if (GradTarget dx = ctx.grad_in(0)) {
        T* gx = dx.t.data<T>();
        const bool fresh = dx.fresh;
        // dx = s (g w) - x s^3 mean(g w x)
        for_each_row("rms_norm_backward_x", M, D, KOKKOS_LAMBDA(std::int64_t r, const Row& row) {
          const A s = pr[r];
          const A dot =
              row.sum<A>([&](std::int64_t j) { return A(gy[r * D + j]) * A(w[j]) * A(px[r * D + j]); }) / A(D);
          row.each([&](std::int64_t j) {
            const A v = s * A(gy[r * D + j]) * A(w[j]) - A(px[r * D + j]) * s * s * s * dot;
            accumulate(gx[r * D + j], v, fresh);
          });
        });
      }
      if (GradTarget dw = ctx.grad_in(1))
        column_sums<A>("rms_norm_backward_w", M, D, weight_grad<T>(dw, "rms_norm"), dw.fresh,
                       KOKKOS_LAMBDA(std::int64_t r, std::int64_t j) {
                         return A(gy[r * D + j]) * A(px[r * D + j]) * pr[r];
                       });
    });
  });
  return out;
}

}  // namespace remat::ops
