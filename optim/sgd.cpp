// SGD with optional momentum (PyTorch's form: b = mu b + g; p -= lr b) and
// the same decoupled weight decay as AdamW.
#include <Kokkos_Core.hpp>

#include "autodiff/loops.hpp"
#include "optim/optimizers.hpp"

namespace remat {
namespace {

template <class T>
void update(T* p, const T* g, T* b, std::int64_t n, T decay, T momentum, T lr) {
  if (b)
    backend::for_each_element("sgd_momentum", n, KOKKOS_LAMBDA(std::int64_t i) {
      const T bi = momentum * b[i] + g[i];
      b[i] = bi;
      p[i] = p[i] * decay - lr * bi;
    });
  else
    backend::for_each_element("sgd", n, KOKKOS_LAMBDA(std::int64_t i) { p[i] = p[i] * decay - lr * g[i]; });
}

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerConfig& c, const std::vector<Tensor>& params, std::vector<bool> decays)
      : c_(c), params_(params), decays_(std::move(decays)) {
    if (c_.momentum > 0)
      for (const auto& p : params_)  // a frozen parameter gets no state
        buffers_.push_back(p.requires_grad() ? Tensor::zeros(p.shape(), p.dtype(), "sgd.momentum") : Tensor());
  }
  void step(double lr) override {
    ++steps_;
    for (std::size_t k = 0; k < params_.size(); ++k) {
      const Tensor& p = params_[k];
      const Tensor g = p.grad();
      if (!g.defined()) continue;
      const double decay = decays_[k] ? 1 - lr * c_.weight_decay : 1;
      const bool momentum = !buffers_.empty();
      if (p.dtype() == DType::f32)
        update<float>(p.data<float>(), g.data<float>(), momentum ? buffers_[k].data<float>() : nullptr, p.numel(),
                      float(decay), float(c_.momentum), float(lr));
      else
        update<double>(p.data<double>(), g.data<double>(), momentum ? buffers_[k].data<double>() : nullptr,
                       p.numel(), decay, c_.momentum, lr);
    }
  }
  std::vector<std::string> state_names() const override {
    return buffers_.empty() ? std::vector<std::string>{} : std::vector<std::string>{"momentum"};
  }
  std::vector<Tensor>& state(const std::string&) override { return buffers_; }

 private:
  OptimizerConfig c_;
  std::vector<Tensor> params_, buffers_;
  std::vector<bool> decays_;
};

}  // namespace

std::unique_ptr<Optimizer> make_sgd(const OptimizerConfig& c, const std::vector<Tensor>& params,
                                      std::vector<bool> decays) {
  return std::make_unique<Sgd>(c, params, std::move(decays));
}

}  // namespace remat
