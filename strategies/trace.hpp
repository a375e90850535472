#pragma once
// What a strategy did with one region (a block or a segment of blocks): the
// ops that saved tensors in forward and what became of each byte. `remat
// check --trace` prints it; tests read it.
#include <cstdint>
#include <map>
#include <deque>
#include <string>
#include <vector>

#include "core/text.hpp"

namespace remat {

struct RegionTrace {
  std::string name;                       // "h.3" or "h.0-h.3"
  std::vector<std::string> saves;         // "linear: keep [8, 256, 768] 6.3 MiB", in save order
  std::map<std::string, std::int64_t> forward_ops;     // op -> runs in the forward pass
  std::map<std::string, std::int64_t> recomputed_ops;  // op -> runs in recomputation
  std::int64_t saved = 0, kept = 0, dropped = 0, offloaded = 0;  // bytes
};

class Trace {
 public:
  bool enabled = false;
  RegionTrace& region(const std::string& name);
  const std::deque<RegionTrace>& regions() const { return regions_; }
  void clear() { regions_.clear(); }
  std::string to_string() const;

 private:
  std::deque<RegionTrace> regions_;  // stable addresses: regions hold pointers
};


}  // namespace remat
