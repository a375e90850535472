#include "zoo/tensor_parallel.hpp"

#include "autodiff/elementwise.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/random.hpp"
#include "autodiff/shape_only.hpp"
#include "autodiff/tape.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "zoo/common.hpp"
#include "zoo/model.hpp"

namespace remat::tp {

namespace {

std::int64_t part(std::int64_t whole, const RankGroup& g) { return whole / g.size; }

// Calls f(whole offset, part offset, length) for each run of consecutive
// elements that rank r's part of a parameter split as `s` copies from the
// whole one of `whole` shape.
template <class F>
void for_each_run(const Split& s, const Shape& whole, int r, int ranks, const F& f) {
  if (s.dim < 0) return f(std::int64_t(0), std::int64_t(0), numel(whole));
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < s.dim; ++i) outer *= whole[i];
  for (std::size_t i = s.dim + 1; i < whole.size(); ++i) inner *= whole[i];
  const int parts = s.parts > 0 ? s.parts : ranks, mine = r * parts / ranks;
  const std::int64_t n = whole[s.dim], block = n / s.blocks, q = block / parts;
  std::int64_t at = 0;
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t b = 0; b < s.blocks; ++b, at += q * inner)
      f((o * n + b * block + mine * q) * inner, at, q * inner);
}

}  // namespace

void append_column(std::vector<ParamSpec>& p, const std::string& prefix, std::int64_t out, std::int64_t in,
                   const RankGroup& g, Init init, bool bias, int blocks, int parts) {
  if (!g.split()) return append_linear(p, prefix, out, in, init, bias);
  const std::int64_t rows = parts > 0 ? out / parts : part(out, g);
  p.push_back({prefix + ".weight", {rows, in}, init, {0, blocks, parts}});
  if (bias) p.push_back({prefix + ".bias", {rows}, Init::zeros, {0, blocks, parts}});
}

int kv_parts(int kv_heads, const RankGroup& g) { return g.split() && kv_heads < g.size ? kv_heads : 0; }

Tensor replicated(const Tensor& read, int parts, const RankGroup& g) {
  return parts <= 0 ? read : ops::all_reduce_in_backward(read, g, g.size / parts);
}

void append_row(std::vector<ParamSpec>& p, const std::string& prefix, std::int64_t out, std::int64_t in,
                const RankGroup& g, Init init, bool bias) {
  if (!g.split()) return append_linear(p, prefix, out, in, init, bias);
  p.push_back({prefix + ".weight", {out, part(in, g)}, init, {1, 1}});
  if (bias) p.push_back({prefix + ".bias", {out}, Init::zeros});
}

void append_vocabulary(std::vector<ParamSpec>& p, const std::string& name, std::int64_t V, std::int64_t D,
                       const RankGroup& g) {
  if (!g.split()) return p.push_back({name, {V, D}});
  p.push_back({name, {part(V, g), D}, Init::normal, {0, 1}});
}

namespace {

// The sum over the group of every rank's x: whole, or this rank's part of the sequence.
Tensor summed(const Tensor& x, const RankGroup& g) {
  return g.sequence ? ops::reduce_scatter_sequence(x, g) : ops::all_reduce(x, g);
}

}  // namespace

Tensor enter(const Tensor& x, const RankGroup& g) {
  if (!g.split()) return x;
  return g.sequence ? ops::all_gather_sequence(x, g) : ops::all_reduce_in_backward(x, g);
}

Tensor shared(const ParamStore& p, const std::string& name, const RankGroup& g) {
  return g.sequence ? ops::all_reduce_in_backward(p[name], g) : p[name];
}

Tensor positions(const Tensor& tokens, const RankGroup& g) {
  if (!g.sequence) return remat::positions(tokens);
  const std::int64_t part = tokens.dim(1) / g.size;
  std::vector<std::int32_t> mine(static_cast<std::size_t>(part));
  for (std::int64_t i = 0; i < part; ++i) mine[std::size_t(i)] = std::int32_t(g.rank * part + i);
  return Tensor::from_host(mine, {part}, "positions");
}

