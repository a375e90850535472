#pragma once
// A record's fields declared once: the name in the file, its type, unit and
// meaning. Writers and readers go through the declaration, so a name is
// spelled in one place, and the tables of docs/results-schema.md and
// docs/training.md are made from the same declarations (a test compares
// them): adding a field is one line in its schema.
//
// A name ending in "<...>" is a family ("loss.<part>", "stats/<name>"):
// at("ce") gives one member's name.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "h5/h5.hpp"

namespace remat::h5 {

// One row of a schema's documentation.
struct FieldDoc {
  std::string name, type, unit, meaning;
};

template <class T>
constexpr const char* type_name() {
  if constexpr (std::is_same_v<T, std::string>) return "string";
  else if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
  else if constexpr (std::is_same_v<T, float>) return "float32";
  else return "float64";
}

// The name of a family's member ("loss.<part>" at "ce": "loss.ce"), or the
// name itself.
std::string member(std::string_view name, std::string_view sub);

// An attribute of type T (std::string, std::int64_t or double) on a group.
template <class T>
struct Attr {
  std::string_view name, unit, meaning;

  std::string at(std::string_view sub) const { return member(name, sub); }
  void write(const File& f, const std::string& object, const T& value) const {
    write_attr(f, std::string(name), value, object);
  }
  std::optional<T> read(const File& f, const std::string& object) const {
    if constexpr (std::is_same_v<T, std::string>) return read_attr_string(f, std::string(name), object);
    else if constexpr (std::is_same_v<T, std::int64_t>) return read_attr_int(f, std::string(name), object);
    else return read_attr_double(f, std::string(name), object);
  }
  // The value; UserError "no 'name' attribute" where it is missing.
  T require(const File& f, const std::string& object) const;
  FieldDoc doc() const { return {std::string(name), type_name<T>(), std::string(unit), std::string(meaning)}; }
};

// A dataset of elements T (float, double, std::int64_t, std::int32_t or
// std::string) under a group ("" for the root); `shape` says its extent in
// the docs ("[steps]").
template <class T>
struct Dataset {
  std::string_view name, shape, unit, meaning;

  std::string at(std::string_view sub) const { return member(name, sub); }
  std::string path(const std::string& group) const { return group + "/" + std::string(name); }
  // The group a root-level dataset (or family) lies in: "/params" for
  // "params/<name>", "/batch" for "batch/tokens", "/" for "loss".
  std::string group() const {
    const auto slash = name.rfind('/');
    return slash == std::string_view::npos ? "/" : "/" + std::string(name.substr(0, slash));
  }
  bool exists_in(const File& f, const std::string& group) const { return h5::exists(f, path(group)); }
  void write(const File& f, const std::string& group, const std::vector<T>& values) const {
    if constexpr (std::is_same_v<T, std::string>) h5::write(f, path(group), values);
    else h5::write(f, path(group), values, Shape{std::int64_t(values.size())});
  }
  std::vector<T> read(const File& f, const std::string& group) const {
    if constexpr (std::is_same_v<T, std::string>) return read_strings(f, path(group));
    else if constexpr (std::is_same_v<T, std::int64_t>) return read_i64(f, path(group));
    else if constexpr (std::is_same_v<T, std::int32_t>) return read_i32(f, path(group));
    else if constexpr (std::is_same_v<T, float>) return read_f32(f, path(group));
    else return read_f64(f, path(group));
  }
  FieldDoc doc() const {
    return {std::string(name), std::string(type_name<T>()) + " " + std::string(shape), std::string(unit),
            std::string(meaning)};
  }
};

// The docs' table of `fields`: | name | type | unit | meaning |, a row each.
std::string markdown_table(const std::vector<FieldDoc>& fields);

}  // namespace remat::h5
