// Softmax over the last dimension (a router's probabilities over experts):
// y = exp(x - max) / sum, a row per thread on the host and a team per row on
// a device (row_kernel.hpp); backward dx = y (dy - <dy, y>), from the output.
#include "autodiff/fast_math.hpp"
#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/ops/row_kernel.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"

namespace remat::ops {
using namespace detail;

Tensor softmax(const Tensor& x) {
  require_float("softmax", x, "x");
  require(x.rank() >= 1 && x.dim(-1) >= 1, [&] { return "softmax: x " + to_string(x.shape()) + " has no last dimension"; });
  stats::count_forward("softmax");
  const std::int64_t N = x.dim(-1), M = rows_of(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), "softmax");
  out.set_tag("softmax");
  REMAT_DISPATCH_COMPUTE(x.dtype(), T, {
    const T* px = x.data<T>();
    T* y = out.data<T>();
    for_each_row("softmax_forward", M, N, KOKKOS_LAMBDA(std::int64_t r, const Row& row) {
      const T* xr = px + r * N;
      T* yr = y + r * N;
      const A m = row.max<A>([&](std::int64_t j) { return A(xr[j]); });
      const A s = row.sum<A>([&](std::int64_t j) { return fast_exp(A(xr[j]) - m); });
      const A inv = A(1) / s;
      row.each([&](std::int64_t j) { yr[j] = T(fast_exp(A(xr[j]) - m) * inv); });
    });
  });
  OpRecorder rec("softmax", {&x});
  if (!rec) return out;
  const SavedTensor sy = save(out);
  rec.finish({&out}, [sy, M, N](BackwardContext& ctx) {
    Tensor dy = ctx.grad_out(), yv = sy.unpack();
    GradTarget dx = ctx.grad_in(0);
    REMAT_DISPATCH_COMPUTE(dy.dtype(), T, {
      const T *g = dy.data<T>(), *y = yv.data<T>();
      T* gx = dx.t.data<T>();
      const bool fresh = dx.fresh;
      for_each_row("softmax_backward", M, N, KOKKOS_LAMBDA(std::int64_t r, const Row& row) {
        const T *gr = g + r * N, *yr = y + r * N;
        T* out_r = gx + r * N;
        const A dot = row.sum<A>([&](std::int64_t j) { return A(gr[j]) * A(yr[j]); });
        row.each([&](std::int64_t j) { accumulate(out_r[j], A(yr[j]) * (A(gr[j]) - dot), fresh); });
      });
    });
  });
  return out;
}

}  // namespace remat::ops
