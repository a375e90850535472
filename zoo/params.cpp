#include "zoo/params.hpp"

#include <cmath>
#include <stdexcept>
#include <utility>

#include "autodiff/elementwise.hpp"
#include "autodiff/memory_tracker.hpp"
#include "core/error.hpp"
#include "autodiff/rng.hpp"
#include "autodiff/loops.hpp"

namespace remat {

ParamStore::ParamStore(const std::vector<ParamSpec>& specs, DType dtype) : specs_(specs) {
  for (const auto& s : specs) {
    if (index_.count(s.name)) throw std::logic_error("parameter '" + s.name + "' declared twice");
    index_[s.name] = tensors_.size();
    names_.push_back(s.name);
    tensors_.push_back(Tensor::parameter(s.shape, dtype, s.name));
  }
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
    default: return "fp32";
  }
}

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  if (name == "fp16") return Precision::fp16;
  throw UserError("unknown precision '" + name + "' (fp32, bf16, fp16)");
}

DType compute_dtype(Precision p, DType params) {
  switch (p) {
    case Precision::bf16: return DType::bf16;
    case Precision::fp16: return DType::f16;
    default: return params;
  }
}

double default_loss_scale(Precision p) { return p == Precision::fp16 ? kInitialLossScale : 1.0; }

namespace {
constexpr const char* kCopyLabel = "weights_16bit";
}

std::size_t ParamStore::index_of(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw std::logic_error("no parameter named '" + name + "'");
  return it->second;
}

const Tensor& ParamStore::operator[](const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw std::logic_error("no parameter named '" + name + "'");
  if (!quantized_.empty() && quantized_.count(name))
    throw std::logic_error("parameter '" + name + "' is quantized: only a linear reads it");
  if (recording_) other_reads_.insert(name);
  if (on_access_) on_access_(it->second);
  if (!copying_) return tensors_[it->second];
  Tensor& copy = copies_[it->second];
  if (!copy.defined()) {
    const Tensor& master = tensors_[it->second];
    copy = converted(master, compute_dtype_, kCopyLabel);
    copy.attach_slot(master.slot());  // null for a frozen parameter
  }
  return copy;
}

PrecisionScope::PrecisionScope(const ParamStore& params, Precision p) : params_(params) {
  const DType dt = compute_dtype(p, params_.tensors().empty() ? DType::f32 : params_.tensors().front().dtype());
  if (params_.tensors().empty() || dt == params_.tensors().front().dtype()) return;
  if (params_.copying_) {  // an enclosing scope's copies serve (a check's steps share them: no update between)
    if (params_.compute_dtype_ != dt) throw std::logic_error("PrecisionScope: the store is open at another precision");
    return;
  }
  if (params_.tensors().front().dtype() != DType::f32)
    throw std::logic_error(std::string("PrecisionScope: 16-bit copies of ") + dtype_name(params_.tensors().front().dtype()) +
                           " parameters (the master weights are float32)");
  MemoryTracker::instance().pool_for_label(kCopyLabel, ParamStore::kCopyPool);
  params_.compute_dtype_ = dt;
  params_.copying_ = true;
  params_.copies_.assign(params_.tensors().size(), Tensor());
  active_ = true;
}

PrecisionScope::~PrecisionScope() {
  if (!active_) return;
  params_.copies_.clear();
  params_.copying_ = false;
  params_.compute_dtype_ = DType::f32;
}

void ParamStore::freeze(const std::string& name) {
  auto it = index_.find(name);
  if (it == index_.end()) throw std::logic_error("no parameter named '" + name + "'");
  tensors_[it->second].attach_slot(nullptr);
}

void ParamStore::quantize(const std::string& name, QuantFormat format) {
  const std::size_t i = index_of(name);
  if (tensors_[i].requires_grad()) throw std::logic_error("quantize: '" + name + "' is trainable");
  if (quantized_.count(name)) throw std::logic_error("quantize: '" + name + "' is quantized already");
  set_quantized(name, remat::quantize(tensors_[i], format));
}

void ParamStore::set_quantized(const std::string& name, QuantizedWeight q) {
  const std::size_t i = index_of(name);
  if (q.shape != specs_[i].shape) throw std::logic_error("set_quantized: '" + name + "' has another shape");
  tensors_[i] = q.bytes;  // no gradient slot: frozen
  quantized_[name] = std::move(q);
}

