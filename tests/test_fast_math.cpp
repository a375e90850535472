// fast_exp and fast_erfc (float) against the library functions in double.
#include <cmath>
#include <limits>

#include "autodiff/fast_math.hpp"
#include "catch.hpp"

using namespace remat;

namespace {
double ulps(float got, double want) {
  const float w = float(want);
  return std::abs(double(got) - want) / double(std::nextafter(w, std::numeric_limits<float>::infinity()) - w);
}
}  // namespace

TEST_CASE("fast_exp is within 2 ulp of exp where the result is a normal float", "[fast_math]") {
  double worst = 0;
  for (float x = -87.0f; x < 88.0f; x += 0.00731f) worst = std::max(worst, ulps(fast_exp(x), std::exp(double(x))));
  for (float x : {-1e-7f, 0.0f, 1e-7f, 0.5f, -0.5f, 0.34657359f, -0.34657359f})
    worst = std::max(worst, ulps(fast_exp(x), std::exp(double(x))));
  CHECK(worst <= 2.0);
  CHECK(fast_exp(0.0f) == 1.0f);
}

TEST_CASE("fast_exp flushes tiny results to zero and passes NaN", "[fast_math]") {
  CHECK(fast_exp(-88.5f) == 0.0f);
  CHECK(fast_exp(-1000.0f) == 0.0f);
  CHECK(fast_exp(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(std::isnan(fast_exp(std::numeric_limits<float>::quiet_NaN())));
  CHECK(fast_exp(1.0) == std::exp(1.0));  // double is the library's
}

TEST_CASE("fast_erfc is within 5e-7 absolute and 1e-5 relative of erfc", "[fast_math]") {
  double worst_abs = 0, worst_rel = 0;
  for (float x = -6.0f; x < 9.0f; x += 0.000913f) {
    const double want = std::erfc(double(x)), got = fast_erfc(x);
    worst_abs = std::max(worst_abs, std::abs(got - want));
    worst_rel = std::max(worst_rel, std::abs(got - want) / want);
  }
  CHECK(worst_abs < 5e-7);
  CHECK(worst_rel < 1e-5);
}
