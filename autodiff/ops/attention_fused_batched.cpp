// The fused attention on a GPU: query tiles through batched GEMMs (cuBLAS),
// the softmax a team per row. The host's tiles (attention_fused.cpp) run a
// tile per thread through the serial BLAS; here a tile is a head's block of
// query rows in every sequence at once, so each product is one strided
// batched GEMM over the B sequences, and the only kernels are the row
// kernels between them. Nothing outlives a call but the output and the
// log-sum-exp; backward recomputes each tile's probabilities from it, as on
// the host. It runs on any backend (the tests hold it against the team
// kernels); a GPU build's `fused` runs it.
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <type_traits>

#include "autodiff/fast_math.hpp"
#include "autodiff/kmath.hpp"
#include "autodiff/ops/attention_fused.hpp"
#include "autodiff/ops/row_kernel.hpp"

namespace remat::ops::fused {
namespace {

using detail::for_each_row;
using detail::mats;
using detail::Row;
using gemm::Op;

// A tile's scores for all B sequences, [B, rows, S], take about this much:
// large enough that each GEMM fills a GPU, small enough for long sequences.
constexpr std::int64_t kTileBytes = std::int64_t(32) << 20;

// Query rows per tile: the whole sequence if it fits, else a multiple of 64.
std::int64_t tile_rows(const Problem& p, std::int64_t element_bytes) {
  const std::int64_t fit = kTileBytes / std::max<std::int64_t>(1, p.B * p.S * element_bytes);
  if (fit >= p.S) return p.S;
  return std::max<std::int64_t>(1, fit >= 64 ? fit / 64 * 64 : fit);
}

// A workspace the memory tracker counts (a shape-only run counts it too).
template <class T>
Tensor workspace(std::int64_t n) {
  return Tensor::empty({n}, DTypeOf<T>::value, "attention_fused_workspace");
}

// The GEMM windows, each over the B sequences: a head's rows [i0, i0 + rows)
// of q (or dq, laid out alike); a kv head's first `keys` rows of k or v (or
// of a dense [B, S, Hkv hd] float accumulator: kv_dense); the output's (or
// its gradient's) rows; a tile [B, rows, keys] with rows S apart.
template <class T>
auto q_rows(const Problem& p, T* q, std::int64_t h, std::int64_t i0, std::int64_t rows) {
  return mats(q + p.q.offset + i0 * p.q.ld + h * p.hd, p.B, p.q.batch_stride, rows, p.hd, p.q.ld);
}
template <class T>
auto kv_rows(const Problem& p, const Layout& x, T* base, std::int64_t kvh, std::int64_t keys) {
  return mats(base + x.offset + kvh * p.hd, p.B, x.batch_stride, keys, p.hd, x.ld);
}
template <class T>
auto kv_dense(const Problem& p, T* base, std::int64_t kvh, std::int64_t keys) {
  return mats(base + kvh * p.hd, p.B, p.S * p.Hkv * p.hd, keys, p.hd, p.Hkv * p.hd);
}
template <class T>
auto out_rows(const Problem& p, T* y, std::int64_t h, std::int64_t i0, std::int64_t rows) {
  const std::int64_t W = p.H * p.hd;
  return mats(y + i0 * W + h * p.hd, p.B, p.S * W, rows, p.hd, W);
}
template <class T>
auto tile_of(T* s, const Problem& p, std::int64_t rows, std::int64_t keys) {
  return mats(s, p.B, rows * p.S, rows, keys, p.S);
}

// Scores to dropout(probabilities) in place (y may be x), each row's keys
// past its last valid one zeroed, its log-sum-exp kept. Row r of the tile is
// query i0 + r % rows of sequence r / rows.
template <class A, class T>
void softmax_tile(const Problem& p, std::int64_t h, std::int64_t i0, std::int64_t rows, std::int64_t keys,
                  const A* x, T* y, A* lse) {
  for_each_row("attention_fused_softmax", p.B * rows, keys, KOKKOS_LAMBDA(std::int64_t r, const Row& row) {
    const std::int64_t b = r / rows, i = i0 + r % rows, valid = p.causal ? i + 1 : p.S;
    const A* xr = x + r * p.S;
    const A m = row.max<A>([&](std::int64_t j) { return j < valid ? xr[j] : xr[0]; });
    const A sum = row.sum<A>([&](std::int64_t j) { return j < valid ? fast_exp(xr[j] - m) : A(0); });
    const A inv = A(1) / sum;
    row.each([&](std::int64_t j) {
      y[r * p.S + j] = T(j < valid ? fast_exp(xr[j] - m) * inv * keep<A>(p, b, h, i, j) : A(0));
    });
    row.once([&] { lse[(b * p.H + h) * p.S + i] = m + kmath::log(sum); });
  });
}

// Backward's tile: scores to P = exp(s - lse) in place, and dropout(P) into
// `dropped` (unless it is prob: no dropout, no rounding).
template <class A, class T>
void probs_tile(const Problem& p, std::int64_t h, std::int64_t i0, std::int64_t rows, std::int64_t keys, A* prob,
                T* dropped, const A* lse) {
  for_each_row("attention_fused_probs", p.B * rows, keys, KOKKOS_LAMBDA(std::int64_t r, const Row& row) {
    const std::int64_t b = r / rows, i = i0 + r % rows, valid = p.causal ? i + 1 : p.S;
    const A l = lse[(b * p.H + h) * p.S + i];
    row.each([&](std::int64_t j) {
      const A e = j < valid ? fast_exp(prob[r * p.S + j] - l) : A(0);
      prob[r * p.S + j] = e;
      if (static_cast<void*>(dropped) != static_cast<void*>(prob))
        dropped[r * p.S + j] = T(e * keep<A>(p, b, h, i, j));
    });
  });
}

// dS = P (dP - <dO, O>) scale into ds (ds may be dprob), dP through the
// dropout mask; <dO, O> = sum_j dropout(P)_ij dP_ij.
template <class A, class T>
void dscores_tile(const Problem& p, std::int64_t h, std::int64_t i0, std::int64_t rows, std::int64_t keys,
                  const A* prob, A* dprob, T* ds) {
  const A scale = A(p.scale);
  for_each_row("attention_fused_dscores", p.B * rows, keys, KOKKOS_LAMBDA(std::int64_t r, const Row& row) {
    const std::int64_t b = r / rows, i = i0 + r % rows;
    const A* pr = prob + r * p.S;
    A* dp = dprob + r * p.S;
    const A dot = row.sum<A>([&](std::int64_t j) { return pr[j] * keep<A>(p, b, h, i, j) * dp[j]; });
    row.each([&](std::int64_t j) { ds[r * p.S + j] = T(pr[j] * (dp[j] * keep<A>(p, b, h, i, j) - dot) * scale); });
  });
}

// Between a gradient's k or v columns (rows ld apart) and a dense float
// accumulator [B, S, Hkv hd]: widen into it, or round back out of it.
template <class T, class A>
void kv_copy(const Problem& p, const Layout& x, T* grad, A* dense, bool widen) {
  const std::int64_t W = p.Hkv * p.hd, S = p.S;
  detail::for_each("attention_fused_kv_copy", p.B * S * W, KOKKOS_LAMBDA(std::int64_t n) {
    T& g = grad[x.offset + n / (S * W) * x.batch_stride + n / W % S * x.ld + n % W];
    if (widen)
      dense[n] = A(g);
    else
      g = T(dense[n]);
  });
}

// tile(h, kvh, i0, rows, keys) for every head and query tile in order (the
// order sums into dk and dv run in), then the scores of one: s = scale q k^T.
template <class Tile>
void for_each_tile(const Problem& p, std::int64_t tq, const Tile& tile) {
  for (std::int64_t h = 0; h < p.H; ++h)
    for (std::int64_t i0 = 0; i0 < p.S; i0 += tq) {
      const std::int64_t rows = std::min(tq, p.S - i0);
      tile(h, h / (p.H / p.Hkv), i0, rows, p.causal ? i0 + rows : p.S);
    }
}
template <class T, class A>
void tile_scores(const Problem& p, const T* q, const T* k, std::int64_t h, std::int64_t kvh, std::int64_t i0,
            std::int64_t rows, std::int64_t keys, A* s) {
  gemm::gemm_batched(ExecSpace(), Op::N, Op::T, A(p.scale), q_rows(p, q, h, i0, rows), kv_rows(p, p.k, k, kvh, keys),
                     A(0), tile_of(s, p, rows, keys));
}

}  // namespace

template <class T>
void batched_forward(const Problem& p, const T* q, const T* k, const T* v, T* out, compute_t<T>* lse,
                     std::int64_t rows_per_tile) {
  using A = compute_t<T>;
  const std::int64_t tq = rows_per_tile > 0 ? rows_per_tile : tile_rows(p, sizeof(A)), tile = p.B * tq * p.S;
  // 16-bit: scores in float, probabilities rounded for the product with v.
  // (A shape-only run counts the workspaces and the GEMMs' FLOPs; no kernel runs.)
  Tensor scores = workspace<A>(tile), rounded = kWidened<T> ? workspace<T>(tile) : scores;
  A* s = scores.data<A>();
  T* pt = rounded.data<T>();
  for_each_tile(p, tq, [&](std::int64_t h, std::int64_t kvh, std::int64_t i0, std::int64_t rows, std::int64_t keys) {
    tile_scores(p, q, k, h, kvh, i0, rows, keys, s);
    softmax_tile<A, T>(p, h, i0, rows, keys, s, pt, lse);
    gemm::gemm_batched(ExecSpace(), Op::N, Op::N, A(1), tile_of(static_cast<const T*>(pt), p, rows, keys),
                       kv_rows(p, p.v, v, kvh, keys), A(0), out_rows(p, out, h, i0, rows));
  });
}

template <class T>
void batched_backward(const Problem& p, const T* q, const T* k, const T* v, const compute_t<T>* lse, const T* dout,
                      T* dq, T* dk, T* dv, Wanted wanted, std::int64_t rows_per_tile) {
  using A = compute_t<T>;
  const std::int64_t tq = rows_per_tile > 0 ? rows_per_tile : tile_rows(p, sizeof(A)), tile = p.B * tq * p.S;
  // prob and dprob in the compute type; the GEMMs' other operands rounded
  // (16-bit) or kept apart from P (dropout); dk and dv summed in float over
  // the tiles and query heads (16-bit), rounded once at the end.
  Tensor prob_ws = workspace<A>(tile), dprob_ws = workspace<A>(tile);
  Tensor dropped_ws = kWidened<T> || p.dropout > 0 ? workspace<T>(tile) : prob_ws;
  Tensor ds_ws = kWidened<T> ? workspace<T>(tile) : dprob_ws;
  const std::int64_t kv_elems = p.B * p.S * p.Hkv * p.hd;
  Tensor dk_ws = kWidened<T> ? workspace<A>(kv_elems) : Tensor();
  Tensor dv_ws = kWidened<T> ? workspace<A>(kv_elems) : Tensor();
  // A shape-only run has no data: its targets are those `wanted` names.
  const bool shapes = shape_only(), want_q = shapes ? wanted.q : dq != nullptr,
             want_k = shapes ? wanted.k : dk != nullptr, want_v = shapes ? wanted.v : dv != nullptr;
  A *prob = prob_ws.data<A>(), *dprob = dprob_ws.data<A>();
  T *dropped = dropped_ws.data<T>(), *ds = ds_ws.data<T>();
  A *dkf = kWidened<T> ? dk_ws.data<A>() : nullptr, *dvf = kWidened<T> ? dv_ws.data<A>() : nullptr;
  if constexpr (kWidened<T>) {
    if (want_k) kv_copy(p, p.k, dk, dkf, true);
    if (want_v) kv_copy(p, p.v, dv, dvf, true);
  }
  for_each_tile(p, tq, [&](std::int64_t h, std::int64_t kvh, std::int64_t i0, std::int64_t rows, std::int64_t keys) {
    tile_scores(p, q, k, h, kvh, i0, rows, keys, prob);
    probs_tile<A, T>(p, h, i0, rows, keys, prob, dropped, lse);
    const auto dropped_tile = tile_of(static_cast<const T*>(dropped), p, rows, keys);
    const auto dout_rows = out_rows(p, dout, h, i0, rows);
    // dv += dropout(P)^T dO ; dP = dO v^T
    if (want_v && kWidened<T>)
      gemm::gemm_batched(ExecSpace(), Op::T, Op::N, A(1), dropped_tile, dout_rows, A(1),
                         kv_dense(p, dvf, kvh, keys));
    else if (want_v)
      gemm::gemm_batched(ExecSpace(), Op::T, Op::N, A(1), dropped_tile, dout_rows, A(1),
                         kv_rows(p, p.v, dv, kvh, keys));
    gemm::gemm_batched(ExecSpace(), Op::N, Op::T, A(1), dout_rows, kv_rows(p, p.v, v, kvh, keys), A(0),
                       tile_of(dprob, p, rows, keys));
    dscores_tile<A, T>(p, h, i0, rows, keys, prob, dprob, ds);
    // dq += dS k ; dk += dS^T q
    const auto ds_tile = tile_of(static_cast<const T*>(ds), p, rows, keys);
    if (want_q)
      gemm::gemm_batched(ExecSpace(), Op::N, Op::N, A(1), ds_tile, kv_rows(p, p.k, k, kvh, keys), A(1),
                         q_rows(p, dq, h, i0, rows));
    if (want_k && kWidened<T>)
      gemm::gemm_batched(ExecSpace(), Op::T, Op::N, A(1), ds_tile, q_rows(p, q, h, i0, rows), A(1),
                         kv_dense(p, dkf, kvh, keys));
    else if (want_k)
      gemm::gemm_batched(ExecSpace(), Op::T, Op::N, A(1), ds_tile, q_rows(p, q, h, i0, rows), A(1),
                         kv_rows(p, p.k, dk, kvh, keys));
  });
  if constexpr (kWidened<T>) {
    if (want_k) kv_copy(p, p.k, dk, dkf, false);
    if (want_v) kv_copy(p, p.v, dv, dvf, false);
  }
}

#define REMAT_FUSED_BATCHED_INSTANTIATE(T)                                                                 \
  template void batched_forward<T>(const Problem&, const T*, const T*, const T*, T*, compute_t<T>*, std::int64_t); \
  template void batched_backward<T>(const Problem&, const T*, const T*, const T*, const compute_t<T>*, const T*, \
                                    T*, T*, T*, Wanted, std::int64_t);
REMAT_FUSED_BATCHED_INSTANTIATE(float)
REMAT_FUSED_BATCHED_INSTANTIATE(double)
REMAT_FUSED_BATCHED_INSTANTIATE(bf16)
REMAT_FUSED_BATCHED_INSTANTIATE(f16)

}  // namespace remat::ops::fused
