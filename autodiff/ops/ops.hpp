#pragma once
// The differentiable ops. Each records a node on the current tape (when an
// input requires a gradient) and saves what its backward needs through the
// saved-tensor hooks. Activations are [..., features], row-major; linear
// weights follow PyTorch: weight[out][in], y = x W^T + b.
#include <string>
#include <unordered_map>
#include <vector>

#include "autodiff/quantized.hpp"
#include "autodiff/tensor.hpp"
#include "core/rank_group.hpp"

namespace remat::ops {

// weight[V, D] gathered at int32 ids[...] -> [..., D].
Tensor embedding(const Tensor& weight, const Tensor& ids);

// Rows [first, first + V) of a vocabulary of `vocabulary` ids, weight[V, D],
// gathered at ids[...] -> [..., D]: ids outside the part give zero rows
// (tensor parallelism's vocabulary-parallel embedding, summed over ranks
// after); ids outside the vocabulary are refused, as embedding() refuses them.
Tensor embedding_part(const Tensor& weight, const Tensor& ids, std::int64_t first, std::int64_t vocabulary);

// a + b, where b has a's shape or a trailing part of it (broadcast over the
// leading dimensions, as a position embedding over the batch).
Tensor add(const Tensor& a, const Tensor& b);

// x[..., in] W[out, in]^T + bias[out] (bias may be undefined).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// The same with a quantized weight, which is frozen: each product (forward,
// backward's dx, a recomputation) dequantizes it into x's type in a scratch
// buffer the tracker counts ("dequantized_weight"), freed after the product.
Tensor linear(const Tensor& x, const QuantizedWeight& weight, const Tensor& bias = Tensor());

// LayerNorm over the last dimension with gain and bias.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Tensor gelu_tanh(const Tensor& x);

// Multi-head self-attention core on packed projections qkv[B, S, 3D] laid out
// [q | k | v], H heads of D/H; dropout(softmax(q k^T / sqrt(D/H), causal
// mask)) v, heads merged -> [B, S, D].
Tensor attention(const Tensor& qkv, int heads, bool causal, double dropout = 0);

// Attention on separate projections: q[B, S, H hd], k and v [B, S, Hkv hd]
// (grouped-query: query head h uses kv head h / (H / Hkv)).
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int heads, int kv_heads, bool causal,
                 double dropout = 0);

// Cross-attention on a query q[B, S, H hd] and packed keys and values
// kv[B, S, 2 H hd] laid out [k | v] (an encoder-decoder's keys and values
// from the encoder's output).
Tensor attention(const Tensor& q, const Tensor& kv, int heads, bool causal, double dropout = 0);

// Context parallelism's self-attention (autodiff/ops/ring_attention.cpp),
// causal or (`causal` false) bidirectional: this rank's rows of the sequence
// (zigzag_position's, core/rank_group.hpp) against every rank's keys and
// values, which travel around the ring of the group `g` (comm's context
// group), merged by the online softmax; backward sends them around again
// with their gradients. The fused kernel only. With `dropout` on the
// probabilities, each rank's masks are its own (not one process's).
Tensor ring_attention(const Tensor& qkv, int heads, const RankGroup& g, bool causal = true, double dropout = 0);
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, int heads, int kv_heads, const RankGroup& g,
                      bool causal = true, double dropout = 0);
// q[B, S, D] against kv[B, S, 2D] (keys | values packed: a cross-attention's
// keys and values of another sequence split alike over the ranks).
Tensor ring_attention(const Tensor& q, const Tensor& kv, int heads, const RankGroup& g, bool causal = false,
                      double dropout = 0);

// Which attention kernel the attention ops use. `fused` (the default) keeps
// only the output and each row's log-sum-exp and recomputes probabilities
// tile by tile in backward: on host memory as tiles through the BLAS, a tile
// per thread; on a device as tiles through batched GEMMs (cuBLAS). `fused_team`
// names Kokkos team kernels of the same algorithm that any backend runs. `plain` keeps the probabilities [B, H, S, S]. All take the
// same dropout masks and agree to rounding. The choice is a step's option
// (StepOptions::attention): the step installs it with a scope for its
// forward and backward, so no choice outlives the step that made it.
enum class AttentionKernel { fused, fused_team, plain };
// The kernel's name, as options and results files spell it.
const char* attention_kernel_name(AttentionKernel k);
AttentionKernel parse_attention_kernel(const std::string& name);  // UserError if unknown
AttentionKernel current_attention_kernel();  // fused outside any scope
class AttentionKernelScope {
 public:
  explicit AttentionKernelScope(AttentionKernel k);
  ~AttentionKernelScope();
  AttentionKernelScope(const AttentionKernelScope&) = delete;
  AttentionKernelScope& operator=(const AttentionKernelScope&) = delete;

