#include "autodiff/ops/attention_fused.hpp"

#include <Kokkos_Core.hpp>
#include <cmath>
#include <vector>

#include "autodiff/gemm.hpp"
#include "autodiff/rng.hpp"

namespace remat::ops::fused {
namespace {

using gemm::Op;
constexpr std::int64_t kTile = 64;  // query rows per tile

// The dropout keep-scale of probability (b, h, i, j), indexed as the plain
// kernel indexes its [B, H, S, S] probabilities, so both draw the same mask.
template <class T>
inline T keep(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
  if (p.dropout <= 0) return T(1);
  const std::uint64_t idx = std::uint64_t(((b * p.H + h) * p.S + i) * p.S + j);
  return rng::uniform(p.seed, p.stream, idx) > p.dropout ? T(1.0 / (1.0 - p.dropout)) : T(0);
}

// Scores of a tile: s[r, j] = scale q_{i0+r} . k_j for the keys the rows may see.
template <class T>
void scores(const Problem& p, const T* q, const T* k, std::int64_t b, std::int64_t h, std::int64_t i0,
            std::int64_t rows, std::int64_t keys, T* s) {
  const std::int64_t kvh = h / (p.H / p.Hkv);
  const T* qb = q + p.q.offset + b * p.q.batch_stride + i0 * p.q.ld + h * p.hd;
  const T* kb = k + p.k.offset + b * p.k.batch_stride + kvh * p.hd;
  gemm::gemm_serial<T>(Op::N, Op::T, rows, keys, p.hd, T(p.scale), qb, p.q.ld, kb, p.k.ld, 0, s, p.S);
}

}  // namespace

template <class T>
void forward(const Problem& p, const T* q, const T* k, const T* v, T* out, T* lse) {
  const std::int64_t tiles = (p.S + kTile - 1) / kTile, W = p.H * p.hd;
  Kokkos::parallel_for(
      "attention_fused_forward", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, p.B * p.H * tiles),
      [=](std::int64_t task) {
        const std::int64_t b = task / (p.H * tiles), h = task / tiles % p.H, i0 = task % tiles * kTile;
        const std::int64_t rows = std::min(kTile, p.S - i0), keys = p.causal ? i0 + rows : p.S;
        const std::int64_t kvh = h / (p.H / p.Hkv);
        std::vector<T> s(std::size_t(rows * p.S));  // this tile's probabilities, then dropped
        scores(p, q, k, b, h, i0, rows, keys, s.data());
        for (std::int64_t r = 0; r < rows; ++r) {
          T* row = s.data() + r * p.S;
          const std::int64_t valid = p.causal ? i0 + r + 1 : p.S;
          T m = row[0];
          for (std::int64_t j = 1; j < valid; ++j) m = row[j] > m ? row[j] : m;
          T sum = 0;
          for (std::int64_t j = 0; j < valid; ++j) sum += (row[j] = std::exp(row[j] - m));
          const T inv = T(1) / sum;
          for (std::int64_t j = 0; j < valid; ++j) row[j] *= inv * keep<T>(p, b, h, i0 + r, j);
          for (std::int64_t j = valid; j < keys; ++j) row[j] = 0;
          lse[(b * p.H + h) * p.S + i0 + r] = m + std::log(sum);
        }
        const T* vb = v + p.v.offset + b * p.v.batch_stride + kvh * p.hd;
        gemm::gemm_serial<T>(Op::N, Op::N, rows, p.hd, keys, 1, s.data(), p.S, vb, p.v.ld, 0,
                      out + (b * p.S + i0) * W + h * p.hd, W);
      });
  Kokkos::DefaultHostExecutionSpace().fence();
}

