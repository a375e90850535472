#include <cmath>

#include "autodiff/gemm.hpp"
#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/random.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"

namespace remat::ops {
using namespace detail;
using gemm::Op;

namespace {

// Geometry of one attention call on packed qkv[B, S, 3D].
struct Geometry {
  std::int64_t B, S, D, H, hd;
  bool causal;
  std::int64_t qkv_batch() const { return S * 3 * D; }  // stride between sequences in qkv
  std::int64_t out_batch() const { return S * D; }
  std::int64_t p_batch() const { return H * S * S; }
  double scale() const { return 1.0 / std::sqrt(double(hd)); }
};

// Probability dropout: keep with 1-p, scale by 1/(1-p); the mask is a pure
// function of (seed, step, op id, element), regenerated rather than stored.
struct Dropout {
  double p = 0;
  std::uint64_t seed = 0, stream = 0;
  bool active() const { return p > 0; }
};

// softmax(q k^T * scale, mask) -> probs[B, H, S, S]
Tensor attention_probs(const Tensor& qkv, const Geometry& g) {
  stats::count_forward("attention_probs");
  Tensor probs = Tensor::empty({g.B, g.H, g.S, g.S}, qkv.dtype(), "attention_probs");
  probs.set_kind(OpKind::attn_core);
  dispatch_float(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = qkv.data<T>();
    T* p = probs.data<T>();
    const std::int64_t S = g.S, ld = 3 * g.D;
    const bool causal = g.causal;
    for (std::int64_t h = 0; h < g.H; ++h)  // one GEMM per (sequence, head)
      gemm::gemm_strided_batched<T>(Op::N, Op::T, S, S, g.hd, T(g.scale()), x + h * g.hd, ld, g.qkv_batch(),
                                    x + g.D + h * g.hd, ld, g.qkv_batch(), 0, p + h * S * S, S, g.p_batch(), g.B);
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
  });
  return probs;
}

// dst = src * mask / (1 - p), elementwise over probs-shaped tensors.
template <class T>
void apply_dropout(const T* src, T* dst, std::int64_t n, const Dropout& d) {
  const double p = d.p;
  const std::uint64_t seed = d.seed, stream = d.stream;
  const T keep_scale = T(1.0 / (1.0 - p));
  for_each("attention_dropout", n, KOKKOS_LAMBDA(std::int64_t i) {
    dst[i] = rng::uniform(seed, stream, std::uint64_t(i)) > p ? src[i] * keep_scale : T(0);
  });
}

// out[B, S, D] = dropout(probs) v, heads merged.
Tensor attention_output(const Tensor& probs, const Tensor& qkv, const Geometry& g, const Dropout& d) {
  stats::count_forward("attention_output");
  Tensor out = Tensor::empty({g.B, g.S, g.D}, qkv.dtype(), "attention");
  out.set_kind(OpKind::matmul);
  Tensor dropped = d.active() ? Tensor::empty(probs.shape(), probs.dtype(), "attention_dropped") : probs;
  dispatch_float(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (d.active()) apply_dropout(probs.data<T>(), dropped.data<T>(), probs.numel(), d);
    const T *x = qkv.data<T>(), *p = dropped.data<T>();
    T* y = out.data<T>();
    const std::int64_t S = g.S;
    for (std::int64_t h = 0; h < g.H; ++h)
      gemm::gemm_strided_batched<T>(Op::N, Op::N, S, g.hd, S, 1, p + h * S * S, S, g.p_batch(),
                                    x + 2 * g.D + h * g.hd, 3 * g.D, g.qkv_batch(), 0, y + h * g.hd, g.D,
                                    g.out_batch(), g.B);
  });
  return out;
}

}  // namespace

Tensor attention(const Tensor& qkv, int heads, bool causal, double dropout) {
  require_float("attention", qkv, "qkv");
  require(qkv.rank() == 3 && qkv.dim(2) % 3 == 0, "attention: qkv must be [B, S, 3D], got " + to_string(qkv.shape()));
  const std::int64_t D = qkv.dim(2) / 3;
  require(heads > 0 && D % heads == 0,
          "attention: " + std::to_string(heads) + " heads do not divide the model width " + std::to_string(D));
  require(dropout >= 0 && dropout < 1, "attention: dropout " + std::to_string(dropout) + " outside [0, 1)");
  const Geometry g{qkv.dim(0), qkv.dim(1), D, heads, D / heads, causal};
  Dropout d;
  if (dropout > 0) d = {dropout, random_ops::seed(), random_ops::stream(random_ops::next_op())};

  Tensor probs = attention_probs(qkv, g);
  Tensor out = attention_output(probs, qkv, g, d);
  OpRecorder rec("attention", {&qkv});
  if (!rec) return out;
  const SavedTensor sq = save(qkv);
  probs.set_recipe([sq, g] { return attention_probs(sq.unpack(), g); });
  const SavedTensor sp = save(probs);
  out.set_recipe([sq, sp, g, d] { return attention_output(sp.unpack(), sq.unpack(), g, d); });
  rec.finish({&out}, [sq, sp, g, d](BackwardContext& ctx) {
    Tensor dy = ctx.grad_out(), x = sq.unpack(), pr = sp.unpack();
    GradTarget dx = ctx.grad_in(0);
    Tensor dprobs = Tensor::empty(pr.shape(), pr.dtype(), "attention_dprobs");
    Tensor dropped = d.active() ? Tensor::empty(pr.shape(), pr.dtype(), "attention_dropped") : pr;
    dispatch_float(dy.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if (d.active()) apply_dropout(pr.data<T>(), dropped.data<T>(), pr.numel(), d);
      const T *gy = dy.data<T>(), *px = x.data<T>(), *p = pr.data<T>(), *pd = dropped.data<T>();
      T* dp = dprobs.data<T>();
      T* gx = dx.t.data<T>();
      const T beta = dx.fresh ? 0 : 1;
      const std::int64_t S = g.S, ld = 3 * g.D;
      for (std::int64_t h = 0; h < g.H; ++h) {
        const std::int64_t q = h * g.hd, v = 2 * g.D + h * g.hd;
        // dv = dropout(probs)^T dy ; d(dropped probs) = dy v^T
        gemm::gemm_strided_batched<T>(Op::T, Op::N, S, g.hd, S, 1, pd + h * S * S, S, g.p_batch(), gy + q, g.D,
                                      g.out_batch(), beta, gx + v, ld, g.qkv_batch(), g.B);
        gemm::gemm_strided_batched<T>(Op::N, Op::T, S, S, g.hd, 1, gy + q, g.D, g.out_batch(), px + v, ld,
                                      g.qkv_batch(), 0, dp + h * S * S, S, g.p_batch(), g.B);
      }
      if (d.active()) apply_dropout(dp, dp, dprobs.numel(), d);  // through the same mask
      // softmax backward, scaled: dscores = probs * (dprobs - <dprobs, probs>) * scale
      const T sc = T(g.scale());
      for_each("attention_softmax_backward", g.B * g.H * S, KOKKOS_LAMBDA(std::int64_t row) {
        const T* pr_row = p + row * S;
        T* r = dp + row * S;
        T dot = 0;
        for (std::int64_t j = 0; j < S; ++j) dot += r[j] * pr_row[j];
        for (std::int64_t j = 0; j < S; ++j) r[j] = pr_row[j] * (r[j] - dot) * sc;
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
