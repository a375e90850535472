#include "core/version.hpp"

namespace remat {

const char* version() { return REMAT_VERSION; }

}  // namespace remat
