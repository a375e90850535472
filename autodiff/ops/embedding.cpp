#include "core/error.hpp"
#include "autodiff/ops/embedding_grad.hpp"
#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"

namespace remat::ops {
using namespace detail;

namespace {

// Rows [first, first + V) of a table: other ids give zeros.
Tensor embedding_forward(const Tensor& weight, const Tensor& ids, std::int64_t first) {
  stats::count_forward("embedding");
  const std::int64_t V = weight.dim(0), D = weight.dim(1), N = ids.numel();
  Shape shape = ids.shape();
  shape.push_back(D);
  Tensor out = Tensor::empty(shape, weight.dtype(), "embedding");
  out.set_tag("embedding");
  REMAT_DISPATCH_COMPUTE(weight.dtype(), T, {
    const T* w = weight.data<T>();
    const std::int32_t* id = ids.data<std::int32_t>();
    T* y = out.data<T>();
    for_each_element("embedding_forward", N * D, KOKKOS_LAMBDA(std::int64_t i) {
      const std::int64_t n = i / D, d = i % D, v = std::int64_t(id[n]) - first;
      y[i] = v >= 0 && v < V ? w[v * D + d] : T(0);
    });
  });
  return out;
}

// The op for a whole table (first 0, every id checked) or a part of one.
Tensor embedding_rows(const Tensor& weight, const Tensor& ids, std::int64_t first) {
  const std::int64_t V = weight.dim(0), D = weight.dim(1), N = ids.numel();
  Tensor out = embedding_forward(weight, ids, first);
  OpRecorder rec("embedding", {&weight, nullptr});
  if (!rec) return out;
  out.set_recipe([weight, ids, first] { return embedding_forward(weight, ids, first); });
  rec.weight_grads_apart();  // the table's gradient is all it has
  rec.finish({&out}, [ids, V, D, N, first](BackwardContext& ctx) {
    GradTarget dw = ctx.grad_in(0);
    Tensor dy = ctx.grad_out();
    REMAT_DISPATCH_COMPUTE(dy.dtype(), T, {
      A* g = weight_grad<T>(dw, "embedding");
      const T* gy = dy.data<T>();
      const std::int32_t* id = ids.data<std::int32_t>();
      if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible)
        embedding_grad_by_column<T>(id, gy, N, V, D, first, g, dw.fresh);
      else
        embedding_grad_by_token<T>(id, gy, N, V, D, first, g, dw.fresh);
    });
  });
  return out;
}

void require_table(const char* op, const Tensor& weight, const Tensor& ids) {
  require_float(op, weight, "weight");
  require(weight.rank() == 2, [&] { return std::string(op) + ": weight must be [V, D], got " + to_string(weight.shape()); });
  require(ids.dtype() == DType::i32, [&] { return std::string(op) + ": ids must be int32, got " + dtype_name(ids.dtype()); });
}

void require_ids(const Tensor& ids, std::int64_t vocabulary) {
  if (const auto bad = count_out_of_range(ids, vocabulary))
    throw UserError("embedding: " + std::to_string(bad) + " id(s) outside [0, " + std::to_string(vocabulary) + ")");
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  require_table("embedding", weight, ids);
  require_ids(ids, weight.dim(0));
  return embedding_rows(weight, ids, 0);
}

Tensor embedding_part(const Tensor& weight, const Tensor& ids, std::int64_t first, std::int64_t vocabulary) {
  require_table("embedding_part", weight, ids);
  require_ids(ids, vocabulary);
  return embedding_rows(weight, ids, first);
}

}  // namespace remat::ops
