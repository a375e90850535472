#pragma once
// A quantized weight's values in the compute type T for one product
// (autodiff/quantized.hpp): a counted scratch buffer ("dequantized_weight"),
// filled when made and freed when it goes, so a step holds one weight's
// values at a time. The quantized linear and the grouped expert product
// multiply by it; each counts as a run of the op "dequantize", and its FLOPs
// and seconds (fenced) go to the step's counts beside the GEMMs'.
#include <chrono>
#include <cstddef>

#include "autodiff/quantized.hpp"
#include "autodiff/scratch.hpp"
#include "autodiff/stats.hpp"

namespace remat::ops::detail {

template <class T>
class DequantizedWeight {
 public:
  explicit DequantizedWeight(const QuantizedWeight& q) : buffer_("dequantized_weight", std::size_t(q.numel())) {
    stats::count_forward("dequantize");
    const auto t0 = std::chrono::steady_clock::now();
    dequantize(q, buffer_.data());
    ExecSpace().fence();
    stats::count_dequantize(dequantize_flops(q),
                            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  T* data() const { return buffer_.data(); }

 private:
  Scratch<T, MemSpace> buffer_;
};

}  // namespace remat::ops::detail
