// gpt2: decoder, pre-LayerNorm, learned positions, tied head (docs/models.md).
//   x = wte[tokens] + wpe[0..S)
//   for i: h = x + Attn_i(LN1_i(x));  x = h + MLP_i(LN2_i(h))
//   logits = LN_f(x) @ wte^T
// Dropout (when set) where GPT-2 has it: embeddings, attention
// probabilities, and each residual branch. Split by tensor parallelism as
// zoo/gpt_layers.hpp says, and the sequence by context parallelism
// (zoo/context_parallel.hpp).
#include "autodiff/ops/ops.hpp"
#include "autodiff/region.hpp"
#include "zoo/common.hpp"
#include "zoo/context_parallel.hpp"
#include "zoo/gpt_layers.hpp"
#include "zoo/model.hpp"

namespace remat {
namespace {

class Gpt2 final : public Model {
 public:
  using Model::Model;

  std::vector<ParamSpec> params() const override {
    const std::int64_t D = sizes_.D;
    std::vector<ParamSpec> p;
    const RankGroup& group = sizes_.tp;
    gpt::append_embeddings(p, sizes_.V, D, sizes_.S_max, group);
    for (int i = 0; i < sizes_.L; ++i) {
      const std::string h = block_name(i) + ".";
      append_layer_norm(p, h + "ln_1", D);
      gpt::append_attention(p, h + "attn", D, group);
      append_layer_norm(p, h + "ln_2", D);
      gpt::append_mlp(p, h + "mlp", D, group);
    }
    append_layer_norm(p, "ln_f", D);
    return p;
  }

  bool staged() const override { return true; }
  Tensors embed(const ParamStore& p, const Batch& batch) const override {
    return {gpt::embeddings(p, cp::rows(batch.tokens, sizes_.cp), sizes_.dropout, sizes_.tp, sizes_.cp)};
  }
  std::string layer_name(int i) const override { return block_name(i); }
  Tensor head_logits(const ParamStore& p, const Tensor& x) const override { return gpt::tied_head(p, x, sizes_.tp); }

  Tensors layer(const ParamStore& p, int i, const Tensors& in) const override {
    const Tensor& x = in[0];
    const std::string h = block_name(i) + ".";
    const Tensor a = gpt::layer_norm(p, h + "ln_1", x, sizes_.tp);
    const Tensor r = ops::add(x, gpt::attention(p, h + "attn", a, sizes_.H, sizes_.dropout, true, sizes_.tp, sizes_.cp));
    const Tensor m = gpt::layer_norm(p, h + "ln_2", r, sizes_.tp);
    return {ops::add(r, gpt::mlp(p, h + "mlp", m, sizes_.dropout, sizes_.tp))};
  }

 private:
  static std::string block_name(int i) { return "h." + std::to_string(i); }
};

}  // namespace

void register_gpt2(ModelRegistry& r) {
  r.add({"gpt2", "decoder, pre-LayerNorm, learned positions, GELU MLP, tied head", false,
         [](const Sizes& s) { return std::make_unique<Gpt2>(s); }, {}, /*tensor_parallel=*/true, {}, gpt::mlp_hidden,
         /*grouped_kv=*/false, /*context_parallel=*/true});
}

}  // namespace remat
