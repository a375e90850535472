// mixtral: llama with a sparse mixture of experts in place of the FFN
// (docs/models.md), dropless top-k routing:
//   m = RMS2_i(h);  p = softmax(gate m);  the k most probable experts per token
//   y = sum_j w_j expert_sel_j(m),  w renormalised over the selected,
//   expert_e(m) = w2_e(silu(w1_e m) * w3_e m)
// loss = CE + router_aux * E sum_e (C_e / N)(P_e / N) over the N routed rows
// of all layers (Switch Transformer's load balancing, as Hugging Face's
// Mixtral). The blocks carry, beside the hidden state, the running sums of
// the router's probabilities (P, differentiable) and the tokens each expert
// received per layer (no gradient), so that the loss needs nothing kept from
// the blocks beyond what they hand on. Under expert parallelism
// (zoo/expert_parallel.hpp) a rank runs its part of the sequences and holds
// its part of the experts, and the loss and statistics are summed over ranks;
// under context parallelism (zoo/context_parallel.hpp) a rank runs its rows
// of the sequence and its loss is its share of the whole (loss_terms).
#include <optional>

#include "autodiff/ops/ops.hpp"
#include "autodiff/region.hpp"
#include "zoo/common.hpp"
#include "zoo/context_parallel.hpp"
#include "zoo/expert_parallel.hpp"
#include "zoo/llama_layers.hpp"
#include "zoo/model.hpp"
#include "zoo/tensor_parallel.hpp"

namespace remat {
namespace {

// One of a block's three expert matrices, expert by expert: dense weights
// (read as a linear reads them), or quantized ones (QLoRA's frozen experts).
struct Experts {
  std::vector<Tensor> dense;
  std::vector<QuantizedWeight> quantized;
  void add(const ParamStore& p, const std::string& name) {
    const QuantizedWeight* q = p.quantized(name);
    dense.push_back(q ? Tensor() : p.linear_weight(name));
    quantized.push_back(q ? *q : QuantizedWeight());
  }
};

class Mixtral final : public Model {
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
      append_linear(p, l + "block_sparse_moe.gate", sizes_.E, D, Init::normal, false);
      for (int e = ep::first_expert(sizes_); e < ep::first_expert(sizes_) + ep::experts_here(sizes_); ++e) {
        const std::string x = expert(i, e);
        tp::append_column(p, x + "w1", F, D, group, Init::normal, false);
        tp::append_row(p, x + "w2", D, F, group, Init::residual_out, false);
        tp::append_column(p, x + "w3", F, D, group, Init::normal, false);
      }
    }
    p.push_back({"norm.weight", {D}, Init::ones});
    tp::append_column(p, "output", V, D, group, Init::normal, false);
    return p;
  }

  // Stages hand on what the blocks carry: the hidden state, the router's
  // running sums (a gradient comes back for them where the load-balancing
  // loss counts) and its counts (none).
  bool staged() const override { return true; }
  std::string layer_name(int i) const override { return block_name(i); }
  std::vector<StageEdge> stage_edges(int) const override {
    return {{{sizes_.B, sizes_.S, sizes_.D}, true, true},
            {{sizes_.E}, false, sizes_.router_aux > 0},
            {{sizes_.L, sizes_.E}, false, false}};
  }

  // {the embedded tokens, the router probabilities' sums [E], tokens per expert per layer [L, E]}.
  Tensors embed(const ParamStore& p, const Batch& batch) const override {
    // The router's statistics are reductions: kept in the compute type
    // (float32 when the step runs in bfloat16).
    const DType dt = compute_dtype(p["tok_embeddings.weight"].dtype());
    const Tensor tokens = cp::rows(ep::my_sequences(batch.tokens, sizes_.ep), sizes_.cp);
    return {embedded(p, tokens), Tensor::zeros({sizes_.E}, dt, "router_sums"),
            Tensor::zeros({sizes_.L, sizes_.E}, dt, "expert_load")};
  }
  Tensors layer(const ParamStore& p, int i, const Tensors& x) const override { return block(p, i, x); }
  Tensor head_logits(const ParamStore& p, const Tensor& x) const override {
    const Tensor last = ops::rms_norm(x, tp::shared(p, "norm.weight", sizes_.tp), sizes_.eps);
    return linear(p, "output", tp::enter(last, sizes_.tp), false);
  }

  LossTerms head_loss(const ParamStore& p, const Tensors& blocks, const Batch& batch) const override {
    Tensors out = {head_logits(p, blocks.at(0)), blocks.at(1), blocks.at(2)};
    const Tensor targets = ep::my_sequences(batch.targets, sizes_.ep);
    const std::int64_t routed = std::int64_t(sizes_.L) * batch.tokens.numel();  // the whole batch's rows, all layers
    const RankGroup& g = sizes_.ep;
    if (g.split()) {  // the whole batch's: each rank's mean over its part, and the router's counts, summed
      const Tensor ce = ops::all_reduce(ops::scale(tp::cross_entropy(out[0], targets, sizes_.tp), 1.0 / g.size), g);
      out[1] = ops::all_reduce(out[1], g);
      out[2] = ops::all_reduce(out[2], g);
      return terms(ce, ops::load_balancing_loss(out[1], out[2], routed), out[2]);
    }
    const RankGroup& c = sizes_.cp;
    if (c.split()) {
      // Each rank's loss is its share of the whole (summed over the group, as
      // every --cp model's): its rows' cross-entropy share, and 1/N of the
      // load-balancing loss of the router's whole-sequence sums. The
      // probabilities' sum is gathered by an op that also sums its gradient
      // in backward: every rank's 1/N share of the aux loss reaches it.
      const Tensor whole_probs = ops::all_reduce(ops::all_reduce_in_backward(out[1], c), c);
      const Tensor aux = ops::load_balancing_loss(whole_probs, ops::all_reduce(out[2], c), routed);
      return terms(cp::cross_entropy(out[0], targets, sizes_), ops::scale(aux, 1.0 / c.size), out[2]);
    }
    return terms(tp::cross_entropy(out[0], targets, sizes_.tp), ops::load_balancing_loss(out[1], out[2], routed), out[2]);
  }

