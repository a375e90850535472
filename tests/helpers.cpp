#include "helpers.hpp"

#include "autodiff/elementwise.hpp"

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>

#include "autodiff/rng.hpp"
#include "autodiff/tape.hpp"

namespace remat::test {

std::uint64_t sample_seed() {
  static const std::uint64_t seed = [] {
    if (const char* env = std::getenv("REMAT_SAMPLE_SEED")) return std::uint64_t(std::stoull(env));
    return std::uint64_t(std::random_device{}()) % 1000000;
  }();
  return seed;
}

std::vector<double> random_values(std::int64_t n, std::uint64_t seed, double lo, double hi) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * rng::uniform(seed, 7, std::uint64_t(i));
  return v;
}

void upload(const Tensor& t, const std::vector<double>& values) {
  Tensor src = t.dtype() == DType::f64 ? Tensor::from_host(values, t.shape())
                                       : Tensor::from_host(std::vector<float>(values.begin(), values.end()), t.shape());
  if (t.dtype() != src.dtype()) src = converted(src, t.dtype(), "upload");  // 16-bit: rounded from float
  Kokkos::deep_copy(t.bytes(), src.bytes());
}

Tensor random_tensor(const Shape& shape, std::uint64_t seed, DType dtype, double lo, double hi) {
  Tensor t = Tensor::empty(shape, dtype, "random");
  upload(t, random_values(numel(shape), seed, lo, hi));
  return t;
}

Tensor random_leaf(const Shape& shape, std::uint64_t seed, DType dtype, double lo, double hi) {
  Tensor t = Tensor::parameter(shape, dtype, "leaf");
  upload(t, random_values(numel(shape), seed, lo, hi));
  return t;
}

Tensor random_ids(const Shape& shape, std::int32_t limit, std::uint64_t seed) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::int32_t(rng::bits(seed, 11, i) % std::uint64_t(limit));
  return Tensor::from_host(v, shape, "ids");
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

namespace {

double weighted_sum(const Tensor& out, const std::vector<double>& w) {
  const auto o = out.to_host_f64();
  double s = 0;
  for (std::size_t i = 0; i < o.size(); ++i) s += o[i] * w[i];
  return s;
}

}  // namespace

GradCheck check_gradients(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, double eps) {
  for (const auto& t : inputs) t.zero_grad();
  Tensor out = f(inputs);
  const auto w = random_values(out.numel(), 99);
  backward(out, Tensor::from_host(w, out.shape()));

  GradCheck result;
  NoGradScope no_grad;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    const auto analytic = x.grad().defined() ? x.grad().to_host_f64() : std::vector<double>(x.numel(), 0.0);
    auto values = x.to_host_f64();
    for (std::int64_t j = 0; j < x.numel(); ++j) {
      const double keep = values[j];
      values[j] = keep + eps;
      upload(x, values);
      const double plus = weighted_sum(f(inputs), w);
      values[j] = keep - eps;
      upload(x, values);
      const double minus = weighted_sum(f(inputs), w);
      values[j] = keep;
      upload(x, values);
      const double numeric = (plus - minus) / (2 * eps);
      const double err = std::abs(analytic[j] - numeric) / (1 + std::abs(numeric));
      if (err > result.max_error) {
        result.max_error = err;
        result.where = "input " + std::to_string(i) + ", element " + std::to_string(j) + ": analytic " +
                       std::to_string(analytic[j]) + ", numeric " + std::to_string(numeric);
      }
    }
  }
  return result;
}

}  // namespace remat::test
