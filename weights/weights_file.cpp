#include "weights/weights_file.hpp"

#include <algorithm>
#include <cmath>
#include <future>
#include <initializer_list>
#include <set>

#include "autodiff/backend.hpp"
#include "weights/hf_folder.hpp"
#include "weights/quantized_param.hpp"
#include "core/error.hpp"
#include "weights/weights_schema.hpp"
#include "core/memory.hpp"
#include "h5/atomic_file.hpp"
#include "h5/h5.hpp"

namespace remat {
namespace {

// The first non-finite value of a tensor read from a file is an error: a NaN
// weight would only come back as a NaN loss with exit 0.
template <class T>
void require_finite(const std::vector<T>& v, const std::string& path, const std::string& what) {
  for (std::size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(double(v[i])))
      throw UserError(path + ": " + what + " holds a non-finite value (" + std::to_string(double(v[i])) +
                      ") at index " + std::to_string(i));
}

void write_setup(const h5::File& f, const ModelSetup& s, const std::string& object) {
  namespace W = weights_file::root;
  W::model.write(f, object, s.model);
  W::preset.write(f, object, s.preset);
  const Sizes& z = s.sizes;
  // (The list's type spelled out: nvcc's front end deduces no initializer_list of braced pairs.)
  using Size = std::pair<const h5::Attr<std::int64_t>*, int>;
  for (auto [field, v] : std::initializer_list<Size>{{&W::L, z.L}, {&W::D, z.D}, {&W::H, z.H}, {&W::Hkv, z.Hkv}, {&W::F, z.F},
                          {&W::S, z.S}, {&W::S_max, z.S_max}, {&W::V, z.V}, {&W::B, z.B}})
    field->write(f, object, v);
  for (const auto& a : models().find(s.model).attributes) {
    if (a == "E") W::E.write(f, object, z.E);
    if (a == "K") W::K.write(f, object, z.K);
    if (a == "theta") W::theta.write(f, object, z.theta);
    if (a == "eps") W::eps.write(f, object, z.eps);
    if (a == "qkv_bias") W::qkv_bias.write(f, object, std::int64_t(z.qkv_bias));
    if (a == "rope_scaling") {
      W::rope_factor.write(f, object, z.rope_factor);
      W::rope_low_freq_factor.write(f, object, z.rope_low_freq);
      W::rope_high_freq_factor.write(f, object, z.rope_high_freq);
      W::rope_original_positions.write(f, object, z.rope_original);
    }
  }
}

// Llama 3.1's rotary scaling, where the file has it (none where absent);
// validate() checks the values together.
void read_rope_scaling(const h5::File& f, Sizes& z) {
  namespace W = weights_file::root;
  using Field = std::pair<const h5::Attr<double>*, double*>;
  for (auto [field, v] : std::initializer_list<Field>{{&W::rope_factor, &z.rope_factor},
                                                      {&W::rope_low_freq_factor, &z.rope_low_freq},
                                                      {&W::rope_high_freq_factor, &z.rope_high_freq},
                                                      {&W::rope_original_positions, &z.rope_original}}) {
    const auto value = field->read(f, "/");
    if (value && !std::isfinite(*value))
      throw UserError(f.path() + ": attribute '" + std::string(field->name) + "' is not finite");
    if (value) *v = *value;
  }
}

// Every size docs/models.md lists is required (a missing Hkv must not quietly
// become H); S_max defaults to S and B to the batch's.
ModelSetup read_setup(const h5::File& f) {
  namespace W = weights_file::root;
  ModelSetup s;
  auto model = W::model.read(f, "/");
  if (!model) throw UserError(f.path() + ": no 'model' attribute on / (not a remat weight file?)");
  s.model = *model;
  models().find(s.model);  // unknown model: a clear error now
  s.preset = W::preset.read(f, "/").value_or("custom");
  auto size = [&](const h5::Attr<std::int64_t>& field, std::optional<int> fallback) {
    const std::string name(field.name);
    const auto v = field.read(f, "/");
    if (!v && !fallback) throw UserError(f.path() + ": missing size attribute '" + name + "' on /");
    if (v && (*v < 1 || *v > INT32_MAX))
      throw UserError(f.path() + ": size attribute '" + name + "' = " + std::to_string(*v) + " is out of range");
    return v ? int(*v) : *fallback;
  };
  Sizes& z = s.sizes;
  z.L = size(W::L, {});
  z.D = size(W::D, {});
  z.H = size(W::H, {});
  z.Hkv = size(W::Hkv, {});
  z.F = size(W::F, {});
  z.S = size(W::S, {});
  z.V = size(W::V, {});
  z.S_max = size(W::S_max, z.S);
  z.B = size(W::B, 1);
  // The model's own attributes: E and K are required where the model reads
  // them; theta defaults to 10000 (files written before it was recorded).
  for (const auto& a : models().find(s.model).attributes) {
    if (a == "E") z.E = size(W::E, {});
    if (a == "K") z.K = size(W::K, {});
    if (a == "theta") {
      const auto t = W::theta.read(f, "/");
      if (t && !(*t > 0 && *t < 1e12))
        throw UserError(f.path() + ": attribute 'theta' = " + std::to_string(*t) + " is not a rotary base");
      z.theta = t.value_or(10000.0);
    }
    if (a == "eps") {  // 1e-5 where absent (files written before it was recorded)
      const auto e = W::eps.read(f, "/");
      if (e && !(*e > 0 && *e < 0.1))
        throw UserError(f.path() + ": attribute 'eps' = " + std::to_string(*e) + " is not a norm epsilon");
      z.eps = e.value_or(1e-5);
    }
    if (a == "qkv_bias") {  // 0 where absent
      const auto b = W::qkv_bias.read(f, "/");
      if (b && *b != 0 && *b != 1)
        throw UserError(f.path() + ": attribute 'qkv_bias' = " + std::to_string(*b) + " is neither 0 nor 1");
      z.qkv_bias = b.value_or(0) == 1;
    }
    if (a == "rope_scaling") read_rope_scaling(f, z);
  }
  try {
    validate(z);
  } catch (const UserError& e) {
    throw UserError(f.path() + ": " + e.what());
  }
  return s;
}

// /batch/tokens and /batch/targets, int32 [B, S], ids in [0, V); the file's
// S and B attributes, where given, must agree with them.
bool has_attribute(const h5::File& f, const h5::Attr<std::int64_t>& a) { return a.read(f, "/").has_value(); }

Batch read_batch(const h5::File& f, ModelSetup& setup, bool has_b, bool has_s) {
  namespace D = weights_file::data;
  const Sizes& z = setup.sizes;
  const std::string tokens_path = D::tokens.path(""), targets_path = D::targets.path("");
  if (!h5::is_group(f, D::tokens.group())) throw UserError(f.path() + ": " + D::tokens.group() + " is not a group");
  for (const std::string& name : {tokens_path, targets_path}) {
    if (!h5::exists(f, name))
      throw UserError(f.path() + ": " + D::tokens.group() + " has no " + name.substr(D::tokens.group().size() + 1));
    const auto di = h5::info(f, name);
    if (di.kind != h5::Kind::int32) throw UserError(f.path() + ": " + name + " holds " + di.type_name + ", expected int32");
    if (di.shape.size() != 2 || di.shape[0] < 1 || di.shape[1] < 1 || di.shape[1] > z.S_max || di.shape[0] > (1 << 16))
      throw UserError(f.path() + ": " + name + " has shape " + to_string(di.shape) + ", expected [B, S] with S <= " +
                      std::to_string(z.S_max));
  }
  const Shape shape = h5::info(f, tokens_path).shape;
  if (h5::info(f, targets_path).shape != shape)
    throw UserError(f.path() + ": " + targets_path + " has shape " + to_string(h5::info(f, targets_path).shape) +
                    ", " + tokens_path + " " + to_string(shape));
  if ((has_b && shape[0] != z.B) || (has_s && shape[1] != z.S))
    throw UserError(f.path() + ": /batch is " + to_string(shape) + " but the file's attributes say B = " +
                    std::to_string(z.B) + ", S = " + std::to_string(z.S));
  std::vector<std::int32_t> tokens = D::tokens.read(f, ""), targets = D::targets.read(f, "");
  for (const auto* v : {&tokens, &targets})
    for (std::size_t i = 0; i < v->size(); ++i)
      if ((*v)[i] < 0 || (*v)[i] >= z.V)
        throw UserError(f.path() + ": " + (v == &tokens ? tokens_path : targets_path) + " holds " +
                        std::to_string((*v)[i]) + " at index " + std::to_string(i) + ", outside the vocabulary [0, " +
                        std::to_string(z.V) + ")");
  setup.sizes.B = int(shape[0]);
  setup.sizes.S = int(shape[1]);
  return {Tensor::from_host(tokens, shape, "tokens"), Tensor::from_host(targets, shape, "targets")};
}

// The one writer of the docs/models.md layout: any of parameters, batch, result.
// With `loss`, the gradients too: every parameter's (a frozen one's zeros:
// a golden file holds them all), or with `trainable_only` the trainable ones'.
void write_model_file(const std::string& path, const ModelSetup& setup, const ParamStore& params, bool with_params,
                      const Batch* batch, const double* loss, bool trainable_only = false) {
  namespace D = weights_file::data;
  h5::File f = h5::File::create(path);
  write_setup(f, setup, "/");
  if (with_params) write_params(f, params);
  if (batch) {
    h5::write(f, D::tokens.path(""), batch->tokens.to_host_i32(), batch->tokens.shape());
    h5::write(f, D::targets.path(""), batch->targets.to_host_i32(), batch->targets.shape());
  }
  if (loss) {
    h5::write(f, D::loss.path(""), std::vector<double>{*loss}, Shape{});
    for (std::size_t i = 0; i < params.names().size(); ++i) {
      if (trainable_only && !params.trainable(i)) continue;
      const Shape& shape = params.specs()[i].shape;  // a quantized parameter's tensor holds its bytes
      const Tensor g = params.tensors()[i].grad();
      h5::write(f, "/" + D::grad.at(params.names()[i]),
                g.defined() ? g.to_host_f32() : std::vector<float>(std::size_t(numel(shape)), 0.0f), shape);
    }
  }
  f.save();
}

}  // namespace

void write_params(const h5::File& f, const ParamStore& params) {
  for (std::size_t i = 0; i < params.names().size(); ++i) {
    const std::string path = "/" + weights_file::data::param.at(params.names()[i]);
    if (const QuantizedWeight* q = params.quantized(params.names()[i]))
      write_quantized_param(f, path, *q);
    else
      h5::write(f, path, params.tensors()[i].to_host_f32(), params.tensors()[i].shape());
  }
}

void write_model_setup(const h5::File& f, const ModelSetup& setup, const std::string& object) {
  write_setup(f, setup, object);
}
ModelSetup read_model_setup(const h5::File& f) { return read_setup(f); }

void write_weights(const std::string& path, const ModelSetup& setup, const ParamStore& params, const Batch* batch) {
  write_model_file(path, setup, params, true, batch, nullptr);
}

void write_gradients(const std::string& path, const ModelSetup& setup, const ParamStore& params, double loss) {
  write_model_file(path, setup, params, false, nullptr, &loss, /*trainable_only=*/true);
}

void write_golden(const std::string& path, const ModelSetup& setup, const ParamStore& params, const Batch& batch,
                  double loss) {
  write_model_file(path, setup, params, true, &batch, &loss);
}

Golden load_golden(const std::string& path) {
  Golden g;
  g.weights = load_weights(path);
  if (!g.weights.batch) throw UserError(path + ": a golden file needs /batch");
  h5::File f = h5::File::open(path);
  namespace D = weights_file::data;
  if (!D::loss.exists_in(f, "")) throw UserError(path + ": no /loss (not a golden file: write one with --save-golden)");
  g.loss = h5::read_scalar_f64(f, D::loss.path(""));
  if (!std::isfinite(g.loss)) throw UserError(path + ": /loss is not finite");
  for (const auto& spec : g.weights.params->specs()) {
    const std::string p = "/" + D::grad.at(spec.name);
    if (!h5::exists(f, p)) throw UserError(path + ": missing gradient '" + spec.name + "'");
    const auto di = h5::info(f, p);
    if (di.shape != spec.shape)
      throw UserError(path + ": gradient '" + spec.name + "' has shape " + to_string(di.shape) + ", expected " +
                      to_string(spec.shape));
    g.grads.push_back(h5::read_f32(f, p));
    require_finite(g.grads.back(), path, "gradient '" + spec.name + "'");
  }
  return g;
}

namespace {

// A Hugging Face model folder (weights/hf_folder.hpp) as weights: its
// sizes from config.json, no batch.
LoadedWeights load_hf_folder(const std::string& path, bool force) {
  const hf::HfFolder c(path);
  LoadedWeights w;
  w.setup = c.setup();
  require_memory(4 * count_params(models().find(w.setup.model).make(w.setup.sizes)->params()) * 2,
                 path + " (" + w.setup.model + ", L " + std::to_string(w.setup.sizes.L) + ", D " +
                     std::to_string(w.setup.sizes.D) + ")",
                 0, force);
  w.model = models().find(w.setup.model).make(w.setup.sizes);
  w.params = std::make_unique<ParamStore>(c.params(), DType::f32);
  std::vector<float> values;
  for (std::size_t i = 0; i < c.params().size(); ++i) {
    values.resize(std::size_t(numel(c.params()[i].shape)));
    c.read(i, values.data());
    backend::upload(w.params->tensors()[i], values);
  }
  return w;
}

}  // namespace

void write_weights_streaming(const std::string& path, const ModelSetup& setup, const std::vector<ParamSpec>& specs,
                             const std::function<void(std::size_t, float*)>& values,
                             const std::vector<QuantFormat>& formats) {
  std::int64_t bytes = 0;
  for (const auto& s : specs) bytes += 4 * numel(s.shape);
  // HDF5 writes this file itself and does not survive a failed close: the
  // space is checked first (with a margin for its metadata).
  const std::int64_t free = free_bytes(path);
  if (free >= 0 && free < bytes + bytes / 100 + (8 << 20))
    throw UserError(path + ": " + std::to_string(bytes) + " bytes of weights to write, " + std::to_string(free) +
                    " free on its file system; nothing written");
  AtomicFile file(path);
  {
    h5::File f = h5::File::create_on_disk(file.path(), path);
    write_setup(f, setup, "/");
    std::int64_t largest = 0;
    for (const auto& s : specs) largest = std::max(largest, numel(s.shape));
    // Two buffers, filled, not zeroed (written over): the next parameter is
    // read while this one is written, so reading and converting overlap
    // the disk.
    const std::unique_ptr<float[]> buffers[2] = {std::unique_ptr<float[]>(new float[std::size_t(largest)]),
                                                 std::unique_ptr<float[]>(new float[std::size_t(largest)])};
    std::future<void> next;
    if (!specs.empty()) next = std::async(std::launch::async, [&] { values(0, buffers[0].get()); });
    for (std::size_t i = 0; i < specs.size(); ++i) {
      next.get();  // parameter i is in buffers[i % 2] (or its error is thrown here)
      if (i + 1 < specs.size())
        next = std::async(std::launch::async, [&, i] { values(i + 1, buffers[(i + 1) % 2].get()); });
      const std::string p = "/" + weights_file::data::param.at(specs[i].name);
      const float* v = buffers[i % 2].get();
      if (i < formats.size() && formats[i] != QuantFormat::none)
        write_quantized_param(f, p, formats[i], quantize_values({v, v + numel(specs[i].shape)}, formats[i]));
      else
        h5::write(f, p, v, specs[i].shape);
    }
    f.close();
  }
  file.commit();
}

bool is_adapter_name(const std::string& name) {
  for (const char* suffix : {".lora_A", ".lora_B"})
    if (name.size() > 7 && name.compare(name.size() - 7, 7, suffix) == 0) return true;
  return false;
}

ModelSetup read_weights_setup(const std::string& path) {
  if (hf::is_hf_folder(path)) return hf::HfFolder(path).setup();
  const h5::File f = h5::File::open(path);
  ModelSetup setup = read_setup(f);
  if (h5::exists(f, weights_file::data::tokens.group()))
    read_batch(f, setup, has_attribute(f, weights_file::root::B), has_attribute(f, weights_file::root::S));
  return setup;
}

namespace {

// The parameters of `specs` from the file, each checked (present, its shape
// and type, finite values; quantized bytes as weights/quantized_param.hpp
// checks them) before any is read.
std::unique_ptr<ParamStore> read_params(const h5::File& f, const std::vector<ParamSpec>& specs, const std::string& path) {
  std::vector<std::optional<QuantFormat>> formats;
  for (const auto& s : specs) {
    const std::string p = "/" + weights_file::data::param.at(s.name);
    if (!h5::exists(f, p)) throw UserError(path + ": missing parameter '" + s.name + "' " + to_string(s.shape));
    formats.push_back(stored_format(f, p, path));
    if (formats.back()) continue;  // checked as it is read
    const auto di = h5::info(f, p);
    if (di.shape != s.shape)
      throw UserError(path + ": parameter '" + s.name + "' has shape " + to_string(di.shape) + ", expected " +
                      to_string(s.shape));
    if (di.kind != h5::Kind::float32)
      throw UserError(path + ": parameter '" + s.name + "' holds " + di.type_name + ", expected float32");
  }

  auto params = std::make_unique<ParamStore>(specs, DType::f32);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::string p = "/" + weights_file::data::param.at(specs[i].name);
    if (formats[i]) {
      params->set_quantized(specs[i].name, read_quantized_param(f, p, specs[i], *formats[i], path));
      continue;
    }
    const auto values = h5::read_f32(f, p);
    require_finite(values, path, "parameter '" + specs[i].name + "'");
    backend::upload(params->tensors()[i], values);
  }
  return params;
}

}  // namespace