 private:
  AttentionKernel previous_;
};

// RMSNorm over the last dimension: x * rsqrt(mean(x^2) + eps) * weight.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps);

// Rotary position embedding, "rotate half": per head of `head_dim`, for
// position p and j < head_dim/2 the pair (j, j + head_dim/2) turns by
// p * theta^(-2j/head_dim). x is [B, S, heads * head_dim].
// Llama 3.1's scaling of the rotary frequencies ("rope_type": "llama3"): a
// frequency whose wavelength is beyond original / low_freq is divided by
// factor, one within original / high_freq kept, and those between blended
// (docs/models.md). factor 0: none.
struct RopeScaling {
  double factor = 0, low_freq = 1, high_freq = 4, original = 8192;
  bool any() const { return factor > 0; }
};
// Under context parallelism (`context` split) x holds this rank's rows of the
// sequence, at zigzag_position's positions (core/rank_group.hpp).
Tensor rotary(const Tensor& x, int head_dim, double theta = 10000.0, const RopeScaling& scaling = {},
              const RankGroup& context = RankGroup::context());

// GELU, exact: 0.5 x (1 + erf(x / sqrt 2)).
Tensor gelu_erf(const Tensor& x);

// SiLU, x * sigmoid(x); and the SwiGLU product silu(gate) * up.
Tensor silu(const Tensor& x);
Tensor swiglu(const Tensor& gate, const Tensor& up);

// x * s.
Tensor scale(const Tensor& x, double s);

// Inverted dropout; the identity when p = 0. Its mask is a pure function of
// (seed, step, op id, element): recomputation draws the same one.
Tensor dropout(const Tensor& x, double p);

// Mean cross-entropy of logits[..., V] against int32 targets[...] -> scalar.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets);

// Tensor parallelism's communication (autodiff/ops/tensor_parallel.cpp), over
// the group `g` of every rank of the job: all_reduce sums x over the ranks
// (backward: the identity; Megatron's g, after a row-parallel layer), and
// all_reduce_in_backward is the identity whose backward sums the gradient
// (Megatron's f, before column-parallel layers). Sums go in rank order: the
// same bits on every rank and in every recomputation.
Tensor all_reduce(const Tensor& x, const RankGroup& g);
Tensor all_reduce_in_backward(const Tensor& x, const RankGroup& g);
// The same, the gradient summed only over the `share` consecutive ranks this
// rank is among (ranks 0..share-1, share..2 share-1, ...): what ranks holding
// the same replicated part of a weight add up.
Tensor all_reduce_in_backward(const Tensor& x, const RankGroup& g, int share);
// Sequence parallelism's pair (Korthikanti et al. 2022's g and g-bar), along
// dim 1 of x[B, S, ...]: all_gather_sequence joins every rank's part of the
// sequence, in rank order (backward: the gradient reduce-scattered);
// reduce_scatter_sequence sums x over the ranks and keeps this rank's part of
// the sequence, [B, S / size, ...] (backward: the gradient all-gathered).
Tensor all_gather_sequence(const Tensor& x, const RankGroup& g);
Tensor reduce_scatter_sequence(const Tensor& x, const RankGroup& g);
// The same gather for a layer every rank runs whole on the whole sequence
// (mixtral's router under --sp): every rank's gradient is then the same,
// and backward keeps this rank's part of it (Megatron's gather with
// tensor_parallel_output_grad off) instead of summing N copies.
Tensor all_gather_sequence_whole(const Tensor& x, const RankGroup& g);
// Mean cross-entropy of logits split over the vocabulary: this rank's
// logits[..., V_part] for ids [first, first + V_part), against the int32
// targets[...]; row maxima and sums are combined over the ranks, so the
// whole logits never exist on one rank. Every rank gets the scalar; targets
// outside the whole vocabulary (V_part x ranks) are refused on every rank.
Tensor cross_entropy_parts(const Tensor& logits, const Tensor& targets, std::int64_t first, const RankGroup& g);

