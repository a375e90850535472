#pragma once
// LoRA for every zoo model without touching its file: `--lora R [--lora-alpha
// A] [--lora-targets PATTERN,...]` gives each linear weight the patterns
// match two parameters, `<weight>.lora_A` [R, in] ~ N(0, 0.02) (the
// counter-based generator, like every weight) and `<weight>.lora_B` [out, R]
// = 0, so that its linear computes x W^T + b + (alpha/R) (x A^T) B^T
// (zoo/params.hpp: ParamStore::attach_adapter, applied by the zoo's linear); every other parameter is frozen.
#include <memory>
#include <string>
#include <vector>

#include "datasets/batch.hpp"
#include "zoo/model.hpp"

namespace remat {

struct LoraOptions {
  int rank = 0;        // 0: no LoRA
  double alpha = 0;    // 0: alpha = rank (scale 1)
  std::vector<std::string> targets;  // empty: the attention's query and value projections of every zoo model
  bool any() const { return rank > 0; }
  double scale() const { return (alpha > 0 ? alpha : rank) / double(rank); }
  // As recorded in results: "rank=8;alpha=8;targets=*.attn.c_attn.weight", or "" for none.
  std::string key() const;
  // The inverse of key(); UserError naming `where` if `key` is not one.
  static LoraOptions parse(const std::string& key, const std::string& where);
};

// The default targets: gpt2's (and its relatives') c_attn, llama's wq and wv,
// bert's query and value.
const std::vector<std::string>& default_lora_targets();

// A store holding `base`'s parameters (copied) and the adapters, with every
// base parameter frozen and the adapters attached. UserError for a target
// pattern that matches nothing (the defaults: none at all), a target that is
// not a 2-D weight, or R <= 0 or above the weight's smaller dimension.
// Under tensor parallelism (`tp` split, `base` this rank's parts), the
// adapters are this rank's parts of the whole model's: B's rows split with
// a column-parallel weight's, A's columns with a row-parallel one's, the
// other whole (its gradient summed over the ranks by the zoo's linear).
std::unique_ptr<ParamStore> with_lora(const ParamStore& base, const LoraOptions& options, std::uint64_t seed, int layers,
                                      const RankGroup& tp = {});

// `whole` (the whole model's weights, with its LoRA adapters if any) as
// this rank's parts under tensor parallelism `tp`: `specs` the split
// model's, each adapter split with its weight as with_lora splits it, and
// attached (without adapters: tp::part_of).
std::unique_ptr<ParamStore> lora_part_of(const ParamStore& whole, const std::vector<ParamSpec>& specs, const RankGroup& tp);

// UserError naming an adapted weight that no linear used in a forward pass of
// `model` on `batch` (an embedding table, say): it is not a linear weight.
void require_adapters_used(const Model& model, const ParamStore& params, const Batch& batch);

}  // namespace remat