LoadedWeights load_weights(const std::string& path, bool force, bool skip_adapters) {
  if (hf::is_hf_folder(path)) return load_hf_folder(path, force);
  h5::File f = h5::File::open(path);
  LoadedWeights w;
  w.setup = read_setup(f);
  require_memory(4 * count_params(models().find(w.setup.model).make(w.setup.sizes)->params()) * 2,
                 path + " (" + w.setup.model + ", L " + std::to_string(w.setup.sizes.L) + ", D " +
                     std::to_string(w.setup.sizes.D) + ")",
                 0, force);
  w.model = models().find(w.setup.model).make(w.setup.sizes);
  const auto specs = w.model->params();

  const std::string params_group = weights_file::data::param.group();
  if (h5::exists(f, params_group) && !h5::is_group(f, params_group)) throw UserError(path + ": " + params_group + " is not a group");
  std::set<std::string> expected;
  for (const auto& s : specs) expected.insert(s.name);
  const auto stored = h5::list(f, params_group);
  for (const auto& name : stored) {
    if (is_adapter_name(name) && expected.count(name.substr(0, name.size() - 7))) {
      if (skip_adapters) continue;
      // A --lora run file holds its base weights beside the adapters; an
      // --adapters-out file holds the adapters alone, and the suggestion
      // must name weights that exist.
      const bool has_base = std::all_of(specs.begin(), specs.end(), [&](const auto& s) {
        return std::find(stored.begin(), stored.end(), s.name) != stored.end();
      });
      if (has_base)
        throw UserError(path + ": holds LoRA adapters ('" + name + "'), which this command does not apply; fold " +
                        "them into plain weights first: remat lora-merge --weights " + path + " --adapters " + path +
                        " --out merged.h5");
      throw UserError(path + ": holds LoRA adapters alone ('" + name + "'), not weights; fold them into the " +
                      "weights they were trained on: remat lora-merge --weights <those weights> --adapters " + path +
                      " --out merged.h5");
    }
    if (!expected.count(name))
      throw UserError(path + ": unexpected parameter '" + name + "' " + to_string(h5::info(f, "/" + weights_file::data::param.at(name)).shape) +
                      " for " + w.setup.model + " with L = " + std::to_string(w.setup.sizes.L));
  }
  w.params = read_params(f, specs, path);
  if (h5::exists(f, weights_file::data::tokens.group()))
    w.batch = read_batch(f, w.setup, has_attribute(f, weights_file::root::B), has_attribute(f, weights_file::root::S));
  return w;
}

}  // namespace remat
