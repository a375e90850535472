#pragma once
// The weight file's fields (docs/models.md, "The HDF5 weight file"),
// declared once: weights_file.cpp and the adapter files write and read
// through these, a training run file carries them too, and the docs' tables
// are tested against them. A field is one line.
#include <cstdint>
#include <string>
#include <vector>

#include "h5/record.hpp"

// X(identifier, name in the file, type, unit, meaning): a model and its
// sizes (docs/models.md), as a weight file and a results file's run both
// carry them (write_model_setup writes them on either).
#define REMAT_MODEL_SETUP(X)                                                                                          \
  X(model, "model", std::string, "", "the zoo model")                                                                \
  X(preset, "preset", std::string, "", "the preset, published configuration, `custom` or `hf`")                     \
  X(L, "L", std::int64_t, "", "blocks")                                                                              \
  X(D, "D", std::int64_t, "", "model width")                                                                         \
  X(H, "H", std::int64_t, "", "attention heads")                                                                     \
  X(Hkv, "Hkv", std::int64_t, "", "key and value heads")                                                             \
  X(F, "F", std::int64_t, "", "feed-forward width")                                                                  \
  X(S, "S", std::int64_t, "", "sequence length")                                                                     \
  X(S_max, "S_max", std::int64_t, "", "positions the model holds")                                                   \
  X(V, "V", std::int64_t, "", "vocabulary")                                                                          \
  X(B, "B", std::int64_t, "", "sequences per batch")                                                                 \
  X(E, "E", std::int64_t, "", "mixtral only: experts")                                                               \
  X(K, "K", std::int64_t, "", "mixtral only: experts per token")                                                     \
  X(theta, "theta", double, "", "llama and mixtral only: the rotary base")                                            \
  X(eps, "eps", double, "", "llama and mixtral only: the RMSNorm epsilon (1e-5 where absent)")                      \
  X(rope_factor, "rope_factor", double, "",                                                                          \
    "llama and mixtral only: Llama 3.1's rotary scaling factor (0 or absent: none; docs/models.md)")                  \
  X(rope_low_freq_factor, "rope_low_freq_factor", double, "", "with rope_factor: its low_freq_factor")             \
  X(rope_high_freq_factor, "rope_high_freq_factor", double, "", "with rope_factor: its high_freq_factor")          \
  X(rope_original_positions, "rope_original_positions", double, "",                                                 \
    "with rope_factor: its original_max_position_embeddings")                                                        \
  X(qkv_bias, "qkv_bias", std::int64_t, "", "llama and mixtral only: 1 where the query, key and value projections have biases (Qwen2; 0 where absent)")

// Attributes of a weight file's `/`: the model setup, and LoRA's setting.
#define REMAT_WEIGHTS_ROOT(X)                                                                                         \
  REMAT_MODEL_SETUP(X)                                                                                                \
  X(lora, "lora", std::string, "",                                                                                   \
    "adapter files and LoRA runs only: `rank=R;alpha=A;targets=...` (docs/fine-tuning.md)")

// Attributes of a parameter's dataset.
#define REMAT_WEIGHTS_PARAM_ATTRS(X)                                                                                  \
  X(quantized, "quantized", std::string, "",                                                                         \
    "a quantized frozen weight only (`remat import --quantize`, QLoRA): `nf4` or `int8`; its dataset then holds "    \
    "the uint8 bytes of that format (docs/fine-tuning.md) in place of float32 values")

// Datasets: X(identifier, path from the root, element type, shape, unit, meaning)
#define REMAT_WEIGHTS_DATASETS(X)                                                                                     \
  X(param, "params/<name>", float, "[...]", "",                                                                      \
    "one per parameter, of the shape its model's section gives (a quantized one: uint8 [bytes], below)")          \
  X(tokens, "batch/tokens", std::int32_t, "[B, S]", "",                                                              \
    "optional: the batch to run, ids in [0, V); where the file has `S` and `B` attributes they must agree")         \
  X(targets, "batch/targets", std::int32_t, "[B, S]", "", "with `batch/tokens`: the next token of each")           \
  X(loss, "loss", double, "[]", "", "a result (`remat grads`, a golden file): the step's loss")                    \
  X(grad, "grads/<name>", float, "[...]", "", "a result: each parameter's gradient, of its shape")

namespace remat::weights_file {

namespace root {
#define REMAT_WEIGHTS_DECLARE_ATTR(id, name, T, unit, meaning) inline constexpr h5::Attr<T> id{name, unit, meaning};
REMAT_WEIGHTS_ROOT(REMAT_WEIGHTS_DECLARE_ATTR)
}  // namespace root
namespace param_attr {
REMAT_WEIGHTS_PARAM_ATTRS(REMAT_WEIGHTS_DECLARE_ATTR)
}  // namespace param_attr
namespace data {
#define REMAT_WEIGHTS_DECLARE_DATASET(id, name, T, shape, unit, meaning) \
  inline constexpr h5::Dataset<T> id{name, shape, unit, meaning};
REMAT_WEIGHTS_DATASETS(REMAT_WEIGHTS_DECLARE_DATASET)
}  // namespace data

// The tables of docs/models.md, made from the declarations above.
std::vector<h5::FieldDoc> root_docs();
std::vector<h5::FieldDoc> param_attribute_docs();
std::vector<h5::FieldDoc> dataset_docs();

}  // namespace remat::weights_file
