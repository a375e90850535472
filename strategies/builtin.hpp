#pragma once
// The built-in strategies' constructors, one file each; the registry parses
// specs into calls to these.
#include <memory>
#include <set>
#include <string>

#include "strategies/strategy.hpp"

namespace remat {

std::unique_ptr<Strategy> make_full();
std::unique_ptr<Strategy> make_offload();
std::unique_ptr<Strategy> make_checkpoint(const std::string& spec, int k, bool offload);  // k = 0: sqrt(L)
std::unique_ptr<Strategy> make_reversible();
std::unique_ptr<Strategy> make_selective(const std::string& spec, std::set<OpKind> drop, bool offload);

}  // namespace remat
