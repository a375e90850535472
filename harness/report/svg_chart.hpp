#pragma once
// Plain SVG line and scatter charts with honest axes: ticks at round values
// (1, 2, 5 x 10^k on linear axes; powers of ten, or of two over a short
// range, on log axes), every tick labelled with its true value.
#include <string>
#include <vector>

namespace remat::svg {

struct Series {
  std::string name;
  std::vector<double> x, y;
  bool line = true;     // connect the points
  bool markers = false;
  bool dashed = false;
  bool ring = false;    // hollow markers (e.g. the Pareto front)
};

struct Chart {
  std::string title, x_label, y_label;
  bool log_x = false, log_y = false;
  std::vector<Series> series;
};

// Charts side by side, under one title.
std::string render(const std::string& title, const std::vector<Chart>& panels);

}  // namespace remat::svg
