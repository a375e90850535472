// The linear layer over a quantized, frozen weight (autodiff/quantized.hpp).
#include "autodiff/ops/dequantized_weight.hpp"
#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/saved_tensor.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"

namespace remat::ops {
using namespace detail;
using gemm::Op;

namespace {

// y (+)= x W^T, or with `transposed` y (+)= x W (backward's dx = dy W), W
// dequantized for this one product.
void product(const Tensor& x, const QuantizedWeight& w, bool transposed, const Tensor& y, bool accumulate) {
  const std::int64_t M = rows_of(x), out_f = w.shape[0], in = w.shape[1];
  REMAT_DISPATCH_COMPUTE(x.dtype(), T, {
    const DequantizedWeight<T> weight(w);
    const A beta = accumulate ? 1 : 0;
    if (transposed)
      gemm::gemm(ExecSpace(), Op::N, Op::N, A(1), mat(x.data<T>(), M, out_f), mat(weight.data(), out_f, in), beta,
                 mat(y.data<T>(), M, in));
    else
      gemm::gemm(ExecSpace(), Op::N, Op::T, A(1), mat(x.data<T>(), M, in), mat(weight.data(), out_f, in), beta,
                 mat(y.data<T>(), M, out_f));
  });
}

Tensor forward(const Tensor& x, const QuantizedWeight& w, const Tensor& bias) {
  stats::count_forward("linear");
  const std::int64_t M = rows_of(x), out_f = w.shape[0];
  Shape shape = x.shape();
  shape.back() = out_f;
  Tensor out = Tensor::empty(shape, x.dtype(), "linear");
  out.set_tag("linear");
  if (bias.defined())  // y = bias, then y += x W^T
    REMAT_DISPATCH_COMPUTE(x.dtype(), T, { broadcast_rows(out.data<T>(), bias.data<T>(), M, out_f); });
  product(x, w, false, out, bias.defined());
  return out;
}

}  // namespace

Tensor linear(const Tensor& x, const QuantizedWeight& weight, const Tensor& bias) {
  require_float("linear", x, "x");
  require(weight.defined() && weight.shape.size() == 2 && x.rank() >= 1 && x.dim(-1) == weight.shape[1],
          [&] { return "linear: x " + to_string(x.shape()) + " does not fit the quantized weight " + to_string(weight.shape); });
  require(!bias.defined() || (bias.shape() == Shape{weight.shape[0]} && bias.dtype() == x.dtype()),
          [&] { return "linear: bias " + to_string(bias.shape()) + " for the quantized weight " + to_string(weight.shape); });
  OpRecorder rec("linear", {&x, &bias});
  // The weight is frozen: no gradient reads x, so nothing is saved.
  if (rec) note_not_saved("linear", x, "its weight is quantized (frozen): only the weight's gradient would read it");
  Tensor out = forward(x, weight, bias);
  if (!rec) return out;
  const std::int64_t M = rows_of(x), out_f = weight.shape[0];
  rec.weight_grads_apart();  // dy for the bias, the frozen weight for dx
  rec.finish({&out}, [weight, M, out_f](BackwardContext& ctx) {
    const Tensor dy = ctx.grad_out();
    if (GradTarget dx = ctx.grad_in(0)) product(dy, weight, true, dx.t, !dx.fresh);
    if (GradTarget db = ctx.grad_in(1))
      REMAT_DISPATCH_COMPUTE(dy.dtype(), T, {
        column_sums(dy.data<T>(), M, out_f, weight_grad<T>(db, "linear"), !db.fresh);
      });
  });
  return out;
}

}  // namespace remat::ops
