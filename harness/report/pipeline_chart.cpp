#include "harness/report/pipeline_chart.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/text.hpp"

namespace remat {
namespace {

constexpr double kLeft = 90, kRight = 30, kWidth = 900, kLane = 34, kTop = 60, kGap = 70, kMemory = 200;
const char* const kForward = "#9ecae1";
const char* const kBackward = "#3182bd";
const char* const kWeight = "#17becf";  // zb-h1's W passes
const char* const kLines[] = {"#e6550d", "#31a354", "#756bb1", "#636363", "#d6616b", "#8c6d31", "#3182bd", "#e7ba52"};

std::string escaped(const std::string& text) {
  std::string out;
  for (char c : text) out += c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '\'' ? "&apos;" : std::string(1, c);
  return out;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}

// The step's span over every stage: its first start and last end.
std::pair<double, double> span(const std::vector<std::vector<pipeline::PassTiming>>& stages) {
  double first = 0, last = 0;
  bool any = false;
  for (const auto& passes : stages)
    for (const auto& p : passes) {
      first = any ? std::min(first, p.start) : p.start;
      last = any ? std::max(last, p.end) : p.end;
      any = true;
    }
  return {first, last};
}

}  // namespace

double measured_bubble(const std::vector<std::vector<pipeline::PassTiming>>& stages) {
  const auto [first, last] = span(stages);
  double busy = 0;
  for (const auto& passes : stages)
    for (const auto& p : passes) busy += p.end - p.start;
  const double all = double(stages.size()) * (last - first);
  return all > 0 ? 1 - busy / all : 0;
}

namespace {

// Stage s's passes as boxes in its lane, each with its micro-batch where it fits.
template <class X>
void draw_lane(std::ostringstream& o, std::size_t s, const std::vector<pipeline::PassTiming>& passes, const X& x) {
  const double top = kTop + kLane * double(s);
  o << "<text x='" << num(kLeft - 8) << "' y='" << num(top + kLane / 2 + 4) << "' text-anchor='end'>stage " << s
    << "</text>\n";
  for (const auto& p : passes) {
    const bool forward = p.pass.kind == pipeline::PassKind::forward;
    const char* fill = forward ? kForward : p.pass.kind == pipeline::PassKind::weight ? kWeight : kBackward;
    const double x0 = x(p.start), w = std::max(x(p.end) - x0, 0.5);
    o << "<rect x='" << num(x0) << "' y='" << num(top + 3) << "' width='" << num(w) << "' height='" << num(kLane - 6)
      << "' fill='" << fill << "' stroke='white' stroke-width='0.5'/>\n";
    if (w > 14)
      o << "<text x='" << num(x0 + w / 2) << "' y='" << num(top + kLane / 2 + 4) << "' text-anchor='middle' fill='"
        << (forward ? "black" : "white") << "'>" << p.pass.micro_batch << "</text>\n";
  }
}

}  // namespace

std::string pipeline_svg(const std::string& title, const std::vector<std::vector<pipeline::PassTiming>>& stages) {
  const auto [first, last] = span(stages);
  const double seconds = std::max(last - first, 1e-9);
  const auto x = [&, first = first](double t) { return kLeft + (t - first) / seconds * kWidth; };
  const double lanes = kLane * double(stages.size());
  const double memory_top = kTop + lanes + kGap;
  std::int64_t most = 1;
  bool split = false;  // W passes drawn: their colour in the legend
  for (const auto& passes : stages)
    for (const auto& p : passes) {
      most = std::max(most, std::max(p.peak, p.live_after));
      split = split || p.pass.kind == pipeline::PassKind::weight;
    }
  const auto y = [&](std::int64_t bytes) { return memory_top + kMemory - double(bytes) / double(most) * kMemory; };
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << num(kLeft + kWidth + kRight) << "' height='"
    << num(memory_top + kMemory + 60) << "' font-family='sans-serif' font-size='12'>\n"
    << "<rect width='100%' height='100%' fill='white'/>\n"
    << "<text x='" << num(kLeft) << "' y='24' font-size='15'>" << escaped(title) << "</text>\n"
    << "<text x='" << num(kLeft) << "' y='44'>forward <tspan fill='" << kForward << "'>&#9632;</tspan>  backward <tspan fill='"
    << kBackward << "'>&#9632;</tspan>" << (split ? "  weight gradients <tspan fill='" + std::string(kWeight) + "'>&#9632;</tspan>" : "")
    << "  (the micro-batch in each box; white between boxes: the bubble)</text>\n";
  for (std::size_t s = 0; s < stages.size(); ++s) draw_lane(o, s, stages[s], x);
  // The time axis under the lanes: five ticks.
  const double axis = kTop + lanes + 4;
  for (int k = 0; k <= 4; ++k) {
    const double t = first + seconds * k / 4;
    o << "<text x='" << num(x(t)) << "' y='" << num(axis + 14) << "' text-anchor='middle'>" << fixed((t - first) * 1e3, 1)
      << " ms</text>\n";
  }
  // Each stage's activation bytes over the step: after each pass, and its peak during it.
  o << "<text x='" << num(kLeft) << "' y='" << num(memory_top - 10) << "'>activation memory of each stage (peak "
    << human_bytes(double(most)) << " at the top)</text>\n"
    << "<line x1='" << num(kLeft) << "' y1='" << num(memory_top + kMemory) << "' x2='" << num(kLeft + kWidth)
    << "' y2='" << num(memory_top + kMemory) << "' stroke='black'/>\n";
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const char* colour = kLines[s % (sizeof kLines / sizeof kLines[0])];
    o << "<polyline fill='none' stroke='" << colour << "' stroke-width='1.5' points='" << num(x(first)) << ","
      << num(y(0));
    std::int64_t held = 0;  // between passes, what the last one left
    for (const auto& p : stages[s]) {  // its peak drawn at its middle
      o << " " << num(x(p.start)) << "," << num(y(held)) << " " << num(x((p.start + p.end) / 2)) << "," << num(y(p.peak))
        << " " << num(x(p.end)) << "," << num(y(p.live_after));
      held = p.live_after;
    }
    o << "'/>\n<text x='" << num(kLeft + kWidth - 70) << "' y='" << num(memory_top + 14 * double(s + 1)) << "' fill='"
      << colour << "'>stage " << s << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace remat
