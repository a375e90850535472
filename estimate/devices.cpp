#include "estimate/devices.hpp"

#include "core/error.hpp"
#include "core/text.hpp"

namespace remat {
namespace {

constexpr std::int64_t kMiB = std::int64_t(1) << 20;
constexpr double kT = 1e12, kG = 1e9;
// A training process holds memory no tensor accounts for: the CUDA context
// (about 500 MiB on Ampere and Hopper with the kernels of cuBLAS loaded), the
// cuBLAS workspace, and what a caching allocator keeps in reserve. One
// documented figure for every named device; mem:<size> has none.
constexpr std::int64_t kOverhead = 1024 * kMiB;
// Host memory per GPU: the share of one GPU of the machine each is sold in
// (DGX H100, H200 and A100 640GB: 2 TiB for 8 GPUs; DGX A100 320GB: 1 TiB
// for 8), or of a typical host for a card sold alone (a cloud L4 instance
// with 32 GiB, a workstation with 64 GiB beside an RTX 4090).
constexpr std::int64_t kGiB = 1024 * kMiB;

}  // namespace

const std::vector<Device>& named_devices() {
  static const std::vector<Device> devices = {
      // The peer link: NVLink's bandwidth each way (H100 and H200: NVLink 4, 900 GB/s in all; A100: NVLink 3,
      // 600 GB/s), or PCIe 4.0 x16's where a card has no NVLink (L4, RTX 4090).
      {"h100-80gb", 81559 * kMiB, kOverhead, 67 * kT, 989 * kT, 3350 * kG, 64 * kG, 450 * kG, 256 * kGiB,
       "NVIDIA H100 SXM5 datasheet; host memory: DGX H100's"},
      {"h200-141gb", 143771 * kMiB, kOverhead, 67 * kT, 989 * kT, 4800 * kG, 64 * kG, 450 * kG, 256 * kGiB,
       "NVIDIA H200 SXM datasheet; host memory: DGX H200's"},
      {"a100-40gb", 40960 * kMiB, kOverhead, 19.5 * kT, 312 * kT, 1555 * kG, 32 * kG, 300 * kG, 128 * kGiB,
       "NVIDIA A100 SXM4 datasheet; host memory: DGX A100 320GB's"},
      {"a100-80gb", 81920 * kMiB, kOverhead, 19.5 * kT, 312 * kT, 2039 * kG, 32 * kG, 300 * kG, 256 * kGiB,
       "NVIDIA A100 SXM4 datasheet; host memory: DGX A100 640GB's"},
      {"l4-24gb", 23034 * kMiB, kOverhead, 30.3 * kT, 121 * kT, 300 * kG, 32 * kG, 32 * kG, 32 * kGiB,
       "NVIDIA L4 datasheet; host memory: a cloud instance of one L4"},
      {"rtx4090-24gb", 24564 * kMiB, kOverhead, 82.6 * kT, 165 * kT, 1008 * kG, 32 * kG, 32 * kG, 64 * kGiB,
       "NVIDIA Ada GPU architecture whitepaper (GeForce RTX 4090); host memory: a workstation's"},
  };
  return devices;
}

Device find_device(const std::string& name) {
  for (const auto& d : named_devices())
    if (d.name == name) return d;
  if (name.rfind("mem:", 0) == 0) {
    Device d;
    d.name = name;
    try {
      d.memory_bytes = parse_byte_size(name.substr(4));
    } catch (const UserError& e) {
      throw UserError("--device '" + name + "': " + e.what());
    }
    d.source = "given";
    return d;
  }
  std::string names;
  for (const auto& d : named_devices()) names += (names.empty() ? "" : ", ") + d.name;
  throw UserError("--device '" + name + "': not a device remat knows (" + names + ", or mem:<size> such as mem:80G)");
}

}  // namespace remat
