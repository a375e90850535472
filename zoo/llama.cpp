// llama: decoder, RMSNorm, rotary positions, SwiGLU, grouped-query attention,
// untied output (docs/models.md). Split by tensor parallelism as Megatron
// does (zoo/tensor_parallel.hpp): heads, the SwiGLU's hidden size and the
// vocabulary (embedding and output); the sequence by context parallelism
// (zoo/context_parallel.hpp).
//   x = tok_embeddings[tokens]
//   for i: h = x + Attn_i(RMS1_i(x));  x = h + FFN_i(RMS2_i(h))
//   logits = output(RMS_f(x))
#include "autodiff/ops/ops.hpp"
#include "autodiff/region.hpp"
#include "zoo/common.hpp"
#include "zoo/context_parallel.hpp"
#include "zoo/llama_layers.hpp"
#include "zoo/model.hpp"
#include "zoo/tensor_parallel.hpp"

namespace remat {
namespace {

class Llama final : public Model {
 public:
  using Model::Model;

  std::vector<ParamSpec> params() const override {
    const std::int64_t V = sizes_.V, D = sizes_.D, F = sizes_.F;
    const RankGroup& group = sizes_.tp;
    std::vector<ParamSpec> p;
    tp::append_vocabulary(p, "tok_embeddings.weight", V, D, group);
    for (int i = 0; i < sizes_.L; ++i) {
      const std::string l = block_name(i) + ".";
      p.push_back({l + "attention_norm.weight", {D}, Init::ones});
      llama::append_attention(p, l + "attention", sizes_);
      p.push_back({l + "ffn_norm.weight", {D}, Init::ones});
      tp::append_column(p, l + "feed_forward.w1", F, D, group, Init::normal, false);
      tp::append_row(p, l + "feed_forward.w2", D, F, group, Init::residual_out, false);
      tp::append_column(p, l + "feed_forward.w3", F, D, group, Init::normal, false);
    }
    p.push_back({"norm.weight", {D}, Init::ones});
    tp::append_column(p, "output", V, D, group, Init::normal, false);
    return p;
  }

  bool staged() const override { return true; }
  Tensors embed(const ParamStore& p, const Batch& batch) const override {
    const RankGroup& group = sizes_.tp;
    return {tp::dropout(tp::embedding(p, "tok_embeddings.weight", cp::rows(batch.tokens, sizes_.cp), group), sizes_.dropout, group)};
  }
  std::string layer_name(int i) const override { return block_name(i); }
  Tensor head_logits(const ParamStore& p, const Tensor& x) const override {
    const RankGroup& group = sizes_.tp;
    return linear(p, "output", tp::enter(ops::rms_norm(x, tp::shared(p, "norm.weight", group), sizes_.eps), group), false);
  }

  Tensors layer(const ParamStore& p, int i, const Tensors& stream) const override {
    const Tensor& x = stream[0];
    const std::string l = block_name(i) + ".";
    const double drop = sizes_.dropout;
    const RankGroup& group = sizes_.tp;
    const Tensor a = ops::rms_norm(x, tp::shared(p, l + "attention_norm.weight", group), sizes_.eps);
    const Tensor h = ops::add(x, llama::attention(p, l + "attention", a, sizes_));
    const Tensor m = ops::rms_norm(h, tp::shared(p, l + "ffn_norm.weight", group), sizes_.eps);
    const Tensor in = tp::enter(m, sizes_.tp);
    const Tensor gated =
        ops::swiglu(linear(p, l + "feed_forward.w1", in, false), linear(p, l + "feed_forward.w3", in, false));
    return {ops::add(h, tp::dropout(tp::row_linear(p, l + "feed_forward.w2", gated, sizes_.tp, false), drop, sizes_.tp))};
  }

 private:
  static std::string block_name(int i) { return "layers." + std::to_string(i); }
};

}  // namespace

void register_llama(ModelRegistry& r) {
  r.add({"llama", "decoder, RMSNorm, rotary positions, SwiGLU, grouped-query attention, untied head", false,
         [](const Sizes& s) { return std::make_unique<Llama>(s); }, {"theta", "eps", "qkv_bias", "rope_scaling"}, /*tensor_parallel=*/true,
         {}, nullptr, /*grouped_kv=*/true, /*context_parallel=*/true});
}

}  // namespace remat
