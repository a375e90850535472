#include "autodiff/ops/attention_fused.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <string>
#include <type_traits>

#include "autodiff/fast_math.hpp"
#include "autodiff/gemm.hpp"
#include "autodiff/scratch.hpp"
#include "autodiff/ops/softmax_row.hpp"

namespace remat::ops::fused {
namespace {

using gemm::Op;
constexpr std::int64_t kTile = 64;  // query rows per tile

// Runs task(index, workspace) for every index in [0, tasks): each host thread
// takes a contiguous run of indices and owns one slice of a workspace that
// is allocated once per call (a Scratch: the memory tracker counts it), so
// the loop over tiles allocates nothing.
template <class T, class Task>
void for_each_task(const char* name, std::int64_t tasks, std::int64_t workspace_per_worker, const Task& task) {
  using Host = Kokkos::DefaultHostExecutionSpace;
  const std::int64_t workers = std::min<std::int64_t>(Host().concurrency(), tasks);
  const Scratch<T, Kokkos::HostSpace> workspace(name, std::size_t(workers * workspace_per_worker));
  T* base = workspace.data();
  if (shape_only()) return;  // the workspace counted, no tile run
  Kokkos::parallel_for(name, Kokkos::RangePolicy<Host>(0, workers), [=](std::int64_t w) {
    for (std::int64_t t = tasks * w / workers; t < tasks * (w + 1) / workers; ++t)
      task(t, base + w * workspace_per_worker);
  });
  Host().fence();
}

// a[j] b[j], as lane_sum takes its terms. A functor, not a lambda: lane_sum
// is a host-and-device function, and nvcc refuses a host lambda in it.
template <class T>
struct Product {
  const T *a, *b;
  KOKKOS_INLINE_FUNCTION T operator()(std::int64_t j) const { return a[j] * b[j]; }
};

// A head's rows as the tile code reads them: a pointer and a row stride.
template <class A>
struct Rows {
  A* at;
  std::int64_t ld;
};

// Copies rows [0, n) of a head (row stride ld, hd wide) into dst[n, hd] of
// the compute type, or back (rounded) with to_storage.
template <class T, class A>
void widen(const T* src, std::int64_t ld, std::int64_t n, std::int64_t hd, A* dst) {
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t e = 0; e < hd; ++e) dst[r * hd + e] = A(src[r * ld + e]);
}
template <class A, class T>
void to_storage(const A* src, std::int64_t n, std::int64_t hd, T* dst, std::int64_t ld) {
  for (std::int64_t r = 0; r < n; ++r)
    for (std::int64_t e = 0; e < hd; ++e) dst[r * ld + e] = T(src[r * hd + e]);
}

// One tile of the forward: query rows [i0, i0 + rows) of head h against its
// `keys` keys, in the compute type A; s is the tile's [rows, S] workspace.
template <class A>
void forward_tile(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t rows,
                  std::int64_t keys, Rows<const A> q, Rows<const A> k, Rows<const A> v, Rows<A> out, A* s, A* lse) {
  gemm::gemm_serial<A>(Op::N, Op::T, rows, keys, p.hd, A(p.scale), q.at, q.ld, k.at, k.ld, 0, s, p.S);
  for (std::int64_t r = 0; r < rows; ++r) {  // this tile's probabilities, then dropped
    A* row = s + r * p.S;
    const std::int64_t valid = p.causal ? i0 + r + 1 : p.S;
    lse[(b * p.H + h) * p.S + i0 + r] = detail::softmax_row(row, valid, keys);
    if (p.dropout > 0)
      for (std::int64_t j = 0; j < valid; ++j) row[j] *= keep<A>(p, b, h, i0 + r, j);
  }
  gemm::gemm_serial<A>(Op::N, Op::N, rows, p.hd, keys, 1, s, p.S, v.at, v.ld, 0, out.at, out.ld);
}

// One tile of the backward: adds this tile's part of dq, dk and dv (any may
// be null). ws holds three [rows, S] tiles.
template <class A>
void backward_tile(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i0, std::int64_t rows,
                   std::int64_t keys, Rows<const A> q, Rows<const A> k, Rows<const A> v, Rows<const A> dout,
                   Rows<A> dq, Rows<A> dk, Rows<A> dv, const A* lse, const A* row_dot, A* ws) {
  const std::int64_t tile = kTile * p.S;
  const bool dropout = p.dropout > 0;
  A *prob = ws, *dprob = ws + tile, *dropped = dropout ? ws + 2 * tile : prob;
  // probabilities again, from the saved log-sum-exp
  gemm::gemm_serial<A>(Op::N, Op::T, rows, keys, p.hd, A(p.scale), q.at, q.ld, k.at, k.ld, 0, prob, p.S);
  for (std::int64_t r = 0; r < rows; ++r) {
    A* row = prob + r * p.S;
    const A l = lse[(b * p.H + h) * p.S + i0 + r];
    const std::int64_t valid = p.causal ? i0 + r + 1 : p.S;
    for (std::int64_t j = 0; j < valid; ++j) row[j] = fast_exp(row[j] - l);
    for (std::int64_t j = valid; j < keys; ++j) row[j] = A(0);
    if (dropout)
      for (std::int64_t j = 0; j < keys; ++j) dropped[r * p.S + j] = row[j] * keep<A>(p, b, h, i0 + r, j);
  }
  // dv += dropout(P)^T dO ; d(dropped P) = dO v^T
  if (dv.at) gemm::gemm_serial<A>(Op::T, Op::N, keys, p.hd, rows, 1, dropped, p.S, dout.at, dout.ld, 1, dv.at, dv.ld);
  gemm::gemm_serial<A>(Op::N, Op::T, rows, keys, p.hd, 1, dout.at, dout.ld, v.at, v.ld, 0, dprob, p.S);
  // dS = P (dP - <dO, O>) scale, dP through the same dropout mask;
  // <dO, O> = sum_j dropout(P)_ij (dO v^T)_ij, O being dropout(P) v
  for (std::int64_t r = 0; r < rows; ++r) {
    A *dp = dprob + r * p.S, *pr = prob + r * p.S;
    const A dot = row_dot ? row_dot[(b * p.H + h) * p.S + i0 + r]
                          : detail::lane_sum<A>(keys, Product<A>{dropped + r * p.S, dp});
    if (dropout)
      for (std::int64_t j = 0; j < keys; ++j) dp[j] *= keep<A>(p, b, h, i0 + r, j);
    const A scale = A(p.scale);
    for (std::int64_t j = 0; j < keys; ++j) dp[j] = pr[j] * (dp[j] - dot) * scale;
  }
  // dq = dS k ; dk += dS^T q
  if (dq.at) gemm::gemm_serial<A>(Op::N, Op::N, rows, p.hd, keys, 1, dprob, p.S, k.at, k.ld, 1, dq.at, dq.ld);
  if (dk.at) gemm::gemm_serial<A>(Op::T, Op::N, keys, p.hd, rows, 1, dprob, p.S, q.at, q.ld, 1, dk.at, dk.ld);
}

}  // namespace