Tensor row_linear(const ParamStore& p, const std::string& prefix, const Tensor& x, const RankGroup& g, bool bias) {
  if (!g.split()) return linear(p, prefix, x, bias);
  const Tensor y = summed(linear(p, prefix, x, false), g);
  return bias && p.has(prefix + ".bias") ? ops::add(y, shared(p, prefix + ".bias", g)) : y;
}

Tensor embedding(const ParamStore& p, const std::string& name, const Tensor& tokens, const RankGroup& g) {
  if (!g.split()) return ops::embedding(p[name], tokens);
  const Tensor& table = p[name];
  return summed(ops::embedding_part(table, tokens, g.rank * table.dim(0), table.dim(0) * g.size), g);
}

Tensor dropout(const Tensor& x, double p, const RankGroup& g) {
  if (!g.sequence) return ops::dropout(x, p);
  const random_ops::PartScope mine(std::uint64_t(g.rank));
  return ops::dropout(x, p);
}

Tensor on_my_heads(const RankGroup& g, const std::function<Tensor()>& f) {
  if (!g.split()) return f();
  const random_ops::PartScope mine(std::uint64_t(g.rank));
  return f();
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, const RankGroup& g) {
  if (!g.split()) return ops::cross_entropy(logits, targets);
  return ops::cross_entropy_parts(logits, targets, g.rank * logits.dim(-1), g);
}

void validate(const std::string& model, const Sizes& z) {
  const RankGroup& g = z.tp;
  if (g.size < 1 || g.rank < 0 || g.rank >= g.size)
    throw UserError("--tp " + std::to_string(g.size) + ": rank " + std::to_string(g.rank) + " is not in the group");
  if (g.sequence && !g.split())
    throw UserError("--sp splits the sequence over a tensor-parallel group: give --tp 2 or more");
  if (!g.split()) return;
  if (!models().find(model).tensor_parallel)
    throw UserError("--tp: " + model + " is not split by tensor parallelism yet (models that are: " +
                    join(tensor_parallel_models(), ", ") + ")");
  auto divides = [&](std::int64_t n, const std::string& what, const std::string& note = "") {
    if (n % g.size != 0)
      throw UserError("--tp " + std::to_string(g.size) + " does not divide " + what + " = " + std::to_string(n) + note);
  };
  const ModelInfo& info = models().find(model);  // what its registration says of its split
  divides(z.H, "the attention heads H");
  if (info.grouped_kv && z.Hkv % g.size != 0 && g.size % z.Hkv != 0)
    throw UserError("--tp " + std::to_string(g.size) + " neither divides the key/value heads Hkv = " +
                    std::to_string(z.Hkv) + " nor is a multiple of it (to replicate them)");
  divides(info.mlp_hidden ? info.mlp_hidden(z) : z.F, "the MLP's hidden size");
  divides(z.V, "the vocabulary V");
  if (!g.sequence) return;
  const std::string& refused = models().find(model).no_sequence_split;
  if (!refused.empty()) throw UserError("--sp: " + refused);
  if (z.cp.split())  // sequence parallelism splits each context-parallel rank's rows
    divides(z.S / z.cp.size, "each --cp rank's rows S / " + std::to_string(z.cp.size));
  else
    divides(z.S, "the sequence length S");
}

std::unique_ptr<ParamStore> part_of(const ParamStore& whole, const std::vector<ParamSpec>& specs,
                                    const RankGroup& g) {
  auto parts = std::make_unique<ParamStore>(specs, whole.tensors().empty() ? DType::f32 : whole.tensors()[0].dtype());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (const QuantizedWeight* q = whole.quantized(specs[i].name)) {  // (set_quantized freezes it)
      parts->set_quantized(specs[i].name, quantized_part_of(*q, specs[i], g));
      continue;
    }
    const Tensor& from = whole[specs[i].name];
    convert_into(parts->tensors()[i],
                 Tensor::from_host(part_values(from.to_host_f64(), specs[i], from.shape(), g), specs[i].shape));
    if (!from.requires_grad()) parts->freeze(specs[i].name);  // a frozen parameter's parts are frozen
  }
  return parts;
}

Shape whole_shape(const ParamSpec& spec, int ranks) {
  Shape whole = spec.shape;
  if (spec.split.dim >= 0) whole[std::size_t(spec.split.dim)] *= spec.split.parts > 0 ? spec.split.parts : ranks;
  return whole;
}

