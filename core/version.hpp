#pragma once
// remat's version, from the one place it is written: CMake's project().
namespace remat {

const char* version();  // "0.5.0"

}  // namespace remat
