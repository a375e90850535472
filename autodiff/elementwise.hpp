#pragma once
// Small whole-tensor kernels the autodiff core itself needs.
#include "autodiff/tensor.hpp"

namespace remat {

Tensor clone(const Tensor& t);
// Rows [first, first + count) of t along its first dimension, copied (no
// gradient: a batch's ids).
Tensor rows_copy(const Tensor& t, std::int64_t first, std::int64_t count, const std::string& label);
// dst += src; src may be of another float type (a bfloat16 gradient into a
// float32 one), converted element by element.
void add_inplace(const Tensor& dst, const Tensor& src);
// A copy of t as element type `to` (rounded to nearest even into bfloat16).
// Not recorded on the tape.
Tensor converted(const Tensor& t, DType to, const std::string& label);
// dst = src converted to dst's element type (shapes equal).
void convert_into(const Tensor& dst, const Tensor& src);
void fill(const Tensor& t, double value);
// t *= factor, for a float32 or float64 t (gradients: averaging, clipping,
// unscaling fp16's loss scale).
void scale_inplace(const Tensor& t, double factor);

}  // namespace remat
