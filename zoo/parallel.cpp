// parallel: a GPT-J / GPT-NeoX-style decoder whose blocks run attention and
// MLP side by side on one LayerNorm, learned positions, tied head.
//   x = wte[tokens] + wpe[0..S)
//   for i: a = LN_i(x);  x = x + Attn_i(a) + MLP_i(a)
//   logits = LN_f(x) @ wte^T
// Attn and MLP as in gpt2 (zoo/gpt_layers.hpp), split alike by tensor
// parallelism: each branch's row-parallel output is summed over the ranks
// on its own (under sequence parallelism each gathers the LayerNorm's
// output for itself). Added by following docs/adding-a-model.md.
#include "autodiff/ops/ops.hpp"
#include "autodiff/region.hpp"
#include "zoo/common.hpp"
#include "zoo/context_parallel.hpp"
#include "zoo/gpt_layers.hpp"
#include "zoo/model.hpp"

namespace remat {
namespace {

class Parallel final : public Model {
 public:
  using Model::Model;

  std::vector<ParamSpec> params() const override {
    const std::int64_t D = sizes_.D;
    std::vector<ParamSpec> p;
    const RankGroup& group = sizes_.tp;
    gpt::append_embeddings(p, sizes_.V, D, sizes_.S_max, group);
    for (int i = 0; i < sizes_.L; ++i) {
      const std::string h = block_name(i) + ".";
      append_layer_norm(p, h + "ln", D);
      gpt::append_attention(p, h + "attn", D, group);
      gpt::append_mlp(p, h + "mlp", D, group);
    }
    append_layer_norm(p, "ln_f", D);
    return p;
  }

  Tensor logits(const ParamStore& p, const Batch& batch) const override {
    const Tensor tokens = cp::rows(batch.tokens, sizes_.cp);
    Tensor x = gpt::embeddings(p, tokens, sizes_.dropout, sizes_.tp, sizes_.cp);
    for (int i = 0; i < sizes_.L; ++i)
      x = run_block({i, sizes_.L, block_name(i)}, x, [this, &p, i](const Tensor& x) { return block(p, i, x); });
    return gpt::tied_head(p, x, sizes_.tp);
  }

 private:
  static std::string block_name(int i) { return "h." + std::to_string(i); }

  Tensor block(const ParamStore& p, int i, const Tensor& x) const {
    const std::string h = block_name(i) + ".";
    const Tensor a = gpt::layer_norm(p, h + "ln", x, sizes_.tp);
    const Tensor attn = gpt::attention(p, h + "attn", a, sizes_.H, sizes_.dropout, true, sizes_.tp, sizes_.cp);
    return ops::add(ops::add(x, attn), gpt::mlp(p, h + "mlp", a, sizes_.dropout, sizes_.tp));
  }
};

}  // namespace

void register_parallel(ModelRegistry& r) {
  r.add({"parallel", "GPT-J/NeoX-style decoder: attention and MLP in parallel on one LayerNorm, tied head", false,
         [](const Sizes& s) { return std::make_unique<Parallel>(s); }, {}, /*tensor_parallel=*/true, {},
         gpt::mlp_hidden, /*grouped_kv=*/false, /*context_parallel=*/true});
}

}  // namespace remat
