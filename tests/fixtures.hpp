#pragma once
// Shared test fixtures: a temporary folder, and a zoo model ready for a step.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "weights/weights_file.hpp"
#include "datasets/batch.hpp"
#include "zoo/model.hpp"

namespace remat::test {

// A fresh folder under the system's temporary folder, removed with all it
// holds when the test ends (the process id keeps parallel tests apart).
struct TempDir {
  explicit TempDir(const std::string& prefix);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
  std::size_t entries() const;  // files and folders in it
  std::filesystem::path path;
};

// A zoo model with initialised float32 parameters and a random batch.
struct TinyModel {
  ModelSetup setup;
  std::unique_ptr<Model> model;
  std::unique_ptr<ParamStore> params;
  Batch batch;
};

// `name` on `preset` with `layers` blocks (0: the preset's), weights and
// batch drawn from `seed`, and the preset's dropout unless given.
TinyModel tiny_model(const std::string& name, int layers, std::uint64_t seed,
                     std::optional<double> dropout = std::nullopt, const std::string& preset = "tiny");

}  // namespace remat::test
