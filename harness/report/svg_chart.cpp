#include "harness/report/svg_chart.hpp"

#include "core/text.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace remat::svg {
namespace {

constexpr double kW = 600, kH = 380, kLeft = 78, kRight = 250, kTop = 40, kBottom = 56;  // panel geometry
constexpr double kTitleLine = 16;  // each further line of a panel's title
const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                         "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};

// `extra`: digits beyond the fewest (one significant digit in exponent
// form, six otherwise).
std::string num(double v, int extra = 0) {
  char buf[32];
  const double a = std::abs(v);
  if (v == 0) return "0";
  if (a >= 1e5 || a < 1e-3) std::snprintf(buf, sizeof buf, "%.*e", extra, v);
  else std::snprintf(buf, sizeof buf, "%.*g", 6 + extra, v);
  return buf;
}

// Tick labels with as many digits as it takes for neighbours to differ
// (0.00045 and 0.0005 read "4.5e-04" and "5.0e-04", never "5e-04" twice).
std::vector<std::string> tick_labels(const std::vector<double>& ticks) {
  std::vector<std::string> labels;
  for (int extra = 0; extra <= 6; ++extra) {
    labels.clear();
    for (double v : ticks) labels.push_back(num(v, extra));
    bool distinct = true;
    for (std::size_t i = 1; i < labels.size(); ++i) distinct = distinct && labels[i] != labels[i - 1];
    if (distinct) break;
  }
  return labels;
}

struct Axis {
  bool log;
  double lo, hi;  // in data units
  std::vector<double> ticks;

