// A mixture's expert products (autodiff/ops/moe.cpp routes the rows): each
// expert's rows through its own weight, dense or quantized.
#include <optional>

#include "autodiff/elementwise.hpp"
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

// Expert e's weight for one product: its dense values, or its quantized ones
// dequantized for as long as this object lives.
template <class V>
class ExpertWeight {
 public:
  ExpertWeight(const Tensor& dense, const QuantizedWeight* q) {
    if (q) dequantized_.emplace(*q);
    values_ = q ? dequantized_->data() : dense.data<V>();
  }
  V* data() const { return values_; }

 private:
  std::optional<DequantizedWeight<V>> dequantized_;
  V* values_ = nullptr;
};

const QuantizedWeight* quantized_at(const std::vector<QuantizedWeight>& q, std::size_t e) {
  return e < q.size() && q[e].defined() ? &q[e] : nullptr;
}

Tensor grouped_forward(const Tensor& x, const std::vector<Tensor>& weights, const std::vector<QuantizedWeight>& quantized,
                       const std::vector<std::int64_t>& offsets, std::int64_t out_f) {
  stats::count_forward("grouped_linear");
  const std::int64_t N = rows_of(x), in = x.dim(-1);
  Tensor out = Tensor::empty({N, out_f}, x.dtype(), "grouped_linear");
  out.set_tag("grouped_linear");
  REMAT_DISPATCH_COMPUTE(x.dtype(), V, {
    for (std::size_t e = 0; e < weights.size(); ++e) {
      const std::int64_t first = offsets[e], rows = offsets[e + 1] - first;
      if (rows == 0) continue;  // an expert no token chose
      const ExpertWeight<V> w(weights[e], quantized_at(quantized, e));
      gemm::gemm(ExecSpace(), Op::N, Op::T, A(1), mat(x.data<V>() + first * in, rows, in), mat(w.data(), out_f, in),
                 A(0), mat(out.data<V>() + first * out_f, rows, out_f));
    }
  });
  return out;
}

// Every expert's [out, in], checked against x and the routing.
Shape expert_shape(const Tensor& x, const std::vector<Tensor>& weights, const Routing& r,
                   const std::vector<QuantizedWeight>& quantized) {
  require(int(weights.size()) == r.experts && std::int64_t(r.offsets.size()) == r.experts + 1 &&
              (quantized.empty() || quantized.size() == weights.size()),
          [&] { return "grouped_linear: " + std::to_string(weights.size()) + " weights for " + std::to_string(r.experts) +
              " experts"; });
  require(x.rank() == 2 && x.dim(0) == r.offsets.back(),
          [&] { return "grouped_linear: x " + to_string(x.shape()) + " for " + std::to_string(r.offsets.back()) + " routed rows"; });
  Shape shape;
  for (std::size_t e = 0; e < weights.size(); ++e) {
    const QuantizedWeight* q = quantized_at(quantized, e);
    const Shape s = q ? q->shape : weights[e].shape();
    if (shape.empty()) shape = s;
    require(s.size() == 2 && s == shape && s[1] == x.dim(1) && (q || weights[e].dtype() == x.dtype()),
            [&] { return "grouped_linear: weight " + to_string(s) + " for x " + to_string(x.shape()); });
  }
  return shape;
}

}  // namespace

Tensor grouped_linear(const Tensor& x, const std::vector<Tensor>& weights, const Routing& r,
                      const std::vector<QuantizedWeight>& quantized) {
  require_float("grouped_linear", x, "x");
  const Shape shape = expert_shape(x, weights, r, quantized);
  std::vector<const Tensor*> inputs{&x};
  for (const auto& w : weights) inputs.push_back(&w);
  OpRecorder rec("grouped_linear", inputs);
  bool any_weight_trains = false;
  for (const auto& w : weights) any_weight_trains = any_weight_trains || w.requires_grad();
  // Only the weights' gradients read x (as linear).
  const SavedTensor sx = rec && any_weight_trains ? save(x) : SavedTensor();
  const std::int64_t in = shape[1], out_f = shape[0];
  Tensor out = grouped_forward(x, weights, quantized, r.offsets, out_f);
  if (!rec) return out;
  const std::vector<std::int64_t> offsets = r.offsets;
  if (any_weight_trains)
    out.set_recipe([sx, weights, quantized, offsets, out_f] {
      return grouped_forward(sx.unpack(), weights, quantized, offsets, out_f);
    });
  rec.weight_grads_apart();  // as linear
  rec.finish({&out}, [sx, weights, quantized, offsets, in, out_f](BackwardContext& ctx) {
    Tensor dy = ctx.grad_out(), xv;
    for (std::size_t e = 0; e < weights.size() && !xv.defined(); ++e)
      if (ctx.needs_grad(int(e) + 1)) xv = sx.unpack();
    GradTarget dx = ctx.grad_in(0);
    REMAT_DISPATCH_COMPUTE(dy.dtype(), V, {
      const V* gy = dy.data<V>();
      for (std::size_t e = 0; e < weights.size(); ++e) {
        const std::int64_t first = offsets[e], rows = offsets[e + 1] - first;
        if (dx && rows > 0) {
          const ExpertWeight<V> w(weights[e], quantized_at(quantized, e));
          gemm::gemm(ExecSpace(), Op::N, Op::N, A(1), mat(gy + first * out_f, rows, out_f), mat(w.data(), out_f, in),
                     A(dx.fresh ? 0 : 1), mat(dx.t.data<V>() + first * in, rows, in));
        }
        if (GradTarget dw = ctx.grad_in(int(e) + 1)) {
          if (rows == 0) {  // an expert no token chose: no gradient from this batch
            if (dw.fresh) fill(dw.t, 0.0);
            continue;
          }
          gemm::gemm(ExecSpace(), Op::T, Op::N, A(1), mat(gy + first * out_f, rows, out_f),
                     mat(xv.data<V>() + first * in, rows, in), A(dw.fresh ? 0 : 1),
                     mat(weight_grad<V>(dw, "grouped_linear"), out_f, in));
        }
      }
    });
  });
  return out;
}

}  // namespace remat::ops
