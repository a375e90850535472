#include "finetune/adapters_file.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>

#include "autodiff/backend.hpp"
#include "autodiff/gemm.hpp"
#include "core/error.hpp"
#include "weights/weights_schema.hpp"

namespace remat {
namespace {

constexpr const char* kA = ".lora_A";
constexpr const char* kB = ".lora_B";

bool ends_with(const std::string& s, const char* suffix) {
  const std::string x(suffix);
  return s.size() > x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
}

// Adapters fit a model through its weights' shapes: the same model and the
// sizes that shape a weight (not S or B).
void require_same_model(const ModelSetup& base, const ModelSetup& file, const std::string& path) {
  const Sizes &a = base.sizes, &b = file.sizes;
  std::string diff;
  if (base.model != file.model) diff = "model " + file.model + " (not " + base.model + ")";
  for (auto [name, x, y] : std::initializer_list<std::tuple<const char*, int, int>>{{"L", a.L, b.L}, {"D", a.D, b.D}, {"H", a.H, b.H}, {"Hkv", a.Hkv, b.Hkv},
                            {"F", a.F, b.F}, {"V", a.V, b.V}})
    if (diff.empty() && x != y) diff = std::string(name) + " = " + std::to_string(y) + " (not " + std::to_string(x) + ")";
  if (!diff.empty())
    throw UserError(path + ": adapters for another model or shape: " + diff + " than the weights they would adapt");
}

// Each adapted weight of `adapters` against the weight in `params`: present,
// 2-D, and A [R, in], B [out, R].
void require_fit(const ParamStore& params, const AdapterFile& adapters, const std::string& path) {
  const int R = adapters.options.rank;
  for (const auto& w : adapters.weights()) {
    if (!params.has(w)) throw UserError(path + ": adapters for '" + w + "', which the model does not have");
    const Shape& s = params.specs()[params.index_of(w)].shape;  // a quantized weight's tensor holds its bytes
    const Shape& a = adapters.params.at(w + kA).shape;
    const Shape& b = adapters.params.at(w + kB).shape;
    if (s.size() != 2 || a != Shape{R, s[1]} || b != Shape{s[0], R})
      throw UserError(path + ": adapters of '" + w + "' " + to_string(s) + " have shapes " + to_string(a) + " and " +
                      to_string(b) + ", expected [" + std::to_string(R) + ", " + std::to_string(s.size() == 2 ? s[1] : 0) +
                      "] and [" + std::to_string(s.empty() ? 0 : s[0]) + ", " + std::to_string(R) + "]");
  }
}

}  // namespace

std::vector<std::string> AdapterFile::weights() const {
  std::vector<std::string> w;
  for (const auto& [name, v] : params)
    if (ends_with(name, kA)) w.push_back(name.substr(0, name.size() - 7));
  return w;
}

void write_lora_setting(const h5::File& f, const LoraOptions& options) {
  weights_file::root::lora.write(f, "/", options.key());
}

void write_adapters(const std::string& path, const ModelSetup& setup, const ParamStore& store,
                    const LoraOptions& options) {
  h5::File f = h5::File::create(path);
  write_model_setup(f, setup);
  write_lora_setting(f, options);
  for (std::size_t i = 0; i < store.names().size(); ++i)
    if (is_adapter_name(store.names()[i]))
      h5::write(f, "/" + weights_file::data::param.at(store.names()[i]), store.tensors()[i].to_host_f32(),
                store.tensors()[i].shape());
  f.save();
}

AdapterFile read_adapters(const std::string& path) {
  const h5::File f = h5::File::open(path);
  AdapterFile a;
  a.setup = read_model_setup(f);
  const auto setting = weights_file::root::lora.read(f, "/");
  if (!setting) throw UserError(path + ": holds no LoRA adapters (no 'lora' attribute on /)");
  a.options = LoraOptions::parse(*setting, path + ": attribute 'lora'");
  const std::string params_group = weights_file::data::param.group();
  if (h5::exists(f, params_group) && h5::is_group(f, params_group))
    for (const auto& name : h5::list(f, params_group)) {
      if (!is_adapter_name(name)) continue;
      const std::string p = "/" + weights_file::data::param.at(name);
      const auto info = h5::info(f, p);
      if (info.kind != h5::Kind::float32) throw UserError(path + ": " + p + " holds " + info.type_name + ", expected float32");
      AdapterFile::Values v{info.shape, h5::read_f32(f, p)};
      for (float x : v.data)
        if (!std::isfinite(x)) throw UserError(path + ": " + p + " holds a non-finite value");
      a.params[name] = std::move(v);
    }
  for (const auto& [name, v] : a.params) {
    const std::string other = name.substr(0, name.size() - 7) + (ends_with(name, kA) ? kB : kA);
    if (!a.params.count(other)) throw UserError(path + ": /params/" + name + " without /params/" + other);
  }
  if (a.params.empty()) throw UserError(path + ": holds no LoRA adapters (no /params/<weight>.lora_A)");
  return a;
}

void load_adapters(ParamStore& store, const ModelSetup& setup, const AdapterFile& adapters, const std::string& path) {
  require_same_model(setup, adapters.setup, path);
  require_fit(store, adapters, path);
  std::vector<std::string> mine;
  for (const auto& name : store.names())
    if (ends_with(name, kA)) mine.push_back(name.substr(0, name.size() - 7));
  std::sort(mine.begin(), mine.end());
  if (mine != adapters.weights())
    throw UserError(path + ": adapts " + std::to_string(adapters.weights().size()) + " weights (" +
                    adapters.weights().front() + ", ...), not the " + std::to_string(mine.size()) + " asked for (" +
                    (mine.empty() ? std::string("none") : mine.front() + ", ...") + ")");
  for (const auto& [name, v] : adapters.params) {
    if (store[name].shape() != v.shape)
      throw UserError(path + ": /params/" + name + " has shape " + to_string(v.shape) + ", the adapters asked for " +
                      to_string(store[name].shape()) + " (rank " + std::to_string(adapters.options.rank) +
                      " in the file)");
    backend::upload(store[name], v.data);
  }
}

void merge_adapters(ParamStore& base, const ModelSetup& setup, const AdapterFile& adapters, const std::string& path) {
  require_same_model(setup, adapters.setup, path);
  require_fit(base, adapters, path);
  const std::int64_t R = adapters.options.rank;
  const double scale = adapters.options.scale();
  for (const auto& w : adapters.weights()) {
    const Tensor& weight = base[w];
    const std::int64_t out = weight.dim(0), in = weight.dim(1);
    const auto& a = adapters.params.at(w + kA).data;  // [R, in]
    const auto& b = adapters.params.at(w + kB).data;  // [out, R]
    const std::vector<double> A(a.begin(), a.end()), B(b.begin(), b.end());
    std::vector<double> W = weight.to_host_f64();
    gemm::gemm_serial<double>(gemm::Op::N, gemm::Op::N, out, in, R, scale, B.data(), R, A.data(), in, 1.0, W.data(), in);
    const std::vector<float> merged(W.begin(), W.end());
    backend::upload(weight, merged);
  }
}

}  // namespace remat
