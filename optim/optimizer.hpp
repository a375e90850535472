#pragma once
// Optimizers: they update parameters from the gradients backward left in
// them. An optimizer owns its state (AdamW's moments), which a run file
// saves and restores by name, so that a resumed run continues bitwise.
// Every update is elementwise, in Kokkos kernels, and deterministic.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "autodiff/tensor.hpp"

namespace remat {

struct OptimizerConfig {
  std::string kind = "adamw";  // adamw | sgd
  double weight_decay = 0.0;   // decoupled (AdamW's), never on biases and norm gains (1-D parameters)
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // AdamW
  double momentum = 0.0;                          // SGD
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of every parameter with learning rate `lr`.
  virtual void step(double lr) = 0;
  // The state a run file holds, per parameter: names of the buffers
  // ("m", "v" for AdamW) and the buffers themselves, in parameter order;
  // a frozen parameter (no gradient slot when the optimizer is made) has
  // none: its buffers are undefined tensors.
  virtual std::vector<std::string> state_names() const = 0;
  virtual std::vector<Tensor>& state(const std::string& name) = 0;
  const std::vector<Tensor>& state(const std::string& name) const {  // the same buffers, to read
    return const_cast<Optimizer*>(this)->state(name);
  }
  std::int64_t steps_taken() const { return steps_; }
  void set_steps_taken(std::int64_t n) { steps_ = n; }

 protected:
  std::int64_t steps_ = 0;
};

// UserError for an unknown kind or a bad setting.
// Weight decay applies to matrices (weights, embeddings), never to biases
// and norm gains, the model's 1-D parameters.
inline bool decays(const Tensor& p) { return p.rank() >= 2; }

// `decays[k]`: whether weight decay applies to params[k]; left empty, to
// the matrices (rank >= 2), never to biases and norm gains. (Sharded
// parameters are 1-D shards of matrices too: their trainer says which.)
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, const std::vector<Tensor>& params,
                                          std::vector<bool> decays = {});

// The global L2 norm of the parameters' gradients (those that have one),
// summed in a fixed order: the same for any thread count. Parameter by
// parameter, the sums of squares of consecutive chunks of kNormChunk values
// are added in order; parameters cut into shards at multiples of
// kNormChunk (ParamShards) give the same chunks, so the sharded norm is
// bitwise this one.
constexpr std::int64_t kNormChunk = 1024;
double gradient_norm(const std::vector<Tensor>& params);
// Per parameter, the sum of squares of its gradient as gradient_norm adds
// it (0 where it has none).
std::vector<double> gradient_squares(const std::vector<Tensor>& params);
// The sums of squares of g's first n values, a chunk of kNormChunk values
// each (the last one shorter), in order.
std::vector<double> chunk_squares(const Tensor& g, std::int64_t n);
// Multiplies every gradient by `factor` (clipping, averaging accumulated
// micro-batches).
void scale_gradients(const std::vector<Tensor>& params, double factor);

}  // namespace remat