// Float and double tiles read the tensors in place. 16-bit tensors are
// widened into the worker's workspace first (a head's keys and values, a
// tile's queries), the tile runs in float, and what it produced is rounded
// once on the way back: gradients that several tiles add into (dk, dv) stay
// in float until the task's last tile.
template <class T>
void forward(const Problem& p, const T* q, const T* k, const T* v, T* out, compute_t<T>* lse) {
  using A = compute_t<T>;
  const std::int64_t tiles = (p.S + kTile - 1) / kTile, W = p.H * p.hd, hd = p.hd;
  const std::int64_t widened = kWidened<T> ? 2 * kTile * hd + 2 * p.S * hd : 0;
  for_each_task<A>("attention_fused_workspace", p.B * p.H * tiles, kTile * p.S + widened, [=](std::int64_t task, A* s) {
    const std::int64_t b = task / (p.H * tiles), h = task / tiles % p.H, i0 = task % tiles * kTile;
    const std::int64_t rows = std::min(kTile, p.S - i0), keys = p.causal ? i0 + rows : p.S;
    const std::int64_t kvh = h / (p.H / p.Hkv);
    const T* qb = q + p.q.offset + b * p.q.batch_stride + i0 * p.q.ld + h * hd;
    const T* kb = k + p.k.offset + b * p.k.batch_stride + kvh * hd;
    const T* vb = v + p.v.offset + b * p.v.batch_stride + kvh * hd;
    T* ob = out + (b * p.S + i0) * W + h * hd;
    if constexpr (!kWidened<T>) {
      forward_tile<A>(p, b, h, i0, rows, keys, {qb, p.q.ld}, {kb, p.k.ld}, {vb, p.v.ld}, {ob, W}, s, lse);
    } else {
      A *qf = s + kTile * p.S, *of = qf + kTile * hd, *kf = of + kTile * hd, *vf = kf + p.S * hd;
      widen(qb, p.q.ld, rows, hd, qf);
      widen(kb, p.k.ld, keys, hd, kf);
      widen(vb, p.v.ld, keys, hd, vf);
      forward_tile<A>(p, b, h, i0, rows, keys, {qf, hd}, {kf, hd}, {vf, hd}, {of, hd}, s, lse);
      to_storage(of, rows, hd, ob, W);
    }
  });
}

