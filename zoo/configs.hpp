#pragma once
// The published configurations of well-known models (docs/models.md,
// "Published configurations"): real sizes, for estimates at real scale and
// for loading their weights. Each row names its model and the exact
// parameter count a model built from it has (a test holds every row to it).
#include <cstdint>
#include <string>
#include <vector>

#include "zoo/sizes.hpp"

namespace remat {

struct PublishedConfig {
  std::string name;   // "llama-7b"
  std::string model;  // the zoo model it is an instance of
  Sizes sizes;        // S = S_max, B = 1 until --seq and --batch say otherwise
  std::int64_t parameters = 0;  // the published count
};

const std::vector<PublishedConfig>& published_configs();
std::vector<std::string> config_names();
// Throws UserError naming the configurations if `name` is not one.
const PublishedConfig& published_config(const std::string& name);

}  // namespace remat
