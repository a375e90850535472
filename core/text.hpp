#pragma once
// Small pieces of text every layer parses or prints the same way.
#include <cstdint>
#include <string>
#include <vector>

namespace remat {

// "a,b,,c" -> {"a", "b", "", "c"} (empty parts kept, for callers to refuse).
std::vector<std::string> split(const std::string& s, char sep = ',');

// A list a user gave: "a,b,c" -> {"a", "b", "c"}; UserError naming `what`
// and the position of an empty item ("1,,2", "1,", ",1", "").
std::vector<std::string> split_list(const std::string& s, const std::string& what, char sep = ',');

// {"a", "b"} -> "a, b" (with sep ", ").
std::string join(const std::vector<std::string>& items, const std::string& sep);

// "512M", "1.5G", "150MB", "350k", "4096" (binary units: M = 2^20 bytes);
// UserError if `text` is not a positive size.
std::int64_t parse_byte_size(const std::string& text);

// Bytes for people: "395.1 MiB", "2.0 KiB", "17 B" (binary units, named so).
// Text for XML or HTML: & < > " as entities.
std::string xml_escape(const std::string& text);
// v with `decimals` digits after the point, rounded (as printf's %.Nf), never
// truncated: one value printed in two places reads the same in both.
std::string fixed(double v, int decimals);
std::string human_bytes(double bytes);

}  // namespace remat
