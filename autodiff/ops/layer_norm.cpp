#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/ops/row_kernel.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"

namespace remat::ops {
using namespace detail;

namespace {

struct LayerNormalized {
  Tensor out, mean, rstd;
};

LayerNormalized layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  stats::count_forward("layer_norm");
  const std::int64_t D = x.dim(-1), M = rows_of(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), "layer_norm");
  Tensor mean = Tensor::empty({M}, compute_dtype(x.dtype()), "layer_norm_mean");
  Tensor rstd = Tensor::empty({M}, compute_dtype(x.dtype()), "layer_norm_rstd");
  for (Tensor* t : {&out, &mean, &rstd}) t->set_tag("layer_norm");
  REMAT_DISPATCH_COMPUTE(x.dtype(), T, {
    const T *px = x.data<T>(), *w = weight.data<T>(), *b = bias.data<T>();
    T* y = out.data<T>();
    A *pm = mean.data<A>(), *pr = rstd.data<A>();
    const A e = A(eps);
    for_each_row("layer_norm_forward", M, D, KOKKOS_LAMBDA(std::int64_t r, const Row& row) {
      const T* xr = px + r * D;
      const A m = row.sum<A>([&](std::int64_t j) { return A(xr[j]); }) / A(D);
      const A v = row.sum<A>([&](std::int64_t j) { return (A(xr[j]) - m) * (A(xr[j]) - m); });
      const A s = A(1) / kmath::sqrt(v / A(D) + e);
      row.each([&](std::int64_t j) { y[r * D + j] = T((A(xr[j]) - m) * s * A(w[j]) + A(b[j])); });
      row.once([&] {
        pm[r] = m;
        pr[r] = s;
      });
    });
  });

  return {out, mean, rstd};
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  require_float("layer_norm", x, "x");
  const std::int64_t D = x.dim(-1), M = rows_of(x);
  require(weight.shape() == Shape{D} && bias.shape() == Shape{D},
          [&] { return "layer_norm: weight " + to_string(weight.shape()) + " and bias " + to_string(bias.shape()) +
              " must both be [" + std::to_string(D) + "]"; });

  auto [out, mean, rstd] = layer_norm_forward(x, weight, bias, eps);
  OpRecorder rec("layer_norm", {&x, &weight, &bias});
  if (!rec) return out;
  const SavedTensor sx = save(x);
  out.set_recipe([sx, weight, bias, eps] { return layer_norm_forward(sx.unpack(), weight, bias, eps).out; });
  const SavedTensor sm = save(mean), sr = save(rstd);  // named: see saved_tensor.hpp on saves in temporaries
  rec.finish({&out}, [sx, sm, sr, weight, M, D](BackwardContext& ctx) {
      Tensor dy = ctx.grad_out(), xv = sx.unpack(), mv = sm.unpack(), rv = sr.unpack();
      REMAT_DISPATCH_COMPUTE(dy.dtype(), T, {
        const T *gy = dy.data<T>(), *px = xv.data<T>();
        const A *pm = mv.data<A>(), *pr = rv.data<A>();
        const T* w = weight.data<T>();
        if (GradTarget dx = ctx.grad_in(0)) {
          T* gx = dx.t.data<T>();
          const bool fresh = dx.fresh;
          for_each_row("layer_norm_backward_x", M, D, KOKKOS_LAMBDA(std::int64_t r, const Row& row) {
            const A m = pm[r], s = pr[r];
            // means of dxhat and dxhat * xhat
            const A sum_g = row.sum<A>([&](std::int64_t j) { return A(gy[r * D + j]) * A(w[j]); }) / A(D);
            const A sum_gx = row.sum<A>([&](std::int64_t j) {
                               return A(gy[r * D + j]) * A(w[j]) * (A(px[r * D + j]) - m) * s;
                             }) / A(D);
            row.each([&](std::int64_t j) {
              const A xhat = (A(px[r * D + j]) - m) * s;
              const A v = s * (A(gy[r * D + j]) * A(w[j]) - sum_g - xhat * sum_gx);
              accumulate(gx[r * D + j], v, fresh);
            });
          });
        }
        if (GradTarget dw = ctx.grad_in(1))
          column_sums<A>("layer_norm_backward_w", M, D, weight_grad<T>(dw, "layer_norm"), dw.fresh,
                         KOKKOS_LAMBDA(std::int64_t r, std::int64_t j) {
                           return A(gy[r * D + j]) * (A(px[r * D + j]) - pm[r]) * pr[r];
                         });
        if (GradTarget db = ctx.grad_in(2))
          column_sums<A>("layer_norm_backward_b", M, D, weight_grad<T>(db, "layer_norm"), db.fresh,
                         KOKKOS_LAMBDA(std::int64_t r, std::int64_t j) { return A(gy[r * D + j]); });
      });
    });
  return out;
}

}  // namespace remat::ops
