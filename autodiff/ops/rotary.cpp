#include <cmath>

#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"

namespace remat::ops {
using namespace detail;

namespace {

// Rotates every (j, j + half) pair of every head by +angle (forward) or
// -angle (backward: the transpose of a rotation is its inverse).
Tensor rotate(const Tensor& x, int head_dim, double theta, double sign) {
  const std::int64_t S = x.dim(1), W = x.dim(2), half = head_dim / 2, rows = rows_of(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), "rotary");
  out.set_kind(x.kind());
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* px = x.data<T>();
    T* y = out.data<T>();
    const std::int64_t pairs = W / 2;  // per row: heads * half
    const double log_theta = std::log(theta);
    for_each("rotary", rows * pairs, KOKKOS_LAMBDA(std::int64_t i) {
      const std::int64_t r = i / pairs, pair = i % pairs, head = pair / half, j = pair % half;
      const double pos = double(r % S);
      const double angle = pos * kmath::exp(-2.0 * double(j) / double(head_dim) * log_theta);
      const T c = T(kmath::cos(angle)), s = T(sign * kmath::sin(angle));
      const std::int64_t a = r * W + head * head_dim + j, b = a + half;
      const T xa = px[a], xb = px[b];
      y[a] = xa * c - xb * s;
      y[b] = xb * c + xa * s;
    });
  });
  return out;
}

}  // namespace

Tensor rotary(const Tensor& x, int head_dim, double theta) {
  require_float("rotary", x, "x");
  require(x.rank() == 3 && head_dim > 0 && head_dim % 2 == 0 && x.dim(2) % head_dim == 0,
          "rotary: x " + to_string(x.shape()) + " is not [B, S, heads * " + std::to_string(head_dim) +
              "] with an even head size");
  stats::count_forward("rotary");
  Tensor out = rotate(x, head_dim, theta, 1.0);
  OpRecorder rec("rotary", {&x});
  if (rec)
    rec.finish({&out}, [head_dim, theta](BackwardContext& ctx) {
      ctx.accumulate(0, rotate(ctx.grad_out(), head_dim, theta, -1.0));
    });
  return out;
}

}  // namespace remat::ops
