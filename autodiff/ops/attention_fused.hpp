#pragma once
// The fused, tiled attention kernel (the flash-attention idea on the host):
// forward keeps only the output and each row's log-sum-exp; backward
// recomputes the probabilities one tile of query rows at a time. Same
// geometry, masking and dropout masks as the plain kernel in attention.cpp.
#include <cstdint>

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

// out[B, S, H hd] and lse[B, H, S].
template <class T>
void forward(const Problem& p, const T* q, const T* k, const T* v, T* out, T* lse);

// Adds into dq, dk, dv (any of them may be null); zero them first if fresh.
template <class T>
void backward(const Problem& p, const T* q, const T* k, const T* v, const T* out, const T* lse, const T* dout, T* dq,
              T* dk, T* dv);

}  // namespace remat::ops::fused
