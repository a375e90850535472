// AdamW (Loshchilov & Hutter): Adam's moments with bias correction, and
// weight decay applied to the weights directly, not through the gradient.
// The order of operations is PyTorch's torch.optim.AdamW:
//   p *= 1 - lr wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
#include <Kokkos_Core.hpp>
#include <cmath>

#include "autodiff/kmath.hpp"
#include "autodiff/loops.hpp"
#include "optim/optimizers.hpp"

namespace remat {
namespace {

// One pass over the parameter, in SIMD blocks (it is bound by memory:
// 28 bytes read or written per parameter).
template <class T>
void update(T* p, const T* g, T* m, T* v, std::int64_t n, T decay, T b1, T b2, T step_size, T bc2_sqrt, T eps) {
  backend::for_each_element("adamw", n, KOKKOS_LAMBDA(std::int64_t i) {
    const T gi = g[i];
    const T mi = b1 * m[i] + (T(1) - b1) * gi;
    const T vi = b2 * v[i] + (T(1) - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - step_size * mi / (kmath::sqrt(vi) / bc2_sqrt + eps);
  });
}

class AdamW final : public Optimizer {
 public:
  AdamW(const OptimizerConfig& c, const std::vector<Tensor>& params, std::vector<bool> decays)
      : c_(c), params_(params), decays_(std::move(decays)) {
    for (const auto& p : params_) {  // a frozen parameter gets no state
      m_.push_back(p.requires_grad() ? Tensor::zeros(p.shape(), p.dtype(), "adamw.m") : Tensor());
      v_.push_back(p.requires_grad() ? Tensor::zeros(p.shape(), p.dtype(), "adamw.v") : Tensor());
    }
  }
  void step(double lr) override {
    ++steps_;
    const double bc1 = 1 - std::pow(c_.beta1, double(steps_)), bc2 = 1 - std::pow(c_.beta2, double(steps_));
    for (std::size_t k = 0; k < params_.size(); ++k) {
      const Tensor& p = params_[k];
      const Tensor g = p.grad();
      if (!g.defined()) continue;
      const double decay = decays_[k] ? 1 - lr * c_.weight_decay : 1;
      if (p.dtype() == DType::f32)
        update<float>(p.data<float>(), g.data<float>(), m_[k].data<float>(), v_[k].data<float>(), p.numel(),
                      float(decay), float(c_.beta1), float(c_.beta2), float(lr / bc1), float(std::sqrt(bc2)),
                      float(c_.eps));
      else
        update<double>(p.data<double>(), g.data<double>(), m_[k].data<double>(), v_[k].data<double>(), p.numel(),
                       decay, c_.beta1, c_.beta2, lr / bc1, std::sqrt(bc2), c_.eps);
    }
  }
  std::vector<std::string> state_names() const override { return {"m", "v"}; }
  std::vector<Tensor>& state(const std::string& name) override { return name == "m" ? m_ : v_; }

 private:
  OptimizerConfig c_;
  std::vector<Tensor> params_, m_, v_;
  std::vector<bool> decays_;
};

}  // namespace

std::unique_ptr<Optimizer> make_adamw(const OptimizerConfig& c, const std::vector<Tensor>& params,
                                      std::vector<bool> decays) {
  return std::make_unique<AdamW>(c, params, std::move(decays));
}

}  // namespace remat
