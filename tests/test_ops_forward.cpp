// Every op's forward against the naive reference, in float32 and float64; the
// kernels of one op against each other.
#include <cmath>
#include <optional>

#include "autodiff/ops/attention_fused.hpp"
#include "autodiff/ops/embedding_grad.hpp"
#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/ops/row_kernel.hpp"
#include "autodiff/ops/softmax_row.hpp"
#include "autodiff/random.hpp"
#include "autodiff/shape_only.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"
#include "catch.hpp"
#include "helpers.hpp"
#include "reference_ops.hpp"

using namespace remat;
using test::random_ids;
using test::random_tensor;

namespace {

// float64 kernels must agree with the reference to rounding; float32 ones to
// float32 accuracy relative to the values' size.
void require_close(const Tensor& got, const std::vector<double>& want) {
  const auto g = got.to_host_f64();
  REQUIRE(g.size() == want.size());
  const double tol = got.dtype() == DType::f64 ? 1e-12 : 2e-6;
  double worst = 0;
  for (std::size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - want[i]) / (1 + std::abs(want[i])));
  CHECK(worst <= tol);
}

const DType kDtypes[] = {DType::f32, DType::f64};

}  // namespace

TEST_CASE("embedding gathers rows", "[ops][forward]") {
  for (DType dt : kDtypes) {
    Tensor w = random_tensor({7, 5}, 1, dt);
    Tensor ids = random_ids({3, 4}, 7, 2);
    Tensor y = ops::embedding(w, ids);
    CHECK(y.shape() == Shape{3, 4, 5});
    require_close(y, test::ref::embedding(w.to_host_f64(), 5, ids.to_host_i32()));
  }
}

TEST_CASE("add, same shape and broadcast over leading dimensions", "[ops][forward]") {
  for (DType dt : kDtypes) {
    Tensor a = random_tensor({2, 3, 4}, 1, dt);
    Tensor b = random_tensor({2, 3, 4}, 2, dt);
    Tensor c = random_tensor({3, 4}, 3, dt);
    require_close(ops::add(a, b), test::ref::add(a.to_host_f64(), b.to_host_f64()));
    require_close(ops::add(a, c), test::ref::add(a.to_host_f64(), c.to_host_f64()));
  }
}

TEST_CASE("linear with and without bias", "[ops][forward]") {
  for (DType dt : kDtypes) {
    Tensor x = random_tensor({2, 3, 6}, 1, dt);
    Tensor w = random_tensor({5, 6}, 2, dt);
    Tensor b = random_tensor({5}, 3, dt);
    require_close(ops::linear(x, w, b), test::ref::linear(x.to_host_f64(), 6, w.to_host_f64(), 5, b.to_host_f64()));
    require_close(ops::linear(x, w), test::ref::linear(x.to_host_f64(), 6, w.to_host_f64(), 5, {}));
  }
}

TEST_CASE("layer_norm", "[ops][forward]") {
  for (DType dt : kDtypes) {
    Tensor x = random_tensor({4, 8}, 1, dt, -3, 3);
    Tensor w = random_tensor({8}, 2, dt);
    Tensor b = random_tensor({8}, 3, dt);
    require_close(ops::layer_norm(x, w, b, 1e-5),
                  test::ref::layer_norm(x.to_host_f64(), 8, w.to_host_f64(), b.to_host_f64(), 1e-5));
  }
}

TEST_CASE("gelu_tanh", "[ops][forward]") {
  for (DType dt : kDtypes) {
    Tensor x = random_tensor({50}, 1, dt, -5, 5);
    require_close(ops::gelu_tanh(x), test::ref::gelu_tanh(x.to_host_f64()));
  }
}

TEST_CASE("attention, causal and bidirectional, every kernel", "[ops][forward]") {
  const auto kernel = GENERATE(ops::AttentionKernel::fused, ops::AttentionKernel::fused_team, ops::AttentionKernel::plain);
  ops::AttentionKernelScope scope(kernel);
  for (DType dt : kDtypes)
    for (bool causal : {true, false}) {
      Tensor qkv = random_tensor({2, 5, 24}, 1, dt, -2, 2);
      require_close(ops::attention(qkv, 2, causal), test::ref::attention(qkv.to_host_f64(), 2, 5, 8, 2, causal));
    }
}

