#include "autodiff/quantized.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "autodiff/loops.hpp"
#include "autodiff/memory_tracker.hpp"
#include "autodiff/shape_only.hpp"
#include "core/error.hpp"

namespace remat {

namespace {

// The levels as a kernel reads them: a local array, which device code can
// index (a namespace-scope one lives in host memory only).
KOKKOS_INLINE_FUNCTION float level_of(int code) {
  constexpr float levels[16] = {-1.0f,
                                -0.6961928009986877f,
                                -0.5250730514526367f,
                                -0.39491748809814453f,
                                -0.28444138169288635f,
                                -0.18477343022823334f,
                                -0.09105003625154495f,
                                0.0f,
                                0.07958029955625534f,
                                0.16093020141124725f,
                                0.24611230194568634f,
                                0.33791524171829224f,
                                0.44070982775878906f,
                                0.5626170039176941f,
                                0.7229568362236023f,
                                1.0f};
  return levels[code];
}

std::int64_t aligned4(std::int64_t n) { return (n + 3) / 4 * 4; }

// round(v / scale * 127), ties to even, within [-127, 127]; 0 for a zero scale.
std::int8_t code8(float v, float scale) {
  if (scale == 0) return 0;
  const float q = std::nearbyint((v / scale) * 127.0f);
  return std::int8_t(std::clamp(q, -127.0f, 127.0f));
}

void put_float(std::vector<std::uint8_t>& out, std::int64_t at, float v) { std::memcpy(out.data() + at, &v, 4); }

// The blocks' absmax: the largest magnitude of each kQuantBlock weights.
std::vector<float> block_absmax(const std::vector<float>& w) {
  std::vector<float> absmax(w.size() / kQuantBlock, 0.0f);
  for (std::size_t i = 0; i < w.size(); ++i)
    absmax[i / kQuantBlock] = std::max(absmax[i / kQuantBlock], std::fabs(w[i]));
  return absmax;
}

void quantize_nf4(const std::vector<float>& w, const QuantLayout& l, std::vector<std::uint8_t>& out) {
  const std::vector<float> absmax = block_absmax(w);
  // The nearest level: the number of midpoints below x (a tie goes to the lower level).
  float mid[15];
  for (int k = 0; k < 15; ++k) mid[k] = (level_of(k) + level_of(k + 1)) * 0.5f;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const float a = absmax[i / kQuantBlock];
    const float x = a == 0 ? 0.0f : w[i] / a;
    int code = 0;
    while (code < 15 && mid[code] < x) ++code;
    out[l.codes + i / 2] |= std::uint8_t(i % 2 == 0 ? code << 4 : code);
  }
  // Double quantization: the absmax values less their mean, in signed 8
  // bits, with a float32 scale per kScaleBlock of them.
  double sum = 0;
  for (float a : absmax) sum += a;
  const float mean = float(sum / double(absmax.size()));
  put_float(out, l.offset, mean);
  for (std::size_t g = 0; g * kScaleBlock < absmax.size(); ++g) {
    const std::size_t lo = g * kScaleBlock, hi = std::min(absmax.size(), lo + kScaleBlock);
    float scale = 0;
    for (std::size_t b = lo; b < hi; ++b) scale = std::max(scale, std::fabs(absmax[b] - mean));
    put_float(out, l.scales + 4 * std::int64_t(g), scale);
    for (std::size_t b = lo; b < hi; ++b) out[l.absmax + b] = std::uint8_t(code8(absmax[b] - mean, scale));
  }
}

void quantize_int8(const std::vector<float>& w, const QuantLayout& l, std::vector<std::uint8_t>& out) {
  const std::vector<float> absmax = block_absmax(w);
  for (std::size_t b = 0; b < absmax.size(); ++b) put_float(out, l.absmax + 4 * std::int64_t(b), absmax[b]);
  for (std::size_t i = 0; i < w.size(); ++i) out[l.codes + i] = std::uint8_t(code8(w[i], absmax[i / kQuantBlock]));
}

}  // namespace

float nf4_level(int code) {
  if (code < 0 || code > 15) throw std::out_of_range("nf4_level: code " + std::to_string(code));
  return level_of(code);
}

const char* quant_format_name(QuantFormat f) {
  switch (f) {
    case QuantFormat::nf4: return "nf4";
    case QuantFormat::int8: return "int8";
    default: return "none";
  }
}

QuantFormat parse_quant_format(const std::string& name) {
  if (name == "nf4") return QuantFormat::nf4;
  if (name == "int8") return QuantFormat::int8;
  if (name == "none") return QuantFormat::none;
  throw UserError("unknown quantization '" + name + "' (nf4, int8, none)");
}

