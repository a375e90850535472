#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/random.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"

namespace remat::ops {
using namespace detail;

namespace {

// y = x * mask * scale, where the mask is drawn from (seed, stream, element):
// forward and backward draw the same mask, and nothing is saved.
Tensor masked_scale(const Tensor& x, double p, std::uint64_t seed, std::uint64_t stream) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), "dropout");
  out.set_tag("dropout");
  REMAT_DISPATCH_COMPUTE(x.dtype(), T, {
    const T* px = x.data<T>();
    T* y = out.data<T>();
    const A keep_scale = A(1.0 / (1.0 - p));
    for_each_element("dropout", x.numel(), KOKKOS_LAMBDA(std::int64_t i) {
      y[i] = T(rng::uniform(seed, stream, std::uint64_t(i)) > p ? A(px[i]) * keep_scale : A(0));
    });
  });
  return out;
}

}  // namespace

Tensor dropout(const Tensor& x, double p) {
  require_float("dropout", x, "x");
  require(p >= 0 && p < 1, [&] { return "dropout: p = " + std::to_string(p) + " outside [0, 1)"; });
  if (p == 0) return x;
  stats::count_forward("dropout");
  const std::uint64_t seed = random_ops::seed(), stream = random_ops::stream(random_ops::next_op());
  Tensor out = masked_scale(x, p, seed, stream);
  OpRecorder rec("dropout", {&x});
  if (rec)
    rec.finish({&out}, [p, seed, stream](BackwardContext& ctx) {
      ctx.accumulate(0, masked_scale(ctx.grad_out(), p, seed, stream));
    });
  return out;
}

}  // namespace remat::ops
