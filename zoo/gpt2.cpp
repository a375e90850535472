// gpt2: decoder, pre-LayerNorm, learned positions, tied head (MODELS.md).
//   x = wte[tokens] + wpe[0..S)
//   for i: h = x + Attn_i(LN1_i(x));  x = h + MLP_i(LN2_i(h))
//   logits = LN_f(x) @ wte^T
// Dropout (when set) where GPT-2 has it: embeddings, attention
// probabilities, and each residual branch.
#include "autodiff/ops/ops.hpp"
#include "autodiff/region.hpp"
#include "zoo/common.hpp"
#include "zoo/model.hpp"

namespace remat {
namespace {

class Gpt2 final : public Model {
 public:
  using Model::Model;

  std::vector<ParamSpec> params() const override {
    const std::int64_t V = sizes_.V, D = sizes_.D, Smax = sizes_.S_max;
    std::vector<ParamSpec> p = {{"wte.weight", {V, D}}, {"wpe.weight", {Smax, D}}};
    for (int i = 0; i < sizes_.L; ++i) {
      const std::string h = block_name(i) + ".";
      append_layer_norm(p, h + "ln_1", D);
      append_linear(p, h + "attn.c_attn", 3 * D, D);
      append_linear(p, h + "attn.c_proj", D, D, Init::residual_out);
      append_layer_norm(p, h + "ln_2", D);
      append_linear(p, h + "mlp.c_fc", 4 * D, D);
      append_linear(p, h + "mlp.c_proj", D, 4 * D, Init::residual_out);
    }
    append_layer_norm(p, "ln_f", D);
    return p;
  }

  Tensor logits(const ParamStore& p, const Tensor& tokens) const override {
    const Tensor& wte = p["wte.weight"];
    Tensor x = ops::add(ops::embedding(wte, tokens), ops::embedding(p["wpe.weight"], positions(tokens)));
    x = ops::dropout(x, sizes_.dropout);
    for (int i = 0; i < sizes_.L; ++i)
      x = run_block({i, sizes_.L, block_name(i)}, x, [this, &p, i](const Tensor& x) { return block(p, i, x); });
    return ops::linear(ops::layer_norm(x, p["ln_f.weight"], p["ln_f.bias"], 1e-5), wte);
  }

 private:
  static std::string block_name(int i) { return "h." + std::to_string(i); }

  Tensor block(const ParamStore& p, int i, const Tensor& x) const {
    const std::string h = block_name(i) + ".";
    const double drop = sizes_.dropout;
    Tensor a = ops::layer_norm(x, p[h + "ln_1.weight"], p[h + "ln_1.bias"], 1e-5);
    a = ops::attention(ops::linear(a, p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"]), sizes_.H,
                       /*causal=*/true, drop);
    a = ops::dropout(ops::linear(a, p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"]), drop);
    const Tensor r = ops::add(x, a);
    Tensor m = ops::layer_norm(r, p[h + "ln_2.weight"], p[h + "ln_2.bias"], 1e-5);
    m = ops::gelu_tanh(ops::linear(m, p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"]));
    m = ops::dropout(ops::linear(m, p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"]), drop);
    return ops::add(r, m);
  }
};

}  // namespace

void register_gpt2(ModelRegistry& r) {
  r.add({"gpt2", "decoder, pre-LayerNorm, learned positions, GELU MLP, tied head", false,
         [](const Sizes& s) { return std::make_unique<Gpt2>(s); }});
}

}  // namespace remat
