#include "finetune/freeze.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <cctype>

#include "core/error.hpp"
#include "core/text.hpp"

namespace remat {

std::string FreezeOptions::key() const {
  if (!any()) return "";
  std::string k = "patterns=";
  for (std::size_t i = 0; i < patterns.size(); ++i) k += (i ? "," : "") + patterns[i];
  return k + ";below=" + std::to_string(below);
}

int block_of(const std::string& name) {
  for (const auto& part : split(name, '.'))
    if (!part.empty() && part.size() < 9 &&
        std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }))
      return std::stoi(part);
  return -1;
}

std::vector<int> chain_blocks(const std::vector<std::string>& names) {
  std::vector<std::string> prefixes;  // in order of first appearance
  std::vector<int> out;
  for (const auto& name : names) {
    const int b = block_of(name);
    if (b < 0) {
      out.push_back(-1);
      continue;
    }
    // The name up to and including its first whole-number component.
    std::string prefix;
    for (const auto& part : split(name, '.')) {
      prefix += (prefix.empty() ? "" : ".") + part;
      if (block_of(part) >= 0) break;
    }
    auto it = std::find(prefixes.begin(), prefixes.end(), prefix);
    if (it == prefixes.end()) it = prefixes.insert(prefixes.end(), prefix);
    out.push_back(int(it - prefixes.begin()));
  }
  return out;
}

std::vector<std::string> frozen_names(const ParamStore& params, const FreezeOptions& options, int layers) {
  return frozen_names(params.names(), options, layers);
}

std::vector<std::string> frozen_names(const std::vector<std::string>& names, const FreezeOptions& options, int layers) {
  std::vector<bool> frozen(names.size(), false);
  for (const auto& pattern : options.patterns) {
    if (pattern.empty()) throw UserError("--freeze: an empty pattern");
    bool matched = false;
    for (std::size_t i = 0; i < names.size(); ++i)
      if (fnmatch(pattern.c_str(), names[i].c_str(), 0) == 0) frozen[i] = matched = true;
    if (!matched)
      throw UserError("--freeze: pattern '" + pattern + "' matches no parameter (names as in `remat export`, e.g. " +
                      names.front() + ", " + names[names.size() / 2] + ")");
  }
  if (options.below < 0 || options.below > layers)
    throw UserError("--freeze-below " + std::to_string(options.below) + ": the model has " + std::to_string(layers) +
                    " blocks (0.." + std::to_string(layers) + ")");
  if (options.below > 0) {
    // The blocks below, and every parameter outside blocks that lies below
    // them: declared before the first block (the embeddings), or between
    // frozen blocks and a later block (an encoder's final norm, a decoder's
    // position table once the encoder is frozen). A final norm and head
    // after the last block stay trainable.
    const std::vector<int> block = chain_blocks(names);
    const int last = *std::max_element(block.begin(), block.end());
    int seen = -1;  // the last block declared so far
    for (std::size_t i = 0; i < names.size(); ++i) {
      if (block[i] >= 0) {
        seen = std::max(seen, block[i]);
        frozen[i] = frozen[i] || block[i] < options.below;
      } else if (seen < last && seen < options.below) {
        frozen[i] = true;
      }
    }
  }
  std::vector<std::string> out;
  for (std::size_t i = 0; i < names.size(); ++i)
    if (frozen[i]) out.push_back(names[i]);
  if (!out.empty() && out.size() == names.size())
    throw UserError("freezing every parameter leaves nothing to train (--freeze " +
                    std::string(options.patterns.empty() ? "" : options.patterns.front()) + " --freeze-below " +
                    std::to_string(options.below) + ")");
  return out;
}

std::vector<std::string> apply_freeze(ParamStore& params, const FreezeOptions& options, int layers,
                                      const std::vector<std::string>& model_names) {
  std::vector<std::string> frozen;
  for (const auto& n : frozen_names(model_names.empty() ? params.names() : model_names, options, layers))
    if (params.has(n)) params.freeze(n), frozen.push_back(n);
  return frozen;
}

}  // namespace remat
