#pragma once
// Checks on option values, run on the text before it is converted, so that
// a bad value is one line saying what is accepted ("--layers: must be a
// whole number from 1 to 65536, got '0'") instead of a wrapped seed or a
// range ending at 1.8e308.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

namespace remat::cli {

// Decimal digits only, in [lo, hi].
CLI::Validator whole_number(std::int64_t lo, std::int64_t hi = INT32_MAX);
// A seed: a whole number from 0 to 2^63 - 1 (it is recorded as an int64).
CLI::Validator seed_number();
// A positive byte count with an optional k/M/G suffix (binary), e.g. 150MB.
CLI::Validator byte_size();

}  // namespace remat::cli
