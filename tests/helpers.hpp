#pragma once
// Shared test helpers: random tensors, host round trips, and the
// finite-difference gradient check every op goes through.
#include <functional>
#include <vector>

#include "autodiff/ops/ops.hpp"
#include "autodiff/tensor.hpp"

namespace remat::test {

// Seeded values uniform in [lo, hi).
std::vector<double> random_values(std::int64_t n, std::uint64_t seed, double lo = -1, double hi = 1);
Tensor random_tensor(const Shape& shape, std::uint64_t seed, DType dtype = DType::f64, double lo = -1, double hi = 1);
// A leaf that collects a gradient, with random values.
Tensor random_leaf(const Shape& shape, std::uint64_t seed, DType dtype = DType::f64, double lo = -1, double hi = 1);
Tensor random_ids(const Shape& shape, std::int32_t limit, std::uint64_t seed);
void upload(const Tensor& t, const std::vector<double>& values);

// The seed of a sweep sampled per run (each run covers another part; all
// runs together cover the whole): REMAT_SAMPLE_SEED when set, to repeat a
// run, else new for each process. A test puts it in an INFO, so a failure
// prints it.
std::uint64_t sample_seed();

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b);

struct GradCheck {
  double max_error = 0;   // worst |analytic - numeric| / (1 + |numeric|)
  std::string where;      // "input 1, element 17"
};

// Compares the gradient of sum(w * f(inputs)) for random w, from backward,
// against central finite differences of every element of every input.
// Inputs must be float64 leaves (random_leaf).
GradCheck check_gradients(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                          const std::vector<Tensor>& inputs, double eps = 1e-6);

}  // namespace remat::test
