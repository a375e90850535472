#include "zoo/gpt_layers.hpp"

#include "autodiff/ops/ops.hpp"
#include "zoo/common.hpp"

namespace remat::gpt {
void append_attention(std::vector<ParamSpec>& p, const std::string& prefix, std::int64_t D) {
  append_linear(p, prefix + ".c_attn", 3 * D, D);
  append_linear(p, prefix + ".c_proj", D, D, Init::residual_out);
}

void append_mlp(std::vector<ParamSpec>& p, const std::string& prefix, std::int64_t D) {
  append_linear(p, prefix + ".c_fc", 4 * D, D);
  append_linear(p, prefix + ".c_proj", D, 4 * D, Init::residual_out);
}

void append_embeddings(std::vector<ParamSpec>& p, std::int64_t V, std::int64_t D, std::int64_t S_max) {
  p.push_back({"wte.weight", {V, D}});
  p.push_back({"wpe.weight", {S_max, D}});
}

Tensor attention(const ParamStore& p, const std::string& prefix, const Tensor& x, int heads, double dropout,
                 bool causal) {
  const Tensor a = ops::attention(linear(p, prefix + ".c_attn", x), heads, causal, dropout);
  return ops::dropout(linear(p, prefix + ".c_proj", a), dropout);
}

Tensor mlp(const ParamStore& p, const std::string& prefix, const Tensor& x, double dropout) {
  return ops::dropout(linear(p, prefix + ".c_proj", ops::gelu_tanh(linear(p, prefix + ".c_fc", x))), dropout);
}

Tensor embeddings(const ParamStore& p, const Tensor& tokens, double dropout) {
  return ops::dropout(ops::add(ops::embedding(p["wte.weight"], tokens),
                               ops::embedding(p["wpe.weight"], positions(tokens))),
                      dropout);
}

Tensor tied_head(const ParamStore& p, const Tensor& x) {
  return ops::linear(ops::layer_norm(x, p["ln_f.weight"], p["ln_f.bias"], 1e-5), p["wte.weight"]);
}

}  // namespace remat::gpt
