#pragma once
// A model's sizes and the named presets of docs/models.md.
#include <string>
#include <vector>

#include "core/rank_group.hpp"

namespace remat {

struct Sizes {
  int L = 0;      // blocks
  int D = 0;      // model width
  int H = 0;      // attention heads
  int Hkv = 0;    // key/value heads (grouped-query models)
  int F = 0;      // feed-forward hidden size (SwiGLU models)
  int S = 0;      // sequence length
  int S_max = 0;  // positions a learned position table holds
  int V = 0;      // vocabulary
  int B = 0;      // batch
  int E = 0;      // experts of a mixture-of-experts block (mixtral)
  int K = 0;      // experts each token is routed to (top-k)
  double theta = 10000;  // rotary base (llama, mixtral)
  double eps = 1e-5;     // RMSNorm epsilon (llama, mixtral; LLaMA-1 used 1e-6)
  bool qkv_bias = false;  // llama: biases on the query, key and value projections (Qwen2)
  // Llama 3.1's rotary scaling (ops::RopeScaling; factor 0: none).
  double rope_factor = 0, rope_low_freq = 1, rope_high_freq = 4, rope_original = 8192;
  // Training settings, not sizes, but the models read them here:
  double dropout = 0;       // probability
  double router_aux = 0.01;  // weight of the load-balancing loss (mixtral)
  // Tensor parallelism (zoo/tensor_parallel.hpp): this rank's part of every
  // split layer; the sizes above stay the whole model's.
  RankGroup tp = {};
  // Expert parallelism (zoo/expert_parallel.hpp): this rank's experts and
  // its part of the batch's sequences.
  RankGroup ep = RankGroup::expert();
  // Context parallelism (zoo/context_parallel.hpp): this rank's rows of the
  // sequence; S stays the whole sequence's.
  RankGroup cp = RankGroup::context();
  // Whether this rank holds a part of a layout split over ranks (any of them).
  bool split_over_ranks() const { return tp.split() || ep.split() || cp.split(); }
  // These sizes with no split over ranks: the whole model, its parameters
  // and (on the whole batch's rows) its loss and gradients.
  Sizes whole_model() const {
    Sizes whole = *this;
    whole.tp = RankGroup::tensor();
    whole.ep = RankGroup::expert();
    whole.cp = RankGroup::context();
    return whole;
  }
};

struct Preset {
  std::string name;
  Sizes sizes;
  std::string use;
};

const std::vector<Preset>& presets();
// Throws UserError naming the presets if `name` is not one.
Sizes preset_sizes(const std::string& name);
std::vector<std::string> preset_names();
// Throws UserError if a size is out of range (e.g. heads not dividing D).
void validate(const Sizes& s);
// The flag a message names for a split over ranks of `experts` (--ep) or
// `context` (--cp) ranks, else tensor parallelism's: "--ep", "--cp" or "--tp".
const char* split_flag(int experts, int context = 1);

}  // namespace remat
