#include "autodiff/gemm.hpp"
#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"

namespace remat::ops {
using namespace detail;
using gemm::Op;

namespace {

Tensor linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  stats::count_forward("linear");
  const std::int64_t M = rows_of(x), in = weight.dim(1), out_f = weight.dim(0);
  Shape shape = x.shape();
  shape.back() = out_f;
  Tensor out = Tensor::empty(shape, x.dtype(), "linear");
  out.set_tag("linear");
  REMAT_DISPATCH_COMPUTE(x.dtype(), T, {
    T* y = out.data<T>();
    A beta = 0;
    if (bias.defined()) {  // y = bias, then y += x W^T inside the GEMM
      broadcast_rows(y, bias.data<T>(), M, out_f);
      beta = 1;
    }
    gemm::gemm(ExecSpace(), Op::N, Op::T, A(1), mat(x.data<T>(), M, in), mat(weight.data<T>(), out_f, in), beta,
               mat(y, M, out_f));
  });
  return out;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  require_float("linear", x, "x");
  require_float("linear", weight, "weight");
  require(weight.rank() == 2 && x.rank() >= 1 && x.dim(-1) == weight.dim(1),
          [&] { return "linear: x " + to_string(x.shape()) + " does not fit weight " + to_string(weight.shape()); });
  require(!bias.defined() || bias.shape() == Shape{weight.dim(0)},
          [&] { return "linear: bias " + to_string(bias.shape()) + " for weight " + to_string(weight.shape()); });
  require(x.dtype() == weight.dtype() && (!bias.defined() || bias.dtype() == x.dtype()), "linear: dtypes differ");
  OpRecorder rec("linear", {&x, &weight, &bias});
  // x is saved before the product is computed: a recomputation that needs
  // nothing after this save (a block's last linear) stops here, without
  // redoing the GEMM. Weights are parameters, alive anyway: held directly,
  // never through hooks.
  // Only the weight's gradient reads x: a frozen weight keeps no copy of it.
  const SavedTensor sx = rec && weight.requires_grad() ? save(x) : SavedTensor();
  if (rec && !weight.requires_grad()) note_not_saved("linear", x, "its weight is frozen: only the weight's gradient reads it");
  Tensor out = linear_forward(x, weight, bias);
  if (!rec) return out;
  if (weight.requires_grad()) out.set_recipe([sx, weight, bias] { return linear_forward(sx.unpack(), weight, bias); });
  const std::int64_t M = rows_of(x), in = weight.dim(1), out_f = weight.dim(0);
  rec.weight_grads_apart();  // x and dy for the weight and bias, the weight for dx
  rec.finish({&out}, [sx, weight, M, in, out_f](BackwardContext& ctx) {
    // Unpack before allocating gradients: a recomputation it may trigger
    // then runs with less live.
    Tensor dy = ctx.grad_out(), xv = ctx.needs_grad(1) ? sx.unpack() : Tensor();
    REMAT_DISPATCH_COMPUTE(dy.dtype(), T, {
      const T* gy = dy.data<T>();
      if (GradTarget dx = ctx.grad_in(0))  // dx = dy W
        gemm::gemm(ExecSpace(), Op::N, Op::N, A(1), mat(gy, M, out_f), mat(weight.data<T>(), out_f, in),
                   A(dx.fresh ? 0 : 1), mat(dx.t.data<T>(), M, in));
      // dW = dy^T x, accumulated in the compute type: a 16-bit product goes
      // straight into the float32 master gradient (Megatron's gradient-
      // accumulation fusion), never through a 16-bit gradient.
      if (GradTarget dw = ctx.grad_in(1))
        gemm::gemm(ExecSpace(), Op::T, Op::N, A(1), mat(gy, M, out_f), mat(xv.data<T>(), M, in),
                   A(dw.fresh ? 0 : 1), mat(weight_grad<T>(dw, "linear"), out_f, in));
      if (GradTarget db = ctx.grad_in(2)) column_sums(gy, M, out_f, weight_grad<T>(db, "linear"), !db.fresh);
    });
  });
  return out;
}

}  // namespace remat::ops
