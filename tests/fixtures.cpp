#include "fixtures.hpp"

#include <unistd.h>

#include <iterator>

#include "zoo/params.hpp"

namespace remat::test {

namespace fs = std::filesystem;

TempDir::TempDir(const std::string& prefix)
    : path(fs::temp_directory_path() / (prefix + "-" + std::to_string(::getpid()))) {
  fs::create_directories(path);
}

TempDir::~TempDir() {
  std::error_code ignored;  // a destructor must not throw
  fs::remove_all(path, ignored);
}

std::size_t TempDir::entries() const {
  return std::size_t(std::distance(fs::directory_iterator(path), fs::directory_iterator()));
}

TinyModel tiny_model(const std::string& name, int layers, std::uint64_t seed, std::optional<double> dropout,
                     const std::string& preset) {
  TinyModel m;
  m.setup = {name, preset, preset_sizes(preset)};
  Sizes& z = m.setup.sizes;
  if (layers) z.L = layers;
  if (dropout) z.dropout = *dropout;
  m.model = models().find(name).make(z);
  m.params = std::make_unique<ParamStore>(m.model->params(), DType::f32);
  initialize(*m.params, seed, z.L);
  m.batch = random_batch(z.B, z.S, z.V, seed);
  return m;
}

}  // namespace remat::test
