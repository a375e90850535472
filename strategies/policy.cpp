#include "strategies/policy.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace remat {

const char* decision_name(Decision d) {
  switch (d) {
    case Decision::none: return "no opinion";
    case Decision::keep: return "keep";
    case Decision::recompute: return "recompute";
    case Decision::offload: return "offload";
  }
  return "?";
}

Decision combine(Decision a, Decision b) {
  if (a == Decision::none) return b;
  if (b == Decision::none || a == b) return a;
  if (a == Decision::keep || b == Decision::keep) return Decision::keep;
  return Decision::recompute;  // recompute against offload
}

namespace {

// The tensors a composition is judged on: every built-in tag, in every
// position of an 8-block model, recomputable or not, and as a segment's
// input. A tag only a model produces is not among them, so a part that
// speaks only of such tags is never judged dead.
template <class F>
void for_each_probe(F&& f) {
  static const Shape shape{1};
  for (int i = 0; i < 8; ++i) {
    const BlockInfo block{i, 8, "h." + std::to_string(i)};
    for (const auto& tag : builtin_tags())
      for (bool recomputable : {false, true})
        for (bool input : {false, true}) f(SavedTensorInfo{tag.c_str(), block, shape, 4, recomputable, input, input});
  }
}

Decision combined(const std::vector<Policy>& parts, const SavedTensorInfo& t, std::size_t skip) {
  Decision d = Decision::none;
  for (std::size_t i = 0; i < parts.size(); ++i)
    if (i != skip) d = combine(d, parts[i].decision(t));
  return d;
}

}  // namespace

Policy compose(const std::vector<Policy>& parts, const std::string& spec) {
  if (parts.size() == 1) return parts.front();
  const Policy* segmented = nullptr;
  for (const auto& p : parts)
    if (p.segment) {
      if (segmented)
        throw UserError("strategy '" + spec + "': '" + segmented->name + "' and '" + p.name +
                        "' both choose checkpoint segments; compose at most one of them");
      segmented = &p;
    }
  // Decisions matter outside segments, and for a segment's inputs.
  auto matters = [&](const SavedTensorInfo& t) {
    const auto s = segmented ? segmented->segment_of(t.block) : std::nullopt;
    return !s || (t.segment_input && s->first == t.block.index);
  };
  for (std::size_t k = 0; k < parts.size(); ++k) {
    if (parts[k].segment) continue;  // segments always have an effect
    bool opinion = false, effect = false;
    for_each_probe([&](const SavedTensorInfo& t) {
      opinion = opinion || parts[k].decision(t) != Decision::none;
      effect = effect || (matters(t) && combined(parts, t, k) != combined(parts, t, parts.size()));
    });
    if (opinion && !effect)
      throw UserError("strategy '" + spec + "': '" + parts[k].name +
                      "' would have no effect here: the rest decides every tensor it has an opinion on (keep wins "
                      "over recompute, recompute over offload; see `remat strategies`)");
  }
  Policy p;
  p.name = spec;
  for (const auto& part : parts) p.named_tags.insert(p.named_tags.end(), part.named_tags.begin(), part.named_tags.end());
  p.decide = [parts](const SavedTensorInfo& t) { return combined(parts, t, parts.size()); };
  if (segmented) p.segment = segmented->segment;
  return p;
}

}  // namespace remat
