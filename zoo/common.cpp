#include "zoo/common.hpp"

#include <Kokkos_Core.hpp>

#include "autodiff/ops/ops.hpp"
#include "autodiff/loops.hpp"

namespace remat {

void append_linear(std::vector<ParamSpec>& p, const std::string& prefix, std::int64_t out, std::int64_t in,
                   Init init, bool bias) {
  p.push_back({prefix + ".weight", {out, in}, init});
  if (bias) p.push_back({prefix + ".bias", {out}, Init::zeros});
}

void append_layer_norm(std::vector<ParamSpec>& p, const std::string& prefix, std::int64_t D) {
  p.push_back({prefix + ".weight", {D}, Init::ones});
  p.push_back({prefix + ".bias", {D}, Init::zeros});
}

Tensor linear(const ParamStore& p, const std::string& prefix, const Tensor& x, bool bias) {
  const std::string weight = prefix + ".weight", b = prefix + ".bias";
  const Tensor bias_t = bias && p.has(b) ? p[b] : Tensor();
  const QuantizedWeight* q = p.quantized(weight);
  const Tensor out = q ? ops::linear(x, *q, bias_t) : ops::linear(x, p.linear_weight(weight), bias_t);
  return with_adapter(p, weight, x, out);
}

Tensor with_adapter(const ParamStore& p, const std::string& weight, const Tensor& x, const Tensor& out) {
  const ParamStore::Adapter* a = p.adapter(weight);
  if (!a) return out;
  Tensor A = p[a->a], B = p[a->b];
  if (a->group.split()) {
    // Split over a tensor-parallel group, the matrix every rank holds whole
    // has on each the gradient of its own part: summed over the ranks (B of
    // a column-parallel weight cut into fewer parts than ranks: over those
    // holding the same part, as tp::replicated does for the weight).
    const RankGroup& g = a->group;
    if (a->split.dim == 0) A = ops::all_reduce_in_backward(A, g);
    if (a->split.dim == 0 && a->split.parts > 0) B = ops::all_reduce_in_backward(B, g, g.size / a->split.parts);
    if (a->split.dim == 1) B = ops::all_reduce_in_backward(B, g);
  }
  return ops::add(out, ops::scale(ops::linear(ops::linear(x, A), B), a->scale));
}

Tensor positions(const Tensor& tokens) {
  const std::int64_t S = tokens.dim(-1);
  Tensor pos = Tensor::empty({S}, DType::i32, "positions");
  std::int32_t* p = pos.data<std::int32_t>();
  backend::for_each("positions", S, KOKKOS_LAMBDA(std::int64_t i) { p[i] = std::int32_t(i); });
  return pos;
}

Tensor shift_right(const Tensor& ids, std::int32_t start) {
  const std::int64_t S = ids.dim(-1), n = ids.numel();
  Tensor out = Tensor::empty(ids.shape(), DType::i32, "positions");
  const std::int32_t* in = ids.data<std::int32_t>();
  std::int32_t* o = out.data<std::int32_t>();
  backend::for_each("shift_right", n, KOKKOS_LAMBDA(std::int64_t i) { o[i] = i % S == 0 ? start : in[i - 1]; });
  return out;
}

}  // namespace remat
