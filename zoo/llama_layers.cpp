#include "zoo/llama_layers.hpp"

#include "autodiff/ops/ops.hpp"
#include "zoo/common.hpp"
#include "zoo/tensor_parallel.hpp"

namespace remat::llama {

void append_attention(std::vector<ParamSpec>& p, const std::string& prefix, const Sizes& z) {
  const std::int64_t D = z.D, hd = D / z.H, q = z.H * hd, kv = z.Hkv * hd;
  tp::append_column(p, prefix + ".wq", q, D, z.tp, Init::normal, z.qkv_bias);
  const int kv_parts = tp::kv_parts(z.Hkv, z.tp);
  tp::append_column(p, prefix + ".wk", kv, D, z.tp, Init::normal, z.qkv_bias, 1, kv_parts);
  tp::append_column(p, prefix + ".wv", kv, D, z.tp, Init::normal, z.qkv_bias, 1, kv_parts);
  tp::append_row(p, prefix + ".wo", D, q, z.tp, Init::residual_out, false);
}

Tensor attention(const ParamStore& p, const std::string& prefix, const Tensor& x, const Sizes& z) {
  const int hd = z.D / z.H;
  const Tensor in = tp::enter(x, z.tp);
  const ops::RopeScaling scaling{z.rope_factor, z.rope_low_freq, z.rope_high_freq, z.rope_original};
  const Tensor q = ops::rotary(linear(p, prefix + ".wq", in, z.qkv_bias), hd, z.theta, scaling, z.cp);
  const int kv_parts = tp::kv_parts(z.Hkv, z.tp);
  // Fewer key/value heads than ranks: each rank holds its heads' rows
  // (and Qwen2's biases) whole, their gradients summed over the ranks that share them.
  // A quantized weight is frozen: no gradient to sum, its part read as it is.
  const auto kv = [&](const char* name) {
    if (kv_parts == 0) return linear(p, prefix + name, in, z.qkv_bias);
    const std::string w = prefix + name;
    const Tensor bias = z.qkv_bias ? tp::replicated(p[w + ".bias"], kv_parts, z.tp) : Tensor();
    const QuantizedWeight* quantized = p.quantized(w + ".weight");
    const Tensor out = quantized ? ops::linear(in, *quantized, bias)
                                 : ops::linear(in, tp::replicated(p.linear_weight(w + ".weight"), kv_parts, z.tp), bias);
    return with_adapter(p, w + ".weight", in, out);
  };
  const Tensor k = ops::rotary(kv(".wk"), hd, z.theta, scaling, z.cp);
  const Tensor v = kv(".wv");
  const int kv_heads = kv_parts > 0 ? 1 : z.Hkv / z.tp.size;
  const Tensor a =
      tp::on_my_heads(z.tp, [&] {
        return z.cp.split() ? ops::ring_attention(q, k, v, z.H / z.tp.size, kv_heads, z.cp, true, z.dropout)
                            : ops::attention(q, k, v, z.H / z.tp.size, kv_heads, true, z.dropout);
      });
  return tp::dropout(tp::row_linear(p, prefix + ".wo", a, z.tp, false), z.dropout, z.tp);
}

}  // namespace remat::llama
