// reversible: a reversible block keeps nothing. Backward rebuilds its inputs
// from its outputs with the inverse coupling (x2 = y2 - G(y1), x1 = y1 -
// F(x2)), running G and F once each, recorded, replaying dropout: the same
// run gives the inverse and, backpropagated, the gradients. The rebuilt
// inputs are the outputs the block before it needs. Only the last block's
// outputs are kept. Not bitwise: reconstruction rounds.
#include <cmath>
#include <map>

#include "autodiff/ops/ops.hpp"
#include "autodiff/random.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"
#include "core/error.hpp"
#include "strategies/registry.hpp"

namespace remat {
namespace {

// A block's outputs, handed over in backward by the block after it.
struct Outputs {
  Tensor y1, y2;
};

Tensor minus(const Tensor& a, const Tensor& b) { return ops::add(a, ops::scale(b, -1.0)); }

double max_abs(const Tensor& a, const Tensor& b) {
  const auto x = a.to_host_f64(), y = b.to_host_f64();
  double m = 0;
  for (std::size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

double max_magnitude(const Tensor& a) {
  double m = 0;
  for (double v : a.to_host_f64()) m = std::max(m, std::abs(v));
  return m;
}

// A leaf copy of `t` for the recomputation's own little graph.
Tensor leaf(const Tensor& t) {
  Tensor v = t.view_as(t.shape());
  auto slot = std::make_shared<GradSlot>();
  slot->shape = t.shape();
  slot->dtype = t.dtype();
  v.attach_slot(slot);
  return v;
}

// One half of the inverse coupling out = other + fn(in): fn runs once on
// `in`, recorded on its own tape, replaying the RNG draws from `cursor`. It
// gives other = out - fn(in) and grad_in = grad_in_other + fn's gradient
// with respect to in, where a gradient flows into out (either term may be
// undefined). The graph is freed on return.
struct Half {
  Tensor other, grad_in;
};
Half undo_half(const std::function<Tensor(const Tensor&)>& fn, std::uint64_t cursor, const Tensor& in,
               const Tensor& out, const Tensor& grad_out, const Tensor& grad_in_other) {
  Tape tape;
  TapeScope scope(tape);
  Tensor a = leaf(in), z;
  {
    stats::RecomputeScope recomputing;
    random_ops::set_cursor(cursor);
    z = fn(a);
  }
  Half h{Tensor(), grad_in_other};
  NoGradScope no_grad;
  h.other = minus(out, z);
  if (grad_out.defined()) {
    z.slot()->grad = std::make_shared<Tensor>(grad_out);
    tape.run_backward();
    if (const Tensor d = a.grad(); d.defined()) h.grad_in = h.grad_in.defined() ? ops::add(h.grad_in, d) : d;
  }
  return h;
}

class Reversible final : public Strategy {
 public:
  Reversible() : Strategy("reversible") {}

  Tensors run(const BlockInfo& info, const Tensors&, const BlockBody&) override {
    throw UserError("strategy 'reversible' needs reversible blocks, and block " + info.name +
                    " is not one (use a reversible model)");
  }

  Tensors run_reversible(const BlockInfo& info, const Tensor& x1, const Tensor& x2,
                         const ReversibleBody& body) override {
    RegionTrace* trace = trace_region(info.name);
    if (!x1.requires_grad() && !x2.requires_grad()) {
      // Below every trainable input (fine-tuning): nothing to rebuild, as no
      // gradient flows back out of the block; its own trainable parameters,
      // if any, are served by an ordinary recorded run.
      previous_ = nullptr;
      return run_traced(trace, [&] {
        Tensor y1 = ops::add(x1, body.f(x2));
        return Tensors{y1, ops::add(x2, body.g(y1))};
      });
    }
    auto mine = std::make_shared<Outputs>();
    const std::uint64_t c0 = random_ops::cursor();
    std::uint64_t c1 = 0;
    Tensor y1, y2;
    run_traced(trace, [&] {
      NoGradScope no_grad;  // nothing inside the block is recorded or saved
      y1 = ops::add(x1, body.f(x2));
      c1 = random_ops::cursor();
      y2 = ops::add(x2, body.g(y1));
      return Tensors{};
    });
    OpRecorder rec("reversible_block", {&x1, &x2});
    if (!rec) return {y1, y2};
    Outputs truth;
    if (verifying()) truth = {x1, x2};
    rec.finish({&y1, &y2}, [this, mine, before = previous_, body, c0, c1, truth, name = info.name,
                            trace](BackwardContext& ctx) {
      const Outputs y = *mine;
      *mine = {};
      const std::uint64_t cursor = random_ops::cursor();
      MemoryPhase phase("reconstruct " + name);
      const auto before_ops = stats::counts().forward;
      const Tensor dy1 = ctx.grad_out(0), dy2 = ctx.grad_out(1);
      // Each of G and F runs once, recorded, and serves both the inverse and
      // the gradients; G's graph is freed before F's is built.
      // y2 = x2 + G(y1): x2 = y2 - G(y1), dy1 += G'(y1)^T dy2.
      const auto [x2, dy1_total] = undo_half(body.g, c1, y.y1, y.y2, dy2, dy1);
      // y1 = x1 + F(x2): x1 = y1 - F(x2), dx1 = dy1, dx2 = dy2 + F'(x2)^T dy1.
      const auto [x1, dx2] = undo_half(body.f, c0, x2, y.y1, dy1_total, dy2);
      if (dy1_total.defined()) ctx.accumulate(0, dy1_total);
      if (dx2.defined()) ctx.accumulate(1, dx2);
      if (truth.y1.defined()) record_error(name, truth, {x1, x2});
      if (trace)
        for (const auto& [op, n] : stats::forward_since(before_ops)) trace->recomputed_ops[op] += n;
      random_ops::set_cursor(cursor);
      if (before) *before = {x1, x2};  // the previous block's outputs
    });
    if (info.index == info.count - 1) *mine = {y1, y2};  // the head needs no more: keep these for backward
    previous_ = mine;
    if (trace) trace->kept += info.index == info.count - 1 ? std::int64_t(y1.nbytes() + y2.nbytes()) : 0;
    return {y1, y2};
  }

  // Forward keeps nothing but the last block's outputs; backward holds one
  // block's outputs and rebuilt inputs with the block's own recomputation.
  // An upper bound: backward holds G's graph, then F's, never both, but the
  // profile knows the block only as a whole (on revformer small it predicts
  // 52 MB for a measured 46 MB). Not under LoRA: there the full step's
  // backward, which this reads, is lighter than the rebuild's (revformer
  // small L4 S32 B2 LoRA 4 measures 1.84 MB against 1.58 predicted).
  // TODO: a bound from the block's forward with its saves under LoRA.
  MemoryPrediction predict(const SaveProfile& p) const override {
    MemoryPrediction m{std::max(p.outside_peak + p.blocks.back().input, p.tail_peak), 0};
    for (const auto& b : p.blocks)
      m.device = std::max({m.device, b.outside_before, b.input + segment_forward_peak(b, true), 2 * b.input + b.backward_peak});
    return m;
  }

 private:
  void reset() override { previous_.reset(); }

  void record_error(const std::string& block, const Outputs& truth, const Outputs& rebuilt) {
    const double abs = std::max(max_abs(truth.y1, rebuilt.y1), max_abs(truth.y2, rebuilt.y2));
    const double scale = std::max(max_magnitude(truth.y1), max_magnitude(truth.y2));
    report_reconstruction({abs, scale > 0 ? abs / scale : abs, block});
  }

  std::shared_ptr<Outputs> previous_;
};

}  // namespace

void register_reversible(StrategyRegistry& r) {
  StrategyEntry e;
  e.name = e.usage = "reversible";
  e.description = "keep nothing inside blocks: rebuild each block's inputs from its outputs in backward";
  e.exact = false;  // reconstruction rounds
  e.applies = [](const ModelTraits& m) { return m.reversible; };
  e.applies_to = "reversible models";
  e.runner = [](const std::string&) { return std::make_unique<Reversible>(); };
  e.in_all = {"reversible"};
  r.add(std::move(e));
}

}  // namespace remat
