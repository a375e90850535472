// Checkpointing: segments of K consecutive blocks keep only their input;
// what their blocks save is recomputed by running the segment again in
// backward (strategies/recompute_region.hpp). every:K, per-layer (every:1)
// and sqrt (K = floor(sqrt(L)), memory ~ sqrt(L)). The blocks after the last
// whole segment boundary run plainly and keep what they save: their
// backward follows their forward at once, so keeping them costs no extra
// peak and saves their recomputation.
#include <cmath>

#include "core/error.hpp"
#include "strategies/registry.hpp"

namespace remat {
namespace {

// k = 0: floor(sqrt(L)).
Policy segments_of(int k) {
  auto size = [k](int blocks) { return k > 0 ? k : std::max(1, int(std::floor(std::sqrt(double(blocks))))); };
  Policy p;
  p.segment = [size](const BlockInfo& b) -> std::optional<Segment> {
    const int k = size(b.count), s = b.index / k;
    if (s == (b.count - 1) / k) return std::nullopt;  // the tail
    return Segment{s * k, std::min(s * k + k, b.count) - 1, nullptr};
  };
  // The tail is kept: another policy (offload) must not move it.
  p.decide = [size](const SavedTensorInfo& t) {
    const int k = size(t.block.count);
    return t.block.index / k == (t.block.count - 1) / k ? Decision::keep : Decision::none;
  };
  return p;
}

int parse_k(const std::string& text) {
  try {
    std::size_t used = 0;
    const int k = std::stoi(text, &used);
    if (used == text.size() && k >= 1) return k;
  } catch (const std::exception&) {
  }
  throw UserError("strategy 'every:" + text + "': K must be a whole number of blocks, at least 1, got '" + text + "'");
}

}  // namespace

Policy per_layer_policy() { return segments_of(1); }

void register_checkpoint(StrategyRegistry& r) {
  StrategyEntry per_layer;
  per_layer.name = per_layer.usage = "per-layer";
  per_layer.description = "every:1: keep only each block's input, recompute the block in backward";
  per_layer.policy = [](const std::string&) { return segments_of(1); };
  per_layer.in_all = {"per-layer"};
  r.add(std::move(per_layer));

  StrategyEntry every;
  every.name = "every";
  every.usage = "every:K";
  every.description = "checkpoint segments of K blocks: keep each segment's input, recompute the rest in backward";
  every.policy = [](const std::string& k) {
    if (k.empty()) throw UserError("strategy 'every' needs K, the blocks per segment (every:K)");
    return segments_of(parse_k(k));
  };
  every.in_all = {"every:2"};
  r.add(std::move(every));

  StrategyEntry sqrt;
  sqrt.name = sqrt.usage = "sqrt";
  sqrt.description = "every:K with K = floor(sqrt(L)): memory ~ sqrt(L)";
  sqrt.policy = [](const std::string&) { return segments_of(0); };
  sqrt.in_all = {"sqrt"};
  r.add(std::move(sqrt));
}

}  // namespace remat
