#pragma once
// LoRA adapters on disk (docs/fine-tuning.md): /params/<weight>.lora_A [R, in]
// and /params/<weight>.lora_B [out, R], float32, beside the attributes of the
// model they adapt (model, preset, sizes, as in a weight file) and the LoRA
// setting (attribute `lora`: "rank=8;alpha=8;targets=..."). A training run
// made with --lora holds them too, beside its base weights, so a run file
// serves as an adapter file.
#include <map>
#include <string>
#include <vector>

#include "weights/weights_file.hpp"
#include "finetune/lora.hpp"
#include "h5/h5.hpp"

namespace remat {

struct AdapterFile {
  ModelSetup setup;
  LoraOptions options;
  struct Values {
    Shape shape;
    std::vector<float> data;
  };
  std::map<std::string, Values> params;  // "<weight>.lora_A" / ".lora_B"
  std::vector<std::string> weights() const;  // the adapted weights, sorted
};

void write_lora_setting(const h5::File& f, const LoraOptions& options);
// The adapters of `store` (made by with_lora) alone, replacing `path` atomically.
void write_adapters(const std::string& path, const ModelSetup& setup, const ParamStore& store,
                    const LoraOptions& options);

// UserError if `path` holds no adapters, or a bad one (shape, non-finite value).
AdapterFile read_adapters(const std::string& path);

// Copies the file's adapters into `store` (made by with_lora for `setup`).
// UserError for adapters of another model or sizes, or of other weights or rank.
void load_adapters(ParamStore& store, const ModelSetup& setup, const AdapterFile& adapters, const std::string& path);

// Folds each adapter into its weight, W + (alpha/R) B A (summed in double,
// rounded once), leaving plain weights. The same UserErrors as load_adapters.
void merge_adapters(ParamStore& base, const ModelSetup& setup, const AdapterFile& adapters, const std::string& path);

}  // namespace remat