TEST_CASE("cross_entropy", "[ops][forward]") {
  for (DType dt : kDtypes) {
    Tensor z = random_tensor({2, 3, 10}, 1, dt, -4, 4);
    Tensor t = random_ids({2, 3}, 10, 2);
    Tensor loss = ops::cross_entropy(z, t);
    CHECK(loss.shape().empty());
    CHECK(loss.item() == test::Approx(test::ref::cross_entropy(z.to_host_f64(), 10, t.to_host_i32())).epsilon(1e-6));
  }
}

TEST_CASE("rms_norm", "[ops][forward]") {
  for (DType dt : kDtypes) {
    Tensor x = random_tensor({4, 8}, 1, dt, -3, 3);
    Tensor w = random_tensor({8}, 2, dt);
    require_close(ops::rms_norm(x, w, 1e-5), test::ref::rms_norm(x.to_host_f64(), 8, w.to_host_f64(), 1e-5));
  }
}

TEST_CASE("rotary, rotate-half, theta 10000", "[ops][forward]") {
  for (DType dt : kDtypes) {
    Tensor x = random_tensor({2, 5, 16}, 1, dt);
    require_close(ops::rotary(x, 8), test::ref::rotary(x.to_host_f64(), 5, 16, 8, 10000.0));
  }
}

TEST_CASE("gelu_erf, silu, swiglu, scale", "[ops][forward]") {
  for (DType dt : kDtypes) {
    Tensor x = random_tensor({50}, 1, dt, -5, 5), u = random_tensor({50}, 2, dt, -2, 2);
    require_close(ops::gelu_erf(x), test::ref::gelu_erf(x.to_host_f64()));
    require_close(ops::silu(x), test::ref::silu(x.to_host_f64()));
    require_close(ops::swiglu(x, u), test::ref::swiglu(x.to_host_f64(), u.to_host_f64()));
    auto half = x.to_host_f64();
    for (auto& v : half) v *= 0.5;
    require_close(ops::scale(x, 0.5), half);
  }
}

TEST_CASE("grouped-query attention, causal and bidirectional, every kernel", "[ops][forward]") {
  const auto kernel = GENERATE(ops::AttentionKernel::fused, ops::AttentionKernel::fused_team, ops::AttentionKernel::plain);
  ops::AttentionKernelScope scope(kernel);
  for (DType dt : kDtypes)
    for (bool causal : {true, false})
      for (int kv : {1, 2, 4}) {
        INFO("kv heads " << kv << " causal " << causal);
        Tensor q = random_tensor({2, 5, 16}, 1, dt, -2, 2);
        Tensor k = random_tensor({2, 5, 4 * kv}, 2, dt, -2, 2), v = random_tensor({2, 5, 4 * kv}, 3, dt, -2, 2);
        require_close(ops::attention(q, k, v, 4, kv, causal),
                      test::ref::attention_gqa(q.to_host_f64(), k.to_host_f64(), v.to_host_f64(), 2, 5, 4, kv, 4, causal));
      }
}

TEST_CASE("cross-attention on packed keys and values equals attention on separate ones, every kernel",
          "[ops][forward]") {
  for (auto kernel : {ops::AttentionKernel::fused, ops::AttentionKernel::fused_team, ops::AttentionKernel::plain}) {
    ops::AttentionKernelScope scope(kernel);
    Tensor q = random_tensor({2, 5, 8}, 1), kv = random_tensor({2, 5, 16}, 2);
    const auto packed = kv.to_host_f64();
    std::vector<double> k, v;
    for (std::size_t r = 0; r < 10; ++r)
      for (std::size_t j = 0; j < 16; ++j) (j < 8 ? k : v).push_back(packed[r * 16 + j]);
    const Tensor want = ops::attention(q, Tensor::from_host(k, {2, 5, 8}), Tensor::from_host(v, {2, 5, 8}), 2, 2, false);
    require_close(ops::attention(q, kv, 2, false), want.to_host_f64());
  }
}

