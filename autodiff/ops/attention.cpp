#include <cmath>

#include "autodiff/elementwise.hpp"
#include "autodiff/gemm.hpp"
#include "autodiff/ops/attention_fused.hpp"
#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/ops/softmax_row.hpp"
#include "autodiff/random.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"
#include "core/error.hpp"

namespace remat::ops {
using namespace detail;
using gemm::Op;

namespace {

// Host memory: the host's kernels (BLAS tiles, a softmax row per thread);
// otherwise the device's (team kernels).
constexpr bool kHostMemory = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;

// Where q, k and v live: each head's rows are `ld` elements apart, heads
// `hd` apart, sequences `batch_stride` apart. Packed qkv[B, S, 3D] and
// separate q[B, S, H hd], k, v[B, S, Hkv hd] are both such layouts.
struct Operand {
  std::int64_t offset, ld, batch_stride;
};

struct Geometry {
  std::int64_t B, S, H, Hkv, hd;
  bool causal;
  Operand q, k, v;
  std::int64_t width() const { return H * hd; }  // of the output
  std::int64_t p_batch() const { return H * S * S; }
  std::int64_t kv_head(std::int64_t h) const { return h / (H / Hkv); }
  double scale() const { return 1.0 / std::sqrt(double(hd)); }
};

// The GEMM operands of head h, over the batch's B sequences: a projection's
// head (q, k or v, laid out as `x`: S x hd); the probabilities' (S x S); the
// output's (S x hd in rows of the heads' width).
template <class T>
auto head_of(T* base, const Operand& x, std::int64_t h, const Geometry& g) {
  return mats(base + h * g.hd, g.B, x.batch_stride, g.S, g.hd, x.ld);
}
template <class T>
auto probs_of(T* p, std::int64_t h, const Geometry& g) {
  return mats(p + h * g.S * g.S, g.B, g.p_batch(), g.S, g.S, g.S);
}
template <class T>
auto output_of(T* y, std::int64_t h, const Geometry& g) {
  return mats(y + h * g.hd, g.B, g.S * g.width(), g.S, g.hd, g.width());
}

// Probability dropout: keep with 1-p, scale by 1/(1-p); the mask is a pure
// function of (seed, step, op id, element), regenerated rather than stored.
struct Dropout {
  double p = 0;
  std::uint64_t seed = 0, stream = 0;
  bool active() const { return p > 0; }
};

// The q, k, v tensors of one call (the same tensor three times when packed;
// k and v one tensor for cross-attention's packed keys and values).
struct Inputs {
  Tensor q, k, v;
  bool packed() const { return q.id() == k.id(); }
  bool kv_packed() const { return k.id() == v.id(); }
};

// softmax(q k^T * scale, mask) -> probs[B, H, S, S]
Tensor attention_probs(const Inputs& in, const Geometry& g) {
  stats::count_forward("attention_probs");
  Tensor probs = Tensor::empty({g.B, g.H, g.S, g.S}, in.q.dtype(), "attention_probs");
  probs.set_tag("softmax");
  REMAT_DISPATCH_COMPUTE(in.q.dtype(), T, {
    const T *q = in.q.data<T>() + g.q.offset, *k = in.k.data<T>() + g.k.offset;
    T* p = probs.data<T>();
    const std::int64_t S = g.S;
    const bool causal = g.causal;
    // One GEMM per (sequence, head): P = scale Q K^T (16-bit scores are
    // rounded once, then the softmax reads them in float).
    for (std::int64_t h = 0; h < g.H; ++h)
      gemm::gemm_batched(ExecSpace(), Op::N, Op::T, A(g.scale()), head_of(q, g.q, h, g),
                         head_of(k, g.k, g.kv_head(h), g), A(0), probs_of(p, h, g));
    if constexpr (kHostMemory)
      for_each("attention_softmax", g.B * g.H * S, KOKKOS_LAMBDA(std::int64_t row) {
        softmax_row(p + row * S, causal ? row % S + 1 : S, S);
      });
    else
      softmax_rows_team("attention_softmax", p, g.B * g.H * S, S,
                        KOKKOS_LAMBDA(std::int64_t row) { return causal ? row % S + 1 : S; });
  });
  return probs;
}

// dst = src * mask / (1 - p), elementwise over probs-shaped tensors.
template <class T>
void apply_dropout(const T* src, T* dst, std::int64_t n, const Dropout& d) {
  using A = compute_t<T>;
  const double p = d.p;
  const std::uint64_t seed = d.seed, stream = d.stream;
  const A keep_scale = A(1.0 / (1.0 - p));
  for_each("attention_dropout", n, KOKKOS_LAMBDA(std::int64_t i) {
    dst[i] = T(rng::uniform(seed, stream, std::uint64_t(i)) > p ? A(src[i]) * keep_scale : A(0));
  });
}

// out[B, S, H hd] = dropout(probs) v, heads merged.
Tensor attention_output(const Tensor& probs, const Inputs& in, const Geometry& g, const Dropout& d) {
  stats::count_forward("attention_output");
  Tensor out = Tensor::empty({g.B, g.S, g.width()}, probs.dtype(), "attention");
  out.set_tag("attention");
  Tensor dropped = d.active() ? Tensor::empty(probs.shape(), probs.dtype(), "attention_dropped") : probs;
  REMAT_DISPATCH_COMPUTE(probs.dtype(), T, {
    if (d.active()) apply_dropout(probs.data<T>(), dropped.data<T>(), probs.numel(), d);
    const T *v = in.v.data<T>() + g.v.offset, *p = dropped.data<T>();
    T* y = out.data<T>();
    for (std::int64_t h = 0; h < g.H; ++h)  // Y = P V
      gemm::gemm_batched(ExecSpace(), Op::N, Op::N, A(1), probs_of(p, h, g), head_of(v, g.v, g.kv_head(h), g), A(0),
                         output_of(y, h, g));
  });
  return out;
}

// The thread's choice, like its tape: set only by an AttentionKernelScope,
// so no choice outlives the step (or test) that made it.
AttentionKernel& kernel_setting() {
  thread_local AttentionKernel k = AttentionKernel::fused;
  return k;
}

fused::Problem fused_problem(const Geometry& g, const Dropout& d) {
  return {g.B, g.S, g.H, g.Hkv, g.hd, g.causal, {g.q.offset, g.q.ld, g.q.batch_stride},
          {g.k.offset, g.k.ld, g.k.batch_stride}, {g.v.offset, g.v.ld, g.v.batch_stride}, g.scale(), d.p, d.seed, d.stream};
}

double attention_flops(const Geometry& g) { return 4.0 * double(g.B * g.H) * double(g.S * g.S) * double(g.hd); }

// Whether a fused call's FLOPs are counted by formula here: the batched
// tiles' (a device's `fused`) count themselves at the GEMM front door.
bool counted_by_formula(bool team) { return team || kHostMemory; }

// The fused kernel (host tiles, or team kernels if `team`): out and lse[B, H, S].
std::pair<Tensor, Tensor> fused_forward(const Inputs& in, const Geometry& g, const Dropout& d, bool team) {
  stats::count_forward("attention_fused");
  if (counted_by_formula(team)) stats::count_flops(attention_flops(g) * (g.causal ? 0.5 : 1.0));
  Tensor out = Tensor::empty({g.B, g.S, g.width()}, in.q.dtype(), "attention");
  out.set_tag("attention");
  Tensor lse = Tensor::empty({g.B, g.H, g.S}, compute_dtype(in.q.dtype()), "attention_lse");
  lse.set_tag("attention_lse");
  // `fused` on host memory: a tile per thread through the serial BLAS; on a
  // device: tiles through batched GEMMs (attention_fused.hpp).
  REMAT_DISPATCH_COMPUTE(in.q.dtype(), T, {
    const fused::Problem p = fused_problem(g, d);
    const T *q = in.q.data<T>(), *k = in.k.data<T>(), *v = in.v.data<T>();
    if (team)
      fused::team_forward<T>(p, q, k, v, out.data<T>(), lse.data<A>());
    else if constexpr (kHostMemory)
      fused::forward<T>(p, q, k, v, out.data<T>(), lse.data<A>());
    else
      fused::batched_forward<T>(p, q, k, v, out.data<T>(), lse.data<A>());
  });
  return {out, lse};
}

Tensor record_fused(const Inputs& in, const Geometry& g, const Dropout& d, bool team) {
  auto [out, lse] = fused_forward(in, g, d, team);
  OpRecorder rec("attention", {&in.q, in.packed() ? nullptr : &in.k, in.packed() ? nullptr : &in.v});
  if (!rec) return out;
  const SavedTensor sq = save(in.q), sk = in.packed() ? sq : save(in.k), sv = in.kv_packed() ? sk : save(in.v);
  auto unpack = [sq, sk, sv] { return Inputs{sq.unpack(), sk.unpack(), sv.unpack()}; };
  out.set_recipe([unpack, g, d, team] { return fused_forward(unpack(), g, d, team).first; });
  // Only the team kernel reads the output in backward (fused::backward).
  const SavedTensor so = team ? save(out) : SavedTensor(), sl = save(lse);
  const bool packed = in.packed();
  rec.finish({&out}, [unpack, so, sl, g, d, packed, team](BackwardContext& ctx) {
    const Inputs x = unpack();
    Tensor o = so.unpack(), l = sl.unpack(), dy = ctx.grad_out();
    GradTarget tq = ctx.grad_in(0), tk = packed ? tq : ctx.grad_in(1), tv = packed ? tq : ctx.grad_in(2);
    zero_fresh({&tq, &tk, &tv});  // the kernel adds
    if (counted_by_formula(team))
      stats::count_flops(attention_flops(g) * 1.5 * (g.causal ? 0.5 : 1.0));  // recomputed scores + four products
    REMAT_DISPATCH_COMPUTE(dy.dtype(), T, {
      T *dq = tq ? tq.t.data<T>() : nullptr, *dk = tk ? tk.t.data<T>() : nullptr, *dv = tv ? tv.t.data<T>() : nullptr;
      if (team)
        fused::team_backward<T>(fused_problem(g, d), x.q.data<T>(), x.k.data<T>(), x.v.data<T>(), o.data<T>(),
                                l.data<A>(), dy.data<T>(), dq, dk, dv);
      else if constexpr (kHostMemory)
        fused::backward<T>(fused_problem(g, d), x.q.data<T>(), x.k.data<T>(), x.v.data<T>(), l.data<A>(),
                           dy.data<T>(), dq, dk, dv);
      else
        fused::batched_backward<T>(fused_problem(g, d), x.q.data<T>(), x.k.data<T>(), x.v.data<T>(), l.data<A>(),
                                   dy.data<T>(), dq, dk, dv, {bool(tq), bool(tk), bool(tv)});
    });
  });
  return out;
}

// The plain kernel's backward from the probabilities it kept: through the
// dropout mask, the softmax and the two products of each head.
void plain_backward(BackwardContext& ctx, const Inputs& x, const Tensor& pr, const Geometry& g, const Dropout& d,
                    bool packed) {
  Tensor dy = ctx.grad_out();
  // Gradient targets: one tensor for packed qkv, three otherwise (which may
  // be one buffer, if k and v are one tensor): zero fresh ones, then add.
  GradTarget tq = ctx.grad_in(0), tk = packed ? tq : ctx.grad_in(1), tv = packed ? tq : ctx.grad_in(2);
  zero_fresh({&tq, &tk, &tv});
  Tensor dprobs = Tensor::empty(pr.shape(), pr.dtype(), "attention_dprobs");
  Tensor dropped = d.active() ? Tensor::empty(pr.shape(), pr.dtype(), "attention_dropped") : pr;
  REMAT_DISPATCH_COMPUTE(dy.dtype(), T, {
    if (d.active()) apply_dropout(pr.data<T>(), dropped.data<T>(), pr.numel(), d);
    const T *gy = dy.data<T>(), *p = pr.data<T>(), *pd = dropped.data<T>();
    const T *q = x.q.data<T>() + g.q.offset, *k = x.k.data<T>() + g.k.offset, *v = x.v.data<T>() + g.v.offset;
    T* dp = dprobs.data<T>();
    T* gq = tq ? tq.t.data<T>() + g.q.offset : nullptr;
    T* gk = tk ? tk.t.data<T>() + g.k.offset : nullptr;
    T* gv = tv ? tv.t.data<T>() + g.v.offset : nullptr;
    const std::int64_t S = g.S;
    for (std::int64_t h = 0; h < g.H; ++h) {
      const std::int64_t kvh = g.kv_head(h);
      // dv += dropout(probs)^T dy ; d(dropped probs) = dy v^T
      if (tv)  // the target, not the pointer: a shape-only run has no data
        gemm::gemm_batched(ExecSpace(), Op::T, Op::N, A(1), probs_of(pd, h, g), output_of(gy, h, g), A(1),
                           head_of(gv, g.v, kvh, g));
      gemm::gemm_batched(ExecSpace(), Op::N, Op::T, A(1), output_of(gy, h, g), head_of(v, g.v, kvh, g), A(0),
                         probs_of(dp, h, g));
    }
    if (d.active()) apply_dropout(dp, dp, dprobs.numel(), d);  // through the same mask
    // softmax backward, scaled: dscores = probs * (dprobs - <dprobs, probs>) * scale
    const A sc = A(g.scale());
    if constexpr (kHostMemory)
      for_each("attention_softmax_backward", g.B * g.H * S, KOKKOS_LAMBDA(std::int64_t row) {
        const T* pr_row = p + row * S;
        T* r = dp + row * S;
        A dot = 0;
        for (std::int64_t j = 0; j < S; ++j) dot += A(r[j]) * A(pr_row[j]);
        for (std::int64_t j = 0; j < S; ++j) r[j] = T(A(pr_row[j]) * (A(r[j]) - dot) * sc);
      });
    else
      softmax_backward_rows_team("attention_softmax_backward", p, dp, g.B * g.H * S, S, sc);
    for (std::int64_t h = 0; h < g.H; ++h) {
      const std::int64_t kvh = g.kv_head(h);
      // dq += dscores k ; dk += dscores^T q
      if (tq)
        gemm::gemm_batched(ExecSpace(), Op::N, Op::N, A(1), probs_of(dp, h, g), head_of(k, g.k, kvh, g), A(1),
                           head_of(gq, g.q, h, g));
      if (tk)
        gemm::gemm_batched(ExecSpace(), Op::T, Op::N, A(1), probs_of(dp, h, g), head_of(q, g.q, h, g), A(1),
                           head_of(gk, g.k, kvh, g));
    }
  });
}

Tensor record(const Inputs& in, const Geometry& g, double dropout) {
  Dropout d;
  if (dropout > 0) d = {dropout, random_ops::seed(), random_ops::stream(random_ops::next_op())};
  const AttentionKernel kernel = kernel_setting();
  if (kernel != AttentionKernel::plain) return record_fused(in, g, d, kernel == AttentionKernel::fused_team);
  Tensor probs = attention_probs(in, g);
  Tensor out = attention_output(probs, in, g, d);
  OpRecorder rec("attention", {&in.q, in.packed() ? nullptr : &in.k, in.packed() ? nullptr : &in.v});
  if (!rec) return out;
  const SavedTensor sq = save(in.q), sk = in.packed() ? sq : save(in.k), sv = in.kv_packed() ? sk : save(in.v);
  auto unpack = [sq, sk, sv] { return Inputs{sq.unpack(), sk.unpack(), sv.unpack()}; };
  probs.set_recipe([unpack, g] { return attention_probs(unpack(), g); });
  const SavedTensor sp = save(probs);
  out.set_recipe([unpack, sp, g, d] { return attention_output(sp.unpack(), unpack(), g, d); });
  const bool packed = in.packed();
  rec.finish({&out}, [unpack, sp, g, d, packed](BackwardContext& ctx) {
    const Inputs x = unpack();  // the inputs first, then the probabilities, as they were saved
    const Tensor pr = sp.unpack();
    plain_backward(ctx, x, pr, g, d, packed);
  });
  return out;
}

}  // namespace

AttentionKernel current_attention_kernel() { return kernel_setting(); }
AttentionKernelScope::AttentionKernelScope(AttentionKernel k) : previous_(kernel_setting()) { kernel_setting() = k; }
AttentionKernelScope::~AttentionKernelScope() { kernel_setting() = previous_; }
const char* attention_kernel_name(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::fused: return "fused";
    case AttentionKernel::fused_team: return "fused-team";
    case AttentionKernel::plain: break;
  }
  return "plain";
}
AttentionKernel parse_attention_kernel(const std::string& name) {
  if (name == "fused") return AttentionKernel::fused;
  if (name == "fused-team") return AttentionKernel::fused_team;
  if (name == "plain") return AttentionKernel::plain;
  throw UserError("unknown attention kernel '" + name + "' (fused, fused-team, plain)");
}

