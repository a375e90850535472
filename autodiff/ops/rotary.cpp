#include <cmath>
#include <string>

#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/scratch.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"

namespace remat::ops {
using namespace detail;

namespace {

// Rotates every (j, j + half) pair of every head by +angle (forward) or
// -angle (backward: the transpose of a rotation is its inverse).
Tensor rotate(const Tensor& x, int head_dim, double theta, const RopeScaling& scaling, double sign,
              const RankGroup& context) {
  const std::int64_t S = x.dim(1), W = x.dim(2), half = head_dim / 2, rows = rows_of(x);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), "rotary");
  out.set_tag("rotary");
  REMAT_DISPATCH_COMPUTE(x.dtype(), T, {
    const T* px = x.data<T>();
    T* y = out.data<T>();
    const double log_theta = std::log(theta), factor = scaling.factor, low = scaling.low_freq,
                 high = scaling.high_freq, original = scaling.original;
    // cos and sin of each (position, frequency), once per call: the
    // transcendental calls, in double, are worth hoisting out of the rows.
    // Interleaved in a flat array (cos, sin, cos, sin...): a View<A*[2]>
    // would be laid out column-major on a GPU (Kokkos' LayoutLeft there),
    // and the rows read it through a pointer.
    const Scratch<A, MemSpace> table("rotary_table", std::size_t(2 * S * half));
    A* pt = table.data();
    // Row t's position: t, or under context parallelism zigzag_position's
    // (core/rank_group.hpp), written out here for the device.
    const std::int64_t ranks = context.size, rank = context.rank, chunk = S / 2;
    for_each("rotary_table", S * half, KOKKOS_LAMBDA(std::int64_t i) {
      const std::int64_t t = i / half;
      const std::int64_t at = ranks == 1 ? t : t < chunk ? rank * chunk + t : (2 * ranks - 1 - rank) * chunk + t - chunk;
      const double pos = double(at), j = double(i % half);
      double frequency = kmath::exp(-2.0 * j / double(head_dim) * log_theta);
      if (factor > 0) {  // Llama 3.1's scaling, as Hugging Face computes it
        const double wavelength = 2.0 * 3.14159265358979323846 / frequency;
        if (wavelength > original / low) {
          frequency /= factor;
        } else if (wavelength >= original / high) {
          const double smooth = (original / wavelength - low) / (high - low);
          frequency = (1 - smooth) * frequency / factor + smooth * frequency;
        }
      }
      const double angle = pos * frequency;
      pt[2 * i] = A(kmath::cos(angle));
      pt[2 * i + 1] = A(sign * kmath::sin(angle));
    });
    for_each("rotary", rows, KOKKOS_LAMBDA(std::int64_t r) {
      const A* row_table = pt + 2 * (r % S) * half;
      for (std::int64_t a = r * W; a < (r + 1) * W; a += head_dim)  // each head
        for (std::int64_t j = 0; j < half; ++j) {
          const A c = row_table[2 * j], s = row_table[2 * j + 1];
          const A xa = A(px[a + j]), xb = A(px[a + j + half]);
          y[a + j] = T(xa * c - xb * s);
          y[a + j + half] = T(xb * c + xa * s);
        }
    });
  });
  return out;
}

}  // namespace

Tensor rotary(const Tensor& x, int head_dim, double theta, const RopeScaling& scaling, const RankGroup& context) {
  require_float("rotary", x, "x");
  require(x.rank() == 3 && head_dim > 0 && head_dim % 2 == 0 && x.dim(2) % head_dim == 0,
          [&] { return "rotary: x " + to_string(x.shape()) + " is not [B, S, heads * " + std::to_string(head_dim) +
              "] with an even head size"; });
  stats::count_forward("rotary");
  Tensor out = rotate(x, head_dim, theta, scaling, 1.0, context);
  OpRecorder rec("rotary", {&x});
  if (rec)
    rec.finish({&out}, [head_dim, theta, scaling, context](BackwardContext& ctx) {
      ctx.accumulate(0, rotate(ctx.grad_out(), head_dim, theta, scaling, -1.0, context));
    });
  return out;
}

}  // namespace remat::ops
