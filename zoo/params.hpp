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

namespace remat {

enum class Init {
  normal,        // N(0, 0.02)
  residual_out,  // N(0, 0.02 / sqrt(2L)): output projection of a residual branch
  zeros,
  ones,
};

struct ParamSpec {
  std::string name;
  Shape shape;
  Init init = Init::normal;
};

class ParamStore {
 public:
  // Zero-filled parameters for every spec.
  ParamStore(const std::vector<ParamSpec>& specs, DType dtype);

  const Tensor& operator[](const std::string& name) const;
  bool has(const std::string& name) const { return index_.count(name) > 0; }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const std::vector<std::string>& names() const { return names_; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  std::int64_t count() const;  // scalar parameters
  std::int64_t bytes() const;
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
  };
  void attach_adapter(const std::string& weight, const std::string& a, const std::string& b, double scale);
  // The adapter of `weight`, or null; counts the use (require_adapters_used).
  const Adapter* adapter(const std::string& weight) const;
  // The adapted weights' names, in the order attached.
  std::vector<std::string> adapted() const;
  // Which adapted weights a linear used since the last call (and forgets them).
  std::set<std::string> take_adapter_uses() const;
  // Called with a parameter's index whenever a model reads it through
  // operator[] (sharded parameters are gathered on first use); none by default.
  void set_access_hook(std::function<void(std::size_t)> hook) { on_access_ = std::move(hook); }

 private:
  std::vector<ParamSpec> specs_;
  std::vector<std::string> names_;
  std::vector<Tensor> tensors_;
  std::unordered_map<std::string, std::size_t> index_;
  std::vector<std::pair<std::string, Adapter>> adapters_;
  mutable std::set<std::string> adapter_uses_;
  std::function<void(std::size_t)> on_access_;
};

// docs/models.md initialisation: a pure function of (seed, parameter name, index).
void initialize(const ParamStore& params, std::uint64_t seed, int layers);

std::int64_t count_params(const std::vector<ParamSpec>& specs);

}  // namespace remat
