#pragma once
// A command's result as a table, rendered one way for every command: as
// aligned text for a person, or as JSON (an array of objects, one per row)
// for a program. A command computes its rows below the CLI and hands them
// here; it never formats a row twice.
#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace remat {

// A cell holds the value itself (bytes, FLOPs, seconds), never its text:
// JSON gets the value, text the column's formatting of it.
using Cell = std::variant<std::monostate, std::int64_t, double, bool, std::string>;

struct Column {
  std::string key;     // the JSON field ("activation_peak_bytes")
  std::string header;  // the text heading ("act GiB"); "" leaves the column out of the text
  // The text of a value's cell (default: the value as is, numbers with %g);
  // a text cell (a note in place of a value) is shown as it is.
  std::function<std::string(const Cell&)> text = nullptr;
  bool left = false;  // text aligned left (names); numbers align right
};

struct Table {
  std::vector<Column> columns;
  std::vector<std::vector<Cell>> rows;  // a cell per column, in order
  void add(std::vector<Cell> row) { rows.push_back(std::move(row)); }
};

// Aligned text: a heading line, a line per row; the first column and those
// marked `left` left-aligned, the others right-aligned; every line ends in a
// newline.
std::string render_text(const Table& t);
// One object per row, a field per column (empty cells left out).
nlohmann::json render_json(const Table& t);

// Cell formats for columns: a number with `decimals` after the point,
// divided by `scale` first; a share as a percentage.
std::function<std::string(const Cell&)> decimals(int decimals, double scale = 1);
std::function<std::string(const Cell&)> percent(int decimals);
double number(const Cell& c);  // an int64 or double cell's value (0 otherwise)

}  // namespace remat
