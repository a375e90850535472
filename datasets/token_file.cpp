#include "datasets/token_file.hpp"

#include "core/error.hpp"
#include "h5/h5.hpp"

namespace remat {

std::vector<std::int32_t> read_token_file(const std::string& path, const std::string& dataset, std::int64_t V) {
  h5::File f = h5::File::open(path);
  const std::string name = dataset.front() == '/' ? dataset : "/" + dataset;
  if (!h5::exists(f, name)) throw UserError(path + ": no dataset " + name);
  const auto di = h5::info(f, name);
  if (di.kind != h5::Kind::int32)
    throw UserError(path + ": " + name + " holds " + di.type_name + ", expected int32 tokens");
  auto tokens = h5::read_i32(f, name);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= V)
      throw UserError(path + ": token " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                      " is outside the vocabulary [0, " + std::to_string(V) + ")");
  return tokens;
}

}  // namespace remat