QuantLayout quant_layout(QuantFormat f, std::int64_t numel, std::int64_t scale_blocks) {
  const std::int64_t blocks = numel / kQuantBlock;
  if (scale_blocks == 0) scale_blocks = blocks;
  QuantLayout l;
  if (f == QuantFormat::int8) {
    l.absmax = aligned4(numel);
    l.scales = l.offset = l.total = l.absmax + 4 * blocks;
  } else if (f == QuantFormat::nf4) {
    l.absmax = aligned4(numel / 2);
    l.scales = aligned4(l.absmax + blocks);
    l.offset = l.scales + 4 * ((scale_blocks + kScaleBlock - 1) / kScaleBlock);
    l.total = l.offset + 4;
  }
  return l;
}

std::vector<std::uint8_t> quantize_values(const std::vector<float>& w, QuantFormat f) {
  if (f == QuantFormat::none) throw std::invalid_argument("quantize: no format");
  if (w.empty() || std::int64_t(w.size()) % kQuantBlock != 0)
    throw std::invalid_argument("quantize: " + std::to_string(w.size()) + " values are not whole blocks of " +
                                std::to_string(kQuantBlock));
  const QuantLayout l = quant_layout(f, std::int64_t(w.size()));
  std::vector<std::uint8_t> out(std::size_t(l.total), 0);
  if (f == QuantFormat::nf4)
    quantize_nf4(w, l, out);
  else
    quantize_int8(w, l, out);
  return out;
}

QuantizedWeight quantize(const Tensor& weight, QuantFormat f) {
  if (f == QuantFormat::none) throw std::invalid_argument("quantize: no format");
  if (weight.numel() == 0 || weight.numel() % kQuantBlock != 0)
    throw std::invalid_argument("quantize: " + std::to_string(weight.numel()) + " values are not whole blocks of " +
                                std::to_string(kQuantBlock));
  if (!shape_only()) return quantized_from_bytes(f, weight.shape(), quantize_values(weight.to_host_f32(), f));
  MemoryTracker::instance().pool_for_label(kQuantLabel, kQuantPool);
  return {f, weight.shape(), Tensor::empty({quant_layout(f, weight.numel()).total}, DType::u8, kQuantLabel), {}};
}

QuantizedWeight quantized_from_bytes(QuantFormat f, const Shape& shape, const std::vector<std::uint8_t>& bytes,
                                     const QuantBlocks& where) {
  const std::int64_t total = quant_layout(f, numel(shape), where.whole).total;
  if (std::int64_t(bytes.size()) != total)
    throw std::invalid_argument("quantized_from_bytes: " + std::to_string(bytes.size()) + " bytes, expected " +
                                std::to_string(total));
  MemoryTracker::instance().pool_for_label(kQuantLabel, kQuantPool);
  return {f, shape, Tensor::from_host(bytes, {total}, kQuantLabel), where};
}

namespace {

// Bytes of one block's codes and of its absmax, in format f.
std::int64_t code_bytes(QuantFormat f) { return f == QuantFormat::nf4 ? kQuantBlock / 2 : kQuantBlock; }
std::int64_t absmax_bytes(QuantFormat f) { return f == QuantFormat::nf4 ? 1 : 4; }

// Copies each block of a part, with nf4's group scales and mean, from its
// whole weight's bytes into the part's (into_part) or back.
void copy_blocks(QuantFormat f, const QuantBlocks& where, std::int64_t part_blocks, const std::uint8_t* from,
                 std::uint8_t* to, bool into_part) {
  const QuantLayout pl = quant_layout(f, part_blocks * kQuantBlock, where.whole);
  const QuantLayout wl = quant_layout(f, where.whole * kQuantBlock);
  const QuantLayout &src = into_part ? wl : pl, &dst = into_part ? pl : wl;
  const std::int64_t c = code_bytes(f), a = absmax_bytes(f);
  for (std::int64_t b = 0; b < part_blocks; ++b) {
    const std::int64_t w = where.of(b), s = into_part ? w : b, d = into_part ? b : w;
    std::memcpy(to + dst.codes + d * c, from + src.codes + s * c, std::size_t(c));
    std::memcpy(to + dst.absmax + d * a, from + src.absmax + s * a, std::size_t(a));
  }
  if (pl.total > pl.scales)  // nf4's scales and mean (int8: none)
    std::memcpy(to + dst.scales, from + src.scales, std::size_t(pl.total - pl.scales));
}

void require_part(QuantFormat f, const Shape& shape, const QuantBlocks& where) {
  const std::int64_t n = numel(shape);
  if (f == QuantFormat::none || n == 0 || n % kQuantBlock != 0 || !where.part() || where.run < 1 ||
      (n / kQuantBlock) % where.run != 0 || where.of(n / kQuantBlock - 1) >= where.whole)
    throw std::invalid_argument("a quantized part: " + std::to_string(n) + " values are not whole runs of blocks of " +
                                std::to_string(where.whole) + " blocks");
}

}  // namespace

