#pragma once
// Context parallelism (--cp N; Megatron's CP, as Llama 3 trained at 128k):
// the sequence itself split over the ranks of a group, each holding two of
// its 2N chunks in the zig-zag order (core/rank_group.hpp) for every layer.
// Everything but attention is position-wise, so a rank runs the model on its
// rows alone; attention sends keys and values around the ring
// (ops::ring_attention). Every rank keeps the whole model, its gradient that
// of its own rows: the ranks' gradients summed are the whole sequence's, as
// over data-parallel ranks. With a group of one every function here is the
// unsplit model's, op for op.
#include <string>

#include "autodiff/tensor.hpp"
#include "core/rank_group.hpp"
#include "zoo/sizes.hpp"

namespace remat::cp {

// This rank's rows of int32 ids[B, S] (tokens or targets, whole on every
// rank): [B, S / size], in zigzag_position's order.
Tensor rows(const Tensor& ids, const RankGroup& g);
// The positions of a learned position table for this rank's tokens[B, S_local]
// (zigzag_position's; under sequence parallelism, the tensor group's part of them).
Tensor positions(const Tensor& tokens, const RankGroup& context, const RankGroup& tensor);
// This rank's share of the whole sequence's mean cross-entropy: its rows'
// mean over the ranks (the shares add up to the mean), of logits split over
// the vocabulary by the tensor group (zoo/tensor_parallel.hpp) against the
// whole targets[B, S].
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const Sizes& z);

// Refuses (UserError, one line) a layout the model cannot run: a model not
// split yet, S not divisible by 2 size.
void validate(const std::string& model, const Sizes& z);

}  // namespace remat::cp
