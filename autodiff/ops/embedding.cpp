#include "core/error.hpp"
#include "autodiff/ops/embedding_grad.hpp"
#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"

namespace remat::ops {
using namespace detail;

namespace {

Tensor embedding_forward(const Tensor& weight, const Tensor& ids) {
  stats::count_forward("embedding");
  const std::int64_t D = weight.dim(1), N = ids.numel();
  Shape shape = ids.shape();
  shape.push_back(D);
  Tensor out = Tensor::empty(shape, weight.dtype(), "embedding");
  out.set_tag("embedding");
  REMAT_DISPATCH_COMPUTE(weight.dtype(), T, {
    const T* w = weight.data<T>();
    const std::int32_t* id = ids.data<std::int32_t>();
    T* y = out.data<T>();
    for_each_element("embedding_forward", N * D, KOKKOS_LAMBDA(std::int64_t i) {
      const std::int64_t n = i / D, d = i % D;
      y[i] = w[std::int64_t(id[n]) * D + d];
    });
  });
  return out;
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& ids) {
  require_float("embedding", weight, "weight");
  require(weight.rank() == 2, "embedding: weight must be [V, D], got " + to_string(weight.shape()));
  require(ids.dtype() == DType::i32, std::string("embedding: ids must be int32, got ") + dtype_name(ids.dtype()));
  const std::int64_t V = weight.dim(0), D = weight.dim(1), N = ids.numel();
  if (const auto bad = count_out_of_range(ids, V))
    throw UserError("embedding: " + std::to_string(bad) + " id(s) outside [0, " + std::to_string(V) + ")");
  Tensor out = embedding_forward(weight, ids);
  OpRecorder rec("embedding", {&weight, nullptr});
  if (!rec) return out;
  out.set_recipe([weight, ids] { return embedding_forward(weight, ids); });
  rec.finish({&out}, [ids, V, D, N](BackwardContext& ctx) {
    GradTarget dw = ctx.grad_in(0);
    Tensor dy = ctx.grad_out();
    REMAT_DISPATCH_COMPUTE(dy.dtype(), T, {
      A* g = weight_grad<T>(dw, "embedding");
      const T* gy = dy.data<T>();
      const std::int32_t* id = ids.data<std::int32_t>();
      if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible)
        embedding_grad_by_column<T>(id, gy, N, V, D, g, dw.fresh);
      else
        embedding_grad_by_token<T>(id, gy, N, V, D, g, dw.fresh);
    });
  });
  return out;
}

}  // namespace remat::ops
