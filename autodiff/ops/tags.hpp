#pragma once
// The ops' vocabulary: the tag each op puts on what it produces (by
// convention its own name: "linear", "softmax", "layer_norm"), and groups of
// tags that stand for several. Strategies decide by them (selective:<tag>);
// they live beside the ops, so a new op adds its tag here and nothing in
// strategies/ (docs/adding-an-op.md).
#include <string>
#include <utility>
#include <vector>

namespace remat {

// Tag groups: names that stand for several tags, and mean what the old op
// kinds meant ("attn-core" = the plain kernel's probabilities and the fused
// kernel's log-sum-exp; "matmul" = every GEMM output, "mlp-act", "norm").
const std::vector<std::pair<std::string, std::vector<std::string>>>& tag_groups();
// The tags a name stands for: a group's members, or the name itself.
std::vector<std::string> expand_tag(const std::string& name);
// Every tag the built-in ops produce.
const std::vector<std::string>& builtin_tags();

}  // namespace remat
