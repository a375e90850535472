#include "autodiff/rng.hpp"
#include "datasets/batch.hpp"
#include "autodiff/loops.hpp"

namespace remat {
namespace {

Tensor random_ids(std::int64_t B, std::int64_t S, std::int64_t V, std::uint64_t seed, const char* stream_name) {
  Tensor t = Tensor::empty({B, S}, DType::i32, stream_name);
  std::int32_t* p = t.data<std::int32_t>();
  const std::uint64_t stream = rng::stream_of(stream_name);
  backend::for_each(stream_name, B * S, KOKKOS_LAMBDA(std::int64_t i) {
    p[i] = std::int32_t(rng::bits(seed, stream, i) % std::uint64_t(V));
  });
  return t;
}

}  // namespace

Batch random_batch(std::int64_t B, std::int64_t S, std::int64_t V, std::uint64_t seed) {
  return {random_ids(B, S, V, seed, "batch/tokens"), random_ids(B, S, V, seed, "batch/targets")};
}

}  // namespace remat
