// The safetensors pieces remat writes by itself: the 16-bit conversions
// (widening exact for every value, narrowing rounded to nearest even, as
// torch rounds) and a file written and read back.
#include <cmath>
#include <cstring>
#include <filesystem>

#include "catch.hpp"
#include "weights/safetensors.hpp"
#include "core/error.hpp"
#include "fixtures.hpp"

using namespace remat;
using namespace remat::hf;

TEST_CASE("every float16 and bfloat16 value widens exactly and narrows back to itself", "[hf]") {
  // NaNs are judged by their bits: comparing a signalling NaN traps here
  // (the test main traps invalid operations).
  auto nan_bits = [](float x) {
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    return (u & 0x7f800000) == 0x7f800000 && (u & 0x7fffff) != 0;
  };
  for (std::uint32_t v = 0; v < 65536; ++v) {
    const auto h = std::uint16_t(v);
    const float f = f16_to_f32(h), b = bf16_to_f32(h);
    const bool f16_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0, bf16_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
    INFO("bits " << v);
    CHECK(nan_bits(f) == f16_nan);
    CHECK(nan_bits(b) == bf16_nan);
    if (!f16_nan) CHECK(f32_to_f16(f) == h);
    if (!bf16_nan) CHECK(f32_to_bf16(b) == h);
  }
  // Known values: 1, the largest half, the smallest subnormal half.
  CHECK(f16_to_f32(0x3c00) == 1.0f);
  CHECK(f16_to_f32(0x7bff) == 65504.0f);
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(bf16_to_f32(0x3f80) == 1.0f);
}

TEST_CASE("narrowing rounds to nearest, ties to even, and overflows float16 to infinity", "[hf]") {
  // 1 + 2^-8 lies halfway between two bfloat16 values (1 and 1 + 2^-7): to the even one, 1.
  CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  CHECK(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);  // halfway above an odd one: up
  CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3f81);
  // float16: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  CHECK(f32_to_f16(65504.0f) == 0x7bff);
  CHECK(f32_to_f16(65519.0f) == 0x7bff);
  CHECK(f32_to_f16(65520.0f) == 0x7c00);
  CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0);  // halfway to the smallest subnormal: to even, zero
  CHECK(f32_to_f16(std::ldexp(1.5f, -25)) == 1);
  CHECK(f32_to_f16(-2.0f) == 0xc000);
}

TEST_CASE("a safetensors file written in each dtype reads back as written", "[hf]") {
  test::TempDir dir("remat-st");
  const std::vector<float> a = {1.0f, -2.5f, 3.14159f, 1e-3f, 0.0f, 65504.0f}, b = {7.0f, 8.0f};
  for (const char* dtype : {"F32", "BF16", "F16"}) {
    const std::string path = dir.file(std::string("t-") + dtype + ".safetensors");
    write_safetensors(path,
                      {{"a", {2, 3}, [&](float* out) { std::memcpy(out, a.data(), a.size() * 4); }},
                       {"b", {2}, [&](float* out) { std::memcpy(out, b.data(), b.size() * 4); }}},
                      dtype, {{"format", "pt"}});
    const SafetensorsFile f(path);
    REQUIRE(f.tensors().size() == 2);
    CHECK(f.metadata().at("format") == "pt");
    const StoredTensor* t = f.find("a");
    REQUIRE(t);
    CHECK(t->dtype == dtype);
    CHECK(t->shape == Shape{2, 3});
    std::vector<float> got(6);
    f.read_f32(*t, got.data());
    for (std::size_t i = 0; i < a.size(); ++i) {
      const float want = std::string(dtype) == "F32" ? a[i] : std::string(dtype) == "BF16" ? bf16_to_f32(f32_to_bf16(a[i]))
                                                                                              : f16_to_f32(f32_to_f16(a[i]));
      CHECK(got[i] == want);
    }
  }
  CHECK_THROWS_WITH(write_safetensors(dir.file("big.safetensors"), {{"x", {1}, [](float* out) { out[0] = 1e6f; }}}, "F16"),
                    Catch::Contains("beyond float16's range"));
  CHECK_FALSE(std::filesystem::exists(dir.file("big.safetensors")));
  CHECK_THROWS_WITH(SafetensorsFile(dir.file("absent.safetensors")), Catch::Contains("cannot open"));
}
