// bert: encoder, post-LayerNorm, bidirectional, exact GELU, untied head with
// bias (docs/models.md).
//   x = LN_e(word[tokens] + pos[0..S))
//   for i: h = LN1_i(x + Attn_i(x));  x = LN2_i(h + MLP_i(h))
//   logits = x @ cls.weight^T + cls.bias
#include "autodiff/ops/ops.hpp"
#include "autodiff/region.hpp"
#include "zoo/common.hpp"
#include "zoo/model.hpp"

namespace remat {
namespace {

constexpr double kEps = 1e-12;  // as BERT

class Bert final : public Model {
 public:
  using Model::Model;

  std::vector<ParamSpec> params() const override {
    const std::int64_t V = sizes_.V, D = sizes_.D, Smax = sizes_.S_max;
    std::vector<ParamSpec> p = {{"embeddings.word_embeddings.weight", {V, D}},
                                {"embeddings.position_embeddings.weight", {Smax, D}}};
    append_layer_norm(p, "embeddings.LayerNorm", D);
    for (int i = 0; i < sizes_.L; ++i) {
      const std::string l = block_name(i) + ".";
      for (const char* proj : {"query", "key", "value"}) append_linear(p, l + "attention.self." + proj, D, D);
      append_linear(p, l + "attention.output.dense", D, D, Init::residual_out);
      append_layer_norm(p, l + "attention.output.LayerNorm", D);
      append_linear(p, l + "intermediate.dense", 4 * D, D);
      append_linear(p, l + "output.dense", D, 4 * D, Init::residual_out);
      append_layer_norm(p, l + "output.LayerNorm", D);
    }
    append_linear(p, "cls", V, D);
    return p;
  }

  Tensor logits(const ParamStore& p, const Batch& batch) const override {
    const Tensor& tokens = batch.tokens;
    Tensor x = ops::add(ops::embedding(p["embeddings.word_embeddings.weight"], tokens),
                        ops::embedding(p["embeddings.position_embeddings.weight"], positions(tokens)));
    x = ops::dropout(ops::layer_norm(x, p["embeddings.LayerNorm.weight"], p["embeddings.LayerNorm.bias"], kEps),
                     sizes_.dropout);
    for (int i = 0; i < sizes_.L; ++i)
      x = run_block({i, sizes_.L, block_name(i)}, x, [this, &p, i](const Tensor& x) { return block(p, i, x); });
    return linear(p, "cls", x);
  }

 private:
  static std::string block_name(int i) { return "encoder.layer." + std::to_string(i); }

  Tensor block(const ParamStore& p, int i, const Tensor& x) const {
    const std::string l = block_name(i) + ".", a = l + "attention.";
    const double drop = sizes_.dropout;
    auto lin = [&](const Tensor& t, const std::string& name) { return linear(p, name, t); };
    const Tensor ctx = ops::attention(lin(x, a + "self.query"), lin(x, a + "self.key"), lin(x, a + "self.value"),
                                      sizes_.H, sizes_.H, /*causal=*/false, drop);
    const Tensor h = ops::layer_norm(ops::add(x, ops::dropout(lin(ctx, a + "output.dense"), drop)),
                                     p[a + "output.LayerNorm.weight"], p[a + "output.LayerNorm.bias"], kEps);
    const Tensor m = lin(ops::gelu_erf(lin(h, l + "intermediate.dense")), l + "output.dense");
    return ops::layer_norm(ops::add(h, ops::dropout(m, drop)), p[l + "output.LayerNorm.weight"],
                           p[l + "output.LayerNorm.bias"], kEps);
  }
};

}  // namespace

void register_bert(ModelRegistry& r) {
  r.add({"bert", "encoder, post-LayerNorm, bidirectional attention, exact GELU, untied head with bias", false,
         [](const Sizes& s) { return std::make_unique<Bert>(s); }});
}

}  // namespace remat
