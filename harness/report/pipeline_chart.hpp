#pragma once
// A pipeline step seen: stages x time, a box per pass (forward light,
// backward dark, the micro-batch's number in it), the idle time between
// them the bubble; beneath, each stage's activation memory over the step.
#include <string>
#include <vector>

#include "pipeline/stage_runner.hpp"

namespace remat {

// The measured bubble: the stages' idle share of (stages x the step's span).
double measured_bubble(const std::vector<std::vector<pipeline::PassTiming>>& stages);

// The SVG of one step's passes (`stages[s]`: stage s's, in its order).
std::string pipeline_svg(const std::string& title, const std::vector<std::vector<pipeline::PassTiming>>& stages);

}  // namespace remat
