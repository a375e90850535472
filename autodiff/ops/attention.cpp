#include <cmath>

#include "autodiff/gemm.hpp"
#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/saved_tensor.hpp"
#include "autodiff/tape.hpp"

namespace remat::ops {
using namespace detail;
using gemm::Op;

namespace {

// Geometry of one attention call on packed qkv[B, S, 3D].
struct Geometry {
  std::int64_t B, S, D, H, hd;
  std::int64_t qkv_batch() const { return S * 3 * D; }  // stride between sequences in qkv
  std::int64_t out_batch() const { return S * D; }
  std::int64_t p_batch() const { return H * S * S; }
};

}  // namespace

Tensor attention(const Tensor& qkv, int heads, bool causal) {
  require_float("attention", qkv, "qkv");
  require(qkv.rank() == 3 && qkv.dim(2) % 3 == 0, "attention: qkv must be [B, S, 3D], got " + to_string(qkv.shape()));
  const std::int64_t D = qkv.dim(2) / 3;
  require(heads > 0 && D % heads == 0,
          "attention: " + std::to_string(heads) + " heads do not divide the model width " + std::to_string(D));
  const Geometry g{qkv.dim(0), qkv.dim(1), D, heads, D / heads};
  const double scale = 1.0 / std::sqrt(double(g.hd));

  Tensor out = Tensor::empty({g.B, g.S, g.D}, qkv.dtype(), "attention");
  out.set_kind(OpKind::matmul);
  Tensor probs = Tensor::empty({g.B, g.H, g.S, g.S}, qkv.dtype(), "attention_probs");
  probs.set_kind(OpKind::attn_core);
  dispatch_float(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = qkv.data<T>();
    T* p = probs.data<T>();
    T* y = out.data<T>();
    const std::int64_t S = g.S, ld = 3 * g.D;
    // scores = q k^T, one GEMM per (sequence, head)
    for (std::int64_t h = 0; h < g.H; ++h)
      gemm::gemm_strided_batched<T>(Op::N, Op::T, S, S, g.hd, T(scale), x + h * g.hd, ld, g.qkv_batch(),
                                    x + g.D + h * g.hd, ld, g.qkv_batch(), 0, p + h * S * S, S, g.p_batch(), g.B);
    // masked softmax over each score row, in place
    for_each("attention_softmax", g.B * g.H * S, KOKKOS_LAMBDA(std::int64_t row) {
      T* r = p + row * S;
      const std::int64_t valid = causal ? row % S + 1 : S;
      T m = r[0];
      for (std::int64_t j = 1; j < valid; ++j) m = r[j] > m ? r[j] : m;
      T sum = 0;
      for (std::int64_t j = 0; j < valid; ++j) {
        r[j] = kmath::exp(r[j] - m);
        sum += r[j];
      }
      const T inv = T(1) / sum;
      for (std::int64_t j = 0; j < valid; ++j) r[j] *= inv;
      for (std::int64_t j = valid; j < S; ++j) r[j] = 0;
    });
    // out = probs v, written straight into the merged-heads layout
    for (std::int64_t h = 0; h < g.H; ++h)
      gemm::gemm_strided_batched<T>(Op::N, Op::N, S, g.hd, S, 1, p + h * S * S, S, g.p_batch(),
                                    x + 2 * g.D + h * g.hd, ld, g.qkv_batch(), 0, y + h * g.hd, g.D, g.out_batch(),
                                    g.B);
  });

  OpRecorder rec("attention", {&qkv});
  if (rec)
    rec.finish({&out}, [sq = save(qkv), sp = save(probs), g, scale](BackwardContext& ctx) {
      Tensor dy = ctx.grad_out(), x = sq.unpack(), pr = sp.unpack();
      GradTarget dx = ctx.grad_in(0);
      Tensor dprobs = Tensor::empty(pr.shape(), pr.dtype(), "attention_dprobs");
      dispatch_float(dy.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const T *gy = dy.data<T>(), *px = x.data<T>(), *p = pr.data<T>();
        T* dp = dprobs.data<T>();
        T* gx = dx.t.data<T>();
        const T beta = dx.fresh ? 0 : 1;
        const std::int64_t S = g.S, ld = 3 * g.D;
        for (std::int64_t h = 0; h < g.H; ++h) {
          const std::int64_t q = h * g.hd, v = 2 * g.D + h * g.hd;
          const T* ph = p + h * S * S;
          // dv = probs^T dy ; dprobs = dy v^T
          gemm::gemm_strided_batched<T>(Op::T, Op::N, S, g.hd, S, 1, ph, S, g.p_batch(), gy + q, g.D, g.out_batch(),
                                        beta, gx + v, ld, g.qkv_batch(), g.B);
          gemm::gemm_strided_batched<T>(Op::N, Op::T, S, S, g.hd, 1, gy + q, g.D, g.out_batch(), px + v, ld,
                                        g.qkv_batch(), 0, dp + h * S * S, S, g.p_batch(), g.B);
        }
        // softmax backward, scaled: dscores = probs * (dprobs - <dprobs, probs>) * scale
        const T sc = T(scale);
        for_each("attention_softmax_backward", g.B * g.H * S, KOKKOS_LAMBDA(std::int64_t row) {
          const T* pr_row = p + row * S;
          T* d = dp + row * S;
          T dot = 0;
          for (std::int64_t j = 0; j < S; ++j) dot += d[j] * pr_row[j];
          for (std::int64_t j = 0; j < S; ++j) d[j] = pr_row[j] * (d[j] - dot) * sc;
        });
        for (std::int64_t h = 0; h < g.H; ++h) {
          const std::int64_t q = h * g.hd, k = g.D + h * g.hd;
          const T* dh = dp + h * S * S;
          // dq = dscores k ; dk = dscores^T q
          gemm::gemm_strided_batched<T>(Op::N, Op::N, S, g.hd, S, 1, dh, S, g.p_batch(), px + k, ld, g.qkv_batch(),
                                        beta, gx + q, ld, g.qkv_batch(), g.B);
          gemm::gemm_strided_batched<T>(Op::T, Op::N, S, g.hd, S, 1, dh, S, g.p_batch(), px + q, ld, g.qkv_batch(),
                                        beta, gx + k, ld, g.qkv_batch(), g.B);
        }
      });
    });
  return out;
}

}  // namespace remat::ops
