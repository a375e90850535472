// revformer: reversible decoder, RevNet/Reformer coupling (docs/models.md).
//   x = wte[tokens] + wpe[0..S);  x1 = x;  x2 = x
//   for i: y1 = x1 + F_i(x2);  y2 = x2 + G_i(y1)
//   logits = LN_f((x1 + x2) / 2) @ wte^T
// F_i(z) = Attn(LN(z)), G_i(z) = MLP(LN(z)), each as in gpt2, and split by
// tensor (and sequence) parallelism as gpt2's are (zoo/gpt_layers.hpp). Its
// blocks are marked reversible, so the `reversible` strategy can rebuild
// their inputs: under a split, each rank rebuilds its own (x1, x2), the
// collectives in F and G run again on every rank alike.
#include "autodiff/ops/ops.hpp"
#include "autodiff/region.hpp"
#include "zoo/common.hpp"
#include "zoo/context_parallel.hpp"
#include "zoo/gpt_layers.hpp"
#include "zoo/model.hpp"

namespace remat {
namespace {

class Revformer final : public Model {
 public:
  using Model::Model;

  std::vector<ParamSpec> params() const override {
    const std::int64_t D = sizes_.D;
    const RankGroup& group = sizes_.tp;
    std::vector<ParamSpec> p;
    gpt::append_embeddings(p, sizes_.V, D, sizes_.S_max, group);
    for (int i = 0; i < sizes_.L; ++i) {
      const std::string h = block_name(i) + ".";
      append_layer_norm(p, h + "f.ln", D);
      gpt::append_attention(p, h + "f.attn", D, group);
      append_layer_norm(p, h + "g.ln", D);
      gpt::append_mlp(p, h + "g.mlp", D, group);
    }
    append_layer_norm(p, "ln_f", D);
    return p;
  }

  Tensor logits(const ParamStore& p, const Batch& batch) const override {
    const Tensor tokens = cp::rows(batch.tokens, sizes_.cp);
    // Both streams start as the embeddings; no third handle keeps them alive
    // past the first block (under LoRA nothing saves them, and a handle here
    // would hold a stream through the whole forward).
    Tensor x1 = gpt::embeddings(p, tokens, sizes_.dropout, sizes_.tp, sizes_.cp), x2 = x1;
    for (int i = 0; i < sizes_.L; ++i) {
      const ReversibleBody body{[this, &p, i](const Tensor& z) { return f(p, i, z); },
                                [this, &p, i](const Tensor& z) { return g(p, i, z); }};
      const Tensors y = run_reversible_block({i, sizes_.L, block_name(i)}, x1, x2, body);
      x1 = y[0];
      x2 = y[1];
    }
    return gpt::tied_head(p, ops::scale(ops::add(x1, x2), 0.5), sizes_.tp);
  }

 private:
  static std::string block_name(int i) { return "h." + std::to_string(i); }

  Tensor f(const ParamStore& p, int i, const Tensor& z) const {  // Attn(LN(z))
    const std::string h = block_name(i) + ".f.";
    return gpt::attention(p, h + "attn", gpt::layer_norm(p, h + "ln", z, sizes_.tp), sizes_.H, sizes_.dropout, true,
                          sizes_.tp, sizes_.cp);
  }

  Tensor g(const ParamStore& p, int i, const Tensor& z) const {  // MLP(LN(z))
    const std::string h = block_name(i) + ".g.";
    return gpt::mlp(p, h + "mlp", gpt::layer_norm(p, h + "ln", z, sizes_.tp), sizes_.dropout, sizes_.tp);
  }
};

}  // namespace

void register_revformer(ModelRegistry& r) {
  r.add({"revformer", "reversible decoder (RevNet coupling of gpt2's attention and MLP), tied head", true,
         [](const Sizes& s) { return std::make_unique<Revformer>(s); }, {}, /*tensor_parallel=*/true, {},
         gpt::mlp_hidden, /*grouped_kv=*/false, /*context_parallel=*/true});
}

}  // namespace remat
