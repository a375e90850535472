// encdec: a pre-LayerNorm encoder-decoder with cross-attention
// (docs/models.md), gpt2's LayerNorm, attention and MLP, one token embedding
// shared by both sides and tied to the head:
//   e = wte[tokens] + enc.wpe;  for i < L/2: e += Attn(LN1 e) (bidirectional);  e += MLP(LN2 e)
//   e = enc.ln_f(e)
//   d = wte[0, targets[:, :S-1]] + dec.wpe   (teacher forcing)
//   for i < L/2: d += Attn(LN1 d) (causal);  d += Cross(LN2 d, e);  d += MLP(LN3 d)
//   logits = dec.ln_f(d) @ wte^T
// Blocks: the encoder's, then the decoder's, one chain of L for the
// strategies. Every decoder block reads the encoder's output e: it is each
// decoder block's context input (BlockInfo::context), so strategies keep it
// once, not once per checkpoint region; the first decoder block starts a new
// stack (its input is the decoder's embedding, not the encoder's last
// output), so no checkpoint segment runs across the two. Under context
// parallelism (zoo/context_parallel.hpp) a rank holds the same rows of both
// sequences (the zig-zag chunks); the encoder's attention and the
// cross-attention see every chunk around the ring, the decoder's causally.
#include "autodiff/ops/ops.hpp"
#include "autodiff/region.hpp"
#include "core/error.hpp"
#include "zoo/common.hpp"
#include "zoo/context_parallel.hpp"
#include "zoo/gpt_layers.hpp"
#include "zoo/model.hpp"
#include "zoo/tensor_parallel.hpp"

namespace remat {
namespace {

class Encdec final : public Model {
 public:
  explicit Encdec(const Sizes& s) : Model(s) {
    if (s.L % 2 != 0)
      throw UserError("encdec: L = " + std::to_string(s.L) + " must be even (L/2 encoder and L/2 decoder blocks)");
  }

  std::vector<ParamSpec> params() const override {
    const std::int64_t D = sizes_.D;
    const RankGroup& group = sizes_.tp;
    std::vector<ParamSpec> p;
    tp::append_vocabulary(p, "wte.weight", sizes_.V, D, group);
    p.push_back({"enc.wpe.weight", {sizes_.S_max, D}});
    for (int i = 0; i < half(); ++i) {
      const std::string h = "enc.h." + std::to_string(i) + ".";
      append_layer_norm(p, h + "ln_1", D);
      gpt::append_attention(p, h + "attn", D, group);
      append_layer_norm(p, h + "ln_2", D);
      gpt::append_mlp(p, h + "mlp", D, group);
    }
    append_layer_norm(p, "enc.ln_f", D);
    p.push_back({"dec.wpe.weight", {sizes_.S_max, D}});
    for (int i = 0; i < half(); ++i) {
      const std::string h = "dec.h." + std::to_string(i) + ".";
      append_layer_norm(p, h + "ln_1", D);
      gpt::append_attention(p, h + "attn", D, group);
      append_layer_norm(p, h + "ln_2", D);
      tp::append_column(p, h + "cross.c_q", D, D, group);
      tp::append_column(p, h + "cross.c_kv", 2 * D, D, group, Init::normal, true, /*blocks=*/2);
      tp::append_row(p, h + "cross.c_proj", D, D, group);
      append_layer_norm(p, h + "ln_3", D);
      gpt::append_mlp(p, h + "mlp", D, group);
    }
    append_layer_norm(p, "dec.ln_f", D);
    return p;
  }

