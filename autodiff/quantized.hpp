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
// `scale_blocks`: the blocks whose nf4 second-level scales are kept (a
// part's: its whole weight's; 0: numel's own).
QuantLayout quant_layout(QuantFormat f, std::int64_t numel, std::int64_t scale_blocks = 0);

// Where a part of a quantized weight (a tensor-parallel rank's) lies in the
// whole weight it was cut from, in blocks: runs of `run` blocks, `stride`
// apart, the first at block `first`, of `whole` blocks in all. A part keeps
// its blocks' codes and absmax and, for nf4, the whole's second-level scales
// and mean (4 bytes per kScaleBlock blocks), so that it dequantizes to
// exactly the whole's values at its places. All zero: a whole weight.
struct QuantBlocks {
  std::int64_t first = 0, run = 0, stride = 0, whole = 0;
  bool part() const { return whole > 0; }
  // The whole's block of the part's block `b`.
  KOKKOS_INLINE_FUNCTION std::int64_t of(std::int64_t b) const {
    return whole > 0 ? first + (b / run) * stride + b % run : b;
  }
};

struct QuantizedWeight {
  QuantFormat format = QuantFormat::none;
  Shape shape;  // the weight it stands for
  Tensor bytes;  // uint8 [layout().total]
  QuantBlocks blocks;  // where it lies in its whole weight (a part), or nothing (whole)
  bool defined() const { return format != QuantFormat::none; }
  std::int64_t numel() const { return remat::numel(shape); }
  QuantLayout layout() const { return quant_layout(format, numel(), blocks.whole); }
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
// them, quant_layout(f, numel).total of them; a part's as quantized_part
// cuts them, at `where`), in the pool kQuantPool.
QuantizedWeight quantized_from_bytes(QuantFormat f, const Shape& shape, const std::vector<std::uint8_t>& bytes,
                                     const QuantBlocks& where = {});
// A part of a whole weight quantized as `whole_bytes` (quantize_values'
// bytes, of where.whole * kQuantBlock weights): the bytes of the blocks
// `where` names, standing for a weight of `shape` (tensor parallelism's
// rank part). In a shape-only run (whole_bytes empty) counted, not computed.
QuantizedWeight quantized_part(QuantFormat f, const std::vector<std::uint8_t>& whole_bytes, const Shape& shape,
                               const QuantBlocks& where);
// The other way: a part's bytes (`part`, of `shape`, `where`'s blocks) written into
// the whole weight's (`whole_bytes`, sized quant_layout(f, whole numel)), its
// second-level scales and mean with them (every part holds the same).
void place_part(QuantFormat f, const std::vector<std::uint8_t>& part, const Shape& shape, const QuantBlocks& where,
                std::vector<std::uint8_t>& whole_bytes);
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
