#include "harness/io/weights_file.hpp"

#include <set>

#include "autodiff/error.hpp"
#include "h5/h5.hpp"

namespace remat {
namespace {

std::vector<float> to_f32(const Tensor& t) {
  const auto d = t.to_host_f64();
  return std::vector<float>(d.begin(), d.end());
}

void write_setup(const h5::File& f, const ModelSetup& s) {
  h5::write_attr(f, "model", s.model);
  h5::write_attr(f, "preset", s.preset);
  const Sizes& z = s.sizes;
  for (auto [name, v] : {std::pair{"L", z.L}, {"D", z.D}, {"H", z.H}, {"Hkv", z.Hkv}, {"F", z.F}, {"S", z.S},
                         {"S_max", z.S_max}, {"V", z.V}, {"B", z.B}})
    h5::write_attr(f, name, std::int64_t(v));
}

ModelSetup read_setup(const h5::File& f) {
  ModelSetup s;
  auto model = h5::read_attr_string(f, "model");
  if (!model) throw UserError(f.path() + ": no 'model' attribute on / (not a remat weight file?)");
  s.model = *model;
  models().find(s.model);  // unknown model: a clear error now
  s.preset = h5::read_attr_string(f, "preset").value_or("custom");
  auto size = [&](const char* name, std::optional<std::int64_t> fallback) {
    auto v = h5::read_attr_int(f, name);
    if (!v && !fallback) throw UserError(f.path() + ": missing size attribute '" + name + "' on /");
    return int(v ? *v : *fallback);
  };
  Sizes& z = s.sizes;
  z.L = size("L", {});
  z.D = size("D", {});
  z.H = size("H", {});
  z.S = size("S", {});
  z.V = size("V", {});
  z.Hkv = size("Hkv", z.H);
  z.F = size("F", 4 * std::int64_t(z.D));
  z.S_max = size("S_max", z.S);
  z.B = size("B", 1);
  validate(z);
  return s;
}

Batch read_batch(const h5::File& f, const Sizes& z) {
  for (const char* name : {"/batch/tokens", "/batch/targets"}) {
    const auto di = h5::info(f, name);
    if (di.kind != h5::Kind::int32) throw UserError(f.path() + ": " + name + " holds " + di.type_name + ", expected int32");
    if (di.shape.size() != 2 || di.shape[1] > z.S_max)
      throw UserError(f.path() + ": " + name + " has shape " + to_string(di.shape) + ", expected [B, S] with S <= " +
                      std::to_string(z.S_max));
  }
  const Shape shape = h5::info(f, "/batch/tokens").shape;
  if (h5::info(f, "/batch/targets").shape != shape)
    throw UserError(f.path() + ": /batch/targets has shape " + to_string(h5::info(f, "/batch/targets").shape) +
                    ", /batch/tokens " + to_string(shape));
  return {Tensor::from_host(h5::read_i32(f, "/batch/tokens"), shape, "tokens"),
          Tensor::from_host(h5::read_i32(f, "/batch/targets"), shape, "targets")};
}

// The one writer of the MODELS.md layout: any of parameters, batch, result.
void write_model_file(const std::string& path, const ModelSetup& setup, const ParamStore& params, bool with_params,
                      const Batch* batch, const double* loss) {
  h5::AtomicOutput out(path);
  {
    h5::File f = h5::File::create(out.temp_path());
    write_setup(f, setup);
    for (std::size_t i = 0; i < params.names().size() && with_params; ++i)
      h5::write(f, "/params/" + params.names()[i], to_f32(params.tensors()[i]), params.tensors()[i].shape());
    if (batch) {
      h5::write(f, "/batch/tokens", batch->tokens.to_host_i32(), batch->tokens.shape());
      h5::write(f, "/batch/targets", batch->targets.to_host_i32(), batch->targets.shape());
    }
    if (loss) {
      h5::write(f, "/loss", std::vector<double>{*loss}, Shape{});
      for (std::size_t i = 0; i < params.names().size(); ++i) {
        const Tensor& p = params.tensors()[i];
        const Tensor g = p.grad();
        h5::write(f, "/grads/" + params.names()[i], g.defined() ? to_f32(g) : std::vector<float>(p.numel(), 0.0f),
                  p.shape());
      }
    }
  }
  out.commit();
}

}  // namespace

void write_weights(const std::string& path, const ModelSetup& setup, const ParamStore& params, const Batch* batch) {
  write_model_file(path, setup, params, true, batch, nullptr);
}

void write_gradients(const std::string& path, const ModelSetup& setup, const ParamStore& params, double loss) {
  write_model_file(path, setup, params, false, nullptr, &loss);
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
  if (!h5::exists(f, "/loss")) throw UserError(path + ": no /loss (not a golden file: write one with --save-golden)");
  const auto loss = h5::info(f, "/loss");
  if (loss.kind != h5::Kind::float64 || !loss.shape.empty()) throw UserError(path + ": /loss must be a float64 scalar");
  {
    h5::Handle ds(H5Dopen2(f.id(), "/loss", H5P_DEFAULT), H5Dclose);
    H5Dread(ds.id(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, &g.loss);
  }
  for (const auto& spec : g.weights.params->specs()) {
    const std::string p = "/grads/" + spec.name;
    if (!h5::exists(f, p)) throw UserError(path + ": missing gradient '" + spec.name + "'");
    if (h5::info(f, p).shape != spec.shape)
      throw UserError(path + ": gradient '" + spec.name + "' has shape " + to_string(h5::info(f, p).shape) +
                      ", expected " + to_string(spec.shape));
    g.grads.push_back(h5::read_f32(f, p));
  }
  return g;
}

LoadedWeights load_weights(const std::string& path) {
  h5::File f = h5::File::open(path);
  LoadedWeights w;
  w.setup = read_setup(f);
  w.model = models().find(w.setup.model).make(w.setup.sizes);
  const auto specs = w.model->params();

  std::set<std::string> expected;
  for (const auto& s : specs) expected.insert(s.name);
  for (const auto& name : h5::list(f, "/params"))
    if (!expected.count(name))
      throw UserError(path + ": unexpected parameter '" + name + "' " + to_string(h5::info(f, "/params/" + name).shape) +
                      " for " + w.setup.model + " with L = " + std::to_string(w.setup.sizes.L));
  for (const auto& s : specs) {
    const std::string p = "/params/" + s.name;
    if (!h5::exists(f, p)) throw UserError(path + ": missing parameter '" + s.name + "' " + to_string(s.shape));
    const auto di = h5::info(f, p);
    if (di.shape != s.shape)
      throw UserError(path + ": parameter '" + s.name + "' has shape " + to_string(di.shape) + ", expected " +
                      to_string(s.shape));
    if (di.kind != h5::Kind::float32)
      throw UserError(path + ": parameter '" + s.name + "' holds " + di.type_name + ", expected float32");
  }

  w.params = std::make_unique<ParamStore>(specs, DType::f32);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    Tensor loaded = Tensor::from_host(h5::read_f32(f, "/params/" + specs[i].name), specs[i].shape);
    Kokkos::deep_copy(w.params->tensors()[i].bytes(), loaded.bytes());
  }
  if (h5::exists(f, "/batch/tokens") || h5::exists(f, "/batch/targets")) {
    w.batch = read_batch(f, w.setup.sizes);
    w.setup.sizes.B = int(w.batch->tokens.dim(0));
    w.setup.sizes.S = int(w.batch->tokens.dim(1));
  }
  return w;
}

}  // namespace remat
