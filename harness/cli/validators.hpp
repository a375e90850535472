#pragma once
// Checks on option values, run on the text before it is converted, so that
// a bad value is one line saying what is accepted ("--layers: must be a
// whole number from 1 to 65536, got '0'") instead of a wrapped seed or a
// range ending at 1.8e308.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace remat::cli {

// Decimal digits only, in [lo, hi].
CLI::Validator whole_number(std::int64_t lo, std::int64_t hi = INT32_MAX);
// A seed: a whole number from 0 to 2^63 - 1 (it is recorded as an int64).
CLI::Validator seed_number();
// A positive byte count with an optional k/M/G suffix (binary), e.g. 150MB.
CLI::Validator byte_size();

// Rules that hold for every option of every command, installed once on the
// whole tree after the commands are set up: a number is finite (nan, inf
// and 1e999 refused wherever given, used or not); a value with no checks
// of its own is not empty (--svg '', --device '').
void check_every_option(CLI::App& app);
// Comma lists (options with a ',' delimiter) with an empty item ("1,,2",
// "1,") are refused with the item's position; CLI11 itself would drop the
// empty items silently. Run on the words before they are parsed.
void refuse_empty_list_items(const CLI::App& app, const std::vector<std::string>& words);

}  // namespace remat::cli
