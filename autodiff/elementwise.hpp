#pragma once
// Small whole-tensor kernels the autodiff core itself needs.
#include "autodiff/tensor.hpp"

namespace remat {

Tensor clone(const Tensor& t);
void add_inplace(const Tensor& dst, const Tensor& src);  // dst += src
void fill(const Tensor& t, double value);

}  // namespace remat
