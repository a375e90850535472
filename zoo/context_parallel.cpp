#include "zoo/context_parallel.hpp"

#include <vector>

#include "autodiff/ops/ops.hpp"
#include "autodiff/shape_only.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "zoo/model.hpp"
#include "zoo/tensor_parallel.hpp"

namespace remat::cp {

Tensor rows(const Tensor& ids, const RankGroup& g) {
  if (!g.split()) return ids;
  const std::int64_t B = ids.dim(0), S = ids.dim(1), local = S / g.size;
  // A shape-only run has no ids: the same allocation, of zeros.
  const std::vector<std::int32_t> whole = shape_only() ? std::vector<std::int32_t>(std::size_t(B * S)) : ids.to_host_i32();
  std::vector<std::int32_t> mine(std::size_t(B * local));
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < local; ++t)
      mine[std::size_t(b * local + t)] = whole[std::size_t(b * S + zigzag_position(g, t, local))];
  return Tensor::from_host(mine, {B, local}, "context_rows");
}

Tensor positions(const Tensor& tokens, const RankGroup& context, const RankGroup& tensor) {
  if (!context.split()) return tp::positions(tokens, tensor);
  const std::int64_t local = tokens.dim(1), part = tensor.sequence ? local / tensor.size : local,
                     first = tensor.sequence ? tensor.rank * part : 0;
  std::vector<std::int32_t> mine(static_cast<std::size_t>(part));
  for (std::int64_t i = 0; i < part; ++i) mine[std::size_t(i)] = std::int32_t(zigzag_position(context, first + i, local));
  return Tensor::from_host(mine, {part}, "positions");
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const Sizes& z) {
  const Tensor mean = tp::cross_entropy(logits, rows(targets, z.cp), z.tp);
  return z.cp.split() ? ops::scale(mean, 1.0 / z.cp.size) : mean;
}

void validate(const std::string& model, const Sizes& z) {
  const RankGroup& g = z.cp;
  if (g.size < 1 || g.rank < 0 || g.rank >= g.size)
    throw UserError("--cp " + std::to_string(g.size) + ": rank " + std::to_string(g.rank) + " is not in the group");
  if (!g.split()) return;
  if (!models().find(model).context_parallel) {
    std::vector<std::string> split;
    for (const std::string& name : models().names())
      if (models().find(name).context_parallel) split.push_back(name);
    throw UserError("--cp: " + model + " is not split by context parallelism yet (models that are: " + join(split, ", ") +
                    ")");
  }
  if (z.S % (2 * g.size) != 0)
    throw UserError("--cp " + std::to_string(g.size) + ": the sequence length S = " + std::to_string(z.S) +
                    " must be divisible by " + std::to_string(2 * g.size) + " (two chunks per rank, zig-zag)");
}

}  // namespace remat::cp