  // Stages: blocks 0 .. L/2-1 the encoder's, L/2 .. L-1 the decoder's; the
  // encoder's final norm and the decoder's embedding run on the stage of the
  // first decoder block, before it (outside any block, as in one process).
  bool staged() const override { return true; }
  std::string layer_name(int i) const override {
    return i < half() ? "enc.h." + std::to_string(i) : "dec.h." + std::to_string(i - half());
  }
  // Into a decoder block past the first: its stream and the encoder's output,
  // which every cross-attention reads (its gradient summed back over them).
  std::vector<StageEdge> stage_edges(int layer) const override {
    const Shape stream{sizes_.B, sizes_.S, sizes_.D};
    if (layer > half()) return {{stream, true, true}, {stream, true, true}};
    return {{stream, true, true}};
  }
  Tensors embed(const ParamStore& p, const Batch& batch) const override {
    return {embed_tokens(p, cp::rows(batch.tokens, sizes_.cp), "enc.wpe.weight")};
  }
  Tensors layers(const ParamStore& p, Tensors x, int first, int last, const Batch& batch) const override {
    const int Le = half(), L = sizes_.L;
    Tensors y = std::move(x);
    for (int i = first; i < last; ++i) {
      if (i < Le) {
        y = run_block({i, L, layer_name(i)}, y, [this, &p, i](const Tensors& in) { return Tensors{encoder_block(p, i, in[0])}; });
        continue;
      }
      if (i == Le) {
        const Tensor e = norm(p, "enc.ln_f", y[0]);
        y = {embed_tokens(p, cp::rows(shift_right(batch.targets), sizes_.cp), "dec.wpe.weight"), e};
      }
      const int j = i - Le;
      y = run_block({i, L, layer_name(i), /*context=*/1, /*new_stack=*/j == 0}, y,
                    [this, &p, j](const Tensors& in) { return Tensors{decoder_block(p, j, in[0], in[1]), in[1]}; });
    }
    return y;
  }
  Tensor head_logits(const ParamStore& p, const Tensor& x) const override {
    return ops::linear(tp::enter(norm(p, "dec.ln_f", x), sizes_.tp), p["wte.weight"]);
  }

 private:
  int half() const { return sizes_.L / 2; }

  Tensor norm(const ParamStore& p, const std::string& prefix, const Tensor& x) const {
    return gpt::layer_norm(p, prefix, x, sizes_.tp);
  }

  Tensor embed_tokens(const ParamStore& p, const Tensor& ids, const std::string& positions_table) const {
    return tp::dropout(ops::add(tp::embedding(p, "wte.weight", ids, sizes_.tp),
                                 ops::embedding(tp::shared(p, positions_table, sizes_.tp),
                                                cp::positions(ids, sizes_.cp, sizes_.tp))),
                        sizes_.dropout, sizes_.tp);
  }

  Tensor encoder_block(const ParamStore& p, int i, const Tensor& x) const {
    const std::string h = "enc.h." + std::to_string(i) + ".";
    const Tensor r = ops::add(x, gpt::attention(p, h + "attn", norm(p, h + "ln_1", x), sizes_.H, sizes_.dropout,
                                                /*causal=*/false, sizes_.tp, sizes_.cp));
    return ops::add(r, gpt::mlp(p, h + "mlp", norm(p, h + "ln_2", r), sizes_.dropout, sizes_.tp));
  }

  Tensor decoder_block(const ParamStore& p, int i, const Tensor& x, const Tensor& e) const {
    const std::string h = "dec.h." + std::to_string(i) + ".";
    const Tensor a = ops::add(x, gpt::attention(p, h + "attn", norm(p, h + "ln_1", x), sizes_.H, sizes_.dropout,
                                                /*causal=*/true, sizes_.tp, sizes_.cp));
    const Tensor c = ops::add(a, cross(p, h + "cross", norm(p, h + "ln_2", a), e));
    return ops::add(c, gpt::mlp(p, h + "mlp", norm(p, h + "ln_3", c), sizes_.dropout, sizes_.tp));
  }

  // dropout(c_proj(attention(c_q(z), c_kv(e)))), no mask; split by heads
  // under tensor parallelism as the self-attention is (c_kv's k | v alike).
  Tensor cross(const ParamStore& p, const std::string& prefix, const Tensor& z, const Tensor& e) const {
    const RankGroup& group = sizes_.tp;
    const Tensor q = linear(p, prefix + ".c_q", tp::enter(z, group));
    const Tensor kv = linear(p, prefix + ".c_kv", tp::enter(e, group));
    const Tensor a = tp::on_my_heads(group, [&] {
      const int heads = sizes_.H / group.size;
      return sizes_.cp.split() ? ops::ring_attention(q, kv, heads, sizes_.cp, false, sizes_.dropout)  // encoder keys around the ring
                               : ops::attention(q, kv, heads, false, sizes_.dropout);
    });
    return tp::dropout(tp::row_linear(p, prefix + ".c_proj", a, group), sizes_.dropout, group);
  }
};

}  // namespace

void register_encdec(ModelRegistry& r) {
  r.add({"encdec", "pre-LayerNorm encoder-decoder: gpt2's blocks, cross-attention on the encoder's output, tied head",
         false, [](const Sizes& s) { return std::make_unique<Encdec>(s); }, {}, /*tensor_parallel=*/true, {},
         gpt::mlp_hidden, /*grouped_kv=*/false, /*context_parallel=*/true});
}

}  // namespace remat
