// Mixed precision (docs/precision.md): the bfloat16 type, 16-bit GEMMs
// against a float reference, and every model with every strategy at bf16,
// bitwise equal to full at bf16 with its activation peak about halved.
#include <cmath>
#include <cstring>

#include "autodiff/gemm.hpp"
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

TEST_CASE("16-bit GEMMs: float accumulation of the exact inputs, stored as bfloat16 or float", "[precision][gemm]") {
  using gemm::Op;
  const std::int64_t m = 37, n = 29, k = 53;
  auto bf16s = [](const std::vector<double>& v) { return std::vector<bf16>(v.begin(), v.end()); };
  auto widen = [](const std::vector<bf16>& v) {
    std::vector<float> out;
    for (bf16 x : v) out.push_back(float(x));
    return out;
  };
  const auto a = bf16s(test::random_values(m * k, 1)), b = bf16s(test::random_values(n * k, 2)),
             c = bf16s(test::random_values(m * n, 3));
  const auto af = widen(a), bf = widen(b), cf = widen(c);
  const Kokkos::DefaultHostExecutionSpace host;
  for (const float beta : {0.0f, 1.0f}) {
    INFO("beta " << beta);
    std::vector<bf16> got = c;
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
      REQUIRE(float(got[i]) == float(bf16(want[i])));
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

TEST_CASE("every model with every strategy at bf16: bitwise equal to full at bf16, its peak about half fp32's",
          "[precision][zoo][strategies]") {
  const std::string name = any_model();
  const auto attention = GENERATE(ops::AttentionKernel::fused, ops::AttentionKernel::plain);
  const double dropout = GENERATE(0.0, 0.1);
  INFO(name << " attention " << ops::attention_kernel_name(attention) << " dropout " << dropout);
  Sizes z = preset_sizes("tiny");
  z.dropout = dropout;
  const auto model = models().find(name).make(z);
  ParamStore params(model->params(), DType::f32);
  initialize(params, 1, z.L);
  const Batch batch = random_batch(z.B, z.S, z.V, 1);
  CheckOptions o;
  o.attention = attention;
  const auto fp32 = run_check(*model, params, batch, {"full"}, o);
  o.precision = Precision::bf16;
  const auto bf = run_check(*model, params, batch, strategies_for(name, "all"), o);
  // The same model: bf16's loss near fp32's, its masters' gradients float32.
  CHECK(bf.full.loss == test::Approx(fp32.full.loss).epsilon(0.02));
  for (const auto& t : params.tensors())
    if (t.grad().defined()) CHECK(t.grad().dtype() == DType::f32);
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
    }
  }
}
