#include "strategies/planner/plan.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <set>

#include "strategies/policy_strategy.hpp"

namespace remat::planner {

Policy plan_policy(const std::vector<PlanPart>& parts, const std::string& name) {
  // Per block: its segment (with the inner policy made once), or its drops.
  auto segments = std::make_shared<std::map<int, Segment>>();
  auto drops = std::make_shared<std::map<int, std::set<std::string>>>();
  auto offloaded = std::make_shared<std::set<int>>();
  for (const auto& part : parts) {
    if (part.segment) {
      Segment s{part.first, part.last, nullptr};
      if (!part.inner.empty()) s.inner = std::make_shared<const Policy>(plan_policy(part.inner, name));
      for (int b = part.first; b <= part.last; ++b) (*segments)[b] = s;
    } else if (part.offload) {
      offloaded->insert(part.first);
    } else if (!part.drops.empty()) {
      (*drops)[part.first] = std::set<std::string>(part.drops.begin(), part.drops.end());
    }
  }
  Policy p;
  p.name = name;
  p.segment = [segments](const BlockInfo& b) -> std::optional<Segment> {
    const auto it = segments->find(b.index);
    if (it == segments->end()) return std::nullopt;
    return it->second;
  };
  p.decide = [drops, offloaded](const SavedTensorInfo& t) {
    if (!t.segment_input && offloaded->count(t.block.index)) return Decision::offload;
    const auto it = drops->find(t.block.index);
    // A block's input is never dropped: its recipe reads the previous block's
    // saves, which a segment there would have to recompute early.
    return it != drops->end() && !t.segment_input && !t.block_input && t.recomputable && it->second.count(t.tag)
               ? Decision::recompute
               : Decision::none;
  };
  return p;
}

namespace {

double forward_seconds(const ChainCosts& c, int first, int last) {
  double s = 0;
  for (int b = first; b <= last; ++b) s += c.blocks[std::size_t(b)].forward_seconds;
  return s;
}

// A segment's recomputation over blocks [first, last] run by `parts` (empty: keep all).
double span_seconds(const ChainCosts& c, const SaveProfile& p, int first, int last, const std::vector<PlanPart>& parts) {
  if (parts.empty()) return forward_seconds(c, first, last);
  double s = 0;
  for (const auto& part : parts) {
    if (part.segment) {
      if (part.last < last) s += forward_seconds(c, part.first, part.last);
      s += span_seconds(c, p, part.first, part.last, part.inner);
    } else {
      s += c.blocks[std::size_t(part.first)].forward_seconds +
           recipe_seconds(p.blocks[std::size_t(part.first)], part.drops, c.timed);
    }
  }
  return s;
}

std::string block_range(const SaveProfile& p, int first, int last) {
  const auto& a = p.blocks[std::size_t(first)].name;
  return first == last ? a : a + "-" + p.blocks[std::size_t(last)].name;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

double mb(std::int64_t bytes) { return double(bytes) / 1048576.0; }

void describe_parts(const std::vector<PlanPart>& parts, const SaveProfile& p, int depth, std::string& out) {
  for (const auto& part : parts) {
    char line[512];
    const std::string indent(std::size_t(2 * depth), ' ');
    if (part.segment) {
      std::int64_t input = p.blocks[std::size_t(part.first)].input;
      std::snprintf(line, sizeof line, "%s%-12s segment: keeps its input (%.2f MiB), recomputed in backward%s\n",
                    indent.c_str(), block_range(p, part.first, part.last).c_str(), mb(input),
                    part.inner.empty() ? ", keeping all it saves" : ", by:");
      out += line;
      describe_parts(part.inner, p, depth + 1, out);
    } else {
      const auto& b = p.blocks[std::size_t(part.first)];
      std::int64_t dropped = 0;
      for (const auto& x : b.tensors)
        if (x.recomputable && !x.block_input && std::count(part.drops.begin(), part.drops.end(), x.tag)) dropped += x.bytes;
      if (part.offload)
        std::snprintf(line, sizeof line, "%s%-12s offload: %.2f MiB to the host pool\n", indent.c_str(), b.name.c_str(),
                      mb(b.saved));
      else if (part.drops.empty())
        std::snprintf(line, sizeof line, "%s%-12s keep: %.2f MiB\n", indent.c_str(), b.name.c_str(), mb(b.saved));
      else
        std::snprintf(line, sizeof line, "%s%-12s keep %.2f MiB, drop %s (%.2f MiB, recomputed in backward)\n",
                      indent.c_str(), b.name.c_str(), mb(b.saved - dropped), join(part.drops).c_str(), mb(dropped));
      out += line;
    }
  }
}

}  // namespace

double recompute_seconds(const ChainCosts& c, const SaveProfile& p, const std::vector<PlanPart>& parts) {
  double s = 0;
  for (const auto& part : parts)
    s += part.segment ? span_seconds(c, p, part.first, part.last, part.inner)
         : part.offload ? c.blocks[std::size_t(part.first)].offload_seconds
                        : recipe_seconds(p.blocks[std::size_t(part.first)], part.drops, c.timed);
  return s;
}

void predict(Plan& plan, const ChainCosts& c, const SaveProfile& p) {
  plan.predicted_peak = predict_policy(p, plan_policy(plan.parts, "plan")).device;
  plan.recompute_seconds = recompute_seconds(c, p, plan.parts);
  plan.predicted_seconds = c.step_seconds + plan.recompute_seconds;
}

std::string describe(const Plan& plan, const SaveProfile& p) {
  std::string out;
  describe_parts(plan.parts, p, 0, out);
  return out;
}

std::string summary(const std::vector<PlanPart>& parts, const SaveProfile& p) {
  std::string s;
  for (const auto& part : parts) {
    s += s.empty() ? "" : " ";
    if (part.segment) {
      s += "[" + block_range(p, part.first, part.last) + " segment";
      if (!part.inner.empty()) s += ": " + summary(part.inner, p);
      s += "]";
    } else {
      s += "[" + p.blocks[std::size_t(part.first)].name +
           (part.offload ? " offload" : part.drops.empty() ? " keep" : " drop " + join(part.drops)) + "]";
    }
  }
  return s;
}

}  // namespace remat::planner
