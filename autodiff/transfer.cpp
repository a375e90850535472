#include "autodiff/transfer.hpp"

#include <optional>
#include <stdexcept>
#include <string>

namespace remat::transfer {
namespace {

std::optional<ExecSpace>& instance() {
  static std::optional<ExecSpace> space;
  return space;
}

}  // namespace

ExecSpace copy_space() {
  auto& space = instance();
  if (!space) {
#ifdef KOKKOS_ENABLE_CUDA
    // A stream that does not wait for the legacy default stream either.
    cudaStream_t stream = nullptr;
    const cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) throw std::runtime_error(std::string("cudaStreamCreate: ") + cudaGetErrorString(e));
    space.emplace(stream);  // the stream lives as long as the process
#else
    space.emplace();
#endif
  }
  return *space;
}

void release() { instance().reset(); }

}  // namespace remat::transfer
