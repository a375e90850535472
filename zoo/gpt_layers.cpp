#include "zoo/gpt_layers.hpp"

#include "autodiff/ops/ops.hpp"
#include "core/error.hpp"
#include "zoo/common.hpp"
#include "zoo/context_parallel.hpp"
#include "zoo/tensor_parallel.hpp"

namespace remat::gpt {
void append_attention(std::vector<ParamSpec>& p, const std::string& prefix, std::int64_t D, const RankGroup& group) {
  tp::append_column(p, prefix + ".c_attn", 3 * D, D, group, Init::normal, true, /*blocks=*/3);
  tp::append_row(p, prefix + ".c_proj", D, D, group);
}

void append_mlp(std::vector<ParamSpec>& p, const std::string& prefix, std::int64_t D, const RankGroup& group) {
  tp::append_column(p, prefix + ".c_fc", 4 * D, D, group);
  tp::append_row(p, prefix + ".c_proj", D, 4 * D, group);
}

void append_embeddings(std::vector<ParamSpec>& p, std::int64_t V, std::int64_t D, std::int64_t S_max,
                       const RankGroup& group) {
  tp::append_vocabulary(p, "wte.weight", V, D, group);
  p.push_back({"wpe.weight", {S_max, D}});
}

Tensor layer_norm(const ParamStore& p, const std::string& prefix, const Tensor& x, const RankGroup& group) {
  return ops::layer_norm(x, tp::shared(p, prefix + ".weight", group), tp::shared(p, prefix + ".bias", group), 1e-5);
}

Tensor attention(const ParamStore& p, const std::string& prefix, const Tensor& x, int heads, double dropout,
                 bool causal, const RankGroup& group, const RankGroup& context) {
  const Tensor qkv = linear(p, prefix + ".c_attn", tp::enter(x, group));
  const Tensor a = tp::on_my_heads(group, [&] {
    return context.split() ? ops::ring_attention(qkv, heads / group.size, context, causal, dropout)
                           : ops::attention(qkv, heads / group.size, causal, dropout);
  });
  return tp::dropout(tp::row_linear(p, prefix + ".c_proj", a, group), dropout, group);
}

Tensor mlp(const ParamStore& p, const std::string& prefix, const Tensor& x, double dropout, const RankGroup& group) {
  const Tensor h = ops::gelu_tanh(linear(p, prefix + ".c_fc", tp::enter(x, group)));
  return tp::dropout(tp::row_linear(p, prefix + ".c_proj", h, group), dropout, group);
}

Tensor embeddings(const ParamStore& p, const Tensor& tokens, double dropout, const RankGroup& group,
                  const RankGroup& context) {
  return tp::dropout(ops::add(tp::embedding(p, "wte.weight", tokens, group),
                               ops::embedding(tp::shared(p, "wpe.weight", group), cp::positions(tokens, context, group))),
                      dropout, group);
}

Tensor tied_head(const ParamStore& p, const Tensor& x, const RankGroup& group) {
  return ops::linear(tp::enter(layer_norm(p, "ln_f", x, group), group), p["wte.weight"]);
}

}  // namespace remat::gpt
