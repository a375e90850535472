#pragma once
// Freezing parameters for fine-tuning: `--freeze PATTERN[,PATTERN...]` (globs
// over the parameter names of docs/models.md, e.g. `wte.*,h.[0-5].*`) and
// `--freeze-below N` (the embeddings and blocks 0..N-1, and what lies between
// frozen blocks: an encoder's final norm once the whole encoder is frozen). A frozen parameter
// has no gradient slot, so no op records a gradient for it and it has no
// gradient buffer; what the ops save then follows from what the remaining
// gradients read (autodiff/ops: a frozen linear keeps no copy of its input).
#include <string>
#include <vector>

#include "zoo/params.hpp"

namespace remat {

struct FreezeOptions {
  std::vector<std::string> patterns;
  int below = 0;  // 0: none
  bool any() const { return !patterns.empty() || below > 0; }
  // As recorded in results and run files: "patterns=wte.*,h.0.*;below=2", or "" for none.
  std::string key() const;
};

// The names `options` freeze among `params`, in the store's order. UserError
// for a pattern that matches nothing, `below` beyond the model's blocks, or
// freezing every parameter (nothing would train).
std::vector<std::string> frozen_names(const ParamStore& params, const FreezeOptions& options, int layers);
// The same among `names`, a whole model's parameter names in the order declared.
std::vector<std::string> frozen_names(const std::vector<std::string>& names, const FreezeOptions& options, int layers);

// Freezes them; returns their names. Where `params` hold a rank's part of
// the model's parameters (--ep: its own experts), `model_names` are the
// whole model's: the patterns match against those and the blocks are read
// from them, so every rank freezes alike (a pattern naming only another
// rank's experts is no error here); the frozen ones this rank holds are
// frozen.
std::vector<std::string> apply_freeze(ParamStore& params, const FreezeOptions& options, int layers,
                                      const std::vector<std::string>& model_names = {});

// The block a parameter belongs to (the first whole-number component of its
// name: "h.3.attn.c_attn.weight" -> 3), or -1.
int block_of(const std::string& name);

// The block of each parameter in the model's chain of blocks, or -1 outside
// blocks: blocks are numbered in the order their parameters are declared,
// by the name up to its first whole number ("h.3", "enc.h.0", "dec.h.0"),
// so an encoder-decoder's first decoder block follows its last encoder
// block.
std::vector<int> chain_blocks(const std::vector<std::string>& names);

}  // namespace remat