QuantizedWeight quantized_part(QuantFormat f, const std::vector<std::uint8_t>& whole_bytes, const Shape& shape,
                               const QuantBlocks& where) {
  require_part(f, shape, where);
  const std::int64_t total = quant_layout(f, numel(shape), where.whole).total;
  MemoryTracker::instance().pool_for_label(kQuantLabel, kQuantPool);
  if (whole_bytes.empty()) {
    if (!shape_only()) throw std::invalid_argument("quantized_part: no whole bytes to cut from");
    return {f, shape, Tensor::empty({total}, DType::u8, kQuantLabel), where};
  }
  if (std::int64_t(whole_bytes.size()) != quant_layout(f, where.whole * kQuantBlock).total)
    throw std::invalid_argument("quantized_part: " + std::to_string(whole_bytes.size()) + " bytes are not " +
                                std::to_string(where.whole) + " blocks' in " + quant_format_name(f));
  std::vector<std::uint8_t> part(std::size_t(total), 0);
  copy_blocks(f, where, numel(shape) / kQuantBlock, whole_bytes.data(), part.data(), /*into_part=*/true);
  return {f, shape, Tensor::from_host(part, {total}, kQuantLabel), where};
}

void place_part(QuantFormat f, const std::vector<std::uint8_t>& part, const Shape& shape, const QuantBlocks& where,
                std::vector<std::uint8_t>& whole_bytes) {
  require_part(f, shape, where);
  if (std::int64_t(part.size()) != quant_layout(f, numel(shape), where.whole).total ||
      std::int64_t(whole_bytes.size()) != quant_layout(f, where.whole * kQuantBlock).total)
    throw std::invalid_argument("place_part: the part's or the whole's bytes are not their layout's");
  copy_blocks(f, where, numel(shape) / kQuantBlock, part.data(), whole_bytes.data(), /*into_part=*/false);
}

double dequantize_flops(const QuantizedWeight& q) {
  const double blocks = double(q.numel() / kQuantBlock);
  return q.format == QuantFormat::int8 ? double(q.numel()) + blocks : 19.0 * blocks;
}

template <class T>
void dequantize(const QuantizedWeight& q, T* out) {
  const std::uint8_t* b = q.bytes.data<std::uint8_t>();
  const QuantLayout l = q.layout();
  const QuantBlocks where = q.blocks;
  const std::int64_t blocks = q.numel() / kQuantBlock;
  if (q.format == QuantFormat::int8) {
    backend::for_each("dequantize_int8", blocks, KOKKOS_LAMBDA(std::int64_t blk) {
      const float step = reinterpret_cast<const float*>(b + l.absmax)[blk] / 127.0f;
      for (std::int64_t i = blk * kQuantBlock; i < (blk + 1) * kQuantBlock; ++i)
        out[i] = T(float(std::int8_t(b[l.codes + i])) * step);
    });
    return;
  }
  backend::for_each("dequantize_nf4", blocks, KOKKOS_LAMBDA(std::int64_t blk) {
    // The block's absmax back from 8 bits: code * (scale / 127) + mean. The
    // product is exact in double, so the one rounding to float32 is the
    // same whether or not a compiler fuses the multiply and add.
    // (A part's block takes its whole weight's block's scale.)
    const float step = reinterpret_cast<const float*>(b + l.scales)[where.of(blk) / kScaleBlock] / 127.0f;
    const float mean = reinterpret_cast<const float*>(b + l.offset)[0];
    const float absmax = float(double(std::int8_t(b[l.absmax + blk])) * double(step) + double(mean));
    // The block's 16 values, each level * absmax in float32 rounded once to
    // T: the 64 weights are then lookups.
    T value[16];
    for (int k = 0; k < 16; ++k) value[k] = T(level_of(k) * absmax);
    const std::uint8_t* pairs = b + l.codes + blk * (kQuantBlock / 2);
    T* o = out + blk * kQuantBlock;
    for (std::int64_t j = 0; j < kQuantBlock / 2; ++j) {
      o[2 * j] = value[pairs[j] >> 4];
      o[2 * j + 1] = value[pairs[j] & 15];
    }
  });
}
template void dequantize(const QuantizedWeight&, float*);
template void dequantize(const QuantizedWeight&, double*);
template void dequantize(const QuantizedWeight&, bf16*);
template void dequantize(const QuantizedWeight&, f16*);

Tensor dequantized(const QuantizedWeight& q, const std::string& label) {
  Tensor t = Tensor::empty(q.shape, DType::f32, label);
  dequantize(q, t.data<float>());
  return t;
}

}  // namespace remat
