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
  int color = -1;       // palette index, the same for one name in every panel (-1: the series' index)
  std::vector<double> y_error = {};  // each marker's error bar, y +- this (empty or 0: none)
};

// A palette index per name, in order of first appearance: one strategy keeps
// one colour across every panel and file of a report.
class Palette {
 public:
  int operator()(const std::string& name);

 private:
  std::vector<std::string> names_;
};

struct Chart {
  std::string title, x_label, y_label;
  bool log_x = false, log_y = false;
  std::vector<Series> series;
  // Extend the axes to these (0: the data's range alone), so that small
  // multiples share one scale.
  double x_max = 0, y_max = 0;
};

// Charts in rows of `columns` (0: up to three), under one title.
std::string render(const std::string& title, const std::vector<Chart>& panels, std::size_t columns = 0);

}  // namespace remat::svg
