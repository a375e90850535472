#include "autodiff/tensor.hpp"

#include "autodiff/memory_tracker.hpp"
#include "autodiff/shape_only.hpp"
#include "autodiff/stats.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"
#include "core/text.hpp"

#include <cstring>
#include <mutex>
#include <set>
#include <sstream>

namespace remat {

const char* intern_tag(const std::string& name) {
  static std::mutex mutex;
  static std::set<std::string> names;  // node-based: the strings never move
  std::lock_guard<std::mutex> lock(mutex);
  return names.insert(name).first->c_str();
}

namespace {

[[noreturn]] void throw_allocation_failure(std::size_t bytes, const std::string& label) {
  throw AllocationFailure("out of memory: " + std::string(MemSpace::name()) + " memory could not give " +
                          human_bytes(double(bytes)) + " for '" + label + "' (the machine's own limit, not --mem-limit)");
}

// A shape-only tensor's storage: no bytes, but the tracker hears of its
// allocation and, when the last copy goes, its release, under the label and
// pool a real one would have (autodiff/shape_only.hpp).
struct ShapeOnlyStorage {
  std::string label;
  std::uint64_t bytes;
  void operator()(Tensor::Bytes* b) const {
    MemoryTracker::instance().on_deallocate(MemoryTracker::default_pool(), b, bytes, label);
    delete b;
  }
};

}  // namespace

Tensor Tensor::described(const Shape& shape, DType dtype) {
  for (auto d : shape)
    if (d < 0) throw std::invalid_argument("negative dimension in shape " + to_string(shape));
  Tensor t;
  t.shape_ = shape;
  t.numel_ = remat::numel(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, const std::string& label) {
  Tensor t = described(shape, dtype);
  MemoryTracker::instance().check_allocation(std::int64_t(t.nbytes()));
  stats::count_bytes(double(t.nbytes()));
  if (shape_only()) {
    // Kokkos rounds every View's allocation up to a multiple of 8 bytes, and
    // reports that size to the tracker: so does a shape-only one.
    const std::uint64_t padded = MemoryTracker::counted_bytes(std::uint64_t(t.nbytes()));
    auto* b = new Bytes();
    t.storage_ = std::shared_ptr<Bytes>(b, ShapeOnlyStorage{label, padded});
    MemoryTracker::instance().on_allocate(MemoryTracker::default_pool(), b, padded, label);
    return t;
  }
  try {
    t.storage_ = std::make_shared<Bytes>(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), t.nbytes());
  } catch (const std::bad_alloc&) {
    throw_allocation_failure(t.nbytes(), label);
  } catch (const std::runtime_error& e) {
    // Kokkos reports a failed allocation as a runtime_error of several
    // lines; anything else it throws is not ours to rename.
    if (std::string(e.what()).find("allocat") == std::string::npos) throw;
    throw_allocation_failure(t.nbytes(), label);
  }
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible)
    advise_huge_pages(t.storage_->data(), t.nbytes());
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, const std::string& label) {
  Tensor t = empty(shape, dtype, label);
  if (shape_only()) return t;
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible) {
    // A memset per host thread, each on (and first touching) its own slice:
    // Kokkos 3.4's deep_copy of a value fills byte by byte, which took a tenth
    // of `check --config gpt2-124m`'s time. (Not hot: buffers made once.)
    unsigned char* p = t.bytes().data();
    const std::int64_t n = std::int64_t(t.nbytes()), slices = Kokkos::DefaultHostExecutionSpace().concurrency();
    Kokkos::parallel_for("tensor_zeros", Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>(0, slices),
                         [=](std::int64_t i) {
                           const std::int64_t begin = n * i / slices, end = n * (i + 1) / slices;
                           if (end > begin) std::memset(p + begin, 0, std::size_t(end - begin));  // p is null if n is 0
                         });
    Kokkos::DefaultHostExecutionSpace().fence();
  } else {
    Kokkos::deep_copy(t.bytes(), static_cast<unsigned char>(0));
  }
  return t;
}

Tensor Tensor::unfilled(const Shape& shape, DType dtype) {
  Tensor t = described(shape, dtype);
  t.storage_ = std::make_shared<Bytes>();
  return t;
}

Tensor Tensor::parameter(const Shape& shape, DType dtype, const std::string& name) {
  Tensor t = zeros(shape, dtype, name);
  auto slot = std::make_shared<GradSlot>();
  slot->shape = shape;
  slot->dtype = dtype;
  slot->name = name;
  slot->retain = true;
  t.slot_ = std::move(slot);
  return t;
}

std::string Tensor::label() const {
  if (const auto* meta = std::get_deleter<ShapeOnlyStorage>(storage_)) return meta->label;
  return raw() ? storage_->label() : std::string();
}

void Tensor::release() const {
  if (storage_) *storage_ = Bytes();
}

