#pragma once
// Weight, batch and result files in the docs/models.md layout:
//   /params/<name> float32, attributes model, preset, L D H Hkv F S S_max V B on /,
//   optional /batch/tokens and /batch/targets int32 [B, S],
//   results: scalar /loss and /grads/<name>.
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "datasets/batch.hpp"
#include "h5/h5.hpp"
#include "zoo/model.hpp"

namespace remat {

struct LoadedWeights {
  ModelSetup setup;
  std::unique_ptr<Model> model;
  std::unique_ptr<ParamStore> params;
  std::optional<Batch> batch;
};

// Writers replace `path` atomically (h5::File::save): on failure the
// previous file is intact. Guard the path first (harness/io/output_guard.hpp).
// Writes parameters (and the batch, if given) to `path`.
void write_weights(const std::string& path, const ModelSetup& setup, const ParamStore& params, const Batch* batch);

// The pieces, for files that hold more (a training run, a results file's
// run): the setup's attributes on `object` and /params/<name>.
void write_model_setup(const h5::File& f, const ModelSetup& setup, const std::string& object = "/");
// UserError for a missing or bad attribute.
ModelSetup read_model_setup(const h5::File& f);
void write_params(const h5::File& f, const ParamStore& params);

// Writes parameters straight to disk, one at a time (values(i, out) fills
// parameter i's float32 values, numel of them): a model too big to
// hold twice in memory (remat import). Atomic like the others; UserError
// before anything is written if the file system has too little space.
// `formats`, if given, says per parameter which to store quantized (remat
// import --quantize: weights/quantized_param.hpp).
void write_weights_streaming(const std::string& path, const ModelSetup& setup, const std::vector<ParamSpec>& specs,
                             const std::function<void(std::size_t, float*)>& values,
                             const std::vector<QuantFormat>& formats = {});

// Loads any file in the layout, or a Hugging Face model folder (a folder with
// config.json and safetensors, or a .safetensors file with a config.json
// beside it: weights/hf_folder.hpp); the model and its sizes come
// from the file's attributes (or config.json). Every mismatch is a UserError naming the parameter and shapes;
// so are non-finite weights, token ids outside [0, V), and a model too large
// for the memory available (unless `force`). LoRA adapters in the file
// (finetune/adapters_file.hpp) are an error naming `remat
// lora-merge`, unless `skip_adapters` (the caller reads them).
LoadedWeights load_weights(const std::string& path, bool force = false, bool skip_adapters = false);

// The model and sizes a weight file, run file or Hugging Face model folder
// holds, without reading its weights.
ModelSetup read_weights_setup(const std::string& path);

// Whether a parameter name is a LoRA adapter's, "<weight>.lora_A" or
// ".lora_B" (finetune/adapters_file.hpp writes them beside a model's).
bool is_adapter_name(const std::string& name);

// Writes /loss and /grads/<name> of every trainable parameter (a frozen or
// quantized one has no gradient), and the setup's attributes.
void write_gradients(const std::string& path, const ModelSetup& setup, const ParamStore& params, double loss);

// A golden file: weights, batch, loss and gradients in one file.
void write_golden(const std::string& path, const ModelSetup& setup, const ParamStore& params, const Batch& batch,
                  double loss);
struct Golden {
  LoadedWeights weights;
  double loss = 0;
  std::vector<std::vector<float>> grads;  // in the model's parameter order
};
Golden load_golden(const std::string& path);

}  // namespace remat
