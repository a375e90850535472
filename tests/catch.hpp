#pragma once
// Catch2 v2 (Debian's 2.13) and v3 spell their headers and a few names
// differently; tests use test::Approx and test::Contains from here.
#include <string>

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
namespace remat::test {
using Catch::Approx;
inline auto Contains(const std::string& s) { return Catch::Matchers::ContainsSubstring(s); }
}  // namespace remat::test
#else
#include <catch2/catch.hpp>
namespace remat::test {
using Catch::Detail::Approx;
inline auto Contains(const std::string& s) { return Catch::Matchers::Contains(s); }
}  // namespace remat::test
#endif
