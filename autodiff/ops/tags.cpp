#include "autodiff/ops/tags.hpp"

namespace remat {

const std::vector<std::pair<std::string, std::vector<std::string>>>& tag_groups() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> groups = {
      {"attn-core", {"softmax", "attention_lse"}},
      {"mlp-act", {"gelu_tanh", "gelu_erf", "silu", "swiglu"}},
      {"norm", {"layer_norm", "rms_norm"}},
      {"matmul", {"linear", "attention", "rotary", "grouped_linear"}},
      {"gelu", {"gelu_tanh", "gelu_erf"}},
  };
  return groups;
}

std::vector<std::string> expand_tag(const std::string& name) {
  for (const auto& [group, tags] : tag_groups())
    if (group == name) return tags;
  return {name};
}

const std::vector<std::string>& builtin_tags() {
  static const std::vector<std::string> tags = {
      "leaf",      "embedding", "linear",      "attention", "softmax", "attention_lse", "gelu_tanh",     "gelu_erf",
      "silu",      "swiglu",    "layer_norm",  "rms_norm",  "rotary",  "dropout",       "scale",         "add",
      "cross_entropy", "routing", "routing_weights", "dispatch", "grouped_linear", "combine", "sum_rows",
      "expert_load", "load_balancing_loss"};
  return tags;
}

}  // namespace remat
