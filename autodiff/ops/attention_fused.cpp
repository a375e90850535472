#include "autodiff/ops/attention_fused.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <string>

#include "autodiff/fast_math.hpp"
#include "autodiff/gemm.hpp"
#include "autodiff/ops/softmax_row.hpp"

namespace remat::ops::fused {
namespace {

using gemm::Op;
constexpr std::int64_t kTile = 64;  // query rows per tile

// Scores of a tile: s[r, j] = scale q_{i0+r} . k_j for the keys the rows may see.
template <class T>
void scores(const Problem& p, const T* q, const T* k, std::int64_t b, std::int64_t h, std::int64_t i0,
            std::int64_t rows, std::int64_t keys, T* s) {
  const std::int64_t kvh = h / (p.H / p.Hkv);
  const T* qb = q + p.q.offset + b * p.q.batch_stride + i0 * p.q.ld + h * p.hd;
  const T* kb = k + p.k.offset + b * p.k.batch_stride + kvh * p.hd;
  gemm::gemm_serial<T>(Op::N, Op::T, rows, keys, p.hd, T(p.scale), qb, p.q.ld, kb, p.k.ld, 0, s, p.S);
}

// Runs task(index, workspace) for every index in [0, tasks): each host thread
// takes a contiguous run of indices and owns one slice of a workspace that
// is allocated once per call (a Kokkos allocation, so the memory tracker
// counts it), so the loop over tiles allocates nothing.
template <class T, class Task>
void for_each_task(const char* name, std::int64_t tasks, std::int64_t workspace_per_worker, const Task& task) {
  using Host = Kokkos::DefaultHostExecutionSpace;
  const std::int64_t workers = std::min<std::int64_t>(Host().concurrency(), tasks);
  Kokkos::View<T*, Kokkos::HostSpace> workspace(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(name)),
                                                std::size_t(workers * workspace_per_worker));
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

}  // namespace

template <class T>
void forward(const Problem& p, const T* q, const T* k, const T* v, T* out, T* lse) {
  const std::int64_t tiles = (p.S + kTile - 1) / kTile, W = p.H * p.hd;
  for_each_task<T>("attention_fused_workspace", p.B * p.H * tiles, kTile * p.S, [=](std::int64_t task, T* s) {
    const std::int64_t b = task / (p.H * tiles), h = task / tiles % p.H, i0 = task % tiles * kTile;
    const std::int64_t rows = std::min(kTile, p.S - i0), keys = p.causal ? i0 + rows : p.S;
    const std::int64_t kvh = h / (p.H / p.Hkv);
    scores(p, q, k, b, h, i0, rows, keys, s);  // this tile's probabilities, then dropped
    for (std::int64_t r = 0; r < rows; ++r) {
      T* row = s + r * p.S;
      const std::int64_t valid = p.causal ? i0 + r + 1 : p.S;
      lse[(b * p.H + h) * p.S + i0 + r] = detail::softmax_row(row, valid, keys);
      if (p.dropout > 0)
        for (std::int64_t j = 0; j < valid; ++j) row[j] *= keep<T>(p, b, h, i0 + r, j);
    }
    const T* vb = v + p.v.offset + b * p.v.batch_stride + kvh * p.hd;
    gemm::gemm_serial<T>(Op::N, Op::N, rows, p.hd, keys, 1, s, p.S, vb, p.v.ld, 0, out + (b * p.S + i0) * W + h * p.hd,
                         W);
  });
}

template <class T>
void backward(const Problem& p, const T* q, const T* k, const T* v, const T* lse, const T* dout, T* dq, T* dk,
              T* dv) {
  const std::int64_t group = p.H / p.Hkv, W = p.H * p.hd, tile = kTile * p.S;
  const bool dropout = p.dropout > 0;
  // One task per (sequence, kv head): the query heads sharing it add into
  // its dk and dv in order, so no two tasks write the same place.
  for_each_task<T>("attention_fused_workspace", p.B * p.Hkv, 3 * tile, [=](std::int64_t task, T* ws) {
    const std::int64_t b = task / p.Hkv, kvh = task % p.Hkv;
    T *prob = ws, *dprob = ws + tile, *dropped = dropout ? ws + 2 * tile : prob;
    const T* kb = k + p.k.offset + b * p.k.batch_stride + kvh * p.hd;
    const T* vb = v + p.v.offset + b * p.v.batch_stride + kvh * p.hd;
    T* dkb = dk ? dk + p.k.offset + b * p.k.batch_stride + kvh * p.hd : nullptr;
    T* dvb = dv ? dv + p.v.offset + b * p.v.batch_stride + kvh * p.hd : nullptr;
    for (std::int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
      for (std::int64_t i0 = 0; i0 < p.S; i0 += kTile) {
        const std::int64_t rows = std::min(kTile, p.S - i0), keys = p.causal ? i0 + rows : p.S;
        const T* qb = q + p.q.offset + b * p.q.batch_stride + i0 * p.q.ld + h * p.hd;
        const T* dob = dout + (b * p.S + i0) * W + h * p.hd;
        // probabilities again, from the saved log-sum-exp
        scores(p, q, k, b, h, i0, rows, keys, prob);
        for (std::int64_t r = 0; r < rows; ++r) {
          T* row = prob + r * p.S;
          const T l = lse[(b * p.H + h) * p.S + i0 + r];
          const std::int64_t valid = p.causal ? i0 + r + 1 : p.S;
          for (std::int64_t j = 0; j < valid; ++j) row[j] = fast_exp(row[j] - l);
          for (std::int64_t j = valid; j < keys; ++j) row[j] = T(0);
          if (dropout)
            for (std::int64_t j = 0; j < keys; ++j) dropped[r * p.S + j] = row[j] * keep<T>(p, b, h, i0 + r, j);
        }
        // dv += dropout(P)^T dO ; d(dropped P) = dO v^T
        if (dvb) gemm::gemm_serial<T>(Op::T, Op::N, keys, p.hd, rows, 1, dropped, p.S, dob, W, 1, dvb, p.v.ld);
        gemm::gemm_serial<T>(Op::N, Op::T, rows, keys, p.hd, 1, dob, W, vb, p.v.ld, 0, dprob, p.S);
        // dS = P (dP - <dO, O>) scale, dP through the same dropout mask;
        // <dO, O> = sum_j dropout(P)_ij (dO v^T)_ij, O being dropout(P) v
        for (std::int64_t r = 0; r < rows; ++r) {
          T *dp = dprob + r * p.S, *pr = prob + r * p.S;
          const T dot = detail::lane_sum<T>(keys, Product<T>{dropped + r * p.S, dp});
          if (dropout)
            for (std::int64_t j = 0; j < keys; ++j) dp[j] *= keep<T>(p, b, h, i0 + r, j);
          const T scale = T(p.scale);
          for (std::int64_t j = 0; j < keys; ++j) dp[j] = pr[j] * (dp[j] - dot) * scale;
        }
        // dq = dS k ; dk += dS^T q
        if (dq)
          gemm::gemm_serial<T>(Op::N, Op::N, rows, p.hd, keys, 1, dprob, p.S, kb, p.k.ld, 1,
                               dq + p.q.offset + b * p.q.batch_stride + i0 * p.q.ld + h * p.hd, p.q.ld);
        if (dkb) gemm::gemm_serial<T>(Op::T, Op::N, keys, p.hd, rows, 1, dprob, p.S, qb, p.q.ld, 1, dkb, p.k.ld);
      }
  });
}

#define REMAT_FUSED_INSTANTIATE(T)                                                                        \
  template void forward<T>(const Problem&, const T*, const T*, const T*, T*, T*);                         \
  template void backward<T>(const Problem&, const T*, const T*, const T*, const T*, const T*, T*, T*, T*);
REMAT_FUSED_INSTANTIATE(float)
REMAT_FUSED_INSTANTIATE(double)

}  // namespace remat::ops::fused
