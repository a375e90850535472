// The GEMM front door against the naive reference, and the counter-based RNG.
#include <cmath>
#include <cstdlib>
#include <string>

#include "autodiff/backend.hpp"
#include "autodiff/blas_kernels.hpp"
#include "autodiff/gemm.hpp"
#include "autodiff/gemm_dnnl.hpp"
#include "autodiff/rng.hpp"
#include "catch.hpp"
#include "helpers.hpp"

using namespace remat;
using gemm::Op;

namespace {

// Host memory, whatever the build's default space: the front door sends it
// to the host BLAS in a CUDA build too.
using Host = Kokkos::HostSpace;
// (An instance is made where it is used: one with static storage would be
// made before Kokkos starts and destroyed after it ends.)
using HostExec = Kokkos::DefaultHostExecutionSpace;

}  // namespace

TEST_CASE("gemm matches the naive reference for every transpose and beta", "[gemm]") {
  const std::int64_t m = 5, n = 7, k = 3;
  for (Op oa : {Op::N, Op::T})
    for (Op ob : {Op::N, Op::T})
      for (double beta : {0.0, 1.0}) {
        const auto a = test::random_values(m * k, 1), b = test::random_values(k * n, 2);
        auto c = test::random_values(m * n, 3), want = c;
        const std::int64_t lda = oa == Op::N ? k : m, ldb = ob == Op::N ? n : k;
        const auto [ar, ac] = oa == Op::N ? std::pair{m, k} : std::pair{k, m};
        const auto [br, bc] = ob == Op::N ? std::pair{k, n} : std::pair{n, k};
        gemm::gemm(HostExec(), oa, ob, 0.5, gemm::matrix<Host>(a.data(), ar, ac, lda),
                   gemm::matrix<Host>(b.data(), br, bc, ldb), beta, gemm::matrix<Host>(c.data(), m, n, n));
        gemm::gemm_reference<double>(oa, ob, m, n, k, 0.5, a.data(), lda, b.data(), ldb, beta, want.data(), n);
        CHECK(test::max_abs_diff(c, want) < 1e-12);
      }
}

TEST_CASE("batched gemm equals one gemm per batch entry, windows of wider rows included", "[gemm]") {
  // A's matrices are the left m x k of rows 2k wide (as attention's heads
  // sit in rows of every head), B's dense.
  const std::int64_t m = 4, n = 3, k = 5, count = 6;
  const auto a = test::random_values(count * m * 2 * k, 1), b = test::random_values(count * k * n, 2);
  std::vector<float> fa(a.begin(), a.end()), fb(b.begin(), b.end()), c(count * m * n), want(count * m * n);
  gemm::gemm_batched(HostExec(), Op::N, Op::N, 1.0f, gemm::matrices<Host>(fa.data(), count, m * 2 * k, m, k, 2 * k),
                     gemm::matrices<Host>(fb.data(), count, k * n, k, n, n), 0.0f,
                     gemm::matrices<Host>(c.data(), count, m * n, m, n, n));
  for (std::int64_t i = 0; i < count; ++i)
    gemm::gemm(HostExec(), Op::N, Op::N, 1.0f, gemm::matrix<Host>(fa.data() + i * m * 2 * k, m, k, 2 * k),
               gemm::matrix<Host>(fb.data() + i * k * n, k, n, n), 0.0f,
               gemm::matrix<Host>(want.data() + i * m * n, m, n, n));
  CHECK(c == want);
}

namespace {

// A strided batch of bfloat16 products on the host by one path, into C of
// type C: count 3, A's matrices windows of rows 2 wide, B's shared (stride 0)
// where `shared_b`.
template <class C>
std::vector<double> bf16_products(gemm::Bf16Path path, Op oa, Op ob, float alpha, float beta, bool shared_b) {
  const std::int64_t m = 5, n = 6, k = 7, count = 3;
  const std::int64_t lda = 2 * (oa == Op::N ? k : m), ldb = ob == Op::N ? n : k;
  const auto [ar, ac] = oa == Op::N ? std::pair{m, k} : std::pair{k, m};
  const auto [br, bc] = ob == Op::N ? std::pair{k, n} : std::pair{n, k};
  const std::int64_t sa = ar * lda, sb = shared_b ? 0 : br * ldb, sc = m * n;
  const auto va = test::random_values(count * sa, 1), vb = test::random_values(count * br * ldb, 2),
             vc = test::random_values(count * sc, 3);
  std::vector<bf16> a(va.begin(), va.end()), b(vb.begin(), vb.end());
  std::vector<C> c(vc.begin(), vc.end());
  gemm::Bf16PathScope scope(path);
  gemm::gemm_batched(HostExec(), oa, ob, alpha, gemm::matrices<Host>(a.data(), count, sa, ar, ac, lda),
                     gemm::matrices<Host>(b.data(), count, sb, br, bc, ldb), beta,
                     gemm::matrices<Host>(c.data(), count, sc, m, n, n));
  return std::vector<double>(c.begin(), c.end());
}

}  // namespace

