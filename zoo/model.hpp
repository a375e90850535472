#pragma once
// The interface every zoo model implements: its parameters and its forward
// pass, written with autodiff ops, blocks marked with run_block(). That is
// all a model does; every strategy then applies to it unchanged.
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "autodiff/region.hpp"
#include "autodiff/tensor.hpp"
#include "core/registry.hpp"
#include "datasets/batch.hpp"
#include "zoo/params.hpp"
#include "zoo/sizes.hpp"

namespace remat {

// What a step differentiates, and what it records beside it.
struct LossTerms {
  Tensor total;  // the scalar backward starts from
  // Named scalar parts of the total (mixtral: "ce" and "aux"), recorded beside the loss.
  std::vector<std::pair<std::string, Tensor>> parts;
  // Non-differentiable statistics of the step to record (mixtral: "expert_load", tokens per expert per layer).
  std::vector<std::pair<std::string, Tensor>> stats;
};

class Model {
 public:
  explicit Model(const Sizes& s) : sizes_(s) {
    // Each group's collectives run over its own axis of the job's ranks.
    if (s.tp.axis != Axis::tensor || s.ep.axis != Axis::expert || s.cp.axis != Axis::context)
      throw std::logic_error("Sizes: a rank group on another's axis");
  }
  virtual ~Model() = default;
  const Sizes& sizes() const { return sizes_; }

  virtual std::vector<ParamSpec> params() const = 0;
  // logits[B, S, V] for the batch's int32 tokens[B, S] (an encoder-decoder
  // also reads its targets: the decoder's input is them shifted right). A
  // staged model need not write it: by default, its stages in order.
  virtual Tensor logits(const ParamStore& p, const Batch& batch) const;
  // The loss and its parts: by default the mean cross-entropy of the
  // logits against the targets; a model with auxiliary losses adds them.
  virtual LossTerms loss_terms(const ParamStore& p, const Batch& batch) const;

  // The forward as pipeline stages split it (pipeline/): what comes before
  // the first block (embed), block i (layer, named layer_name(i)), and the
  // logits from the last block's output (head_logits). What a block takes
  // and hands on is the residual stream first, and whatever else the model's
  // blocks carry (mixtral: its router's running sums and counts; encdec's
  // decoder blocks: the encoder's output), as stage_edges() describes it. A
  // model that has them says so (staged()); the rest refuse --pp.
  virtual bool staged() const { return false; }
  virtual Tensors embed(const ParamStore& p, const Batch& batch) const;
  virtual Tensors layer(const ParamStore& p, int i, const Tensors& x) const;
  virtual std::string layer_name(int i) const;
  virtual Tensor head_logits(const ParamStore& p, const Tensor& x) const;
  // Blocks [first, last) from x, each through run_block: a stage's share.
  // A model with work between two blocks (encdec: the encoder's final norm
  // and the decoder's embedding of the batch's targets) does it here.
  // (x by value: a caller that moves it in holds nothing of it while the blocks run.)
  virtual Tensors layers(const ParamStore& p, Tensors x, int first, int last, const Batch& batch) const;
  // The loss terms of a staged model from its last block's outputs (by
  // default the cross-entropy of head_logits against the targets).
  virtual LossTerms head_loss(const ParamStore& p, const Tensors& x, const Batch& batch) const;
  // What enters block `layer` from the one before it, per micro-batch of
  // sizes() (each tensor one message between stages): its shape, whether it
  // is in the step's compute type (the residual stream) or float32
  // (statistics), and whether a gradient comes back for it. By default the
  // residual stream [B, S, D].
  struct StageEdge {
    Shape shape;
    bool compute_type = true;
    bool gradient = true;
  };
  virtual std::vector<StageEdge> stage_edges(int layer) const;
  // loss_terms(...).total.
  Tensor loss(const ParamStore& p, const Batch& batch) const { return loss_terms(p, batch).total; }

 protected:
  Sizes sizes_;
};

// A model of the zoo at given sizes: what a weight file's attributes say.
struct ModelSetup {
  std::string model;
  std::string preset;  // a preset's name, "custom", or "hf" (a Hugging Face model folder)
  Sizes sizes;
};

struct ModelInfo {
  std::string name;
  std::string description;
  bool reversible = false;
  std::function<std::unique_ptr<Model>(const Sizes&)> make;
  // The optional attributes of Sizes the model reads, as weight files name
  // them ("E", "K", "theta"): written with its weights, read back.
  std::vector<std::string> attributes = {};
  // Whether its layers split over a tensor-parallel group (zoo/tensor_parallel.hpp).
  bool tensor_parallel = false;
  // Why --sp (the sequence split between its split layers) is refused for
  // it, said after "--sp: "; empty where it splits that way too.
  std::string no_sequence_split = {};
  // Under --tp: the hidden size each MLP splits over the group (null: F;
  // gpt2's blocks: 4D), and whether the key/value heads are grouped (Hkv,
  // which the group must divide, or replicate where it is a multiple).
  std::int64_t (*mlp_hidden)(const Sizes&) = nullptr;
  bool grouped_kv = false;
  // Whether it splits the sequence over a context-parallel group (zoo/context_parallel.hpp).
  bool context_parallel = false;
};

// find() throws UserError listing the models if a name is not one.
class ModelRegistry : public Registry<ModelInfo> {
 public:
  ModelRegistry() : Registry("model", "models") {}
};

// Every built-in model, registered once (explicitly: no static
// self-registration for a linker to drop).
const ModelRegistry& models();
// The models tensor parallelism splits.
std::vector<std::string> tensor_parallel_models();

}  // namespace remat
