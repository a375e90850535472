// The GEMM front door against the naive reference, and the counter-based RNG.
#include <cmath>

#include "autodiff/gemm.hpp"
#include "autodiff/rng.hpp"
#include "catch.hpp"
#include "helpers.hpp"

using namespace remat;
using gemm::Op;

TEST_CASE("gemm matches the naive reference for every transpose and beta", "[gemm]") {
  const std::int64_t m = 5, n = 7, k = 3;
  for (Op oa : {Op::N, Op::T})
    for (Op ob : {Op::N, Op::T})
      for (double beta : {0.0, 1.0}) {
        const auto a = test::random_values(m * k, 1), b = test::random_values(k * n, 2);
        auto c = test::random_values(m * n, 3), want = c;
        const std::int64_t lda = oa == Op::N ? k : m, ldb = ob == Op::N ? n : k;
        gemm::gemm<double>(oa, ob, m, n, k, 0.5, a.data(), lda, b.data(), ldb, beta, c.data(), n);
        gemm::gemm_reference<double>(oa, ob, m, n, k, 0.5, a.data(), lda, b.data(), ldb, beta, want.data(), n);
        CHECK(test::max_abs_diff(c, want) < 1e-12);
      }
}

TEST_CASE("strided batched gemm equals one gemm per batch entry", "[gemm]") {
  const std::int64_t m = 4, n = 3, k = 5, count = 6;
  const auto a = test::random_values(count * m * k, 1), b = test::random_values(count * k * n, 2);
  std::vector<float> fa(a.begin(), a.end()), fb(b.begin(), b.end()), c(count * m * n), want(count * m * n);
  gemm::gemm_strided_batched<float>(Op::N, Op::N, m, n, k, 1, fa.data(), k, m * k, fb.data(), n, k * n, 0, c.data(),
                                    n, m * n, count);
  for (std::int64_t i = 0; i < count; ++i)
    gemm::gemm<float>(Op::N, Op::N, m, n, k, 1, fa.data() + i * m * k, k, fb.data() + i * k * n, n, 0,
                      want.data() + i * m * n, n);
  CHECK(c == want);
}

TEST_CASE("the RNG is a pure function of (seed, stream, index)", "[rng]") {
  const std::int64_t n = 100000;
  Kokkos::View<double*> dev("normals", n);
  Kokkos::parallel_for(n, KOKKOS_LAMBDA(std::int64_t i) { dev(i) = rng::normal(42, 7, std::uint64_t(i)); });
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dev);
  double sum = 0, sq = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    REQUIRE(host(i) == rng::normal(42, 7, std::uint64_t(i)));  // same on any thread, in any order
    sum += host(i);
    sq += host(i) * host(i);
  }
  CHECK(std::abs(sum / n) < 0.02);
  CHECK(std::abs(std::sqrt(sq / n) - 1) < 0.02);
  CHECK(rng::normal(42, 8, 0) != rng::normal(42, 7, 0));
  CHECK(rng::normal(43, 7, 0) != rng::normal(42, 7, 0));
}
