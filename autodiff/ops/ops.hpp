#pragma once
// The differentiable ops. Each records a node on the current tape (when an
// input requires a gradient) and saves what its backward needs through the
// saved-tensor hooks. Activations are [..., features], row-major; linear
// weights follow PyTorch: weight[out][in], y = x W^T + b.
#include <set>
#include <string>
#include <unordered_map>

#include "autodiff/tensor.hpp"

namespace remat::ops {

// weight[V, D] gathered at int32 ids[...] -> [..., D].
Tensor embedding(const Tensor& weight, const Tensor& ids);

// a + b, where b has a's shape or a trailing part of it (broadcast over the
// leading dimensions, as a position embedding over the batch).
Tensor add(const Tensor& a, const Tensor& b);

// x[..., in] W[out, in]^T + bias[out] (bias may be undefined).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// Low-rank adapters (LoRA, Hu et al. 2021): a linear whose weight has one
// registered computes x W^T + b + scale (x A^T) B^T, from the ops linear,
// scale and add (so every strategy sees ordinary ops, recomputation
// included). The registry is keyed by the weight's storage; a ParamStore
// registers its adapters and removes them when it goes (zoo/params.hpp), so
// adding LoRA to a model needs no change to its file.
struct LowRankAdapter {
  Tensor A, B;  // [R, in], [out, R]
  double scale = 1;  // alpha / R
};
void register_adapter(const Tensor& weight, const LowRankAdapter& adapter);
void unregister_adapter(const void* weight_storage);
// Records the weights whose adapter a linear applied (validation of targets).
class AdapterUseScope {
 public:
  explicit AdapterUseScope(std::set<const void*>& used);
  ~AdapterUseScope();
  AdapterUseScope(const AdapterUseScope&) = delete;
  AdapterUseScope& operator=(const AdapterUseScope&) = delete;

 private:
  std::set<const void*>* previous_;
};

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

// Which attention kernel the attention ops use. `fused` (the default) keeps
// only the output and each row's log-sum-exp and recomputes probabilities
// tile by tile in backward: on host memory as tiles through the BLAS, on a
// device as Kokkos team kernels, which `fused_team` names and which the host
// can run too. `plain` keeps the probabilities [B, H, S, S]. All take the
// same dropout masks and agree to rounding. The choice is a step's option
// (StepOptions::attention): the step installs it with a scope for its
// forward and backward, so no choice outlives the step that made it.
enum class AttentionKernel { fused, fused_team, plain };
// The name of the kernel that runs: on a device `fused` is "fused-team".
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
Tensor rotary(const Tensor& x, int head_dim, double theta = 10000.0);

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

}  // namespace remat::ops