void ParamStore::dequantize(const std::string& name) {
  auto it = quantized_.find(name);
  if (it == quantized_.end()) throw std::logic_error("dequantize: '" + name + "' is not quantized");
  tensors_[index_of(name)] = dequantized(it->second, name);
  quantized_.erase(it);
}

const QuantizedWeight* ParamStore::quantized(const std::string& name) const {
  if (quantized_.empty()) return nullptr;  // the common case, on every linear's read
  auto it = quantized_.find(name);
  if (it == quantized_.end()) return nullptr;
  if (on_access_) on_access_(index_of(name));  // read, as operator[] reads the others
  return &it->second;
}

const Tensor& ParamStore::linear_weight(const std::string& name) const {
  const bool recording = std::exchange(recording_, false);
  const Tensor& t = (*this)[name];
  recording_ = recording;
  if (recording_) linear_reads_.insert(name);
  return t;
}

void ParamStore::record_reads() const {
  recording_ = true;
  linear_reads_.clear();
  other_reads_.clear();
}

std::vector<std::string> ParamStore::linear_only_reads() const {
  recording_ = false;
  std::vector<std::string> out;
  for (const auto& name : names_)
    if (linear_reads_.count(name) && !other_reads_.count(name)) out.push_back(name);
  return out;
}

void ParamStore::attach_adapter(const std::string& weight, const std::string& a, const std::string& b, double scale,
                                const RankGroup& group) {
  for (const auto& name : {weight, a, b})
    if (!index_.count(name)) throw std::logic_error("no parameter named '" + name + "'");
  adapters_.push_back({weight, {a, b, scale, group, specs_[index_of(weight)].split}});
}

const ParamStore::Adapter* ParamStore::adapter(const std::string& weight) const {
  for (const auto& [name, adapter] : adapters_)
    if (name == weight) {
      adapter_uses_.insert(name);
      return &adapter;
    }
  return nullptr;
}

std::vector<std::string> ParamStore::adapted() const {
  std::vector<std::string> names;
  for (const auto& a : adapters_) names.push_back(a.first);
  return names;
}

std::set<std::string> ParamStore::take_adapter_uses() const { return std::exchange(adapter_uses_, {}); }

std::int64_t ParamStore::count() const { return count_params(specs_); }

std::int64_t ParamStore::bytes() const {
  std::int64_t n = 0;
  for (const auto& t : tensors_) n += std::int64_t(MemoryTracker::counted_bytes(t.nbytes()));
  return n;
}

void ParamStore::zero_grad() const {
  // Gradient buffers are allocated once and kept, so they belong to the
  // memory that exists before a step, not to what the step allocates.
  for (const auto& t : tensors_) {
    if (!t.requires_grad()) continue;  // frozen
    if (t.grad().defined())
      fill(t.grad(), 0.0);
    else
      t.slot()->grad = std::make_shared<Tensor>(Tensor::zeros(t.shape(), t.dtype(), "grad." + t.label()));
  }
}

std::int64_t count_params(const std::vector<ParamSpec>& specs) {
  std::int64_t n = 0;
  for (const auto& s : specs) n += numel(s.shape);
  return n;
}

void initialize(const ParamStore& params, std::uint64_t seed, int layers,
                const std::function<void(std::size_t done, std::size_t total)>& progress) {
  for (std::size_t i = 0; i < params.specs().size(); ++i) {
    if (progress) progress(i, params.specs().size());
    const ParamSpec& spec = params.specs()[i];
    const Tensor& t = params.tensors()[i];
    if (spec.init == Init::zeros || spec.init == Init::ones) {
      fill(t, spec.init == Init::ones ? 1.0 : 0.0);
      continue;
    }
    const double std = spec.init == Init::normal ? 0.02 : 0.02 / std::sqrt(2.0 * layers);
    const std::uint64_t stream = rng::stream_of(spec.name);
    REMAT_DISPATCH_FLOAT(t.dtype(), T, {
      T* p = t.data<T>();
      backend::for_each(
          "initialize", t.numel(),
          KOKKOS_LAMBDA(std::int64_t k) { p[k] = T(std * rng::normal(seed, stream, std::uint64_t(k))); });
    });
  }
}

ReadHookScope::ReadHookScope(ParamStore& params, std::function<void(std::size_t)> hook)
    : params_(params), previous_(params.access_hook()) {
  params_.set_access_hook([hook = std::move(hook), previous = previous_](std::size_t i) {
    hook(i);
    if (previous) previous(i);
  });
}

ReadHookScope::~ReadHookScope() { params_.set_access_hook(previous_); }

}  // namespace remat
