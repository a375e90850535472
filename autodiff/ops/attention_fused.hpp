#pragma once
// The fused attention kernels (the flash-attention idea): forward keeps only
// the output and each row's log-sum-exp; backward recomputes the
// probabilities a tile at a time. Same geometry, masking and dropout masks as
// the plain kernel in attention.cpp. Two implementations:
// - forward/backward (attention_fused.cpp): host tiles through the BLAS;
// - batched_forward/batched_backward (attention_fused_batched.cpp): a head's
//   query tile in every sequence at once through batched GEMMs, row kernels
//   between them, on the default execution space: what a GPU runs for
//   `fused` (cuBLAS does the products);
// - team_forward/team_backward (attention_fused_team.cpp): Kokkos team
//   kernels with scratch memory on the default execution space (any
//   backend, as --attention fused-team).
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <type_traits>

#include "autodiff/bfloat16.hpp"
#include "autodiff/rng.hpp"

namespace remat::ops::fused {

struct Layout {  // one of q, k, v: element offset, row stride, sequence stride
  std::int64_t offset, ld, batch_stride;
};

struct Problem {
  std::int64_t B, S, H, Hkv, hd;
  bool causal;
  Layout q, k, v;
  double scale;
  double dropout;  // 0: none
  std::uint64_t seed, stream;
};

// Whether T is stored narrower than it is computed in (16-bit).
template <class T>
inline constexpr bool kWidened = !std::is_same_v<T, compute_t<T>>;

// The dropout keep-scale of probability (b, h, i, j), indexed as the plain
// kernel indexes its [B, H, S, S] probabilities, so all kernels draw the
// same mask.
template <class T>
KOKKOS_INLINE_FUNCTION T keep(const Problem& p, std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
  if (p.dropout <= 0) return T(1);
  const std::uint64_t idx = std::uint64_t(((b * p.H + h) * p.S + i) * p.S + j);
  return rng::uniform(p.seed, p.stream, idx) > p.dropout ? T(1.0 / (1.0 - p.dropout)) : T(0);
}

// out[B, S, H hd] and lse[B, H, S]. Inputs and output of type T, computed
// in compute_t<T> (the log-sum-exp too: float32 for bfloat16 inputs).
template <class T>
void forward(const Problem& p, const T* q, const T* k, const T* v, T* out, compute_t<T>* lse);

// Adds into dq, dk, dv (any of them may be null); zero them first if fresh.
// It needs no output: with whole rows of probabilities at hand it takes each
// row's <dO, O> as sum_j P_ij (dO v^T)_ij (the same number, as O = P v), so
// the op saves the output only when something else needs it (an output
// projection whose weight trains). Where the keys are only part of the rows'
// (context parallelism's ring: the rows' probabilities are spread over the
// ranks' keys), `row_dot` gives each row's <dO, O> instead, laid out as lse.
template <class T>
void backward(const Problem& p, const T* q, const T* k, const T* v, const compute_t<T>* lse, const T* dout, T* dq,
              T* dk, T* dv, const compute_t<T>* row_dot = nullptr);

// The same through batched GEMMs on the default execution space; the same
// saved tensors (no output), the same masks, the same sums up to rounding
// (16-bit: probabilities and score gradients are rounded to T for their
// products, as the plain kernel's are). Query rows per tile: about 32 MiB of
// scores, unless rows_per_tile is given (the tests' ragged tiles).
template <class T>
void batched_forward(const Problem& p, const T* q, const T* k, const T* v, T* out, compute_t<T>* lse,
                     std::int64_t rows_per_tile = 0);
// Which gradients backward adds: those whose pointer is set; in a shape-only
// run (no data, every pointer null) those named here, so that it counts the
// same products.
struct Wanted {
  bool q = true, k = true, v = true;
};
template <class T>
void batched_backward(const Problem& p, const T* q, const T* k, const T* v, const compute_t<T>* lse, const T* dout,
                      T* dq, T* dk, T* dv, Wanted wanted = {}, std::int64_t rows_per_tile = 0);

// The same on the default execution space as team kernels (device memory
// on a GPU build). Backward adds into dq, dk, dv like the host version; it
// works on key tiles, so it reads <dO, O> from the output.
template <class T>
void team_forward(const Problem& p, const T* q, const T* k, const T* v, T* out, compute_t<T>* lse);
template <class T>
void team_backward(const Problem& p, const T* q, const T* k, const T* v, const T* out, const compute_t<T>* lse,
                   const T* dout, T* dq, T* dk, T* dv);

}  // namespace remat::ops::fused
