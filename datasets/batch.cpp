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

Batch batch_rows(const Batch& batch, std::int64_t first, std::int64_t count) {
  return {rows(batch.tokens, first, count, "batch/tokens"), rows(batch.targets, first, count, "batch/targets")};
}

}  // namespace remat
