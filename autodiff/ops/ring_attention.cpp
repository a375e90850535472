// Context parallelism's attention (ring attention, Liu et al. 2023, as
// Megatron's CP runs it). Each rank holds two of the sequence's 2N chunks in
// the zig-zag order (core/rank_group.hpp: chunks r and 2N-1-r), so causal
// work is even over the ranks (bidirectional attention, every chunk seeing
// every other, is even in any order). The keys and values travel around the ring
// of the group; at each hop a rank attends its two query chunks to the
// visiting chunks they may see (its own chunk causally, an earlier chunk
// wholly, a later one not at all) with the fused kernel, and merges the
// partial outputs by their log-sum-exps (the online softmax). Backward sends
// the keys and values around again; their gradients travel with them and
// reach home one hop after the last. Saved: q, k, v, the output and the
// log-sum-exp, as the fused kernel's team variant saves them.
#include <cmath>
#include <limits>
#include <utility>

#include "autodiff/backend.hpp"
#include "autodiff/ops/attention_fused.hpp"
#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/ops/split_group.hpp"
#include "autodiff/random.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"
#include "comm/comm.hpp"
#include "core/error.hpp"

namespace remat::ops {
using namespace detail;

namespace {

// One call's geometry: the local sequence is two chunks of C rows; q, k and
// v where they are in the caller's tensors (packed or not).
struct Ring {
  std::int64_t B, C, H, Hkv, hd;
  fused::Layout q, k, v;
  RankGroup group;
  bool causal = true;  // false: every query sees every key (bidirectional)
  // Dropout on the probabilities (0: none): each (query chunk, key chunk)
  // pair draws from a stream of its own of the op's, drawn at record time
  // (a recomputation draws the same).
  double dropout = 0;
  std::uint64_t seed = 0, stream = 0;
  std::int64_t wq() const { return H * hd; }
  std::int64_t wk() const { return Hkv * hd; }
  // Elements of one of the travelling buffer's parts ([B, 2C, Hkv hd]: its
  // keys, values and, in backward, their gradients).
  std::int64_t part() const { return B * 2 * C * wk(); }
  // The whole sequence's chunk that rank r's local chunk c (0 or 1) is.
  std::int64_t chunk(int r, int c) const { return c == 0 ? r : 2 * group.size - 1 - r; }
  double scale() const { return 1.0 / std::sqrt(double(hd)); }
};

// Query chunk qc of this rank against key chunk kc of the travelling buffer
// (keys at part 0, values at part 1), as the fused kernel takes it.
fused::Problem sub_problem(const Ring& g, int qc, int from, int kc, bool causal) {
  const std::int64_t wk = g.wk(), stride = 2 * g.C * wk;
  const std::uint64_t pair = std::uint64_t(g.chunk(g.group.rank, qc) * 2 * g.group.size + g.chunk(from, kc));
  return {g.B, g.C, g.H, g.Hkv, g.hd, causal, {g.q.offset + qc * g.C * g.q.ld, g.q.ld, g.q.batch_stride},
          {kc * g.C * wk, wk, stride}, {g.part() + kc * g.C * wk, wk, stride}, g.scale(), g.dropout, g.seed,
          g.dropout > 0 ? rng::splitmix64(g.stream ^ rng::splitmix64(pair + 1)) : 0};
}

// The (query chunk, key chunk) pairs of this rank that see the keys of rank
// `from`, and whether each is causal (the same chunk) or whole; without the
// causal mask, every pair wholly.
struct Pair {
  int qc, kc;
  bool causal;
};
std::vector<Pair> visible(const Ring& g, int from) {
  std::vector<Pair> pairs;
  for (int qc = 0; qc < 2; ++qc)
    for (int kc = 0; kc < 2; ++kc) {
      const std::int64_t query = g.chunk(g.group.rank, qc), key = g.chunk(from, kc);
      if (!g.causal) pairs.push_back({qc, kc, false});
      else if (key <= query) pairs.push_back({qc, kc, key == query});
    }
  return pairs;
}

double pair_flops(const Ring& g, const Pair& p) {
  return 4.0 * double(g.B * g.H) * double(g.C * g.C) * double(g.hd) * (p.causal ? 0.5 : 1.0);
}

// The travelling buffer's parts 0 and 1 := this rank's keys and values.
template <class T>
void pack_keys_values(const Ring& g, const T* k, const T* v, T* buffer) {
  const std::int64_t wk = g.wk(), rows = 2 * g.C, n = g.part();
  const fused::Layout lk = g.k, lv = g.v;
  for_each("ring_attention_pack", g.B * rows, KOKKOS_LAMBDA(std::int64_t r) {
    const std::int64_t b = r / rows, i = r % rows;
    for (std::int64_t e = 0; e < wk; ++e) {
      buffer[r * wk + e] = k[lk.offset + b * lk.batch_stride + i * lk.ld + e];
      buffer[n + r * wk + e] = v[lv.offset + b * lv.batch_stride + i * lv.ld + e];
    }
  });
}

// Sends the first `parts` parts of `here` to the next rank, and receives
// the previous rank's into `there`; then they change places.
void shift(Tensor& here, Tensor& there, const Ring& g, int parts) {
  const std::int64_t bytes = std::int64_t(dtype_size(here.dtype())) * g.part() * parts;
  stats::count_communication(double(bytes));
  if (!shape_only()) comm::shift_ring(here.raw(), there.raw(), bytes, comm::Group::context);
  std::swap(here, there);
}

// Merges the partial output of query chunk qc (part[B, C, H hd], its
// log-sum-exp part_lse[B, H, C]) into the running sum[B, 2C, H hd] and
// lse[2, B, H, C]: each row's two parts weighted by their shares of the
// softmax's denominator.
template <class T, class A>
void merge(const Ring& g, int qc, const T* part, const A* part_lse, A* sum, A* lse) {
  const std::int64_t C = g.C, H = g.H, hd = g.hd, wq = g.wq(), B = g.B;
  for_each("ring_attention_merge", B * C * H, KOKKOS_LAMBDA(std::int64_t r) {
    const std::int64_t b = r / (C * H), i = r / H % C, h = r % H;
    A& total = lse[((qc * B + b) * H + h) * C + i];
    const A mine = part_lse[(b * H + h) * C + i];
    const A top = total > mine ? total : mine;
    const A old_share = kmath::exp(total - top), new_share = kmath::exp(mine - top), both = old_share + new_share;
    A* y = sum + (b * 2 * C + qc * C + i) * wq + h * hd;
    const T* x = part + (b * C + i) * wq + h * hd;
    for (std::int64_t e = 0; e < hd; ++e) y[e] = (y[e] * old_share + A(x[e]) * new_share) / both;
    total = top + kmath::log(both);
  });
}

struct RingInputs {
  Tensor q, k, v;
  bool packed() const { return q.id() == k.id(); }
  bool kv_packed() const { return k.id() == v.id(); }
};

// out[B, 2C, H hd] and the log-sum-exp[2, B, H, C] (chunk-major, so that a
// chunk's rows are the fused kernel's [B, H, C]).
std::pair<Tensor, Tensor> ring_forward(const RingInputs& in, const Ring& g) {
  stats::count_forward("attention_ring");
  const DType t = in.q.dtype(), a = compute_dtype(t);
  Tensor out = Tensor::empty({g.B, 2 * g.C, g.wq()}, t, "attention");
  out.set_tag("attention");
  Tensor lse = Tensor::empty({2, g.B, g.H, g.C}, a, "attention_lse");
  lse.set_tag("attention_lse");
  const Tensor sum = Tensor::empty(out.shape(), a, "attention_ring_sum");
  const Tensor part = Tensor::empty({g.B, g.C, g.wq()}, t, "attention_ring_part");
  const Tensor part_lse = Tensor::empty({g.B, g.H, g.C}, a, "attention_ring_part_lse");
  Tensor here = Tensor::empty({2, g.part()}, t, "attention_ring_keys"), there = Tensor::empty(here.shape(), t, "attention_ring_keys");
  fill(sum, 0.0);
  fill(lse, -std::numeric_limits<double>::infinity());
  REMAT_DISPATCH_COMPUTE(t, T, {
    pack_keys_values(g, in.k.data<T>(), in.v.data<T>(), here.data<T>());
    for (int hop = 0; hop < g.group.size; ++hop) {
      const int from = (g.group.rank - hop + g.group.size) % g.group.size;
      for (const Pair& p : visible(g, from)) {
        stats::count_flops(pair_flops(g, p));
        if constexpr (kHostMemory)
          fused::forward<T>(sub_problem(g, p.qc, from, p.kc, p.causal), in.q.data<T>(), here.data<T>(), here.data<T>(),
                            part.data<T>(), part_lse.data<A>());
        merge(g, p.qc, part.data<T>(), part_lse.data<A>(), sum.data<A>(), lse.data<A>());
      }
      if (hop + 1 < g.group.size) shift(here, there, g, 2);
    }
    const A* s = sum.data<A>();
    T* y = out.data<T>();
    for_each_element("ring_attention_out", out.numel(), KOKKOS_LAMBDA(std::int64_t i) { y[i] = T(s[i]); });
  });
  return {out, lse};
}

// Adds part p (2 or 3: the keys' or the values' gradients) of the buffer
// into the gradient of k or v, in its layout.
template <class T>
void add_key_gradient(const Ring& g, const T* buffer, int p, const fused::Layout& to, T* grad) {
  const std::int64_t wk = g.wk(), rows = 2 * g.C;
  const T* from = buffer + p * g.part();
  for_each("ring_attention_key_gradient", g.B * rows, KOKKOS_LAMBDA(std::int64_t r) {
    const std::int64_t b = r / rows, i = r % rows;
    T* y = grad + to.offset + b * to.batch_stride + i * to.ld;
    for (std::int64_t e = 0; e < wk; ++e) y[e] = T(compute_t<T>(y[e]) + compute_t<T>(from[r * wk + e]));
  });
}

void ring_backward(BackwardContext& ctx, const RingInputs& x, const Tensor& out, const Tensor& lse, const Ring& g,
                   bool packed) {
  const Tensor dy = ctx.grad_out();
  GradTarget tq = ctx.grad_in(0), tk = packed ? tq : ctx.grad_in(1), tv = packed ? tq : ctx.grad_in(2);
  zero_fresh({&tq, &tk, &tv});
  const DType t = dy.dtype(), a = compute_dtype(t);
  // Each row's <dO, O> (laid out as lse), and dO chunk by chunk (the fused kernel's [B, C, H hd]).
  const Tensor dot = Tensor::empty(lse.shape(), a, "attention_ring_dot");
  const Tensor dy_chunks = Tensor::empty({2, g.B, g.C, g.wq()}, t, "attention_ring_grad_chunks");
  Tensor here = Tensor::empty({4, g.part()}, t, "attention_ring_keys"), there = Tensor::empty(here.shape(), t, "attention_ring_keys");
  REMAT_DISPATCH_COMPUTE(t, T, {
    const std::int64_t B = g.B, C = g.C, H = g.H, hd = g.hd, wq = g.wq(), n = g.part();
    const T *py = dy.data<T>(), *po = out.data<T>();
    A* pd = dot.data<A>();
    T* pc = dy_chunks.data<T>();
    for_each("ring_attention_dot", 2 * B * H * C, KOKKOS_LAMBDA(std::int64_t r) {
      const std::int64_t qc = r / (B * H * C), b = r / (H * C) % B, h = r / C % H, i = r % C;
      const std::int64_t at = (b * 2 * C + qc * C + i) * wq + h * hd;
      A acc = 0;
      for (std::int64_t e = 0; e < hd; ++e) acc += A(py[at + e]) * A(po[at + e]);
      pd[r] = acc;
      for (std::int64_t e = 0; e < hd; ++e) pc[((qc * B + b) * C + i) * wq + h * hd + e] = py[at + e];
    });
    T* buffer = here.data<T>();
    pack_keys_values(g, x.k.data<T>(), x.v.data<T>(), buffer);
    for_each_element("ring_attention_zero", 2 * n, KOKKOS_LAMBDA(std::int64_t i) { buffer[2 * n + i] = T(0); });
    T* dq = tq ? tq.t.data<T>() : nullptr;
    for (int hop = 0; hop < g.group.size; ++hop) {
      const int from = (g.group.rank - hop + g.group.size) % g.group.size;
      for (const Pair& p : visible(g, from)) {
        stats::count_flops(1.5 * pair_flops(g, p));  // the scores again and four products
        T* kv = here.data<T>();
        if constexpr (kHostMemory)
          fused::backward<T>(sub_problem(g, p.qc, from, p.kc, p.causal), x.q.data<T>(), kv, kv,
                             lse.data<A>() + p.qc * B * H * C, dy_chunks.data<T>() + p.qc * B * C * wq, dq,
                             kv ? kv + 2 * n : nullptr, kv ? kv + 2 * n : nullptr, dot.data<A>() + p.qc * B * H * C);
      }
      if (hop + 1 < g.group.size) shift(here, there, g, 4);
    }
    if (g.group.size > 1) {  // the gradients home: the buffer here is the next rank's
      const std::int64_t bytes = std::int64_t(sizeof(T)) * 2 * n;
      stats::count_communication(double(bytes));
      if (!shape_only()) comm::shift_ring(here.data<T>() + 2 * n, there.data<T>() + 2 * n, bytes, comm::Group::context);
      std::swap(here, there);
    }
    if (tk) add_key_gradient(g, here.data<T>(), 2, g.k, tk.t.data<T>());
    if (tv) add_key_gradient(g, here.data<T>(), 3, g.v, tv.t.data<T>());
  });
}

Tensor record_ring(const RingInputs& in, const Ring& ring) {
  if (ops::current_attention_kernel() != AttentionKernel::fused)
    throw UserError(std::string("context parallelism runs the fused attention kernel; --attention ") +
                    attention_kernel_name(ops::current_attention_kernel()) + " with --cp: not yet");
  require_split_group("ring_attention", ring.group);
  Ring g = ring;
  if (g.dropout > 0) g.seed = random_ops::seed(), g.stream = random_ops::stream(random_ops::next_op());
  auto [out, lse] = ring_forward(in, g);
  OpRecorder rec("attention", {&in.q, in.packed() ? nullptr : &in.k, in.packed() ? nullptr : &in.v});
  if (!rec) return out;
  const SavedTensor sq = save(in.q), sk = in.packed() ? sq : save(in.k), sv = in.kv_packed() ? sk : save(in.v);
  auto unpack = [sq, sk, sv] { return RingInputs{sq.unpack(), sk.unpack(), sv.unpack()}; };
  out.set_recipe([unpack, g] { return ring_forward(unpack(), g).first; });
  const SavedTensor so = save(out), sl = save(lse);
  const bool packed = in.packed();
  rec.finish({&out}, [unpack, so, sl, g, packed](BackwardContext& ctx) {
    const RingInputs x = unpack();
    ring_backward(ctx, x, so.unpack(), sl.unpack(), g, packed);
  });
  return out;
}

void require_ring(const std::int64_t S, int heads, const RankGroup& g, double dropout) {
  require(dropout >= 0 && dropout < 1, [&] { return "ring_attention: dropout " + std::to_string(dropout) + " outside [0, 1)"; });
  require(g.size >= 1 && g.rank >= 0 && g.rank < g.size, [&] { return "ring_attention: rank " + std::to_string(g.rank) +
                                                             " is not in a group of " + std::to_string(g.size); });
  require(S % 2 == 0 && S > 0, [&] { return "ring_attention: this rank's sequence (" + std::to_string(S) +
                                   " rows) is not two chunks of equal length"; });
  require(heads > 0, "ring_attention: heads must be positive");
}

}  // namespace

Tensor ring_attention(const Tensor& qkv, int heads, const RankGroup& g, bool causal, double dropout) {
  require_float("ring_attention", qkv, "qkv");
  require(qkv.rank() == 3 && qkv.dim(2) % 3 == 0, [&] { return "ring_attention: qkv must be [B, S, 3D], got " + to_string(qkv.shape()); });
  const std::int64_t D = qkv.dim(2) / 3, B = qkv.dim(0), S = qkv.dim(1);
  require_ring(S, heads, g, dropout);
  require(D % heads == 0, [&] { return "ring_attention: " + std::to_string(heads) + " heads do not divide the width " + std::to_string(D); });
  const std::int64_t ld = 3 * D, bs = S * 3 * D;
  const Ring ring{B, S / 2, heads, heads, D / heads, {0, ld, bs}, {D, ld, bs}, {2 * D, ld, bs}, g, causal, dropout};
  return record_ring({qkv, qkv, qkv}, ring);
}

Tensor ring_attention(const Tensor& q, const Tensor& kv, int heads, const RankGroup& g, bool causal, double dropout) {
  require_float("ring_attention", q, "q");
  require_float("ring_attention", kv, "kv");
  require(q.rank() == 3 && kv.rank() == 3 && q.dim(0) == kv.dim(0) && q.dim(1) == kv.dim(1) &&
              kv.dim(2) == 2 * q.dim(2) && q.dtype() == kv.dtype(),
          [&] { return "ring_attention: q " + to_string(q.shape()) + " and kv " + to_string(kv.shape()) +
              " must be [B, S, D] and [B, S, 2D] of one type"; });
  const std::int64_t D = q.dim(2), B = q.dim(0), S = q.dim(1);
  require_ring(S, heads, g, dropout);
  require(D % heads == 0, [&] { return "ring_attention: " + std::to_string(heads) + " heads do not divide the width " + std::to_string(D); });
  const Ring ring{B, S / 2, heads, heads, D / heads, {0, D, S * D}, {0, 2 * D, S * 2 * D}, {D, 2 * D, S * 2 * D}, g, causal, dropout};
  return record_ring({q, kv, kv}, ring);
}

Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, int heads, int kv_heads, const RankGroup& g,
                      bool causal, double dropout) {
  for (const Tensor* t : {&q, &k, &v}) require_float("ring_attention", *t, "q, k, v");
  require(q.rank() == 3 && k.shape() == v.shape() && k.rank() == 3 && q.dim(0) == k.dim(0) && q.dim(1) == k.dim(1) &&
              q.dtype() == k.dtype() && k.dtype() == v.dtype(),
          [&] { return "ring_attention: q " + to_string(q.shape()) + ", k " + to_string(k.shape()) + ", v " + to_string(v.shape()) +
              " must be [B, S, H hd], [B, S, Hkv hd], [B, S, Hkv hd] of one type"; });
  const std::int64_t B = q.dim(0), S = q.dim(1);
  require_ring(S, heads, g, dropout);
  require(kv_heads > 0 && heads % kv_heads == 0 && q.dim(2) % heads == 0 && k.dim(2) * heads == q.dim(2) * kv_heads,
          [&] { return "ring_attention: " + std::to_string(heads) + " query heads, " + std::to_string(kv_heads) +
              " key/value heads and widths " + std::to_string(q.dim(2)) + ", " + std::to_string(k.dim(2)) +
              " do not fit"; });
  const std::int64_t hd = q.dim(2) / heads, wq = heads * hd, wk = kv_heads * hd;
  const Ring ring{B, S / 2, heads, kv_heads, hd, {0, wq, S * wq}, {0, wk, S * wk}, {0, wk, S * wk}, g, causal, dropout};
  return record_ring({q, k, v}, ring);
}

}  // namespace remat::ops
