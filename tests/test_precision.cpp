// Mixed precision (docs/precision.md): the bfloat16 and float16 types,
// 16-bit GEMMs against a float reference, and every model with every
// strategy at bf16 and at fp16 (its loss scaled), bitwise equal to full at
// the same precision with its activation peak about halved. Dynamic loss
// scaling in training: tests/test_train.cpp, tests/cli/precision_test.sh.
#include <cmath>
#include <cstring>

#include "autodiff/gemm.hpp"
#include "autodiff/gemm_dnnl.hpp"
#include "autodiff/memory_tracker.hpp"
#include "catch.hpp"
#include "harness/check.hpp"
#include "helpers.hpp"
#include "strategies/registry.hpp"
#include "zoo/model.hpp"

using namespace remat;

namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace

TEST_CASE("bfloat16 rounds to nearest even and widens exactly", "[precision]") {
  CHECK(float(bf16(1.0f)) == 1.0f);
  CHECK(float(bf16(-2.5f)) == -2.5f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  CHECK(float(bf16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: to the even one, 1 + 2^-6.
  CHECK(float(bf16(1.0f + 3 * std::ldexp(1.0f, -8))) == 1.0f + std::ldexp(1.0f, -6));
  CHECK(float(bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20))) == 1.0f + std::ldexp(1.0f, -7));
  CHECK(std::isnan(float(bf16(std::nanf("")))));
  CHECK(std::isinf(float(bf16(from_bits(0x7f800000u)))));
  CHECK(std::isinf(float(bf16(3.4e38f))));  // past bfloat16's largest finite value
  CHECK(dtype_size(DType::bf16) == 2);
}

TEST_CASE("float16 rounds to nearest even, keeps subnormals, overflows to infinity", "[precision]") {
  CHECK(float(f16(1.0f)) == 1.0f);
  CHECK(float(f16(-2.5f)) == -2.5f);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties go to the even mantissa (1).
  CHECK(float(f16(1.0f + std::ldexp(1.0f, -11))) == 1.0f);
  CHECK(float(f16(1.0f + 3 * std::ldexp(1.0f, -11))) == 1.0f + std::ldexp(1.0f, -9));
  CHECK(float(f16(65504.0f)) == 65504.0f);       // the largest finite value
  CHECK(std::isinf(float(f16(65520.0f))));       // halfway to the next binade: to even, infinity
  CHECK(float(f16(65519.0f)) == 65504.0f);
  CHECK(float(f16(std::ldexp(1.0f, -24))) == std::ldexp(1.0f, -24));  // the smallest subnormal
  CHECK(float(f16(std::ldexp(1.0f, -25))) == 0.0f);                   // halfway below it: to even, zero
  CHECK(float(f16(std::ldexp(3.0f, -25))) == std::ldexp(1.0f, -23));  // 1.5 subnormal units: to even, 2
  CHECK(std::isnan(float(f16(std::nanf("")))));
  CHECK(dtype_size(DType::f16) == 2);
  // Every float16 widens exactly and rounds back to itself.
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) continue;  // NaN (a signalling one would trap here)
    const float x = f16::widen(std::uint16_t(h));
    REQUIRE(f16::round(x) == h);
  }
  // The conversions a host build uses (branch-free widening and rounding) are the portable
  // ones, bit for bit: every float16; floats of every exponent and sign at a stride through
  // their mantissas; and every float whose rounding is a tie or one below or above it (the 13
  // bits rounded off 0x0fff, 0x1000 or 0x1001, the other 19 bits all of theirs).
  std::int64_t first_wide = -1, first_round = -1;
  for (std::uint32_t h = 0; h < 0x10000u && first_wide < 0; ++h) {
    const float a = f16::widen(std::uint16_t(h)), b = f16::widen_portable(std::uint16_t(h));
    if (std::memcmp(&a, &b, sizeof a) != 0) first_wide = h;
  }
  for (std::uint64_t u = 0; u < (std::uint64_t(1) << 32) && first_round < 0; u += 4099) {
    float x;
    const auto bits = std::uint32_t(u);
    std::memcpy(&x, &bits, sizeof x);
    if (f16::round(x) != f16::round_portable(x)) first_round = bits;
  }
  for (std::uint32_t top = 0; top < (1u << 19) && first_round < 0; ++top)
    for (const std::uint32_t low : {0x0fffu, 0x1000u, 0x1001u}) {
      float x;
      const std::uint32_t bits = top << 13 | low;
      std::memcpy(&x, &bits, sizeof x);
      if (f16::round_branchless(x) != f16::round_portable(x)) first_round = bits;
    }
  CHECK(first_wide == -1);   // the first float16 whose widening differs
  CHECK(first_round == -1);  // the bits of the first float whose rounding differs
