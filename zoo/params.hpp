#pragma once
// Parameters: specified by a model (name, shape, how to initialise), owned by
// a ParamStore in the model's declaration order. Models never own memory.
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "autodiff/ops/ops.hpp"
#include "autodiff/tensor.hpp"
#include "core/rank_group.hpp"

namespace remat {

enum class Init {
  normal,        // N(0, 0.02)
  residual_out,  // N(0, 0.02 / sqrt(2L)): output projection of a residual branch
  zeros,
  ones,
};

// The precision a step computes in (docs/precision.md). fp32: the
// parameters' own element type (float32; float64 in the finite-difference
// tests). bf16, fp16: activations and a per-step 16-bit copy of the weights,
// with float32 master weights, gradients and optimizer state; fp16's narrow
// range needs the loss scaled (its gradients would underflow).
enum class Precision { fp32, bf16, fp16 };
const char* precision_name(Precision p);
Precision parse_precision(const std::string& name);  // UserError naming the choices if unknown
// The element type a step at precision p computes in, for parameters of type `params`.
DType compute_dtype(Precision p, DType params);
// The loss scale a step at precision p seeds backward with when nothing else
// says (a check, a timing, a plan's probe): PyTorch GradScaler's initial
// 2^16 at fp16, so its gradients do not underflow; 1 otherwise. Training
// adjusts it step by step (train/loss_scaler.hpp).
inline constexpr double kInitialLossScale = 65536.0;
double default_loss_scale(Precision p);

// How tensor parallelism splits a parameter over its group
// (zoo/tensor_parallel.hpp): along `dim`, each of `blocks` equal consecutive
// blocks (c_attn's q | k | v) cut into the group's parts alike; dim -1: the
// whole parameter on every rank. `parts` fewer than the group's ranks (0:
// as many) cuts it into that many, each held by size / parts consecutive
// ranks (key/value heads fewer than the ranks, replicated as Megatron does).
struct Split {
  int dim = -1;
  int blocks = 1;
  int parts = 0;
};

struct ParamSpec {
  std::string name;
  Shape shape;  // this rank's part of it where split
  Init init = Init::normal;
  Split split = {};
};

class ParamStore {
 public:
  // Zero-filled parameters for every spec.
  ParamStore(const std::vector<ParamSpec>& specs, DType dtype);

  const Tensor& operator[](const std::string& name) const;
  bool has(const std::string& name) const { return index_.count(name) > 0; }
  // Its position in tensors() and names() (logic_error if there is none);
  // unlike operator[], no access hook and no 16-bit copy.
  std::size_t index_of(const std::string& name) const;
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  std::int64_t count() const;  // scalar parameters
  std::int64_t bytes() const;  // as allocated: each tensor's rounded up to 8 (MemoryTracker::counted_bytes)
  // Zero-filled gradient buffers for every trainable parameter (allocated on first use).
  void zero_grad() const;
  // No gradient from now on: no slot, no buffer (fine-tuning). Call before
  // anything holds the tensor.
  void freeze(const std::string& name);
  bool trainable(std::size_t i) const { return tensors_[i].requires_grad(); }
  // LoRA (Hu et al. 2021): `weight`'s linear gains scale (x A^T) B^T, A
  // [R, in] and B [out, R] being parameters of this store. The store owns
  // the pairing; the zoo's linear (zoo/common.hpp) applies it, so adding
  // LoRA to a model needs no change to its file.
  struct Adapter {
    std::string a, b;  // the names of A and B (read through operator[], which gathers sharded parameters)
    double scale = 1;  // alpha / R
    // Under tensor parallelism, the group the weight is split over and how
    // (its spec's): A splits with a row-parallel weight's columns, B with a
    // column-parallel one's rows, and the other matrix, whole on every rank,
    // has its gradient summed over the ranks (zoo/common.cpp's linear).
    RankGroup group = {};
    Split split = {};
  };
  void attach_adapter(const std::string& weight, const std::string& a, const std::string& b, double scale,
                      const RankGroup& group = {});
  // The adapter of `weight`, or null; counts the use (require_adapters_used).
  const Adapter* adapter(const std::string& weight) const;
  // The adapted weights' names, in the order attached.
  std::vector<std::string> adapted() const;
  // Every adapter with its weight's name, in the order attached (no use counted).
  const std::vector<std::pair<std::string, Adapter>>& adapters() const { return adapters_; }
  // Which adapted weights a linear used since the last call (and forgets them).
  std::set<std::string> take_adapter_uses() const;
  // QLoRA: frozen weight `name` kept quantized (autodiff/quantized.hpp). Its
  // tensor becomes the quantized bytes (uint8, in the tracker's pool
  // kQuantPool): the float values are gone. The zoo's linear reads it
  // through quantized(); operator[] refuses it.
  void quantize(const std::string& name, QuantFormat format);
  // The same with the quantized weight given (read from a file), freezing `name`.
  void set_quantized(const std::string& name, QuantizedWeight q);
  bool any_quantized() const { return !quantized_.empty(); }
  // The other way: `name` back in float32, its dequantized values (frozen).
  void dequantize(const std::string& name);
  // `name`'s quantized weight, or null if it is kept in floats.
  const QuantizedWeight* quantized(const std::string& name) const;
  // What the zoo's linear reads a dense weight through: operator[], noted as
  // a linear's read while reads are recorded.
  const Tensor& linear_weight(const std::string& name) const;
  // Records which parameters a forward pass reads, and how, from
  // record_reads() until linear_only_reads(): the weights read by linears
  // alone, in the store's order (what --quantize may quantize: not a tied
  // embedding, not a norm).
  void record_reads() const;
  std::vector<std::string> linear_only_reads() const;

