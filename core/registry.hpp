#pragma once
// The one registry every extensible list uses (the zoo's models, the
// strategies): entries with a name, added once, in order, at start-up by an
// explicit function (no static self-registration for a linker to drop),
// looked up by name with an error that lists what exists.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace remat {

template <class Entry>
class Registry {
 public:
  // `kind` names the entries in errors: "unknown model 'x' (models: ...)";
  // `listed` is how an entry is named in that list (default: its name).
  Registry(std::string kind, std::string plural, std::function<std::string(const Entry&)> listed = {})
      : kind_(std::move(kind)), plural_(std::move(plural)), listed_(std::move(listed)) {}

  // A name is registered once; `valid`, if given, checks an entry first.
  void add(Entry e, const std::function<void(const Entry&)>& valid = {}) {
    if (contains(e.name)) throw std::logic_error(kind_ + " '" + e.name + "' registered twice");
    if (valid) valid(e);
    entries_.push_back(std::move(e));
  }
  bool contains(const std::string& name) const {
    for (const auto& e : entries_)
      if (e.name == name) return true;
    return false;
  }
  // UserError listing the entries if `name` is none of them.
  const Entry& find(const std::string& name) const {
    for (const auto& e : entries_)
      if (e.name == name) return e;
    std::string known;
    for (const auto& e : entries_) known += (known.empty() ? "" : ", ") + (listed_ ? listed_(e) : e.name);
    throw UserError("unknown " + kind_ + " '" + name + "' (" + plural_ + ": " + known + ")");
  }
  const std::vector<Entry>& all() const { return entries_; }
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const auto& e : entries_) n.push_back(e.name);
    return n;
  }

 private:
  std::string kind_, plural_;
  std::function<std::string(const Entry&)> listed_;
  std::vector<Entry> entries_;
};

}  // namespace remat
