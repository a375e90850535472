#include "datasets/batch.hpp"

#include <cstdint>
#include <vector>

namespace remat {

namespace {

Tensor rows(const Tensor& t, std::int64_t first, std::int64_t count, const char* label) {
  const std::int64_t S = t.dim(1);
  const std::vector<std::int32_t> all = t.to_host<std::int32_t>();
  const std::vector<std::int32_t> mine(all.begin() + first * S, all.begin() + (first + count) * S);
  return Tensor::from_host(mine, {count, S}, label);
}

}  // namespace

Batch empty_batch(std::int64_t B, std::int64_t S) {
  return {Tensor::empty({B, S}, DType::i32, "tokens"), Tensor::empty({B, S}, DType::i32, "targets")};
}

std::vector<Batch> micro_batches_from(const Batch& first, int count, std::int64_t V, std::uint64_t seed) {
  std::vector<Batch> out = {first};
  for (int m = 1; m < count; ++m)
    out.push_back(random_batch(first.tokens.dim(0), first.tokens.dim(1), V, seed + std::uint64_t(m)));
  return out;
}

Batch batch_rows(const Batch& batch, std::int64_t first, std::int64_t count) {
  return {rows(batch.tokens, first, count, "batch/tokens"), rows(batch.targets, first, count, "batch/targets")};
}

}  // namespace remat