template <class T>
void backward(const Problem& p, const T* q, const T* k, const T* v, const compute_t<T>* lse, const T* dout, T* dq,
              T* dk, T* dv, const compute_t<T>* row_dot) {
  using A = compute_t<T>;
  const std::int64_t group = p.H / p.Hkv, W = p.H * p.hd, hd = p.hd, tile = kTile * p.S;
  const std::int64_t widened = kWidened<T> ? 4 * p.S * hd + 3 * kTile * hd : 0;
  // One task per (sequence, kv head): the query heads sharing it add into
  // its dk and dv in order, so no two tasks write the same place.
  for_each_task<A>("attention_fused_workspace", p.B * p.Hkv, 3 * tile + widened, [=](std::int64_t task, A* ws) {
    const std::int64_t b = task / p.Hkv, kvh = task % p.Hkv;
    const T* kb = k + p.k.offset + b * p.k.batch_stride + kvh * hd;
    const T* vb = v + p.v.offset + b * p.v.batch_stride + kvh * hd;
    T* dkb = dk ? dk + p.k.offset + b * p.k.batch_stride + kvh * hd : nullptr;
    T* dvb = dv ? dv + p.v.offset + b * p.v.batch_stride + kvh * hd : nullptr;
    A *kf = ws + 3 * tile, *vf = kf + p.S * hd, *dkf = vf + p.S * hd, *dvf = dkf + p.S * hd;
    A *qf = dvf + p.S * hd, *dof = qf + kTile * hd, *dqf = dof + kTile * hd;
    if constexpr (kWidened<T>) {
      widen(kb, p.k.ld, p.S, hd, kf);
      widen(vb, p.v.ld, p.S, hd, vf);
      if (dkb) widen(dkb, p.k.ld, p.S, hd, dkf);
      if (dvb) widen(dvb, p.v.ld, p.S, hd, dvf);
    }
    for (std::int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
      for (std::int64_t i0 = 0; i0 < p.S; i0 += kTile) {
        const std::int64_t rows = std::min(kTile, p.S - i0), keys = p.causal ? i0 + rows : p.S;
        const T* qb = q + p.q.offset + b * p.q.batch_stride + i0 * p.q.ld + h * hd;
        const T* dob = dout + (b * p.S + i0) * W + h * hd;
        T* dqb = dq ? dq + p.q.offset + b * p.q.batch_stride + i0 * p.q.ld + h * hd : nullptr;
        if constexpr (!kWidened<T>) {
          backward_tile<A>(p, b, h, i0, rows, keys, {qb, p.q.ld}, {kb, p.k.ld}, {vb, p.v.ld}, {dob, W},
                           {dqb, p.q.ld}, {dkb, p.k.ld}, {dvb, p.v.ld}, lse, row_dot, ws);
        } else {
          widen(qb, p.q.ld, rows, hd, qf);
          widen(dob, W, rows, hd, dof);
          if (dqb) widen(dqb, p.q.ld, rows, hd, dqf);
          backward_tile<A>(p, b, h, i0, rows, keys, {qf, hd}, {kf, hd}, {vf, hd}, {dof, hd},
                           {dqb ? dqf : nullptr, hd}, {dkb ? dkf : nullptr, hd}, {dvb ? dvf : nullptr, hd}, lse,
                           row_dot, ws);
          if (dqb) to_storage(dqf, rows, hd, dqb, p.q.ld);
        }
      }
    if constexpr (kWidened<T>) {
      if (dkb) to_storage(dkf, p.S, hd, dkb, p.k.ld);
      if (dvb) to_storage(dvf, p.S, hd, dvb, p.v.ld);
    }
  });
}

#define REMAT_FUSED_INSTANTIATE(T)                                                                                  \
  template void forward<T>(const Problem&, const T*, const T*, const T*, T*, compute_t<T>*);                        \
  template void backward<T>(const Problem&, const T*, const T*, const T*, const compute_t<T>*, const T*, T*, T*, T*, \
                            const compute_t<T>*);
REMAT_FUSED_INSTANTIATE(float)
REMAT_FUSED_INSTANTIATE(double)
REMAT_FUSED_INSTANTIATE(bf16)
REMAT_FUSED_INSTANTIATE(f16)

}  // namespace remat::ops::fused
