// Whole-model gradient operations: the global norm and scaling.
#include <Kokkos_Core.hpp>
#include <cmath>
#include <stdexcept>

#include "autodiff/backend.hpp"
#include "autodiff/elementwise.hpp"
#include "autodiff/loops.hpp"
#include "optim/optimizer.hpp"

namespace remat {
namespace {

// Sums of squares of x[0, n) in chunks of kNormChunk, each chunk summed in a
// fixed order: independent of the thread count.
template <class T>
std::vector<double> chunk_sums(const T* x, std::int64_t n) {
  const std::int64_t chunks = (n + kNormChunk - 1) / kNormChunk;
  const Tensor partial = Tensor::empty({chunks}, DType::f64, "gradient_norm_partials");
  double* sums = partial.data<double>();
  backend::for_each("gradient_norm", chunks, KOKKOS_LAMBDA(std::int64_t c) {
    const std::int64_t lo = c * kNormChunk, hi = lo + kNormChunk < n ? lo + kNormChunk : n;
    sums[c] = backend::lane_sum<double>(hi - lo, [&](std::int64_t i) { return double(x[lo + i]) * double(x[lo + i]); });
  });
  return partial.to_host_f64();
}

}  // namespace

std::vector<double> chunk_squares(const Tensor& g, std::int64_t n) {
  if (n < 0 || n > g.numel()) throw std::logic_error("chunk_squares: n outside the tensor");
  return g.dtype() == DType::f32 ? chunk_sums(g.data<float>(), n) : chunk_sums(g.data<double>(), n);
}

std::vector<double> gradient_squares(const std::vector<Tensor>& params) {
  std::vector<double> squares;
  for (const auto& p : params) {
    const Tensor g = p.grad();
    squares.push_back(0);  // the parameter's chunks, added in order: ParamShards adds alike
    if (g.defined())
      for (double c : chunk_squares(g, g.numel())) squares.back() += c;
  }
  return squares;
}

double gradient_norm(const std::vector<Tensor>& params) {
  double total = 0;
  for (double s : gradient_squares(params)) total += s;
  return std::sqrt(total);
}

void scale_gradients(const std::vector<Tensor>& params, double factor) {
  for (const auto& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    scale_inplace(g, factor);
  }
}

}  // namespace remat