void Tensor::refill(Bytes bytes) const {
  if (bytes.extent(0) != nbytes())
    throw std::invalid_argument("refill: " + std::to_string(bytes.extent(0)) + " bytes for a tensor of " +
                                std::to_string(nbytes()));
  if (!storage_) throw std::logic_error("refill: an undefined tensor has no storage to fill");
  *storage_ = std::move(bytes);
}

bool Tensor::shares_storage() const { return storage_ && (storage_.use_count() > 1 || storage_->use_count() > 1); }

Tensor Tensor::view_as(const Shape& shape) const {
  if (remat::numel(shape) != numel_)
    throw std::invalid_argument("cannot view a tensor of shape " + to_string(shape_) + " as " + to_string(shape));
  Tensor t = *this;
  t.shape_ = shape;
  t.slot_.reset();
  t.recipe_.reset();
  return t;
}

Tensor Tensor::grad() const { return slot_ && slot_->grad ? *slot_->grad : Tensor(); }

void Tensor::zero_grad() const {
  if (slot_) slot_->grad.reset();
}

void Tensor::check_dtype(DType want) const {
  if (want != dtype_)
    throw std::invalid_argument(std::string("tensor holds ") + dtype_name(dtype_) + ", accessed as " + dtype_name(want));
}

std::vector<double> Tensor::to_host_f64() const {
  std::vector<double> out(numel_);
  if (shape_only()) return out;  // zeros: no values exist
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bytes());
  const unsigned char* p = host.data();
  for (std::int64_t i = 0; i < numel_; ++i) {
    switch (dtype_) {
      case DType::f32: out[i] = reinterpret_cast<const float*>(p)[i]; break;
      case DType::f64: out[i] = reinterpret_cast<const double*>(p)[i]; break;
      case DType::i32: out[i] = reinterpret_cast<const std::int32_t*>(p)[i]; break;
      case DType::bf16: out[i] = double(reinterpret_cast<const bf16*>(p)[i]); break;
      case DType::f16: out[i] = double(reinterpret_cast<const f16*>(p)[i]); break;
      case DType::u8: out[i] = p[i]; break;
    }
  }
  return out;
}

std::vector<float> Tensor::to_host_f32() const {
  std::vector<float> out;
  to_host_f32(out);
  return out;
}

const float* Tensor::host_f32(std::vector<float>& scratch) const {
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible) {
    if (dtype_ == DType::f32 && !shape_only()) return data<float>();
  }
  to_host_f32(scratch);
  return scratch.data();
}

void Tensor::to_host_f32(std::vector<float>& out) const {
  if (dtype_ != DType::f32) {
    const auto d = to_host_f64();
    out.assign(d.begin(), d.end());
  } else if (shape_only()) {
    out.assign(std::size_t(numel_), 0.0f);
  } else {  // as it is, no detour through float64; copied once into out's own storage if it is large enough
    auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bytes());
    const float* p = reinterpret_cast<const float*>(host.data());
    if (out.capacity() < std::size_t(numel_)) {  // fresh storage, in huge pages where it is large
      std::vector<float>().swap(out);
      out.reserve(std::size_t(numel_));
      advise_huge_pages(out.data(), std::size_t(numel_) * sizeof(float));
    }
    out.assign(p, p + numel_);
  }
}

template <class T>
std::vector<T> Tensor::to_host() const {
  check_dtype(DTypeOf<T>::value);
  std::vector<T> out(numel_);
  if (shape_only()) return out;
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bytes());
  std::memcpy(out.data(), host.data(), nbytes());
  return out;
}
template std::vector<std::int32_t> Tensor::to_host() const;
template std::vector<std::uint8_t> Tensor::to_host() const;

std::vector<std::int32_t> Tensor::to_host_i32() const { return to_host<std::int32_t>(); }

template <class T>
Tensor Tensor::from_host(const std::vector<T>& v, const Shape& shape, const std::string& label) {
  if (std::int64_t(v.size()) != remat::numel(shape))
    throw std::invalid_argument("from_host: " + std::to_string(v.size()) + " values for shape " + to_string(shape));
  Tensor t = empty(shape, DTypeOf<T>::value, label);
  if (shape_only()) return t;
  Kokkos::View<const unsigned char*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged> src(
      reinterpret_cast<const unsigned char*>(v.data()), t.nbytes());
  Kokkos::deep_copy(t.bytes(), src);
  return t;
}
template Tensor Tensor::from_host(const std::vector<float>&, const Shape&, const std::string&);
template Tensor Tensor::from_host(const std::vector<double>&, const Shape&, const std::string&);
template Tensor Tensor::from_host(const std::vector<std::int32_t>&, const Shape&, const std::string&);
template Tensor Tensor::from_host(const std::vector<bf16>&, const Shape&, const std::string&);
template Tensor Tensor::from_host(const std::vector<f16>&, const Shape&, const std::string&);
template Tensor Tensor::from_host(const std::vector<std::uint8_t>&, const Shape&, const std::string&);

double Tensor::item() const {
  if (numel_ != 1) throw std::invalid_argument("item() on a tensor of shape " + to_string(shape_));
  return to_host_f64()[0];
}

}  // namespace remat