  // Called with a parameter's index whenever a model reads it through
  // operator[] or quantized() (sharded parameters are gathered on first
  // use); none by default.
  void set_access_hook(std::function<void(std::size_t)> hook) { on_access_ = std::move(hook); }
  const std::function<void(std::size_t)>& access_hook() const { return on_access_; }

  // While a PrecisionScope of a 16-bit precision is open, operator[] returns
  // the parameter's 16-bit copy: made on the first read of the step (so a
  // recomputation reads the same bits), counted in the tracker's pool
  // kCopyPool, sharing the parameter's gradient slot (gradients flow into
  // the float32 master's), and freed when the scope closes.
  static constexpr const char* kCopyPool = "16-bit weights";
  // While such a scope is open: the type a step reads parameters in, and
  // parameter i's copy (undefined until its first read). Sharded parameters
  // (train/param_shards.hpp) gather 16-bit values straight into it.
  bool copying() const { return copying_; }
  DType copy_dtype() const { return compute_dtype_; }
  Tensor& copy_of(std::size_t i) const { return copies_.at(i); }

 private:
  std::vector<ParamSpec> specs_;
  std::vector<std::string> names_;
  std::vector<Tensor> tensors_;
  std::unordered_map<std::string, std::size_t> index_;
  std::vector<std::pair<std::string, Adapter>> adapters_;
  mutable std::set<std::string> adapter_uses_;
  std::function<void(std::size_t)> on_access_;
  std::unordered_map<std::string, QuantizedWeight> quantized_;
  mutable bool recording_ = false;
  mutable std::set<std::string> linear_reads_, other_reads_;
  // A step's precision, not the store's contents: set by a PrecisionScope
  // over a const store, as steps take the store.
  friend class PrecisionScope;
  mutable DType compute_dtype_ = DType::f32;
  mutable bool copying_ = false;
  mutable std::vector<Tensor> copies_;  // per parameter, while copying_
};

// While it lives, `hook` hears every read of `params` too, beside the hook
// installed before it (sharded parameters gather on theirs), which it puts
// back however the scope ends.
class ReadHookScope {
 public:
  ReadHookScope(ParamStore& params, std::function<void(std::size_t)> hook);
  ~ReadHookScope();
  ReadHookScope(const ReadHookScope&) = delete;
  ReadHookScope& operator=(const ReadHookScope&) = delete;

 private:
  ParamStore& params_;
  std::function<void(std::size_t)> previous_;
};

// A step's precision over a store (see ParamStore::operator[]). fp32
// changes nothing. A scope inside an open one at the same precision uses
// its copies (the steps of a check, where the weights do not change); a
// trainer opens one per step, after which the optimizer updates the masters.
class PrecisionScope {
 public:
  PrecisionScope(const ParamStore& params, Precision p);
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  const ParamStore& params_;
  bool active_ = false;
};

// docs/models.md initialisation: a pure function of (seed, parameter name, index).
// `progress`, if given, is told after each tensor (i + 1 of n): a deep stack
// has hundreds of thousands of them.
void initialize(const ParamStore& params, std::uint64_t seed, int layers,
                const std::function<void(std::size_t done, std::size_t total)>& progress = {});

std::int64_t count_params(const std::vector<ParamSpec>& specs);

}  // namespace remat
