#include "h5/record.hpp"

#include "core/error.hpp"

namespace remat::h5 {

std::string member(std::string_view name, std::string_view sub) {
  const auto open = name.find('<');
  return std::string(open == std::string_view::npos ? name : name.substr(0, open)) + std::string(sub);
}

template <class T>
T Attr<T>::require(const File& f, const std::string& object) const {
  auto v = read(f, object);
  if (!v) throw UserError("no '" + std::string(name) + "' attribute");
  return *v;
}

template struct Attr<std::string>;
template struct Attr<std::int64_t>;
template struct Attr<double>;

std::string markdown_table(const std::vector<FieldDoc>& fields) {
  std::string out = "| name | type | unit | meaning |\n| --- | --- | --- | --- |\n";
  for (const auto& d : fields)
    out += "| `" + d.name + "` | " + d.type + " | " + (d.unit.empty() ? "" : d.unit) + " | " + d.meaning + " |\n";
  return out;
}

}  // namespace remat::h5
