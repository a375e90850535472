// llama: decoder, RMSNorm, rotary positions, SwiGLU, grouped-query attention,
// untied output (docs/models.md).
//   x = tok_embeddings[tokens]
//   for i: h = x + Attn_i(RMS1_i(x));  x = h + FFN_i(RMS2_i(h))
//   logits = output(RMS_f(x))
#include "autodiff/ops/ops.hpp"
#include "autodiff/region.hpp"
#include "zoo/common.hpp"
#include "zoo/llama_layers.hpp"
#include "zoo/model.hpp"

namespace remat {
namespace {

class Llama final : public Model {
 public:
  using Model::Model;

  std::vector<ParamSpec> params() const override {
    const std::int64_t V = sizes_.V, D = sizes_.D, F = sizes_.F;
    std::vector<ParamSpec> p = {{"tok_embeddings.weight", {V, D}}};
    for (int i = 0; i < sizes_.L; ++i) {
      const std::string l = block_name(i) + ".";
      p.push_back({l + "attention_norm.weight", {D}, Init::ones});
      llama::append_attention(p, l + "attention", sizes_);
      p.push_back({l + "ffn_norm.weight", {D}, Init::ones});
      append_linear(p, l + "feed_forward.w1", F, D, Init::normal, false);
      append_linear(p, l + "feed_forward.w2", D, F, Init::residual_out, false);
      append_linear(p, l + "feed_forward.w3", F, D, Init::normal, false);
    }
    p.push_back({"norm.weight", {D}, Init::ones});
    append_linear(p, "output", V, D, Init::normal, false);
    return p;
  }

  Tensor logits(const ParamStore& p, const Batch& batch) const override {
    const Tensor& tokens = batch.tokens;
    Tensor x = ops::dropout(ops::embedding(p["tok_embeddings.weight"], tokens), sizes_.dropout);
    for (int i = 0; i < sizes_.L; ++i)
      x = run_block({i, sizes_.L, block_name(i)}, x, [this, &p, i](const Tensor& x) { return block(p, i, x); });
    return linear(p, "output", ops::rms_norm(x, p["norm.weight"], 1e-5), false);
  }

 private:
  static std::string block_name(int i) { return "layers." + std::to_string(i); }

  Tensor block(const ParamStore& p, int i, const Tensor& x) const {
    const std::string l = block_name(i) + ".";
    const double drop = sizes_.dropout;
    const Tensor h = ops::add(x, llama::attention(p, l + "attention", ops::rms_norm(x, p[l + "attention_norm.weight"], 1e-5), sizes_));
    const Tensor m = ops::rms_norm(h, p[l + "ffn_norm.weight"], 1e-5);
    const Tensor gated = ops::swiglu(linear(p, l + "feed_forward.w1", m, false), linear(p, l + "feed_forward.w3", m, false));
    return ops::add(h, ops::dropout(linear(p, l + "feed_forward.w2", gated, false), drop));
  }
};

}  // namespace

void register_llama(ModelRegistry& r) {
  r.add({"llama", "decoder, RMSNorm, rotary positions, SwiGLU, grouped-query attention, untied head", false,
         [](const Sizes& s) { return std::make_unique<Llama>(s); }, {"theta"}});
}

}  // namespace remat