template <class T>
void backward(const Problem& p, const T* q, const T* k, const T* v, const T* out, const T* lse, const T* dout, T* dq,
              T* dk, T* dv) {
  const std::int64_t group = p.H / p.Hkv, W = p.H * p.hd;
  // One task per (sequence, kv head): the query heads sharing it add into
  // its dk and dv in order, so no two tasks write the same place.
  Kokkos::parallel_for(
      "attention_fused_backward", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, p.B * p.Hkv),
      [=](std::int64_t task) {
        const std::int64_t b = task / p.Hkv, kvh = task % p.Hkv;
        std::vector<T> prob(std::size_t(kTile * p.S)), dprob(prob.size()), dropped(prob.size());
        const T* kb = k + p.k.offset + b * p.k.batch_stride + kvh * p.hd;
        const T* vb = v + p.v.offset + b * p.v.batch_stride + kvh * p.hd;
        T* dkb = dk ? dk + p.k.offset + b * p.k.batch_stride + kvh * p.hd : nullptr;
        T* dvb = dv ? dv + p.v.offset + b * p.v.batch_stride + kvh * p.hd : nullptr;
        for (std::int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
          for (std::int64_t i0 = 0; i0 < p.S; i0 += kTile) {
            const std::int64_t rows = std::min(kTile, p.S - i0), keys = p.causal ? i0 + rows : p.S;
            const T* qb = q + p.q.offset + b * p.q.batch_stride + i0 * p.q.ld + h * p.hd;
            const T* dob = dout + (b * p.S + i0) * W + h * p.hd;
            const T* ob = out + (b * p.S + i0) * W + h * p.hd;
            // probabilities again, from the saved log-sum-exp
            scores(p, q, k, b, h, i0, rows, keys, prob.data());
            for (std::int64_t r = 0; r < rows; ++r) {
              const T l = lse[(b * p.H + h) * p.S + i0 + r];
              const std::int64_t valid = p.causal ? i0 + r + 1 : p.S;
              for (std::int64_t j = 0; j < keys; ++j) {
                const T pr = j < valid ? std::exp(prob[r * p.S + j] - l) : T(0);
                prob[r * p.S + j] = pr;
                dropped[r * p.S + j] = pr * keep<T>(p, b, h, i0 + r, j);
              }
            }
            // dv += dropout(P)^T dO ; d(dropped P) = dO v^T
            if (dvb) gemm::gemm_serial<T>(Op::T, Op::N, keys, p.hd, rows, 1, dropped.data(), p.S, dob, W, 1, dvb, p.v.ld);
            gemm::gemm_serial<T>(Op::N, Op::T, rows, keys, p.hd, 1, dob, W, vb, p.v.ld, 0, dprob.data(), p.S);
            // dS = P (dP - <dO, O>) scale, dP through the same dropout mask
            for (std::int64_t r = 0; r < rows; ++r) {
              T dot = 0;
              for (std::int64_t e = 0; e < p.hd; ++e) dot += dob[r * W + e] * ob[r * W + e];
              for (std::int64_t j = 0; j < keys; ++j) {
                const T dp = dprob[r * p.S + j] * keep<T>(p, b, h, i0 + r, j);
                dprob[r * p.S + j] = prob[r * p.S + j] * (dp - dot) * T(p.scale);
              }
            }
            // dq = dS k ; dk += dS^T q
            if (dq)
              gemm::gemm_serial<T>(Op::N, Op::N, rows, p.hd, keys, 1, dprob.data(), p.S, kb, p.k.ld, 1,
                            dq + p.q.offset + b * p.q.batch_stride + i0 * p.q.ld + h * p.hd, p.q.ld);
            if (dkb) gemm::gemm_serial<T>(Op::T, Op::N, keys, p.hd, rows, 1, dprob.data(), p.S, qb, p.q.ld, 1, dkb, p.k.ld);
          }
      });
  Kokkos::DefaultHostExecutionSpace().fence();
}

#define REMAT_FUSED_INSTANTIATE(T)                                                                        \
  template void forward<T>(const Problem&, const T*, const T*, const T*, T*, T*);                         \
  template void backward<T>(const Problem&, const T*, const T*, const T*, const T*, const T*, const T*, T*, \
                            T*, T*);
REMAT_FUSED_INSTANTIATE(float)
REMAT_FUSED_INSTANTIATE(double)

}  // namespace remat::ops::fused
