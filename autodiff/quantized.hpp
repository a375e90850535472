#pragma once
// Frozen weights in 4 or 8 bits, as QLoRA fine-tunes (Dettmers et al. 2023).
// A quantized weight is one uint8 tensor, its codes followed by its scales
// (docs/fine-tuning.md gives the formats byte by byte), and the shape it
// stands for. The linear op dequantizes it into the compute type in a
// counted scratch buffer for each product it runs, forward, backward and
// recomputation alike, so no dequantized copy of a whole model ever exists.
// Dequantization is a pure function of the stored bytes: a recomputation
// reads exactly the values the first forward read.
#include <cstdint>
#include <string>

#include "autodiff/tensor.hpp"

namespace remat {

enum class QuantFormat { none, nf4, int8 };
const char* quant_format_name(QuantFormat f);  // "none", "nf4", "int8"
QuantFormat parse_quant_format(const std::string& name);  // UserError naming the choices if unknown

// Weights per absmax scale (both formats; blocks run over the flattened
// weight, row after row, as bitsandbytes lays them out).
inline constexpr std::int64_t kQuantBlock = 64;
// nf4's double quantization: absmax scales per second-level scale.
inline constexpr std::int64_t kScaleBlock = 256;

// The 16 NormalFloat levels (the QLoRA paper's Appendix E), ascending.
float nf4_level(int code);

// Where each part of a quantized weight's bytes starts (each 4-byte aligned), and their total.
struct QuantLayout {
  std::int64_t codes = 0;   // nf4: two 4-bit codes a byte; int8: one signed byte per weight
  std::int64_t absmax = 0;  // nf4: one signed 8-bit code per block; int8: one float32 per block
  std::int64_t scales = 0;  // nf4: one float32 per kScaleBlock blocks (int8: none)
  std::int64_t offset = 0;  // nf4: one float32, the blocks' mean absmax (int8: none)
  std::int64_t total = 0;
};
QuantLayout quant_layout(QuantFormat f, std::int64_t numel);

struct QuantizedWeight {
  QuantFormat format = QuantFormat::none;
  Shape shape;  // the weight it stands for
  Tensor bytes;  // uint8 [quant_layout(format, numel).total]
  bool defined() const { return format != QuantFormat::none; }
  std::int64_t numel() const { return remat::numel(shape); }
};

// The label of every quantized weight's bytes: the memory tracker's pool
// kQuantPool holds them.
inline constexpr const char* kQuantLabel = "quantized_weights";
inline constexpr const char* kQuantPool = "quantized weights";

// Quantizes a float weight (float32 or float64, read as float32). Its
// element count must be a multiple of kQuantBlock (std::invalid_argument
// otherwise). In a shape-only run the bytes are counted and not computed.
QuantizedWeight quantize(const Tensor& weight, QuantFormat f);
// The same from host values (what a weight file and the tests hold).
std::vector<std::uint8_t> quantize_values(const std::vector<float>& w, QuantFormat f);
// A quantized weight of `shape` from its bytes (as quantize_values writes
// them, quant_layout(f, numel).total of them), in the pool kQuantPool.
QuantizedWeight quantized_from_bytes(QuantFormat f, const Shape& shape, const std::vector<std::uint8_t>& bytes);
// Writes the weight's values, as T, into `out` (numel elements in tensor
// memory). Nothing runs in a shape-only run.
template <class T>
void dequantize(const QuantizedWeight& q, T* out);
// The arithmetic of one dequantization (docs/fine-tuning.md): int8 a
// multiply a weight and a division a block; nf4 a block's absmax (3) and its
// 16 values (16), its weights then lookups.
double dequantize_flops(const QuantizedWeight& q);
// A dequantized copy as a float32 tensor (export, merging, tests).
Tensor dequantized(const QuantizedWeight& q, const std::string& label);

}  // namespace remat