 private:
  static std::string block_name(int i) { return "layers." + std::to_string(i); }
  static std::string expert(int i, int e) {
    return block_name(i) + ".block_sparse_moe.experts." + std::to_string(e) + ".";
  }

  // The loss: cross-entropy plus router_aux times the load-balancing loss,
  // with both parts and the tokens each expert received.
  LossTerms terms(const Tensor& ce, const Tensor& aux, const Tensor& load) const {
    const Tensor total = sizes_.router_aux > 0 ? ops::add(ce, ops::scale(aux, sizes_.router_aux)) : ce;
    return {total, {{"ce", ce}, {"aux", aux}}, {{"expert_load", load}}};
  }

  Tensor embedded(const ParamStore& p, const Tensor& tokens) const {
    const ep::OwnMasks masks(sizes_.ep);
    return tp::dropout(tp::embedding(p, "tok_embeddings.weight", tokens, sizes_.tp), sizes_.dropout, sizes_.tp);
  }

  Tensors block(const ParamStore& p, int i, const Tensors& in) const {
    const ep::OwnMasks masks(sizes_.ep);
    const std::string l = block_name(i) + ".";
    const Tensor& x = in[0];
    const RankGroup& group = sizes_.tp;
    const Tensor a = ops::rms_norm(x, tp::shared(p, l + "attention_norm.weight", group), sizes_.eps);
    const Tensor h = ops::add(x, llama::attention(p, l + "attention", a, sizes_));
    const Tensor m = ops::rms_norm(h, tp::shared(p, l + "ffn_norm.weight", group), sizes_.eps);
    // The router runs whole on every rank (the same bits: the same routing),
    // under --sp on the whole sequence gathered: its gradient, the same on
    // every rank, comes back as each rank's part of it.
    const Tensor whole = group.sequence ? ops::all_gather_sequence_whole(m, group) : m;
    const Tensor probs = ops::softmax(linear(p, l + "block_sparse_moe.gate", whole, false));
    const ops::Routing route = ops::route_top_k(probs, sizes_.K);
    Experts w1, w2, w3;
    for (int e = ep::first_expert(sizes_); e < ep::first_expert(sizes_) + ep::experts_here(sizes_); ++e) {
      w1.add(p, expert(i, e) + "w1.weight");
      w2.add(p, expert(i, e) + "w2.weight");
      w3.add(p, expert(i, e) + "w3.weight");
    }
    // Under tensor parallelism each expert splits as a SwiGLU MLP does: the
    // combined partial outputs are summed over the ranks (reduce-scattered
    // under --sp), and the gradients of the experts' input and of the routing
    // weights too (each rank's is from its part of the features).
    // Under expert parallelism the rows go to their experts' ranks and back.
    const auto entered = [&group](const Tensor& t) { return group.split() ? ops::all_reduce_in_backward(t, group) : t; };
    const Tensor rows = ops::dispatch(entered(whole), route);
    const std::optional<ops::ExpertExchange> exchange =
        sizes_.ep.split() ? std::optional(ops::plan_expert_exchange(route, sizes_.ep)) : std::nullopt;
    const ops::Routing& mine = exchange ? exchange->local : route;
    const Tensor here = exchange ? ops::to_experts(rows, *exchange, sizes_.ep) : rows;
    const Tensor gated = ops::swiglu(ops::grouped_linear(here, w1.dense, mine, w1.quantized),
                                     ops::grouped_linear(here, w3.dense, mine, w3.quantized));
    const Tensor done = ops::grouped_linear(gated, w2.dense, mine, w2.quantized);
    const Tensor weights = entered(ops::routing_weights(probs, route));
    const Tensor back = exchange ? ops::from_experts(done, *exchange, sizes_.ep) : done;
    const Tensor parts = ops::combine(back, weights, route, whole.shape());
    const Tensor y = !group.split() ? parts
                     : group.sequence ? ops::reduce_scatter_sequence(parts, group)
                                      : ops::all_reduce(parts, group);
    return {ops::add(h, tp::dropout(y, sizes_.dropout, group)), ops::add(in[1], ops::sum_rows(probs)),
            ops::expert_load(in[2], i, route)};
  }
};

}  // namespace

void register_mixtral(ModelRegistry& r) {
  r.add({"mixtral", "llama with a sparse mixture of experts for the FFN: top-k routing, dropless, load-balancing loss",
         false, [](const Sizes& s) { return std::make_unique<Mixtral>(s); }, {"E", "K", "theta", "eps", "qkv_bias", "rope_scaling"},
         /*tensor_parallel=*/true, "", nullptr, /*grouped_kv=*/true, /*context_parallel=*/true});
}

}  // namespace remat
