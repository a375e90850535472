#pragma once
// One row of a masked softmax, shared by the plain and the fused attention.
// The max and the sum run in eight interleaved lanes combined in a fixed
// order (lane_sum): the loops vectorise, and the result does not depend on
// the thread count.
#include <Kokkos_Core.hpp>
#include <cstdint>

#include "autodiff/fast_math.hpp"
#include "autodiff/kmath.hpp"
#include "autodiff/ops/kernel.hpp"

namespace remat::ops::detail {

// softmax of row[0, valid) in place, zeros in row[valid, len); returns the
// row's log-sum-exp. valid >= 1.
template <class T>
KOKKOS_INLINE_FUNCTION T softmax_row(T* row, std::int64_t valid, std::int64_t len) {
  constexpr int kLanes = 8;
  T lane[kLanes];
  for (int l = 0; l < kLanes; ++l) lane[l] = row[0];
  std::int64_t j = 0;
  for (; j + kLanes <= valid; j += kLanes)
    for (int l = 0; l < kLanes; ++l) lane[l] = row[j + l] > lane[l] ? row[j + l] : lane[l];
  for (; j < valid; ++j) lane[0] = row[j] > lane[0] ? row[j] : lane[0];
  T m = lane[0];
  for (int l = 1; l < kLanes; ++l) m = lane[l] > m ? lane[l] : m;

  for (j = 0; j < valid; ++j) row[j] = fast_exp(row[j] - m);
  const T sum = lane_sum<T>(valid, [&](std::int64_t i) { return row[i]; });

  const T inv = T(1) / sum;
  for (j = 0; j < valid; ++j) row[j] *= inv;
  for (j = valid; j < len; ++j) row[j] = T(0);
  return m + kmath::log(sum);
}

}  // namespace remat::ops::detail