Tensor attention(const Tensor& qkv, int heads, bool causal, double dropout) {
  require_float("attention", qkv, "qkv");
  require(qkv.rank() == 3 && qkv.dim(2) % 3 == 0, [&] { return "attention: qkv must be [B, S, 3D], got " + to_string(qkv.shape()); });
  const std::int64_t D = qkv.dim(2) / 3, B = qkv.dim(0), S = qkv.dim(1);
  require(heads > 0 && D % heads == 0,
          [&] { return "attention: " + std::to_string(heads) + " heads do not divide the model width " + std::to_string(D); });
  require(dropout >= 0 && dropout < 1, [&] { return "attention: dropout " + std::to_string(dropout) + " outside [0, 1)"; });
  const std::int64_t ld = 3 * D, bs = S * 3 * D;
  const Geometry g{B, S, heads, heads, D / heads, causal, {0, ld, bs}, {D, ld, bs}, {2 * D, ld, bs}};
  return record({qkv, qkv, qkv}, g, dropout);
}

Tensor attention(const Tensor& q, const Tensor& kv, int heads, bool causal, double dropout) {
  require_float("attention", q, "q");
  require_float("attention", kv, "kv");
  require(q.rank() == 3 && kv.rank() == 3 && q.dim(0) == kv.dim(0) && q.dim(1) == kv.dim(1) && kv.dim(2) == 2 * q.dim(2),
          [&] { return "attention: q " + to_string(q.shape()) + " and kv " + to_string(kv.shape()) +
              " must be [B, S, D] and [B, S, 2D]"; });
  require(q.dtype() == kv.dtype(), "attention: q and kv dtypes differ");
  const std::int64_t D = q.dim(2), B = q.dim(0), S = q.dim(1);
  require(heads > 0 && D % heads == 0,
          [&] { return "attention: " + std::to_string(heads) + " heads do not divide the width " + std::to_string(D); });
  require(dropout >= 0 && dropout < 1, [&] { return "attention: dropout " + std::to_string(dropout) + " outside [0, 1)"; });
  const Geometry g{B, S, heads, heads, D / heads, causal, {0, D, S * D}, {0, 2 * D, S * 2 * D}, {D, 2 * D, S * 2 * D}};
  return record({q, kv, kv}, g, dropout);
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int heads, int kv_heads, bool causal,
                 double dropout) {
  for (const Tensor* t : {&q, &k, &v}) require_float("attention", *t, "q, k, v");
  require(q.rank() == 3 && k.shape() == v.shape() && k.rank() == 3 && q.dim(0) == k.dim(0) && q.dim(1) == k.dim(1),
          [&] { return "attention: q " + to_string(q.shape()) + ", k " + to_string(k.shape()) + ", v " + to_string(v.shape()) +
              " must be [B, S, H hd], [B, S, Hkv hd], [B, S, Hkv hd]"; });
  require(heads > 0 && kv_heads > 0 && heads % kv_heads == 0 && q.dim(2) % heads == 0,
          [&] { return "attention: " + std::to_string(heads) + " query heads, " + std::to_string(kv_heads) +
              " kv heads and width " + std::to_string(q.dim(2)) + " do not fit"; });
  const std::int64_t hd = q.dim(2) / heads, B = q.dim(0), S = q.dim(1);
  require(k.dim(2) == kv_heads * hd, [&] { return "attention: k width " + std::to_string(k.dim(2)) + " is not " +
                                         std::to_string(kv_heads) + " kv heads of " + std::to_string(hd); });
  require(dropout >= 0 && dropout < 1, [&] { return "attention: dropout " + std::to_string(dropout) + " outside [0, 1)"; });
  const std::int64_t wq = heads * hd, wk = kv_heads * hd;
  const Geometry g{B, S, heads, kv_heads, hd, causal, {0, wq, S * wq}, {0, wk, S * wk}, {0, wk, S * wk}};
  return record({q, k, v}, g, dropout);
}

}  // namespace remat::ops
