#include <algorithm>

#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"

namespace remat::ops {
using namespace detail;

Tensor add(const Tensor& a, const Tensor& b) {
  require_float("add", a, "a");
  require_float("add", b, "b");
  require(a.dtype() == b.dtype(), "add: dtypes differ");
  const bool same = a.shape() == b.shape();
  const bool trailing = b.rank() <= a.rank() && std::equal(b.shape().begin(), b.shape().end(),
                                                           a.shape().end() - b.rank());
  require(same || trailing, [&] { return "add: cannot broadcast " + to_string(b.shape()) + " onto " + to_string(a.shape()); });
  const std::int64_t n = a.numel(), nb = b.numel();

  stats::count_forward("add");
  Tensor out = Tensor::empty(a.shape(), a.dtype(), "add");
  out.set_tag("add");
  REMAT_DISPATCH_COMPUTE(a.dtype(), T, {
    const T* x = a.data<T>();
    const T* y = b.data<T>();
    T* z = out.data<T>();
    if (n == nb)
      for_each_element("add_forward", n, KOKKOS_LAMBDA(std::int64_t i) { z[i] = T(A(x[i]) + A(y[i])); });
    else  // b repeats over rows of a (a position embedding's rows are the batch: a few)
      for_each_row_element("add_broadcast_forward", n / nb, nb, KOKKOS_LAMBDA(std::int64_t i, std::int64_t j) {
        z[i] = T(A(x[i]) + A(y[j]));
      });
  });

  OpRecorder rec("add", {&a, &b});
  if (rec)
    rec.finish({&out}, [same, n, nb](BackwardContext& ctx) {
      Tensor dy = ctx.grad_out();
      ctx.accumulate(0, dy);
      if (!ctx.needs_grad(1)) return;
      if (same) return ctx.accumulate(1, dy);
      GradTarget db = ctx.grad_in(1);
      // b's gradient is of b's type, or float32 where b is a 16-bit copy of
      // a parameter (docs/precision.md).
      REMAT_DISPATCH_COMPUTE(dy.dtype(), T, {
        if (db.t.dtype() == dy.dtype())
          column_sums(dy.data<T>(), n / nb, nb, db.t.data<T>(), !db.fresh);
        else
          column_sums(dy.data<T>(), n / nb, nb, db.t.data<A>(), !db.fresh);
      });
    });
  return out;
}

}  // namespace remat::ops
