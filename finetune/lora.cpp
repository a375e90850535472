#include "finetune/lora.hpp"

#include <cmath>

#include <fnmatch.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "autodiff/backend.hpp"
#include "autodiff/elementwise.hpp"
#include "autodiff/tape.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "zoo/tensor_parallel.hpp"

namespace remat {

std::string LoraOptions::key() const {
  if (!any()) return "";
  char a[32];
  std::snprintf(a, sizeof a, "%g", alpha > 0 ? alpha : double(rank));
  std::string k = "rank=" + std::to_string(rank) + ";alpha=" + a + ";targets=";
  const auto& t = targets.empty() ? default_lora_targets() : targets;
  for (std::size_t i = 0; i < t.size(); ++i) k += (i ? "," : "") + t[i];
  return k;
}

LoraOptions LoraOptions::parse(const std::string& key, const std::string& where) {
  LoraOptions o;
  const auto bad = [&] { return UserError(where + ": '" + key + "' is not a LoRA setting (rank=R;alpha=A;targets=...)"); };
  const auto a = key.find(";alpha="), t = key.find(";targets=");
  if (key.rfind("rank=", 0) != 0 || a == std::string::npos || t == std::string::npos || t < a) throw bad();
  try {
    o.rank = std::stoi(key.substr(5, a - 5));
    o.alpha = std::stod(key.substr(a + 7, t - a - 7));
  } catch (const std::exception&) {
    throw bad();
  }
  if (o.rank < 1 || !(o.alpha > 0) || !std::isfinite(o.alpha) || o.alpha > 1e6) throw bad();  // as --lora-alpha
  o.targets = split(key.substr(t + 9));
  if (o.targets == default_lora_targets()) o.targets.clear();  // the defaults: whichever this model has
  return o;
}

const std::vector<std::string>& default_lora_targets() {
  static const std::vector<std::string> t{"*.attn.c_attn.weight", "*.attention.wq.weight", "*.attention.wv.weight",
                                          "*.attention.self.query.weight", "*.attention.self.value.weight"};
  return t;
}

namespace {

// A and B of `weight` (this rank's spec of it) at LoRA rank R: under tensor
// parallelism A splits with a row-parallel weight's columns, B with a
// column-parallel one's rows.
void append_adapter_specs(std::vector<ParamSpec>& specs, const ParamSpec& weight, std::int64_t R) {
  const Shape& w = weight.shape;
  specs.push_back({weight.name + ".lora_A", {R, w[1]}, Init::normal, weight.split.dim == 1 ? weight.split : Split{}});
  specs.push_back({weight.name + ".lora_B", {w[0], R}, Init::zeros, weight.split.dim == 0 ? weight.split : Split{}});
}

// Under tensor parallelism, an adapter matrix split with its weight holds
// this rank's part of the whole model's (drawn whole, as one process draws it).
void draw_whole(ParamStore& store, const std::string& name, std::uint64_t seed, int layers, const RankGroup& g) {
  const ParamSpec& spec = store.specs()[store.index_of(name)];
  ParamStore whole({{spec.name, tp::whole_shape(spec, g.size), spec.init}}, DType::f32);
  initialize(whole, seed, layers);
  const Tensor& t = store.tensors()[store.index_of(name)];
  convert_into(t, Tensor::from_host(tp::part_values(whole.tensors()[0].to_host_f64(), spec, whole.tensors()[0].shape(), g),
                                    spec.shape));
}

}  // namespace

std::unique_ptr<ParamStore> with_lora(const ParamStore& base, const LoraOptions& o, std::uint64_t seed, int layers,
                                      const RankGroup& tp) {
  if (o.rank <= 0) throw UserError("--lora " + std::to_string(o.rank) + ": the rank must be at least 1");
  if (!(o.alpha >= 0) || o.alpha > 1e6) throw UserError("--lora-alpha must be positive");
  const bool defaults = o.targets.empty();
  const auto& patterns = defaults ? default_lora_targets() : o.targets;
  std::vector<std::string> targets;
  for (const auto& pattern : patterns) {
    bool matched = false;
    for (const auto& spec : base.specs())
      if (fnmatch(pattern.c_str(), spec.name.c_str(), 0) == 0) {
        matched = true;
        if (spec.shape.size() != 2)
          throw UserError("--lora-targets: '" + spec.name + "' (matched by '" + pattern + "') is not a linear weight: " +
                          "its shape " + to_string(spec.shape) + " is not 2-D");
        const Shape whole = tp::whole_shape(spec, tp.size);
        const std::int64_t limit = std::min(whole[0], whole[1]);
        if (o.rank > limit)
          throw UserError("--lora " + std::to_string(o.rank) + ": above the smaller dimension of '" + spec.name + "' " +
                          to_string(whole) + " (at most " + std::to_string(limit) + ")");
        if (std::find(targets.begin(), targets.end(), spec.name) == targets.end()) targets.push_back(spec.name);
      }
    if (!matched && !defaults) throw UserError("--lora-targets: pattern '" + pattern + "' matches no parameter");
  }
  if (targets.empty()) throw UserError("--lora: no default target in this model; name them with --lora-targets");
  std::vector<ParamSpec> specs = base.specs();
  for (const auto& name : targets) append_adapter_specs(specs, base.specs()[base.index_of(name)], o.rank);
  auto store = std::make_unique<ParamStore>(specs, base.tensors().front().dtype());
  initialize(*store, seed, layers);
  for (const auto& name : targets)
    if (store->specs()[store->index_of(name + ".lora_A")].split.dim >= 0) draw_whole(*store, name + ".lora_A", seed, layers, tp);
  for (std::size_t i = 0; i < base.tensors().size(); ++i) {
    if (const QuantizedWeight* q = base.quantized(base.names()[i]))
      store->set_quantized(base.names()[i], *q);  // its bytes, shared: frozen, never written
    else
      backend::copy(store->tensors()[i], base.tensors()[i]);
    store->freeze(base.names()[i]);
  }
  for (const auto& name : targets) store->attach_adapter(name, name + ".lora_A", name + ".lora_B", o.scale(), tp);
  return store;
}

std::unique_ptr<ParamStore> lora_part_of(const ParamStore& whole, const std::vector<ParamSpec>& specs,
                                         const RankGroup& tp) {
  std::vector<ParamSpec> all = specs;
  for (const auto& [weight, adapter] : whole.adapters()) {
    const std::string& name = weight;  // (nvcc's lambdas take no structured binding)
    const auto w = std::find_if(specs.begin(), specs.end(), [&name](const ParamSpec& s) { return s.name == name; });
    if (w == specs.end()) throw std::logic_error("lora_part_of: no weight " + weight);
    append_adapter_specs(all, *w, whole[adapter.a].dim(0));
  }
  auto parts = tp::part_of(whole, all, tp);
  for (const auto& [weight, adapter] : whole.adapters())
    parts->attach_adapter(weight, adapter.a, adapter.b, adapter.scale, tp);
  return parts;
}

void require_adapters_used(const Model& model, const ParamStore& params, const Batch& batch) {
  // A forward pass: the store counts the adapters the zoo's linear applied.
  params.take_adapter_uses();
  {
    NoGradScope no_grad;
    model.loss(params, batch);
  }
  current_tape().clear();
  const std::set<std::string> used = params.take_adapter_uses();
  for (const auto& weight : params.adapted())
    if (!used.count(weight))
      throw UserError("--lora-targets: '" + weight + "' is not a linear weight (no linear layer uses it)");
}

}  // namespace remat
