#pragma once
// Tensor: a shape, an element type and a reference-counted Kokkos allocation
// in the default execution space's memory. Copies share the data. A tensor
// that takes part in differentiation also points to a GradSlot, where its
// gradient accumulates during backward.
#include <algorithm>
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "autodiff/dtype.hpp"
#include "core/shape.hpp"

namespace remat {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;

// Tags: what produced a tensor, as an open name, by convention the
// producing op's ("linear", "softmax", "layer_norm"). Strategies decide what
// to keep by it, the way JAX remat policies and PyTorch selective-checkpoint
// policies decide per op ("recompute every softmax, keep every linear").
// A tag is a string of static lifetime: a literal, or intern_tag(name) for a
// name made at run time. Models may tag tensors of their own (set_tag on
// the tensor a consumer saves) without touching autodiff.
const char* intern_tag(const std::string& name);

class Tensor;

// Where the gradient of one tensor accumulates. Nodes on the tape hold slots,
// not tensors, so a node never keeps an activation alive by accident.
struct GradSlot {
  Shape shape;
  DType dtype = DType::f32;
  std::string name;  // parameters only
  bool retain = false;  // parameters keep their gradient after backward
  std::shared_ptr<Tensor> grad;  // null until a gradient flows here
  // The label backward allocates `grad` with (null: "grad"); one the memory
  // tracker gives a pool of its own keeps those bytes out of the activations
  // (the whole gradients of sharded parameters, train/param_shards).
  const char* grad_label = nullptr;
};

class Tensor {
 public:
  using Bytes = Kokkos::View<unsigned char*, MemSpace>;

  Tensor() = default;
  static Tensor empty(const Shape& shape, DType dtype, const std::string& label = "tensor");
  static Tensor zeros(const Shape& shape, DType dtype, const std::string& label = "tensor");
  // A tensor with no storage yet (not resident, nothing allocated or
  // counted): refill() gives it some. What a sharded parameter's values are
  // gathered into.
  static Tensor unfilled(const Shape& shape, DType dtype);
  // A leaf that collects a gradient which survives backward (and accumulates
  // over several backward calls until zero_grad()).
  static Tensor parameter(const Shape& shape, DType dtype, const std::string& name);

  bool defined() const { return storage_ != nullptr || !shape_.empty(); }
  const Shape& shape() const { return shape_; }
  std::int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int rank() const { return int(shape_.size()); }
  std::int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  std::size_t nbytes() const { return std::size_t(numel_) * dtype_size(dtype_); }
  std::string label() const;

  template <class T> T* data() const {
    check_dtype(DTypeOf<T>::value);
    return reinterpret_cast<T*>(raw());
  }
  void* raw() const { return storage_ ? storage_->data() : nullptr; }
  // Which buffer this is, for telling tensors apart (the same for every copy
  // and view): its data, or in a shape-only run (no data) its storage.
  const void* id() const { return raw() ? raw() : static_cast<const void*>(storage_.get()); }
  // How many handles hold this buffer: Tensors sharing its storage and any
  // other View of it (what a profile asks to know whether anything but the
  // saved copies still holds a saved tensor).
  long holders() const { return storage_ ? storage_.use_count() + std::max(0L, long(storage_->use_count()) - 1) : 0; }
  // The storage (a handle: shares it); an empty View for an undefined
  // tensor, made fresh, as no View may outlive Kokkos::finalize.
  Bytes bytes() const { return storage_ ? *storage_ : Bytes(); }

  // Every copy of a tensor (views of it, the copies ops keep for backward)
  // shares one storage, which can be released and filled again: a parameter
  // sharded across ranks holds its full values only while it is gathered,
  // and the ops that captured it see them come back.
  bool resident() const { return raw() != nullptr; }
  void release() const;             // the storage is freed once no View of it remains
  void refill(Bytes bytes) const;   // new storage of nbytes() bytes for every copy
  bool shares_storage() const;      // another tensor or View holds this storage

  // Same data, other shape (element counts must agree). Not recorded on the
  // tape: use it on tensors that need no gradient, or through ops::reshape.
  Tensor view_as(const Shape& shape) const;

  const char* tag() const { return tag_; }
  void set_tag(const char* tag) { tag_ = tag; }

  // How to compute this tensor again from what its producing op saved anyway
  // (so holding the recipe costs no activation memory). Selective policies
  // drop a tensor that has one and run it in backward. Null if none.
  using Recipe = std::function<Tensor()>;
  const std::shared_ptr<const Recipe>& recipe() const { return recipe_; }
  void set_recipe(Recipe r) { recipe_ = std::make_shared<const Recipe>(std::move(r)); }

  bool requires_grad() const { return slot_ != nullptr; }
  const std::shared_ptr<GradSlot>& slot() const { return slot_; }
  void attach_slot(std::shared_ptr<GradSlot> s) { slot_ = std::move(s); }
  // The accumulated gradient (undefined tensor if none flowed).
  Tensor grad() const;
  void zero_grad() const;

  // Host copies, for I/O and tests.
  std::vector<double> to_host_f64() const;
  std::vector<float> to_host_f32() const;  // float64 rounded: what weight files store
  void to_host_f32(std::vector<float>& out) const;  // the same into out, reusing its storage
  // numel() float32 values to read on the host: the tensor's own where it is
  // float32 in host memory, else a copy in scratch (valid while both live).
  const float* host_f32(std::vector<float>& scratch) const;
  std::vector<std::int32_t> to_host_i32() const;
  template <class T> std::vector<T> to_host() const;  // as stored: int32 or uint8
  template <class T> static Tensor from_host(const std::vector<T>& v, const Shape& shape,
                                             const std::string& label = "from_host");
  double item() const;  // a one-element float tensor's value

 private:
  static Tensor described(const Shape& shape, DType dtype);  // shape and type checked, no storage
  void check_dtype(DType want) const;
  std::shared_ptr<Bytes> storage_;
  Shape shape_;
  std::int64_t numel_ = 0;
  DType dtype_ = DType::f32;
  const char* tag_ = "leaf";
  std::shared_ptr<GradSlot> slot_;
  std::shared_ptr<const Recipe> recipe_;
};

}  // namespace remat
