// Whole-model gradient operations: the global norm and scaling.
#include <Kokkos_Core.hpp>
#include <cmath>

#include "autodiff/ops/kernel.hpp"
#include "optim/optimizer.hpp"

namespace remat {
namespace {

// Sum of squares of x[0, n) in chunks summed sequentially, chunk partials
// added in order on the host: independent of the thread count.
template <class T>
double sum_of_squares(const T* x, std::int64_t n) {
  constexpr std::int64_t kChunk = 8192;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
  Kokkos::View<double*, MemSpace> partial("gradient_norm_partials", std::size_t(chunks));
  Kokkos::parallel_for("gradient_norm", Kokkos::RangePolicy<ExecSpace>(0, chunks), KOKKOS_LAMBDA(std::int64_t c) {
    const std::int64_t lo = c * kChunk, hi = lo + kChunk < n ? lo + kChunk : n;
    partial(c) = ops::detail::lane_sum<double>(hi - lo, [&](std::int64_t i) { return double(x[lo + i]) * double(x[lo + i]); });
  });
  const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), partial);
  double total = 0;
  for (std::int64_t c = 0; c < chunks; ++c) total += host(c);
  return total;
}

template <class T>
void scale(T* x, std::int64_t n, T factor) {
  ops::detail::for_each_element("scale_gradients", n, KOKKOS_LAMBDA(std::int64_t i) { x[i] *= factor; });
}

}  // namespace

double gradient_norm(const std::vector<Tensor>& params) {
  double total = 0;
  for (const auto& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    total += g.dtype() == DType::f32 ? sum_of_squares(g.data<float>(), g.numel())
                                     : sum_of_squares(g.data<double>(), g.numel());
  }
  return std::sqrt(total);
}

void scale_gradients(const std::vector<Tensor>& params, double factor) {
  for (const auto& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    if (g.dtype() == DType::f32) scale(g.data<float>(), g.numel(), float(factor));
    else scale(g.data<double>(), g.numel(), factor);
  }
}

}  // namespace remat