std::vector<double> part_values(const std::vector<double>& whole, const ParamSpec& spec, const Shape& whole_shape,
                                const RankGroup& g) {
  if (std::int64_t(whole.size()) != numel(whole_shape))
    throw UserError(spec.name + ": " + std::to_string(whole.size()) + " values for a parameter of shape " +
                    to_string(whole_shape));
  std::vector<double> mine(std::size_t(numel(spec.shape)));
  for_each_run(spec.split, whole_shape, g.rank, g.size, [&](std::int64_t w, std::int64_t p, std::int64_t n) {
    std::copy(whole.begin() + w, whole.begin() + w + n, mine.begin() + p);
  });
  return mine;
}

std::vector<double> join_parts(const std::vector<std::vector<double>>& parts, const ParamSpec& spec,
                               const Shape& whole_shape) {
  std::vector<double> whole(std::size_t(numel(whole_shape)));
  const int ranks = spec.split.dim < 0 ? 1 : int(parts.size());
  const int share = spec.split.parts > 0 ? ranks / spec.split.parts : 1;  // ranks holding the same part
  for (int r = 0; r < ranks; r += share)
    for_each_run(spec.split, whole_shape, r, ranks, [&](std::int64_t w, std::int64_t p, std::int64_t n) {
      std::copy(parts[r].begin() + p, parts[r].begin() + p + n, whole.begin() + w);
    });
  return whole;
}

QuantBlocks quant_blocks(const ParamSpec& spec, const Shape& whole, const RankGroup& g) {
  if (spec.split.dim < 0 || !g.split()) return {};
  std::vector<std::int64_t> starts;
  std::int64_t length = 0;
  for_each_run(spec.split, whole, g.rank, g.size, [&](std::int64_t w, std::int64_t, std::int64_t n) {
    starts.push_back(w);
    length = n;
  });
  bool even = length % kQuantBlock == 0 && numel(whole) % kQuantBlock == 0;
  for (std::size_t k = 0; k < starts.size(); ++k)
    even = even && starts[k] % kQuantBlock == 0 && (k < 2 || starts[k] - starts[k - 1] == starts[1] - starts[0]);
  if (!even)
    throw UserError("--tp " + std::to_string(g.size) + ": quantized weight '" + spec.name + "' " + to_string(whole) +
                    " splits into runs of " + std::to_string(length) + " values, not whole blocks of " +
                    std::to_string(kQuantBlock) + " (a rank's part of each row, or its rows, must be whole blocks)");
  const std::int64_t run = length / kQuantBlock;
  const std::int64_t stride = starts.size() > 1 ? (starts[1] - starts[0]) / kQuantBlock : run;
  return {starts[0] / kQuantBlock, run, stride, numel(whole) / kQuantBlock};
}

QuantizedWeight quantized_part_of(const QuantizedWeight& whole, const ParamSpec& spec, const RankGroup& g) {
  const QuantBlocks where = quant_blocks(spec, whole.shape, g);
  if (!where.part()) return whole;
  if (whole.blocks.part()) throw std::logic_error("quantized_part_of: '" + spec.name + "' is a part already");
  return quantized_part(whole.format, shape_only() ? std::vector<std::uint8_t>() : whole.bytes.to_host<std::uint8_t>(),
                        spec.shape, where);
}

std::vector<float> whole_values(const Tensor& part, const ParamSpec& spec, const RankGroup& g) {
  if (shape_only()) return {};
  if (spec.split.dim < 0 || !g.split()) return part.to_host_f32();
  NoGradScope no_grad;
  // Every rank's part, one after the other (a sequence of one row, gathered).
  const Tensor all = ops::all_gather_sequence(part.view_as({1, part.numel()}), g);
  const std::vector<double> values = all.to_host_f64();
  std::vector<std::vector<double>> by_rank(static_cast<std::size_t>(g.size));
  for (int r = 0; r < g.size; ++r)
    by_rank[std::size_t(r)].assign(values.begin() + std::int64_t(r) * part.numel(),
                                   values.begin() + std::int64_t(r + 1) * part.numel());
  const std::vector<double> whole = join_parts(by_rank, spec, whole_shape(spec, g.size));
  return std::vector<float>(whole.begin(), whole.end());
}

}  // namespace remat::tp