TEST_CASE("fused, fused-team and plain attention agree, with the same dropout masks", "[ops][forward]") {
  // 70 rows: several query and key tiles, a ragged last one. Head width 4
  // keeps the team kernels' scratch in level 0, 64 in double sends it to
  // level 1 (global memory): both paths run.
  struct Case {
    DType dt;
    std::int64_t hd;
    double tolerance;
  };
  for (const Case c : {Case{DType::f32, 4, 1e-5}, Case{DType::f64, 64, 1e-12}})
    for (double dropout : {0.0, 0.2})
      for (bool causal : {true, false}) {
        INFO("dtype " << dtype_name(c.dt) << " head width " << c.hd << " dropout " << dropout << " causal " << causal);
        auto run = [&](ops::AttentionKernel k) {
          ops::AttentionKernelScope scope(k);
          random_ops::begin_step(5, 0);
          Tensor q = test::random_leaf({2, 70, 4 * c.hd}, 1, c.dt), kv = test::random_leaf({2, 70, 2 * c.hd}, 2, c.dt);
          Tensor y = ops::attention(q, kv, kv, 4, 2, causal, dropout);
          backward(y, random_tensor({2, 70, 4 * c.hd}, 3, c.dt));
          std::vector<double> all = y.to_host_f64();
          for (const Tensor& t : {q, kv})
            for (double v : t.grad().to_host_f64()) all.push_back(v);
          return all;
        };
        const auto plain = run(ops::AttentionKernel::plain);
        for (auto kernel : {ops::AttentionKernel::fused, ops::AttentionKernel::fused_team}) {
          const auto fused = run(kernel);
          double worst = 0;
          for (std::size_t i = 0; i < fused.size(); ++i)
            worst = std::max(worst, std::abs(fused[i] - plain[i]) / (1 + std::abs(plain[i])));
          INFO("kernel " << ops::attention_kernel_name(kernel));
          CHECK(worst < c.tolerance);
        }
      }
}

