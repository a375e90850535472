#pragma once
// A quantized parameter in a weight file: its dataset holds the format's
// bytes (autodiff/quantized.hpp; docs/fine-tuning.md) as uint8, with the
// `quantized` attribute naming the format (weights/weights_schema.hpp).
// Read back, the bytes are checked as strictly as float weights are.
#include <optional>
#include <string>

#include "autodiff/quantized.hpp"
#include "h5/h5.hpp"
#include "zoo/params.hpp"

namespace remat {

void write_quantized_param(const h5::File& f, const std::string& path, const QuantizedWeight& q);
void write_quantized_param(const h5::File& f, const std::string& path, QuantFormat format,
                           const std::vector<std::uint8_t>& bytes);
// The format a parameter's dataset is stored in (nothing for float values);
// UserError naming `file` for an unknown one.
std::optional<QuantFormat> stored_format(const h5::File& f, const std::string& path, const std::string& file);
// The bytes of parameter `spec`, checked: the length its shape needs in
// that format, codes and scales the quantizer can write (finite, an 8-bit
// code never -128). UserError naming the file and the parameter.
QuantizedWeight read_quantized_param(const h5::File& f, const std::string& path, const ParamSpec& spec,
                                     QuantFormat format, const std::string& file);

}  // namespace remat
