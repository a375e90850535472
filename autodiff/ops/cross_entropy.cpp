#include "core/error.hpp"
#include "autodiff/fast_math.hpp"
#include "autodiff/ops/cross_entropy_grad.hpp"
#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/ops/row_kernel.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"

namespace remat::ops {
using namespace detail;

Tensor cross_entropy(const Tensor& logits, const Tensor& targets) {
  require_float("cross_entropy", logits, "logits");
  require(targets.dtype() == DType::i32,
          [&] { return std::string("cross_entropy: targets must be int32, got ") + dtype_name(targets.dtype()); });
  const std::int64_t V = logits.dim(-1), M = rows_of(logits);
  require(targets.numel() == M, [&] { return "cross_entropy: " + std::to_string(targets.numel()) + " targets for " +
                                    std::to_string(M) + " rows of logits " + to_string(logits.shape()); });
  if (const auto bad = count_out_of_range(targets, V))
    throw UserError("cross_entropy: " + std::to_string(bad) + " target(s) outside [0, " +
                                std::to_string(V) + ")");

  stats::count_forward("cross_entropy");
  // The log-sum-exp and the loss in the compute type (float32 for bfloat16 logits).
  Tensor lse = Tensor::empty({M}, compute_dtype(logits.dtype()), "cross_entropy_lse");
  lse.set_tag("cross_entropy");
  Tensor loss = Tensor::empty({}, compute_dtype(logits.dtype()), "loss");
  loss.set_tag("cross_entropy");
  REMAT_DISPATCH_COMPUTE(logits.dtype(), T, {
    const T* z = logits.data<T>();
    const std::int32_t* t = targets.data<std::int32_t>();
    A* pl = lse.data<A>();
    // Per-row log-sum-exp with max subtraction, then the mean summed in double.
    for_each_row("cross_entropy_forward", M, V, KOKKOS_LAMBDA(std::int64_t r, const Row& row) {
      const T* zr = z + r * V;
      const A m = row.max<A>([&](std::int64_t j) { return A(zr[j]); });
      const A s = row.sum<A>([&](std::int64_t j) { return fast_exp(A(zr[j]) - m); });
      row.once([&] { pl[r] = m + kmath::log(s); });
    });
    double total = 0;
    if (!shape_only())
      Kokkos::parallel_reduce(
          "cross_entropy_mean", Kokkos::RangePolicy<ExecSpace>(0, M),
          KOKKOS_LAMBDA(std::int64_t r, double& acc) { acc += double(pl[r]) - double(A(z[r * V + t[r]])); }, total);
    A* out = loss.data<A>();
    const A mean = A(total / double(M));
    for_each("cross_entropy_store", 1, KOKKOS_LAMBDA(std::int64_t) { out[0] = mean; });
  });

  OpRecorder rec("cross_entropy", {&logits, nullptr});
  if (!rec) return loss;
  const SavedTensor sz = save(logits), sl = save(lse);
  rec.finish({&loss}, cross_entropy_backward(sz, sl, targets, M, V, 0));
  return loss;
}

}  // namespace remat::ops