#if defined(__FLT16_MAX__) && !defined(__CUDACC__)
  // Against the compiler's own _Float16 conversion (round to nearest even).
  for (const double v : test::random_values(20000, 7)) {
    const float x = float(v * 70000.0 * std::pow(10.0, -9.0 * std::abs(v)));
    REQUIRE(f16::round(x) == [&] {
      const _Float16 h = _Float16(x);
      std::uint16_t bits;
      std::memcpy(&bits, &h, sizeof bits);
      return bits;
    }());
  }
#endif
}

TEMPLATE_TEST_CASE("16-bit GEMMs: float accumulation of the exact inputs, stored in 16 bits or float",
                   "[precision][gemm]", bf16, f16) {
  using H = TestType;
  using gemm::Op;
  const std::int64_t m = 37, n = 29, k = 53;
  auto halves = [](const std::vector<double>& v) { return std::vector<H>(v.begin(), v.end()); };
  auto widen = [](const std::vector<H>& v) {
    std::vector<float> out;
    for (H x : v) out.push_back(float(x));
    return out;
  };
  const auto a = halves(test::random_values(m * k, 1)), b = halves(test::random_values(n * k, 2)),
             c = halves(test::random_values(m * n, 3));
  const auto af = widen(a), bf = widen(b), cf = widen(c);
  const Kokkos::DefaultHostExecutionSpace host;
  // The widening path, on every CPU: its products are sgemm's bitwise. On a
  // CPU with native bf16 the default is oneDNN's, which sums in its own order
  // (within float32 rounding of these: test_gemm_rng.cpp compares the two).
  const gemm::Bf16PathScope widening(gemm::Bf16Path::widen);
  for (const float beta : {0.0f, 1.0f}) {
    INFO("beta " << beta);
    std::vector<H> got = c;
    std::vector<float> got_wide = cf, want = cf, exact = cf;
    gemm::gemm(host, Op::N, Op::T, 0.5f, gemm::matrix<Kokkos::HostSpace>(a.data(), m, k, k),
               gemm::matrix<Kokkos::HostSpace>(b.data(), n, k, k), beta,
               gemm::matrix<Kokkos::HostSpace>(got.data(), m, n, n));
    gemm::gemm(host, Op::N, Op::T, 0.5f, gemm::matrix<Kokkos::HostSpace>(a.data(), m, k, k),
               gemm::matrix<Kokkos::HostSpace>(b.data(), n, k, k), beta,
               gemm::matrix<Kokkos::HostSpace>(got_wide.data(), m, n, n));
    // What the policy says: the float product of the widened inputs (the
    // same BLAS call), rounded once; and near the exact product.
    gemm::gemm_serial<float>(Op::N, Op::T, m, n, k, 0.5f, af.data(), k, bf.data(), k, beta, want.data(), n);
    gemm::gemm_reference<float>(Op::N, Op::T, m, n, k, 0.5f, af.data(), k, bf.data(), k, beta, exact.data(), n);
    for (std::int64_t i = 0; i < m * n; ++i) {
      INFO("element " << i);
      REQUIRE(got_wide[i] == want[i]);
      REQUIRE(float(got[i]) == float(H(want[i])));
      REQUIRE(std::abs(got_wide[i] - exact[i]) <= 1e-5f * (1 + std::abs(exact[i])));
    }
  }
}

