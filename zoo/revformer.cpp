// revformer: reversible decoder, RevNet/Reformer coupling (MODELS.md).
//   x = wte[tokens] + wpe[0..S);  x1 = x;  x2 = x
//   for i: y1 = x1 + F_i(x2);  y2 = x2 + G_i(y1)
//   logits = LN_f((x1 + x2) / 2) @ wte^T
// F_i(z) = Attn(LN(z)), G_i(z) = MLP(LN(z)), each as in gpt2. Its blocks are
// marked reversible, so the `reversible` strategy can rebuild their inputs.
#include "autodiff/ops/ops.hpp"
#include "autodiff/region.hpp"
#include "zoo/common.hpp"
#include "zoo/model.hpp"

namespace remat {
namespace {

class Revformer final : public Model {
 public:
  using Model::Model;

  std::vector<ParamSpec> params() const override {
    const std::int64_t V = sizes_.V, D = sizes_.D, Smax = sizes_.S_max;
    std::vector<ParamSpec> p = {{"wte.weight", {V, D}}, {"wpe.weight", {Smax, D}}};
    for (int i = 0; i < sizes_.L; ++i) {
      const std::string h = block_name(i) + ".";
      append_layer_norm(p, h + "f.ln", D);
      append_linear(p, h + "f.attn.c_attn", 3 * D, D);
      append_linear(p, h + "f.attn.c_proj", D, D, Init::residual_out);
      append_layer_norm(p, h + "g.ln", D);
      append_linear(p, h + "g.mlp.c_fc", 4 * D, D);
      append_linear(p, h + "g.mlp.c_proj", D, 4 * D, Init::residual_out);
    }
    append_layer_norm(p, "ln_f", D);
    return p;
  }

  Tensor logits(const ParamStore& p, const Tensor& tokens) const override {
    const Tensor& wte = p["wte.weight"];
    Tensor x = ops::add(ops::embedding(wte, tokens), ops::embedding(p["wpe.weight"], positions(tokens)));
    x = ops::dropout(x, sizes_.dropout);
    Tensor x1 = x, x2 = x;
    for (int i = 0; i < sizes_.L; ++i) {
      const ReversibleBody body{[this, &p, i](const Tensor& z) { return f(p, i, z); },
                                [this, &p, i](const Tensor& z) { return g(p, i, z); }};
      const Tensors y = run_reversible_block({i, sizes_.L, block_name(i)}, x1, x2, body);
      x1 = y[0];
      x2 = y[1];
    }
    const Tensor mean = ops::scale(ops::add(x1, x2), 0.5);
    return ops::linear(ops::layer_norm(mean, p["ln_f.weight"], p["ln_f.bias"], 1e-5), wte);
  }

 private:
  static std::string block_name(int i) { return "h." + std::to_string(i); }

  Tensor f(const ParamStore& p, int i, const Tensor& z) const {
    const std::string h = block_name(i) + ".f.";
    Tensor a = ops::layer_norm(z, p[h + "ln.weight"], p[h + "ln.bias"], 1e-5);
    a = ops::attention(ops::linear(a, p[h + "attn.c_attn.weight"], p[h + "attn.c_attn.bias"]), sizes_.H, true,
                       sizes_.dropout);
    return ops::dropout(ops::linear(a, p[h + "attn.c_proj.weight"], p[h + "attn.c_proj.bias"]), sizes_.dropout);
  }

  Tensor g(const ParamStore& p, int i, const Tensor& z) const {
    const std::string h = block_name(i) + ".g.";
    Tensor m = ops::layer_norm(z, p[h + "ln.weight"], p[h + "ln.bias"], 1e-5);
    m = ops::gelu_tanh(ops::linear(m, p[h + "mlp.c_fc.weight"], p[h + "mlp.c_fc.bias"]));
    return ops::dropout(ops::linear(m, p[h + "mlp.c_proj.weight"], p[h + "mlp.c_proj.bias"]), sizes_.dropout);
  }
};

}  // namespace

void register_revformer(ModelRegistry& r) {
  r.add({"revformer", "reversible decoder (RevNet coupling of gpt2's attention and MLP), tied head", true,
         [](const Sizes& s) { return std::make_unique<Revformer>(s); }});
}

}  // namespace remat
