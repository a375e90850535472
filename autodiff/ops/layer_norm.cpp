#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"

namespace remat::ops {
using namespace detail;

namespace {

struct Normalized {
  Tensor out, mean, rstd;
};

Normalized layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  stats::count_forward("layer_norm");
  const std::int64_t D = x.dim(-1), M = rows_of(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), "layer_norm");
  Tensor mean = Tensor::empty({M}, x.dtype(), "layer_norm_mean");
  Tensor rstd = Tensor::empty({M}, x.dtype(), "layer_norm_rstd");
  for (Tensor* t : {&out, &mean, &rstd}) t->set_kind(OpKind::norm);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T *px = x.data<T>(), *w = weight.data<T>(), *b = bias.data<T>();
    T *y = out.data<T>(), *pm = mean.data<T>(), *pr = rstd.data<T>();
    const T e = T(eps);
    for_each("layer_norm_forward", M, KOKKOS_LAMBDA(std::int64_t r) {
      const T* row = px + r * D;
      T m = 0;
      for (std::int64_t j = 0; j < D; ++j) m += row[j];
      m /= T(D);
      T v = 0;
      for (std::int64_t j = 0; j < D; ++j) v += (row[j] - m) * (row[j] - m);
      const T s = T(1) / kmath::sqrt(v / T(D) + e);
      for (std::int64_t j = 0; j < D; ++j) y[r * D + j] = (row[j] - m) * s * w[j] + b[j];
      pm[r] = m;
      pr[r] = s;
    });
  });

  return {out, mean, rstd};
}

}  // namespace

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  require_float("layer_norm", x, "x");
  const std::int64_t D = x.dim(-1), M = rows_of(x);
  require(weight.shape() == Shape{D} && bias.shape() == Shape{D},
          "layer_norm: weight " + to_string(weight.shape()) + " and bias " + to_string(bias.shape()) +
              " must both be [" + std::to_string(D) + "]");

  auto [out, mean, rstd] = layer_norm_forward(x, weight, bias, eps);
  OpRecorder rec("layer_norm", {&x, &weight, &bias});
  if (!rec) return out;
  const SavedTensor sx = save(x);
  out.set_recipe([sx, weight, bias, eps] { return layer_norm_forward(sx.unpack(), weight, bias, eps).out; });
  rec.finish({&out}, [sx, sm = save(mean), sr = save(rstd), weight, M, D](BackwardContext& ctx) {
      Tensor dy = ctx.grad_out(), xv = sx.unpack(), mv = sm.unpack(), rv = sr.unpack();
      dispatch_float(dy.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const T *gy = dy.data<T>(), *px = xv.data<T>(), *pm = mv.data<T>(), *pr = rv.data<T>();
        const T* w = weight.data<T>();
        if (GradTarget dx = ctx.grad_in(0)) {
          T* gx = dx.t.data<T>();
          const bool fresh = dx.fresh;
          for_each("layer_norm_backward_x", M, KOKKOS_LAMBDA(std::int64_t r) {
            const T m = pm[r], s = pr[r];
            T sum_g = 0, sum_gx = 0;  // means of dxhat and dxhat * xhat
            for (std::int64_t j = 0; j < D; ++j) {
              const T g = gy[r * D + j] * w[j];
              sum_g += g;
              sum_gx += g * (px[r * D + j] - m) * s;
            }
            sum_g /= T(D);
            sum_gx /= T(D);
            for (std::int64_t j = 0; j < D; ++j) {
              const T xhat = (px[r * D + j] - m) * s;
              const T v = s * (gy[r * D + j] * w[j] - sum_g - xhat * sum_gx);
              accumulate(gx[r * D + j], v, fresh);
            }
          });
        }
        GradTarget dw = ctx.grad_in(1), db = ctx.grad_in(2);
        if (dw || db) {
          T* gw = dw ? dw.t.data<T>() : nullptr;
          T* gb = db ? db.t.data<T>() : nullptr;
          const bool fw = dw.fresh, fb = db.fresh;
          // Columns in parallel, rows in order: deterministic sums.
          for_each("layer_norm_backward_wb", D, KOKKOS_LAMBDA(std::int64_t j) {
            T aw = 0, ab = 0;
            for (std::int64_t r = 0; r < M; ++r) {
              aw += gy[r * D + j] * (px[r * D + j] - pm[r]) * pr[r];
              ab += gy[r * D + j];
            }
            if (gw) gw[j] = fw ? aw : gw[j] + aw;
            if (gb) gb[j] = fb ? ab : gb[j] + ab;
          });
        }
      });
    });
  return out;
}

}  // namespace remat::ops
