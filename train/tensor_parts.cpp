#include "train/tensor_parts.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <stdexcept>

#include "autodiff/elementwise.hpp"
#include "comm/comm.hpp"
#include "zoo/expert_parallel.hpp"
#include "zoo/tensor_parallel.hpp"

namespace remat {

namespace {

// Every rank's `mine` of group g, one after the other (each as many).
std::vector<double> gathered(const std::vector<double>& mine, comm::Group g) {
  std::vector<double> all(mine.size() * std::size_t(comm::size(g)));
  comm::gather_all(mine.data(), std::int64_t(mine.size()), all.data(), g);
  return all;
}

}  // namespace

Tensor whole_of(const Tensor& part, const ParamSpec& spec, const Shape& whole, int ranks) {
  const std::vector<double> mine = part.to_host_f64();
  const std::vector<double> all = gathered(mine, comm::Group::tensor);  // (the group has `ranks`)
  std::vector<std::vector<double>> by_rank(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    by_rank[std::size_t(r)].assign(all.begin() + std::int64_t(r) * std::int64_t(mine.size()),
                                   all.begin() + std::int64_t(r + 1) * std::int64_t(mine.size()));
  Tensor out = Tensor::empty(whole, part.dtype(), "whole");
  convert_into(out, Tensor::from_host(tp::join_parts(by_rank, spec, whole), whole));
  return out;
}

namespace {

// Every rank's of the expert group: its values of `t` (zeros where this
// rank does not hold it).
std::vector<double> from_every_rank(const Tensor* t, std::int64_t n) {
  return gathered(t ? t->to_host_f64() : std::vector<double>(std::size_t(n), 0.0), comm::Group::expert);
}

// A quantized weight's bytes as doubles (exactly), to travel with the
// gathers, and back.
std::vector<double> bytes_as_doubles(const QuantizedWeight& q) {
  const std::vector<std::uint8_t> b = q.bytes.to_host<std::uint8_t>();
  return {b.begin(), b.end()};
}
std::vector<std::uint8_t> doubles_as_bytes(const std::vector<double>& v, std::int64_t at, std::int64_t n) {
  std::vector<std::uint8_t> b(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) b[std::size_t(i)] = std::uint8_t(v[std::size_t(at + i)]);
  return b;
}

// Under tensor parallelism: the whole quantized weight of `part`, this
// rank's, from every rank's (a collective); a weight held whole as it is.
QuantizedWeight whole_quantized(const QuantizedWeight& part, const ParamSpec& spec, const Shape& whole, int ranks) {
  if (!part.blocks.part()) return part;
  const std::vector<double> all = gathered(bytes_as_doubles(part), comm::Group::tensor);
  const std::int64_t n = part.bytes.numel();
  std::vector<std::uint8_t> bytes(std::size_t(quant_layout(part.format, numel(whole)).total), 0);
  for (int r = 0; r < ranks; ++r)
    place_part(part.format, doubles_as_bytes(all, r * n, n), spec.shape,
               tp::quant_blocks(spec, whole, RankGroup::tensor(ranks, r)), bytes);
  return quantized_from_bytes(part.format, whole, bytes);
}

// Under expert parallelism: parameter `name`'s quantized weight (`spec`, a
// tensor part of it) from the rank holding it (an expert's) or rank 0 (one
// every rank holds alike); nothing where it is kept in floats (a collective).
std::optional<QuantizedWeight> quantized_over_experts(const std::string& name, int owner, const ParamStore& parts,
                                                      const ParamSpec& spec, const RankGroup& tp) {
  const QuantizedWeight* mine = parts.has(name) ? parts.quantized(name) : nullptr;
  const int from = std::max(owner, 0);
  const auto format = QuantFormat(int(gathered({mine ? double(int(mine->format)) : 0.0}, comm::Group::expert)[from]));
  if (format == QuantFormat::none) return std::nullopt;
  const QuantBlocks where = tp::quant_blocks(spec, tp::whole_shape(spec, tp.size), tp);
  const std::int64_t n = quant_layout(format, numel(spec.shape), where.whole).total;
  const std::vector<double> all =
      gathered(mine ? bytes_as_doubles(*mine) : std::vector<double>(std::size_t(n), 0.0), comm::Group::expert);
  return quantized_from_bytes(format, spec.shape, doubles_as_bytes(all, from * n, n), where);
}

// For each of `names` (the whole model's), whether any rank says `yes` of it:
// an expert's answer is its owner's, and every rank learns it (one gather).
std::vector<bool> on_any_rank(const std::vector<std::string>& names, const std::function<bool(const std::string&)>& yes) {
  std::vector<double> mine(names.size(), 0.0);
  for (std::size_t i = 0; i < names.size(); ++i) mine[i] = yes(names[i]) ? 1 : 0;
  const std::vector<double> all = gathered(mine, comm::Group::expert);
  std::vector<bool> any(names.size(), false);
  for (std::size_t j = 0; j < all.size(); ++j) any[j % names.size()] = any[j % names.size()] || all[j] != 0;
  return any;
}

// Under expert parallelism: an expert's parameter (and gradient) from the
// rank holding it; a parameter every rank holds from rank 0 (they are the
// same), its gradient the sum of every rank's (each from its own sequences),
// added in rank order.
std::unique_ptr<ParamStore> whole_over_experts(const ModelSetup& setup, const ParamStore& parts, bool with_gradients) {
  Sizes sizes = setup.sizes;
  sizes.ep = RankGroup::expert();
  auto whole = std::make_unique<ParamStore>(models().find(setup.model).make(sizes)->params(), DType::f32);
  const std::vector<bool> frozen = on_any_rank(whole->names(), [&parts](const std::string& name) {
    return parts.has(name) && !parts.trainable(parts.index_of(name));
  });
  for (std::size_t i = 0; i < frozen.size(); ++i)
    if (frozen[i]) whole->freeze(whole->names()[i]);  // frozen as where it is held
  if (with_gradients) whole->zero_grad();
  const int ranks = setup.sizes.ep.size;
  for (std::size_t i = 0; i < whole->names().size(); ++i) {
    const std::string& name = whole->names()[i];
    const Tensor& into = whole->tensors()[i];
    const std::int64_t n = into.numel();
    const int owner = ep::owner(name, setup.sizes);
    if (auto q = quantized_over_experts(name, owner, parts, whole->specs()[i], setup.sizes.tp)) {
      whole->set_quantized(name, std::move(*q));  // frozen
      continue;
    }
    const Tensor* mine = parts.has(name) ? &parts.tensors()[parts.index_of(name)] : nullptr;
    const std::vector<double> values = from_every_rank(mine, n);
    const std::int64_t at = std::max(owner, 0) * n;
    convert_into(into, Tensor::from_host(std::vector<double>(values.begin() + at, values.begin() + at + n), into.shape()));
    if (!with_gradients || !into.requires_grad()) continue;
    const Tensor g = mine ? mine->grad() : Tensor();
    const std::vector<double> grads = from_every_rank(g.defined() ? &g : nullptr, n);
    std::vector<double> sum(grads.begin() + at, grads.begin() + at + n);
    for (int r = 1; owner < 0 && r < ranks; ++r)
      for (std::int64_t j = 0; j < n; ++j) sum[std::size_t(j)] += grads[std::size_t(r * n + j)];
    convert_into(into.grad(), Tensor::from_host(sum, into.shape()));
  }
  return whole;
}

}  // namespace

std::vector<Tensor> whole_expert_buffers(const ModelSetup& setup, const ParamStore& parts,
                                         const std::vector<Tensor>& buffers) {
  // The buffers are whole over a tensor split too (joined before): the whole model's shapes.
  const std::vector<ParamSpec> specs = models().find(setup.model).make(setup.sizes.whole_model())->params();
  const auto mine_of = [&](const std::string& name) -> const Tensor* {
    const std::size_t i = parts.has(name) ? parts.index_of(name) : parts.names().size();
    return i < buffers.size() && buffers[i].defined() ? &buffers[i] : nullptr;
  };
  std::vector<std::string> names;
  for (const auto& spec : specs) names.push_back(spec.name);
  // A frozen parameter has none (its owner's answer, for an expert).
  const std::vector<bool> held = on_any_rank(names, [&](const std::string& name) { return mine_of(name) != nullptr; });
  std::vector<Tensor> whole;
  for (std::size_t k = 0; k < specs.size(); ++k) {
    const ParamSpec& spec = specs[k];
    const int owner = ep::owner(spec.name, setup.sizes);
    const Tensor* mine = mine_of(spec.name);
    if (owner < 0 || !held[k]) {
      whole.push_back(mine ? *mine : Tensor());
      continue;
    }
    const std::int64_t n = numel(spec.shape);
    const std::vector<double> all = from_every_rank(mine, n);
    whole.push_back(Tensor::from_host(std::vector<float>(all.begin() + owner * n, all.begin() + (owner + 1) * n),
                                      spec.shape));
  }
  return whole;
}

std::unique_ptr<ParamStore> whole_store(const ModelSetup& setup, const ParamStore& parts, bool with_gradients) {
  if (setup.sizes.ep.split()) {  // every expert, in this rank's tensor parts; then those joined
    auto experts = whole_over_experts(setup, parts, with_gradients);
    if (!setup.sizes.tp.split()) return experts;
    ModelSetup tensor_only = setup;
    tensor_only.sizes.ep = RankGroup::expert();
    return whole_store(tensor_only, *experts, with_gradients);
  }
  const int ranks = setup.sizes.tp.size;
  std::vector<ParamSpec> specs;  // the whole model's, LoRA's adapters included
  for (const ParamSpec& spec : parts.specs()) specs.push_back({spec.name, tp::whole_shape(spec, ranks), spec.init});
  auto whole = std::make_unique<ParamStore>(specs, DType::f32);
  for (std::size_t i = 0; i < parts.specs().size(); ++i)
    if (!parts.trainable(i)) whole->freeze(parts.names()[i]);  // frozen whole as in parts: no gradient
  if (with_gradients) whole->zero_grad();
  for (std::size_t i = 0; i < parts.specs().size(); ++i) {
    const ParamSpec& spec = parts.specs()[i];
    if (const QuantizedWeight* q = parts.quantized(spec.name)) {
      whole->set_quantized(spec.name, whole_quantized(*q, spec, tp::whole_shape(spec, ranks), ranks));
      continue;
    }
    const Tensor& into = whole->tensors()[i];
    convert_into(into, whole_of(parts.tensors()[i], spec, into.shape(), ranks));
    const Tensor g = parts.tensors()[i].grad();
    if (with_gradients && g.defined()) convert_into(into.grad(), whole_of(g, spec, into.shape(), ranks));
  }
  return whole;
}

double split_gradient_norm(const ParamStore& parts, const std::vector<double>& squares, const RankGroup& g) {
  const int ranks = g.size;
  double split = 0, whole = 0;
  for (std::size_t i = 0; i < squares.size(); ++i) {
    const Split& s = parts.specs()[i].split;
    // A part held by several ranks (replicated key/value heads) counts once: its first holder's.
    if (s.parts > 0 && g.rank % (ranks / s.parts) != 0) continue;
    (s.dim >= 0 ? split : whole) += squares[i];
  }
  std::vector<double> all(static_cast<std::size_t>(ranks));
  comm::gather_all(&split, 1, all.data(), comm::Group::tensor);
  double total = whole;
  for (double s : all) total += s;  // in rank order: every rank the same
  return std::sqrt(total);
}

namespace {

// `mine` summed over group g's ranks, in rank order: the same on every rank.
double sum_over(double mine, comm::Group g) {
  std::vector<double> all(static_cast<std::size_t>(comm::size(g)));
  comm::gather_all(&mine, 1, all.data(), g);
  double sum = 0;
  for (double v : all) sum += v;
  return sum;
}

}  // namespace

double grid_gradient_norm(const ParamStore& parts, const std::vector<double>& squares, const Sizes& z) {
  const RankGroup& g = z.tp;
  double whole = 0, split = 0, experts = 0, split_experts = 0;
  for (std::size_t i = 0; i < squares.size(); ++i) {
    const Split& s = parts.specs()[i].split;
    if (s.parts > 0 && g.rank % (g.size / s.parts) != 0) continue;  // a part several ranks hold: once
    const bool expert = ep::owner(parts.names()[i], z) >= 0;
    (s.dim >= 0 ? (expert ? split_experts : split) : (expert ? experts : whole)) += squares[i];
  }
  return std::sqrt(whole + sum_over(split, comm::Group::tensor) + sum_over(experts, comm::Group::expert) +
                   sum_over(split_experts, comm::Group::model));
}

}  // namespace remat