// Softmax over the last dimension, max-subtracted (a router's probabilities).
Tensor softmax(const Tensor& x);

// Mixture of experts, dropless top-k routing (autodiff/ops/moe.cpp). One
// Routing per block, made from the router's probabilities, serves every op
// below in forward and backward. Dispatched rows are grouped by expert,
// tokens in order within each expert: T k rows in all, whatever the load.
struct Routing {
  int experts = 0, k = 0;
  std::int64_t tokens = 0;
  Tensor selected;  // int32 [T, k]: each token's experts, most probable first (ties: the lower index)
  Tensor slots;     // int32 [T, k]: the dispatched row of each (token, choice)
  Tensor counts;    // [E], float: rows routed to each expert
  std::vector<std::int64_t> offsets;  // host, E + 1: expert e's rows are [offsets[e], offsets[e + 1])
  std::uint64_t fingerprint = 0;      // of the slots: backward checks that a recomputation routed the same
};
// The top-k experts of each row of probs[T, E]; not differentiable.
Routing route_top_k(const Tensor& probs, int k);
// [T, k]: the selected experts' probabilities, renormalised to sum to 1.
Tensor routing_weights(const Tensor& probs, const Routing& r);
// x[T, D] gathered into [T k, D], each token once per chosen expert.
Tensor dispatch(const Tensor& x, const Routing& r);
// [T k, out]: each expert's rows through its own weight[out, in] (one GEMM
// per expert). An expert whose entry of `quantized` is defined (QLoRA: a
// frozen expert) uses it instead of its dense weight (then undefined),
// dequantized for each product as the quantized linear does.
Tensor grouped_linear(const Tensor& x, const std::vector<Tensor>& weights, const Routing& r,
                      const std::vector<QuantizedWeight>& quantized = {});
// y[t] = sum_j weights[t, j] * rows[slot(t, j)], shaped `shape` (T rows of D).
Tensor combine(const Tensor& rows, const Tensor& weights, const Routing& r, const Shape& shape);
// Not differentiable: `load` [L, E] with the routed rows of this block added to row `layer`.
Tensor expert_load(const Tensor& load, int layer, const Routing& r);
// [E]: the sum of x[N, E] over its rows.
Tensor sum_rows(const Tensor& x);
// The Switch Transformer load-balancing loss over N routed rows of all
// layers: E * sum_e (C_e / N) (P_e / N), C_e = sum over layers of `load`
// (no gradient), P_e = prob_sums[e] (the router probabilities' sums).
Tensor load_balancing_loss(const Tensor& prob_sums, const Tensor& load, std::int64_t rows);

// Expert parallelism (autodiff/ops/expert_parallel.cpp): the group's ranks
// hold E / N experts each, rank q experts [q E/N, (q+1) E/N). A block's
// exchange, planned from this rank's routing (a small all-to-all of
// counts): which rows go to which rank, and which rows this rank's experts
// receive from each rank.
struct ExpertExchange {
  int ranks = 1, rank = 0, experts_here = 0;
  std::vector<std::int64_t> sent;      // [N]: rows this rank sends rank q (its rows for q's experts)
  std::vector<std::int64_t> received;  // [El N]: rows rank q sends this rank's expert e, at e N + q
  Routing local;  // the received rows grouped by this rank's experts (offsets over El), for grouped_linear
};
ExpertExchange plan_expert_exchange(const Routing& r, const RankGroup& g);
// Dispatched rows [T k, D] (grouped by expert) to the ranks holding their
// experts: [R, D], this rank's experts' rows from every rank, grouped by
// expert and, within an expert, by rank (so in the tokens' order when the
// ranks hold consecutive sequences). Backward returns the gradients.
Tensor to_experts(const Tensor& rows, const ExpertExchange& x, const RankGroup& g);
// Its reverse: this rank's experts' outputs [R, D] back to their tokens' ranks, [T k, D].
Tensor from_experts(const Tensor& rows, const ExpertExchange& x, const RankGroup& g);

}  // namespace remat::ops