  Axis(bool log_scale, double mn, double mx) : log(log_scale) {
    if (!(mx > mn)) {  // a single value: widen around it
      mx = mn == 0 ? 1 : mn * (log ? 2 : 1.1);
      mn = mn == 0 ? -1 : mn / (log ? 2 : 1.1);
      if (!log && mn > 0 && mn < mx * 0.5) mn = 0;
    }
    if (log) {
      const double span = std::log10(mx / mn);
      const double base = span < 1.5 ? 2 : 10;  // powers of two over short ranges
      double t = std::pow(base, std::floor(std::log(mn) / std::log(base)));
      lo = t;
      while (t < mx * (1 - 1e-9)) t *= base;
      hi = t;
      for (double v = lo; v <= hi * 1.0000001 && ticks.size() < 64; v *= base) ticks.push_back(v);
    } else {
      if (mn > 0 && mn < 0.35 * mx) mn = 0;  // show zero when it is near
      const double raw = (mx - mn) / 6;
      const double mag = std::pow(10, std::floor(std::log10(raw)));
      double step = mag;
      for (double m : {1.0, 2.0, 5.0, 10.0})
        if (raw <= m * mag) {
          step = m * mag;
          break;
        }
      lo = std::floor(mn / step) * step;
      hi = std::ceil(mx / step) * step;
      for (double v = lo; v <= hi + step * 1e-9 && ticks.size() < 64; v += step)
        ticks.push_back(std::abs(v) < step * 1e-9 ? 0 : v);
    }
  }
  double frac(double v) const { return log ? std::log(v / lo) / std::log(hi / lo) : (v - lo) / (hi - lo); }
};

// `text` in lines of at most `width` characters, broken at spaces (a word
// longer than a line is broken where it must): wrapped, never cut.
std::vector<std::string> wrapped(const std::string& text, std::size_t width) {
  std::vector<std::string> lines;
  std::string rest = text;
  while (rest.size() > width) {
    std::size_t cut = rest.rfind(' ', width);
    if (cut == std::string::npos || cut == 0) cut = width;
    lines.push_back(rest.substr(0, cut));
    rest = rest.substr(cut == width && rest[cut] != ' ' ? cut : cut + 1);
  }
  lines.push_back(rest);
  return lines;
}

// A legend entry: 11 px text in the legend's column.
std::vector<std::string> legend_lines(const std::string& name) { return wrapped(name, 36); }

// A panel's title: 13 px bold across the panel.
std::vector<std::string> title_lines(const std::string& title) { return wrapped(title, 70); }

// The points of a series a chart can draw: as many as both coordinates
// have, finite, and positive on a log axis.
bool drawable(const Chart& c, const Series& s, std::size_t i) {
  return i < s.y.size() && std::isfinite(s.x[i]) && std::isfinite(s.y[i]) && !(c.log_x && s.x[i] <= 0) &&
         !(c.log_y && s.y[i] <= 0);
}

// A panel's title, centred on the panel (not its plot: a long title has the
// panel's width), a line under another.
void draw_title(std::ostringstream& o, const std::string& title, double ox, double oy) {
  double ty = oy + 22;
  for (const auto& line : title_lines(title)) {
    o << "<text x='" << ox + kW / 2 << "' y='" << ty << "' text-anchor='middle' font-size='13' font-weight='bold'>"
      << xml_escape(line) << "</text>\n";
    ty += kTitleLine;
  }
}

// The plot's frame, grid lines and tick labels.
void draw_grid(std::ostringstream& o, const Axis& ax, const Axis& ay, double x0, double y0, double pw, double ph) {
  o << "<rect x='" << x0 << "' y='" << y0 << "' width='" << pw << "' height='" << ph
    << "' fill='none' stroke='#333'/>\n";
  const auto x_labels = tick_labels(ax.ticks), y_labels = tick_labels(ay.ticks);
  for (std::size_t i = 0; i < ax.ticks.size(); ++i) {
    const double x = x0 + ax.frac(ax.ticks[i]) * pw;
    o << "<line x1='" << x << "' y1='" << y0 << "' x2='" << x << "' y2='" << y0 + ph << "' stroke='#e4e4e4'/>"
      << "<text x='" << x << "' y='" << y0 + ph + 16 << "' text-anchor='middle' font-size='11'>" << x_labels[i]
      << "</text>\n";
  }
  for (std::size_t i = 0; i < ay.ticks.size(); ++i) {
    const double y = y0 + ph - ay.frac(ay.ticks[i]) * ph;
    o << "<line x1='" << x0 << "' y1='" << y << "' x2='" << x0 + pw << "' y2='" << y << "' stroke='#e4e4e4'/>"
      << "<text x='" << x0 - 6 << "' y='" << y + 4 << "' text-anchor='end' font-size='11'>" << y_labels[i]
      << "</text>\n";
  }
}

// Point i of a series: a circle (a ring for a front, a square past ten
// colours), its error bar behind it, and a tooltip with its values.
template <class Px, class Py>
void draw_marker(std::ostringstream& o, const Series& s, std::size_t i, int index, const std::string& color,
                 const Px& px, const Py& py) {
  const double e = i < s.y_error.size() ? s.y_error[i] : 0;
  if (e > 0) {
    const double x = px(s.x[i]), lo = py(s.y[i] - e), hi = py(s.y[i] + e);
    o << "<path d='M" << x << "," << lo << "V" << hi << "M" << x - 4 << "," << lo << "h8M" << x - 4 << "," << hi
      << "h8' stroke='" << color << "' fill='none'/>\n";
  }
  const std::string tip = "<title>" + xml_escape(s.name) + ": " + num(s.x[i]) + ", " + num(s.y[i]) +
                          (e > 0 ? " +- " + num(e) : "") + "</title>";
  if (!s.ring && index >= 10)  // the second round of colours: squares
    o << "<rect x='" << px(s.x[i]) - 4 << "' y='" << py(s.y[i]) - 4 << "' width='8' height='8' fill='" << color << "'>"
      << tip << "</rect>\n";
  else
    o << "<circle cx='" << px(s.x[i]) << "' cy='" << py(s.y[i]) << "' r='" << (s.ring ? 7 : 4) << "' fill='"
      << (s.ring ? "none" : color) << "' stroke='" << color << "'>" << tip << "</circle>\n";
}

// `title_rows`: the most lines any panel's title takes in this figure, so
// that every panel's plot starts at the same height.
void panel(std::ostringstream& o, const Chart& c, double ox, double oy, std::size_t title_rows) {
  double xmin = std::numeric_limits<double>::max(), xmax = -xmin, ymin = xmin, ymax = -xmin;
  for (const auto& s : c.series)
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      if (!drawable(c, s, i)) continue;
      const double e = i < s.y_error.size() ? s.y_error[i] : 0;
      xmin = std::min(xmin, s.x[i]), xmax = std::max(xmax, s.x[i]);
      ymin = std::min(ymin, s.y[i] - e), ymax = std::max(ymax, s.y[i] + e);
    }
  if (xmin > xmax) xmin = ymin = c.log_x ? 1 : 0, xmax = ymax = 1;
  if (c.x_max > 0) xmax = std::max(xmax, c.x_max), xmin = c.log_x ? xmin : std::min(xmin, 0.0);
  if (c.y_max > 0) ymax = std::max(ymax, c.y_max), ymin = c.log_y ? ymin : std::min(ymin, 0.0);
  const Axis ax(c.log_x, xmin, xmax), ay(c.log_y, ymin, ymax);
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom, x0 = ox + kLeft,
               y0 = oy + kTop + kTitleLine * double(title_rows - 1);
  auto px = [&](double v) { return x0 + ax.frac(v) * pw; };
  auto py = [&](double v) { return y0 + ph - ay.frac(v) * ph; };