TEST_CASE("the GPU's fused attention (batched tiles) agrees with the team kernels, forward and backward",
          "[ops][forward]") {
  // Grouped-query (4 heads on 2), 70 rows in tiles of 16 (a ragged last
  // one, causal tiles shorter than the sequence) and in one tile; gradients
  // added to what their buffers held. 16-bit: the batched tiles round the
  // probabilities for their products, as the plain kernel does.
  const std::int64_t B = 2, S = 70, H = 4, Hkv = 2, hd = 8;
  struct Case {
    DType dt;
    double tolerance;
  };
  for (const Case c :
       {Case{DType::f32, 1e-5}, Case{DType::f64, 1e-12}, Case{DType::bf16, 3e-2}, Case{DType::f16, 4e-3}})
    for (double dropout : {0.0, 0.2})
      for (bool causal : {true, false})
        for (std::int64_t tile : {16, 0}) {
          INFO(dtype_name(c.dt) << " dropout " << dropout << " causal " << causal << " tile rows " << tile);
          const ops::fused::Problem p{B, S, H, Hkv, hd, causal, {0, H * hd, S * H * hd}, {0, Hkv * hd, S * Hkv * hd},
                                      {0, Hkv * hd, S * Hkv * hd}, 1 / std::sqrt(double(hd)), dropout, 5, 7};
          const Tensor q = random_tensor({B, S, H * hd}, 1, c.dt), k = random_tensor({B, S, Hkv * hd}, 2, c.dt),
                       v = random_tensor({B, S, Hkv * hd}, 3, c.dt), dout = random_tensor({B, S, H * hd}, 4, c.dt);
          auto run = [&](bool batched) {
            Tensor out = Tensor::empty({B, S, H * hd}, c.dt), lse = Tensor::empty({B, H, S}, compute_dtype(c.dt));
            Tensor dq = random_tensor({B, S, H * hd}, 5, c.dt), dk = random_tensor({B, S, Hkv * hd}, 6, c.dt),
                   dv = random_tensor({B, S, Hkv * hd}, 7, c.dt);
            REMAT_DISPATCH_COMPUTE(c.dt, T, {
              if (batched) {
                ops::fused::batched_forward<T>(p, q.data<T>(), k.data<T>(), v.data<T>(), out.data<T>(), lse.data<A>(),
                                               tile);
                ops::fused::batched_backward<T>(p, q.data<T>(), k.data<T>(), v.data<T>(), lse.data<A>(),
                                                dout.data<T>(), dq.data<T>(), dk.data<T>(), dv.data<T>(), {}, tile);
              } else {  // (the host's tiles read host memory only; the team kernels run anywhere)
                ops::fused::team_forward<T>(p, q.data<T>(), k.data<T>(), v.data<T>(), out.data<T>(), lse.data<A>());
                ops::fused::team_backward<T>(p, q.data<T>(), k.data<T>(), v.data<T>(), out.data<T>(), lse.data<A>(),
                                             dout.data<T>(), dq.data<T>(), dk.data<T>(), dv.data<T>());
              }
            });
            std::vector<double> all;
            for (const Tensor& t : {out, lse, dq, dk, dv})
              for (double x : t.to_host_f64()) all.push_back(x);
            return all;
          };
          const auto team = run(false), batched = run(true);
          double worst = 0;
          for (std::size_t i = 0; i < team.size(); ++i)
            worst = std::max(worst, std::abs(batched[i] - team[i]) / (1 + std::abs(team[i])));
          CHECK(worst < c.tolerance);
        }
  // A shape-only run (no data, every pointer null) counts the same products.
  auto flops = [&](bool shapes) {
    std::optional<ShapeOnlyScope> scope;
    if (shapes) scope.emplace();
    const ops::fused::Problem p{B, S, H, Hkv, hd, true, {0, H * hd, S * H * hd}, {0, Hkv * hd, S * Hkv * hd},
                                {0, Hkv * hd, S * Hkv * hd}, 1 / std::sqrt(double(hd)), 0.0, 5, 7};
    Tensor q = Tensor::zeros({B, S, H * hd}, DType::f32), kv = Tensor::zeros({B, S, Hkv * hd}, DType::f32);
    Tensor out = Tensor::empty({B, S, H * hd}, DType::f32), lse = Tensor::empty({B, H, S}, DType::f32);
    const stats::Counts before = stats::exchange({});
    ops::fused::batched_forward<float>(p, q.data<float>(), kv.data<float>(), kv.data<float>(), out.data<float>(),
                                       lse.data<float>(), 16);
    ops::fused::batched_backward<float>(p, q.data<float>(), kv.data<float>(), kv.data<float>(), lse.data<float>(),
                                        out.data<float>(), q.data<float>(), kv.data<float>(), kv.data<float>(), {}, 16);
    return stats::exchange(before).flops;
  };
  CHECK(flops(false) > 0);
  CHECK(flops(true) == flops(false));
}

TEST_CASE("ops reject bad input with the offending shape", "[ops][errors]") {
  Tensor x = random_tensor({2, 6}, 1, DType::f32);
  CHECK_THROWS_WITH(ops::linear(x, random_tensor({5, 7}, 2, DType::f32)), test::Contains("[2, 6]") && test::Contains("[5, 7]"));
  CHECK_THROWS_WITH(ops::add(x, random_tensor({3}, 2, DType::f32)), test::Contains("cannot broadcast"));
  CHECK_THROWS_WITH(ops::embedding(random_tensor({4, 3}, 1, DType::f32), random_ids({5}, 9, 1)),
                    test::Contains("outside [0, 4)"));
  CHECK_THROWS_WITH(ops::cross_entropy(x, random_ids({3}, 6, 1)), test::Contains("3 targets for 2 rows"));
  CHECK_THROWS_WITH(ops::attention(random_tensor({1, 2, 9}, 1, DType::f32), 2, true), test::Contains("heads do not divide"));
  CHECK_THROWS_WITH(ops::layer_norm(x, random_tensor({5}, 1, DType::f32), random_tensor({6}, 1, DType::f32), 1e-5),
                    test::Contains("must both be [6]"));
}

