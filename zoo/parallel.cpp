// parallel: a GPT-J / GPT-NeoX-style decoder whose blocks run attention and
// MLP side by side on one LayerNorm, learned positions, tied head.
//   x = wte[tokens] + wpe[0..S)
//   for i: a = LN_i(x);  x = x + Attn_i(a) + MLP_i(a)
//   logits = LN_f(x) @ wte^T
// Attn and MLP as in gpt2 (tanh GELU). Added by following docs/adding-a-model.md.
#include "autodiff/ops/ops.hpp"
#include "autodiff/region.hpp"
#include "zoo/common.hpp"
#include "zoo/model.hpp"

namespace remat {
namespace {

class Parallel final : public Model {
 public:
  using Model::Model;

  std::vector<ParamSpec> params() const override {
    const std::int64_t V = sizes_.V, D = sizes_.D, Smax = sizes_.S_max;
    std::vector<ParamSpec> p = {{"wte.weight", {V, D}}, {"wpe.weight", {Smax, D}}};
    for (int i = 0; i < sizes_.L; ++i) {
      const std::string h = block_name(i) + ".";
      append_layer_norm(p, h + "ln", D);
      append_linear(p, h + "attn.c_attn", 3 * D, D);
      append_linear(p, h + "attn.c_proj", D, D, Init::residual_out);
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
    auto lin = [&](const Tensor& t, const std::string& name) { return ops::linear(t, p[name + ".weight"], p[name + ".bias"]); };
    const Tensor a = ops::layer_norm(x, p[h + "ln.weight"], p[h + "ln.bias"], 1e-5);
    const Tensor attn = lin(ops::attention(lin(a, h + "attn.c_attn"), sizes_.H, /*causal=*/true, drop), h + "attn.c_proj");
    const Tensor mlp = lin(ops::gelu_tanh(lin(a, h + "mlp.c_fc")), h + "mlp.c_proj");
    return ops::add(ops::add(x, ops::dropout(attn, drop)), ops::dropout(mlp, drop));
  }
};

}  // namespace

void register_parallel(ModelRegistry& r) {
  r.add({"parallel", "GPT-J/NeoX-style decoder: attention and MLP in parallel on one LayerNorm, tied head", false,
         [](const Sizes& s) { return std::make_unique<Parallel>(s); }});
}

}  // namespace remat
