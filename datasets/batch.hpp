#pragma once
// A batch for next-token training: int32 tokens and targets, both [B, S].
#include <cstdint>
#include <vector>

#include "autodiff/tensor.hpp"

namespace remat {

struct Batch {
  Tensor tokens;
  Tensor targets;
};

// Seeded uniform tokens and targets in [0, V): the same batch for a seed on
// every backend and thread count.
Batch random_batch(std::int64_t B, std::int64_t S, std::int64_t V, std::uint64_t seed);

// Tokens and targets [B, S] made but not filled: what a shape-only run reads
// (autodiff/shape_only.hpp), where only the shapes matter.
Batch empty_batch(std::int64_t B, std::int64_t S);

// A step's `count` micro-batches: `first`, then random ones of its shape
// with tokens in [0, V) (seeds seed + 1, seed + 2, ...).
std::vector<Batch> micro_batches_from(const Batch& first, int count, std::int64_t V, std::uint64_t seed);

// Sequences [first, first + count) of a batch, copied.
Batch batch_rows(const Batch& batch, std::int64_t first, std::int64_t count);

}  // namespace remat