TEST_CASE("column sums: the device's chunked kernel agrees with the host's, fresh and accumulating",
          "[ops][forward]") {
  // 300 x 40: 64 chunks, 300 rows not a multiple of them; 3 x 40: a chunk per
  // row; 4 x 70000: 3 chunks (2^18 threads) over 4 rows; 2 x 300000: no
  // chunks (the columns alone are enough threads), no workspace.
  const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {{300, 40}, {3, 40}, {4, 70000}, {2, 300000}};
  for (auto [M, D] : shapes)
    for (DType dt : kDtypes)
      for (bool fresh : {true, false}) {
        INFO(M << " x " << D << " dtype " << dtype_name(dt) << " fresh " << fresh);
        Tensor src = random_tensor({M, D}, 1, dt, -2, 2), start = random_tensor({D}, 2, dt);
        std::vector<double> expected = src.to_host_f64(), initial = start.to_host_f64(), sums(std::size_t(D), 0.0);
        for (std::int64_t r = 0; r < M; ++r)
          for (std::int64_t j = 0; j < D; ++j) sums[std::size_t(j)] += expected[std::size_t(r * D + j)];
        for (std::int64_t j = 0; j < D; ++j) sums[std::size_t(j)] += fresh ? 0.0 : initial[std::size_t(j)];
        REMAT_DISPATCH_FLOAT(dt, T, {
          Tensor host = random_tensor({D}, 2, dt), chunked = random_tensor({D}, 2, dt);  // both `start`
          const T* s = src.data<T>();
          const std::int64_t cols = D;
          ops::detail::column_sums<T>("test_column_sums", M, D, host.data<T>(), fresh,
                                      KOKKOS_LAMBDA(std::int64_t r, std::int64_t j) { return s[r * cols + j]; });
          ops::detail::column_sums_chunked<T>(
              "test_column_sums", M, D, chunked.data<T>(), fresh,
              KOKKOS_LAMBDA(std::int64_t r, std::int64_t j) { return s[r * cols + j]; });
          // float32 sums of 300 terms carry a few hundred roundings: 1e-5.
          const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
          for (const Tensor& got : {host, chunked}) {
            const auto g = got.to_host_f64();
            std::size_t off = 0;
            for (std::size_t j = 0; j < std::size_t(D); ++j)
              off += std::abs(g[j] - sums[j]) > tol * (1 + std::abs(sums[j]));
            CHECK(off == 0);
          }
        });
      }
}

TEST_CASE("softmax rows: the device's team kernels agree with the row kernel, masked rows included",
          "[ops][forward]") {
  const std::int64_t rows = 12, len = 37;
  for (DType dt : kDtypes) {
    INFO("dtype " << dtype_name(dt));
    const double tol = dt == DType::f64 ? 1e-12 : 1e-6;
    Tensor team = random_tensor({rows, len}, 1, dt, -4, 4), grad = random_tensor({rows, len}, 2, dt);
    std::vector<double> x = team.to_host_f64(), g = grad.to_host_f64(), want(x.size()), want_grad(x.size());
    for (std::int64_t r = 0; r < rows; ++r) {  // row r sees r + 1 entries (capped): a causal mask
      const std::int64_t n = std::min(r + 1, len);
      double m = x[r * len], sum = 0, dot = 0;
      for (std::int64_t j = 0; j < n; ++j) m = std::max(m, x[r * len + j]);
      for (std::int64_t j = 0; j < n; ++j) sum += std::exp(x[r * len + j] - m);
      for (std::int64_t j = 0; j < len; ++j) want[r * len + j] = j < n ? std::exp(x[r * len + j] - m) / sum : 0.0;
      for (std::int64_t j = 0; j < len; ++j) dot += g[r * len + j] * want[r * len + j];
      for (std::int64_t j = 0; j < len; ++j) want_grad[r * len + j] = want[r * len + j] * (g[r * len + j] - dot) * 0.5;
    }
    REMAT_DISPATCH_FLOAT(dt, T, {
      ops::detail::softmax_rows_team("test_softmax", team.data<T>(), rows, len,
                                     KOKKOS_LAMBDA(std::int64_t r) { return r + 1 < len ? r + 1 : len; });
      ops::detail::softmax_backward_rows_team("test_softmax_backward", team.data<T>(), grad.data<T>(), rows, len,
                                              T(0.5));
    });
    const auto got = team.to_host_f64(), got_grad = grad.to_host_f64();
    for (std::size_t i = 0; i < want.size(); ++i) {
      CHECK(std::abs(got[i] - want[i]) <= tol);
      CHECK(std::abs(got_grad[i] - want_grad[i]) <= tol * (1 + std::abs(want_grad[i])));
    }
  }
}

