#pragma once
// Hugging Face's layouts of the zoo's families (GPT2LMHeadModel,
// LlamaForCausalLM, MixtralForCausalLM): how config.json's keys give a
// model's sizes and attributes, and how each remat parameter
// (docs/models.md) is named and laid out in their model folders. Every
// config.json key that changes the math is read and checked: a value the
// zoo's model does not implement is refused by name, never ignored.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "zoo/model.hpp"
#include "zoo/sizes.hpp"

namespace remat::hf {

// Where a remat parameter lives in a model folder of the family.
struct HfTensor {
  std::string name;
  bool transposed = false;  // stored [in, out] (GPT-2's Conv1D), remat's [out, in]
};

class HfFamily {
 public:
  virtual ~HfFamily() = default;
  virtual std::string model() const = 0;         // the zoo's model: "gpt2"
  virtual std::string architecture() const = 0;  // "GPT2LMHeadModel"
  virtual std::string model_type() const = 0;    // config.json's "model_type": "gpt2"
  // Whether this family writes a model of these sizes (Qwen2: a llama with q/k/v biases; llama: one without).
  virtual bool serves(const Sizes& z) const { (void)z; return true; }
  // The sizes a config.json describes (S and B are not a model folder's:
  // S = min(S_max, 256), B = 1, for commands that run it). UserError naming
  // `file` and the key for anything the zoo's model does not implement.
  virtual Sizes sizes(const nlohmann::json& config, const std::string& file) const = 0;
  // config.json for these sizes.
  virtual nlohmann::ordered_json config(const Sizes& z) const = 0;
  // Where parameter `param` lives. `prefixed`: GPT-2 model folders come with
  // and without the "transformer." prefix (GPT2LMHeadModel and GPT2Model).
  virtual HfTensor tensor(const std::string& param, bool prefixed = true) const = 0;
  // Tensors a model folder may hold that are not parameters and that the zoo's
  // model computes anyway (GPT-2's causal-mask buffers, Llama's rotary
  // frequencies): accepted and skipped.
  virtual bool buffer(const std::string& name) const = 0;
  // The head tied to the embedding in the family but saved by some tools
  // (GPT-2's lm_head.weight): accepted if equal to `tied_to`, else refused.
  virtual std::string tied_head() const { return ""; }
  virtual std::string tied_to(bool prefixed) const { (void)prefixed; return ""; }
  // PEFT's name for the module of a remat weight ("model.layers.0.self_attn.q_proj").
  std::string module(const std::string& weight) const;
};

// The family a config.json names ("model_type" and "architectures"), or
// UserError naming the key and the families remat reads.
const HfFamily& family_of_config(const nlohmann::json& config, const std::string& file);
// The family of a zoo model, or UserError if it has none ("bert": none).
const HfFamily& family_of_model(const ModelSetup& setup);

}  // namespace remat::hf
