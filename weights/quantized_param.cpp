#include "weights/quantized_param.hpp"

#include <cmath>
#include <cstring>

#include "core/error.hpp"
#include "weights/weights_schema.hpp"

namespace remat {

namespace {

float float_at(const std::vector<std::uint8_t>& b, std::int64_t at) {
  float v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}

// What no quantizer writes: a non-finite or negative scale, an 8-bit code of -128.
std::string first_flaw(const std::vector<std::uint8_t>& b, QuantFormat format, std::int64_t numel) {
  const QuantLayout l = quant_layout(format, numel);
  const std::int64_t blocks = numel / kQuantBlock;
  const auto bad_scale = [](float s) { return !std::isfinite(s) || s < 0; };
  if (format == QuantFormat::int8) {
    for (std::int64_t i = 0; i < numel; ++i)
      if (b[std::size_t(l.codes + i)] == 0x80) return "code -128 at weight " + std::to_string(i);
    for (std::int64_t k = 0; k < blocks; ++k)
      if (bad_scale(float_at(b, l.absmax + 4 * k))) return "a bad absmax in block " + std::to_string(k);
    return "";
  }
  for (std::int64_t k = 0; k < blocks; ++k)
    if (b[std::size_t(l.absmax + k)] == 0x80) return "absmax code -128 in block " + std::to_string(k);
  for (std::int64_t g = 0; g < (blocks + kScaleBlock - 1) / kScaleBlock; ++g)
    if (bad_scale(float_at(b, l.scales + 4 * g))) return "a bad second-level scale " + std::to_string(g);
  if (!std::isfinite(float_at(b, l.offset))) return "a non-finite mean absmax";
  return "";
}

}  // namespace

void write_quantized_param(const h5::File& f, const std::string& path, QuantFormat format,
                           const std::vector<std::uint8_t>& bytes) {
  h5::write(f, path, bytes, {std::int64_t(bytes.size())});
  weights_file::param_attr::quantized.write(f, path, quant_format_name(format));
}

void write_quantized_param(const h5::File& f, const std::string& path, const QuantizedWeight& q) {
  write_quantized_param(f, path, q.format, q.bytes.to_host<std::uint8_t>());
}

std::optional<QuantFormat> stored_format(const h5::File& f, const std::string& path, const std::string& file) {
  const auto name = weights_file::param_attr::quantized.read(f, path);
  if (!name) return std::nullopt;
  if (*name != "nf4" && *name != "int8")
    throw UserError(file + ": " + path + " is quantized in '" + *name + "', which this build does not know (nf4, int8)");
  return parse_quant_format(*name);
}

QuantizedWeight read_quantized_param(const h5::File& f, const std::string& path, const ParamSpec& spec,
                                     QuantFormat format, const std::string& file) {
  const std::string what = file + ": quantized parameter '" + spec.name + "' " + to_string(spec.shape);
  const std::int64_t n = numel(spec.shape);
  if (spec.shape.size() != 2 || n % kQuantBlock != 0) throw UserError(what + " cannot be quantized (not a 2-D weight of whole 64-value blocks)");
  const h5::DatasetInfo di = h5::info(f, path);
  const std::int64_t want = quant_layout(format, n).total;
  if (di.kind != h5::Kind::uint8 || di.shape != Shape{want})
    throw UserError(what + " holds " + di.type_name + " " + to_string(di.shape) + ", expected uint8 [" +
                    std::to_string(want) + "] in " + quant_format_name(format));
  const std::vector<std::uint8_t> bytes = h5::read_u8(f, path);
  const std::string flaw = first_flaw(bytes, format, n);
  if (!flaw.empty()) throw UserError(what + " is not valid " + quant_format_name(format) + ": " + flaw);
  return quantized_from_bytes(format, spec.shape, bytes);
}

}  // namespace remat