// A row body for either Row: the entries scaled by the row's max, then the
// row's sum of squares and max in two extra columns.
template <class T>
struct RowProbe {
  const T* x;
  T* out;
  std::int64_t len;
  template <class Row>
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t r, const Row& row) const {
    const T* xr = x + r * len;
    T* o = out + r * (len + 2);
    const T m = row.template max<T>([&](std::int64_t j) { return xr[j]; });
    const T s = row.template sum<T>([&](std::int64_t j) { return xr[j] * xr[j]; });
    row.each([&](std::int64_t j) { o[j] = xr[j] * m; });
    row.once([&] {
      o[len] = s;
      o[len + 1] = m;
    });
  }
};

TEST_CASE("row kernels: a team per row gives the serial row's sums, maxima, loops and single writes",
          "[ops][forward]") {
  const std::int64_t rows = 9, len = 45;
  for (DType dt : kDtypes) {
    INFO("dtype " << dtype_name(dt));
    const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
    Tensor x = random_tensor({rows, len}, 3, dt, -3, 3);
    Tensor serial = Tensor::zeros({rows, len + 2}, dt), team = Tensor::zeros({rows, len + 2}, dt);
    REMAT_DISPATCH_FLOAT(dt, T, {
      const T* px = x.data<T>();
      const RowProbe<T> to_serial{px, serial.data<T>(), len}, to_team{px, team.data<T>(), len};
      ops::detail::for_each("test_serial_rows", rows,
                            KOKKOS_LAMBDA(std::int64_t r) { to_serial(r, ops::detail::SerialRow{len}); });
      using Policy = Kokkos::TeamPolicy<ExecSpace>;
      Kokkos::parallel_for("test_team_rows", Policy(int(rows), Kokkos::AUTO),
                           KOKKOS_LAMBDA(const Policy::member_type& m) {
                             to_team(std::int64_t(m.league_rank()), ops::detail::TeamRow{m, len});
                           });
    });
    const auto want = serial.to_host_f64(), got = team.to_host_f64(), xs = x.to_host_f64();
    for (std::int64_t r = 0; r < rows; ++r) {
      double m = xs[r * len], s = 0;
      for (std::int64_t j = 0; j < len; ++j) m = std::max(m, xs[r * len + j]), s += xs[r * len + j] * xs[r * len + j];
      CHECK(std::abs(want[r * (len + 2) + len] - s) <= tol * s);
      CHECK(want[r * (len + 2) + len + 1] == m);
    }
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])));
  }
}

TEST_CASE("embedding gradient: the device's token-sorted schedule equals the host's column schedule bitwise",
          "[ops][backward]") {
  // 7 tokens over 60 positions: every token repeats, one may be absent.
  const std::int64_t V = 7, N = 60, D = 5;
  Tensor ids = random_ids({N}, V, 4);
  for (DType dt : kDtypes)
    for (bool fresh : {true, false}) {
      INFO("dtype " << dtype_name(dt) << " fresh " << fresh);
      Tensor gy = random_tensor({N, D}, 5, dt), by_column = random_tensor({V, D}, 6, dt),
             by_token = random_tensor({V, D}, 6, dt);
      REMAT_DISPATCH_FLOAT(dt, T, {
        const std::int32_t* id = ids.data<std::int32_t>();
        ops::detail::embedding_grad_by_column<T>(id, gy.data<T>(), N, V, D, 0, by_column.data<T>(), fresh);
        ops::detail::embedding_grad_by_token<T>(id, gy.data<T>(), N, V, D, 0, by_token.data<T>(), fresh);
      });
      CHECK(by_token.to_host_f64() == by_column.to_host_f64());
    }
}
