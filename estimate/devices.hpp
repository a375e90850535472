#pragma once
// The devices `remat estimate --device` names: their memory as the driver
// reports it, the fixed overhead a training process holds beside its tensors
// (shown as its own line, never silently added), and the peak rates of their
// datasheets. mem:<size> names a device by its memory alone.
#include <cstdint>
#include <string>
#include <vector>

namespace remat {

struct Device {
  std::string name;
  std::int64_t memory_bytes = 0;    // total, as nvidia-smi reports it
  std::int64_t overhead_bytes = 0;  // CUDA context, cuBLAS workspace, allocator reserve
  double fp32_flops = 0;            // peak FLOP/s, dense, without tensor cores
  double half_flops = 0;            // peak FLOP/s, dense, 16-bit inputs with fp32 accumulation (tensor cores)
  double memory_bandwidth = 0;      // bytes/s
  double host_link = 0;             // bytes/s each way to host memory
  double peer_link = 0;             // bytes/s each way to another GPU of the node (NVLink, else PCIe)
  // The host memory one GPU may fill with offloaded tensors: its share of
  // the machine it is sold in (0: not known, not checked).
  std::int64_t host_memory_bytes = 0;
  std::string source;               // where the figures come from
  std::int64_t usable() const { return memory_bytes - overhead_bytes; }
};

const std::vector<Device>& named_devices();

// A named device, or mem:<size> (that much memory, no overhead, no rates).
// UserError for anything else, listing the names.
Device find_device(const std::string& name);

}  // namespace remat