TEST_CASE("bfloat16 products by oneDNN agree with the widened sgemm's, batched, transposed and scaled",
          "[gemm][bf16]") {
  // A build without oneDNN (the CUDA build), or a CPU without native bf16,
  // where oneDNN 2.6 has no bf16 kernel: asking for it is an error. The
  // comparison below runs on a CPU with native bf16.
  if (!gemm::native_bf16_cpu()) {
    CHECK_THROWS_WITH(bf16_products<float>(gemm::Bf16Path::onednn, Op::N, Op::N, 1, 0, false),
                      Catch::Contains("oneDNN"));
    return;
  }
  // Both take the same bfloat16 inputs exactly and accumulate in float32, in
  // their own orders: float products agree to float32 sums of 7 terms; bf16
  // products are each rounded once, so at most one bf16 step (2^-8) apart.
  for (Op oa : {Op::N, Op::T})
    for (Op ob : {Op::N, Op::T})
      for (auto [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.5f, 1.0f}})
        for (bool shared_b : {false, true}) {
          INFO("ops " << int(oa) << int(ob) << " alpha " << alpha << " beta " << beta << " shared B " << shared_b);
          const auto f1 = bf16_products<float>(gemm::Bf16Path::onednn, oa, ob, alpha, beta, shared_b);
          const auto f2 = bf16_products<float>(gemm::Bf16Path::widen, oa, ob, alpha, beta, shared_b);
          CHECK(test::max_abs_diff(f1, f2) < 1e-5);
          const auto h1 = bf16_products<bf16>(gemm::Bf16Path::onednn, oa, ob, alpha, beta, shared_b);
          const auto h2 = bf16_products<bf16>(gemm::Bf16Path::widen, oa, ob, alpha, beta, shared_b);
          std::size_t apart = 0;
          for (std::size_t i = 0; i < h1.size(); ++i)
            apart += std::abs(h1[i] - h2[i]) > std::ldexp(std::abs(h2[i]), -8);
          CHECK(apart == 0);
        }
}

TEST_CASE("the host BLAS runs the kernels its CPU has, not OpenBLAS's generic fallback", "[gemm]") {
  // The test main started as remat's mains do (blas::use_native_kernels):
  // on a CPU with AVX2 and FMA (or AVX-512) OpenBLAS must not be left on
  // Prescott's SSE3 kernels, whatever CPU model it knows or not. (Unless the
  // user chose other kernels with OPENBLAS_CORETYPE.)
  const char* native = blas::native_kernels();
  const char* chosen = std::getenv("OPENBLAS_CORETYPE");
  INFO(blas::describe());
  if (native && (!chosen || std::string(chosen) == native)) CHECK(blas::kernels() != "Prescott");
  CHECK(blas::describe().rfind("OpenBLAS ", 0) == 0);
}

TEST_CASE("gemm refuses operands whose shapes do not multiply", "[gemm][errors]") {
  std::vector<double> a(12), b(12), c(16);
  const auto A = gemm::matrix<Host>(a.data(), 3, 4, 4), B = gemm::matrix<Host>(b.data(), 3, 4, 4);
  CHECK_THROWS_WITH(gemm::gemm(HostExec(), Op::N, Op::N, 1.0, A, B, 0.0, gemm::matrix<Host>(c.data(), 3, 4, 4)),
                    Catch::Contains("operands of 3x4, 3x4 into 3x4"));
  CHECK_NOTHROW(gemm::gemm(HostExec(), Op::N, Op::T, 1.0, A, B, 0.0, gemm::matrix<Host>(c.data(), 3, 3, 3)));
  CHECK_THROWS_WITH(gemm::gemm_batched(HostExec(), Op::N, Op::N, 1.0, gemm::matrices<Host>(a.data(), 2, 6, 2, 3, 3),
                                       gemm::matrices<Host>(b.data(), 1, 6, 3, 2, 2), 0.0,
                                       gemm::matrices<Host>(c.data(), 2, 4, 2, 2, 2)),
                    Catch::Contains("batches of 2, 1 and 2"));
}

TEST_CASE("the RNG is a pure function of (seed, stream, index)", "[rng]") {
  const std::int64_t n = 100000;
  Kokkos::View<double*> dev("normals", n);
  Kokkos::parallel_for(n, KOKKOS_LAMBDA(std::int64_t i) { dev(i) = rng::normal(42, 7, std::uint64_t(i)); });
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dev);
  double sum = 0, sq = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    // Same on any thread, in any order; a GPU's log and cos may differ from
    // the host's in the last bits (weights rounded to float hide that).
    if constexpr (backend::kHostMemory)
      REQUIRE(host(i) == rng::normal(42, 7, std::uint64_t(i)));
    else
      REQUIRE(std::abs(host(i) - rng::normal(42, 7, std::uint64_t(i))) <= 1e-14);
    sum += host(i);
    sq += host(i) * host(i);
  }
  CHECK(std::abs(sum / n) < 0.02);
  CHECK(std::abs(std::sqrt(sq / n) - 1) < 0.02);
  CHECK(rng::normal(42, 8, 0) != rng::normal(42, 7, 0));
  CHECK(rng::normal(43, 7, 0) != rng::normal(42, 7, 0));
}