  draw_title(o, c.title, ox, oy);
  draw_grid(o, ax, ay, x0, y0, pw, ph);
  o << "<text x='" << x0 + pw / 2 << "' y='" << y0 + ph + 38 << "' text-anchor='middle' font-size='12'>"
    << xml_escape(c.x_label) << (c.log_x ? " (log)" : "") << "</text>\n";
  o << "<text transform='translate(" << ox + 18 << "," << y0 + ph / 2 << ") rotate(-90)' text-anchor='middle' font-size='12'>"
    << xml_escape(c.y_label) << (c.log_y ? " (log)" : "") << "</text>\n";

  int legend = 0;
  for (std::size_t k = 0; k < c.series.size(); ++k) {
    const Series& s = c.series[k];
    const int index = s.color >= 0 ? s.color : int(k);
    const std::string color = s.ring ? "#000" : kColors[index % 10];
    // Past ten names the colours come round again, dashed.
    const bool dashed = s.dashed || (!s.ring && index >= 10);
    std::string points;
    for (std::size_t i = 0; i < s.x.size(); ++i) {
      if (!drawable(c, s, i)) continue;
      points += num(px(s.x[i])) + "," + num(py(s.y[i])) + " ";
    }
    if (s.line && !points.empty())
      o << "<polyline fill='none' stroke='" << color << "' stroke-width='" << (s.ring ? 1 : 1.6) << "'"
        << (dashed ? " stroke-dasharray='5,4'" : "") << " points='" << points << "'/>\n";
    if (s.markers || s.ring)
      for (std::size_t i = 0; i < s.x.size(); ++i)
        if (drawable(c, s, i)) draw_marker(o, s, i, index, color, px, py);
    const double ly = y0 + 10 + 16 * legend;
    o << "<line x1='" << x0 + pw + 10 << "' y1='" << ly << "' x2='" << x0 + pw + 28 << "' y2='" << ly << "' stroke='"
      << color << "' stroke-width='2'" << (dashed ? " stroke-dasharray='5,4'" : "") << "/>";
    for (const auto& line : legend_lines(s.name))  // wrapped, never cut
      o << "<text x='" << x0 + pw + 32 << "' y='" << y0 + 14 + 16 * legend++ << "' font-size='11'>" << xml_escape(line)
        << "</text>\n";
  }
}

}  // namespace

int Palette::operator()(const std::string& name) {
  const auto it = std::find(names_.begin(), names_.end(), name);
  if (it != names_.end()) return int(it - names_.begin());
  names_.push_back(name);
  return int(names_.size()) - 1;
}

std::string render(const std::string& title, const std::vector<Chart>& panels, std::size_t columns) {
  if (columns == 0) columns = std::min<std::size_t>(std::max<std::size_t>(panels.size(), 1), 3);
  // Panels grow downward when a legend needs the room: it never runs off.
  std::size_t rows = 0;
  for (const auto& c : panels) {
    std::size_t lines = 0;
    for (const auto& s : c.series) lines += legend_lines(s.name).size();
    rows = std::max(rows, lines);
  }
  std::size_t title_rows = 1;
  for (const auto& c : panels) title_rows = std::max(title_rows, title_lines(c.title).size());
  const double cell = std::max(kH, kTop + 20 + 16.0 * double(rows)) + kTitleLine * double(title_rows - 1);
  const std::size_t grid_rows = std::max<std::size_t>((panels.size() + columns - 1) / columns, 1);
  const double width = kW * double(columns), height = cell * double(grid_rows) + 30;
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='" << height << "' viewBox='0 0 "
    << width << " " << height << "' font-family='sans-serif'>\n<rect width='100%' height='100%' fill='white'/>\n"
    << "<text x='" << width / 2 << "' y='20' text-anchor='middle' font-size='16'>" << xml_escape(title) << "</text>\n";
  for (std::size_t i = 0; i < panels.size(); ++i)
    panel(o, panels[i], kW * double(i % columns), 30 + cell * double(i / columns), title_rows);
  o << "</svg>\n";
  return o.str();
}

}  // namespace remat::svg