namespace {

std::string any_model() {
  static const auto names = models().names();
  return GENERATE_REF(from_range(names));
}

}  // namespace

TEST_CASE("every model with every strategy at 16 bits: bitwise equal to full at that precision, its peak about half "
          "fp32's", "[precision][zoo][strategies]") {
  const std::string name = any_model();
  const auto precision = GENERATE(Precision::bf16, Precision::fp16);
  const auto attention = GENERATE(ops::AttentionKernel::fused, ops::AttentionKernel::plain);
  const double dropout = GENERATE(0.0, 0.1);
  INFO(name << " " << precision_name(precision) << " attention " << ops::attention_kernel_name(attention)
            << " dropout " << dropout);
  Sizes z = preset_sizes("tiny");
  z.dropout = dropout;
  const auto model = models().find(name).make(z);
  ParamStore params(model->params(), DType::f32);
  initialize(params, 1, z.L);
  const Batch batch = random_batch(z.B, z.S, z.V, 1);
  CheckOptions o;
  o.run.attention = attention;
  const auto fp32 = run_check(*model, params, batch, {"full"}, o);
  const auto reference = gradients(params);
  o.run.precision = precision;
  const auto bf = run_check(*model, params, batch, strategies_for(name, "all"), o);
  // The same model: the 16-bit loss near fp32's, its masters' gradients
  // float32, unscaled (fp16 seeds backward with 2^16) and near fp32's.
  CHECK(bf.full.loss == test::Approx(fp32.full.loss).epsilon(0.02));
  CHECK(bf.full.loss_scale == (precision == Precision::fp16 ? kInitialLossScale : 1.0));
  for (const auto& t : params.tensors())
    if (t.grad().defined()) CHECK(t.grad().dtype() == DType::f32);
  // (Relative to the largest gradient where a parameter's own are near zero,
  // as bert's key bias, whose gradient is zero in exact arithmetic; mixtral's
  // routing flips at 16 bits, which moves whole tokens between experts.)
  const GradientComparison near =
      compare_gradients(params, gradients(params), reference, bf.full.loss, fp32.full.loss, 1e-3);
  INFO("16-bit gradients against fp32's: max rel " << near.max_rel << " at " << near.worst);
  if (name != "mixtral") CHECK(near.max_rel < 0.1);
  // The 16-bit copies: half the parameters' bytes, in their own pool.
  CHECK(bf.full.weight_copy_bytes > 0);
  CHECK(bf.full.weight_copy_bytes <= params.bytes() / 2 + 8 * std::int64_t(params.tensors().size()));
  CHECK(fp32.full.weight_copy_bytes == 0);
  // Activations in 16 bits, statistics (norms, log-sum-exp, loss) in 32.
  const double ratio = double(bf.full.activation_peak) / double(fp32.full.activation_peak);
  INFO("bf16 / fp32 activation peak " << ratio);
  // Half, but for the float32 statistics and the fused kernel's float
  // workspace, which weigh more on tiny than at real sizes (gpt2 small: bench/).
  CHECK(ratio < 0.7);
  CHECK(ratio > 0.45);
  for (const auto& row : bf.rows) {
    INFO(row.strategy << ": max rel " << row.vs_full.max_rel << " at " << row.vs_full.worst);
    if (row.exact) {
      CHECK(std::abs(double(row.step.activation_peak - row.predicted.device)) <= 0.05 * double(row.step.activation_peak));
      CHECK(row.vs_full.bitwise);
    } else {
      REQUIRE(row.reconstruction);
      CHECK(row.vs_full.max_rel < 0.1);
      // Every block's reconstruction error, in forward order; the worst is the one reported.
      REQUIRE(int(row.reconstruction_by_block.size()) == z.L);
      double worst = 0;
      for (int l = 0; l < z.L; ++l) {
        CHECK(row.reconstruction_by_block[std::size_t(l)].block == "h." + std::to_string(l));
        worst = std::max(worst, row.reconstruction_by_block[std::size_t(l)].max_rel);
      }
      CHECK(worst == row.reconstruction->max_rel);
    }
  }
}
