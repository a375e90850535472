#include "zoo/llama_layers.hpp"

#include "autodiff/ops/ops.hpp"
#include "zoo/common.hpp"

namespace remat::llama {

void append_attention(std::vector<ParamSpec>& p, const std::string& prefix, const Sizes& z) {
  const std::int64_t D = z.D, hd = D / z.H, q = z.H * hd, kv = z.Hkv * hd;
  append_linear(p, prefix + ".wq", q, D, Init::normal, false);
  append_linear(p, prefix + ".wk", kv, D, Init::normal, false);
  append_linear(p, prefix + ".wv", kv, D, Init::normal, false);
  append_linear(p, prefix + ".wo", D, q, Init::residual_out, false);
}

Tensor attention(const ParamStore& p, const std::string& prefix, const Tensor& x, const Sizes& z) {
  const int hd = z.D / z.H;
  const Tensor q = ops::rotary(linear(p, prefix + ".wq", x, false), hd, z.theta);
  const Tensor k = ops::rotary(linear(p, prefix + ".wk", x, false), hd, z.theta);
  const Tensor v = linear(p, prefix + ".wv", x, false);
  const Tensor a = ops::attention(q, k, v, z.H, z.Hkv, /*causal=*/true, z.dropout);
  return ops::dropout(linear(p, prefix + ".wo", a, false), z.dropout);
}

}  // namespace remat::llama
