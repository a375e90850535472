#pragma once
// The interface every zoo model implements: its parameters and its forward
// pass, written with autodiff ops, blocks marked with run_block(). That is
// all a model does; every strategy then applies to it unchanged.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autodiff/tensor.hpp"
#include "datasets/batch.hpp"
#include "zoo/params.hpp"
#include "zoo/sizes.hpp"

namespace remat {

class Model {
 public:
  explicit Model(const Sizes& s) : sizes_(s) {}
  virtual ~Model() = default;
  const Sizes& sizes() const { return sizes_; }

  virtual std::vector<ParamSpec> params() const = 0;
  // logits[B, S, V] for int32 tokens[B, S].
  virtual Tensor logits(const ParamStore& p, const Tensor& tokens) const = 0;
  // Mean cross-entropy of the batch.
  Tensor loss(const ParamStore& p, const Batch& batch) const;

 protected:
  Sizes sizes_;
};

struct ModelInfo {
  std::string name;
  std::string description;
  bool reversible = false;
  std::function<std::unique_ptr<Model>(const Sizes&)> make;
};

class ModelRegistry {
 public:
  void add(ModelInfo info);
  // Throws UserError listing the models if `name` is not one.
  const ModelInfo& find(const std::string& name) const;
  const std::vector<ModelInfo>& all() const { return models_; }
  std::vector<std::string> names() const;

 private:
  std::vector<ModelInfo> models_;
};

// Every built-in model, registered once (explicitly: no static
// self-registration for a linker to drop).
const ModelRegistry& models();

}  // namespace remat
