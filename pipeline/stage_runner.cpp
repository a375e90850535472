#include "pipeline/stage_runner.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>

#include "autodiff/elementwise.hpp"
#include "autodiff/memory_tracker.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/random.hpp"
#include "autodiff/region.hpp"
#include "autodiff/shape_only.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "step/step_scope.hpp"
#include "strategies/strategy.hpp"

namespace remat::pipeline {

Layout make_layout(const Schedule& schedule, int layers, int stages, const std::string& given_layers) {
  Layout l;
  l.stages = stages;
  l.virtual_stages = schedule.virtual_stages;
  const std::vector<int> counts =
      schedule.virtual_stages > 1 ? std::vector<int>(std::size_t(l.count()), layers / l.count())
                                  : stage_layers(layers, stages, given_layers);
  l.first = {0};
  for (int c : counts) l.first.push_back(l.first.back() + c);
  l.split_backward = schedule.splits_backward();
  return l;
}

std::string Layout::layers_of(int rank) const {
  std::string out;
  for (int v = rank; v < count(); v += stages) {
    const int a = begin(v), b = end(v) - 1;
    out += (out.empty() ? "" : ", ") + std::to_string(a) + (b > a ? "-" + std::to_string(b) : "");
  }
  return out;
}

void require_stages(const std::string& model, const Sizes& sizes) {
  if (!models().find(model).make(sizes)->staged()) {
    std::vector<std::string> staged;
    for (const std::string& name : models().names())
      if (models().find(name).make(preset_sizes("tiny"))->staged()) staged.push_back(name);
    throw UserError("--pp: " + model + " is not split into stages yet (" + join(staged, ", ") + ")");
  }
}

std::vector<std::vector<std::size_t>> stage_parameters(const Model& model, ParamStore& params, const Layout& layout) {
  ShapeOnlyScope shape_only;
  NoGradScope no_grad;
  const StepScope scope(0, 0);  // its own counts and random state, given back after
  const Sizes& z = model.sizes();
  const Batch batch = empty_batch(z.B, z.S);
  const DType dtype = params.tensors().empty() ? DType::f32 : params.tensors().front().dtype();
  std::vector<std::vector<std::size_t>> out(static_cast<std::size_t>(layout.count()));
  std::set<std::size_t> read;
  const ReadHookScope reads(params, [&read](std::size_t i) { read.insert(i); });  // (gone with this function)
  for (int v = 0; v < layout.count(); ++v) {
    read.clear();
    Tensors x;
    if (v == 0) {
      x = model.embed(params, batch);
    } else {
      for (const Model::StageEdge& e : model.stage_edges(layout.begin(v)))
        x.push_back(Tensor::empty(e.shape, e.compute_type ? dtype : DType::f32, "stage_input"));
    }
    const Tensors y = model.layers(params, std::move(x), layout.begin(v), layout.end(v), batch);
    if (v == layout.count() - 1) model.head_loss(params, y, batch);
    out[std::size_t(v)].assign(read.begin(), read.end());
  }
  return out;
}

namespace {

// Dropout draws by (step, op id), op ids counting the random ops of one
// process's forward in order: where each virtual stage's forward begins in
// that count, from a shape-only forward of the whole model on parameters of
// its own (nothing of the step's, not even their access hooks, is touched).
std::vector<std::uint64_t> random_op_cursors(const Model& model, const Batch& batch, const Layout& layout) {
  ShapeOnlyScope shape_only;
  NoGradScope no_grad;
  const StepScope scope(0, 0);  // its own counts and random state, given back after
  const ParamStore params(model.params(), DType::f32);
  std::vector<std::uint64_t> at{0};
  Tensors x = model.embed(params, batch);
  for (int v = 0; v + 1 < layout.count(); ++v) {
    x = model.layers(params, std::move(x), layout.begin(v), layout.end(v), batch);
    at.push_back(random_ops::cursor());
  }
  return at;
}

}  // namespace

StageRunner::StageRunner(const StageStep& step, const Layout& layout, int rank, StageLink& link)
    : step_(step), layout_(layout), rank_(rank), link_(link) {
  if (!step.model->staged()) throw std::logic_error("StageRunner: a model without stages (require_stages first)");
  const StepOptions& o = step.options;
  loss_scale_ = o.loss_scale > 0 ? o.loss_scale : default_loss_scale(o.precision);
  if (step.model->sizes().dropout > 0) cursors_ = random_op_cursors(*step.model, step.micro_batches->at(0), layout);
}

void StageRunner::draw_as_one_process(int micro_batch, int v) const {
  if (cursors_.empty()) return;
  const std::uint64_t step = step_.micro_batch_step ? step_.micro_batch_step(micro_batch)
                                                    : step_.options.step + std::uint64_t(micro_batch);
  random_ops::begin_step(step_.options.seed, step);
  if (v >= 0) random_ops::set_cursor(cursors_[std::size_t(v)]);
}

double StageRunner::now() const {
  if (step_.clock) return step_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void StageRunner::run(const Pass& pass) {
  ready_ = now();
  const int v = pass.chunk * layout_.stages + rank_;
  if (pass.kind == PassKind::forward)
    forward(pass.micro_batch, v);
  else if (pass.kind == PassKind::backward)
    backward(pass.micro_batch, v);
  else
    weight(pass.micro_batch, v);
}

Tensor StageRunner::receive(const Edge& e) {
  Tensor t = link_.receive(e);
  ready_ = now();
  return t;
}

void StageRunner::forward(int micro_batch, int v) {
  auto f = std::make_unique<InFlight>();
  const Model& model = *step_.model;
  const ParamStore& params = *step_.params;
  const Batch& batch = step_.micro_batches->at(std::size_t(micro_batch));
  MemoryPhase phase("forward");
  TapeScope tape(f->tape);
  draw_as_one_process(micro_batch, v);
  Strategy* strategy = step_.options.strategy;
  std::optional<BlockRunnerScope> runner;
  if (strategy) {
    strategy->begin_step();  // as each micro-batch of an accumulating rank begins its own step
    runner.emplace(*strategy);
  }
  Tensors x;
  if (v == 0) {
    x = model.embed(params, batch);
  } else {
    const std::vector<Model::StageEdge> in = model.stage_edges(layout_.begin(v));
    for (std::size_t k = 0; k < in.size(); ++k) {
      x.push_back(receive({v - 1, micro_batch, false, int(k)}));
      if (!in[k].gradient) continue;
      // A leaf of this tape whose gradient stays after backward, to be sent back.
      auto slot = std::make_shared<GradSlot>();
      slot->shape = x.back().shape();
      slot->dtype = x.back().dtype();
      slot->retain = true;
      x.back().attach_slot(slot);
      f->inputs.push_back(std::move(slot));
    }
  }
  const Tensors y = model.layers(params, std::move(x), layout_.begin(v), layout_.end(v), batch);
  // The chunk's forward is over: copies in flight end here, not under the next micro-batch.
  if (strategy) strategy->forward_over();
  if (v == layout_.count() - 1) {
    const LossTerms terms = model.head_loss(params, y, batch);
    losses_[micro_batch] = terms.total.item();
    if (!shape_only()) record_loss_details(terms, details_[micro_batch]);  // (a shape-only run has no values)
    f->outputs.push_back(terms.total.slot());
  } else {
    const std::vector<Model::StageEdge> out = model.stage_edges(layout_.end(v));
    if (y.size() != out.size()) throw std::logic_error("pipeline: a block hands on other tensors than stage_edges says");
    for (std::size_t k = 0; k < y.size(); ++k) {
      link_.send({v, micro_batch, false, int(k)}, y[k]);
      if (out[k].gradient) f->outputs.push_back(y[k].slot());
    }
  }
  in_flight_[{micro_batch, v}] = std::move(f);
}

void StageRunner::backward(int micro_batch, int v) {
  const auto it = in_flight_.find({micro_batch, v});
  if (it == in_flight_.end())
    throw std::logic_error("pipeline: backward of micro-batch " + std::to_string(micro_batch) + " on virtual stage " +
                           std::to_string(v) + " before its forward");
  InFlight& f = *it->second;
  if (!layout_.split_backward) begin_backward(micro_batch, v);
  draw_as_one_process(micro_batch, -1);  // a recomputation sets its own cursor
  {
    MemoryPhase phase("backward");
    TapeScope tape(f.tape);
    std::optional<DeferWeightGradientsScope> apart;
    if (layout_.split_backward) apart.emplace(f.weight_gradients);
    std::vector<std::pair<GradSlot*, Tensor>> seeds;
    if (v == layout_.count() - 1) {
      GradSlot& loss = *f.outputs.at(0);
      Tensor seed = Tensor::empty(loss.shape, loss.dtype, "grad_loss");
      fill(seed, loss_scale_);
      seeds.emplace_back(&loss, seed);
    } else {
      const std::vector<Model::StageEdge> out = step_.model->stage_edges(layout_.end(v));
      for (std::size_t k = 0, o = 0; k < out.size(); ++k) {
        if (!out[k].gradient) continue;
        GradSlot* slot = f.outputs.at(o++).get();
        Tensor grad = receive({v, micro_batch, true, int(k)});
        // An output that needs no gradient (the first stage, every parameter on it frozen): no backward.
        if (slot) seeds.emplace_back(slot, std::move(grad));
      }
    }
    if (!seeds.empty()) remat::backward(seeds);
  }
  const std::vector<Model::StageEdge> in = v > 0 ? step_.model->stage_edges(layout_.begin(v)) : std::vector<Model::StageEdge>{};
  for (std::size_t k = 0, i = 0; k < in.size(); ++k) {
    if (!in[k].gradient) continue;
    GradSlot& slot = *f.inputs.at(i++);
    if (!slot.grad) throw std::logic_error("pipeline: no gradient reached the input of virtual stage " + std::to_string(v));
    link_.send({v - 1, micro_batch, true, int(k)}, *slot.grad);
    slot.grad.reset();  // sent (under zb-h1 the rest waits for W)
  }
  if (layout_.split_backward) return;
  in_flight_.erase(it);
  end_backward(micro_batch, v);
}

void StageRunner::weight(int micro_batch, int v) {
  const auto it = in_flight_.find({micro_batch, v});
  if (it == in_flight_.end())
    throw std::logic_error("pipeline: weight gradients of micro-batch " + std::to_string(micro_batch) +
                           " on virtual stage " + std::to_string(v) + " before its backward");
  begin_backward(micro_batch, v);
  draw_as_one_process(micro_batch, -1);  // (a recomputation W still needs sets its own cursor)
  it->second->weight_gradients.run();
  // What W made is complete: sharded parameters reduce-scatter it now (W
  // runs outside the backward's block hooks).
  if (BlockHooks* hooks = block_hooks()) hooks->weight_gradients_done();
  in_flight_.erase(it);
  end_backward(micro_batch, v);
}

// A micro-batch's backward on this rank begins at its last chunk and ends at its first.
void StageRunner::begin_backward(int micro_batch, int v) {
  const int last_chunk = (layout_.virtual_stages - 1) * layout_.stages + rank_;
  if (v == last_chunk && step_.begin_backward) step_.begin_backward(micro_batch);
}

void StageRunner::end_backward(int micro_batch, int v) {
  if (step_.end_chunk_backward) step_.end_chunk_backward(micro_batch, v);
  if (v == rank_ && step_.end_backward) {
    const auto loss = losses_.find(micro_batch);
    step_.end_backward(micro_batch, loss == losses_.end() ? 0.0 : loss->second);
  }
}

namespace {

// Tensors handed over inside one process: the receiver gets a copy of its own.
class LocalLink final : public StageLink {
 public:
  explicit LocalLink(EdgeShapes* record) : record_(record) {}
  void send(const Edge& e, const Tensor& t) override {
    sent_[key(e)] = t;
    if (record_) (*record_)[key(e)] = {t.shape(), t.dtype()};
  }
  Tensor receive(const Edge& e) override {
    const auto it = sent_.find(key(e));
    if (it == sent_.end()) throw std::logic_error("pipeline: received before it was sent");
    Tensor copy = Tensor::empty(it->second.shape(), it->second.dtype(), e.gradient ? "stage_output_grad" : "stage_input");
    convert_into(copy, it->second);
    sent_.erase(it);
    return copy;
  }

 private:
  static EdgeKey key(const Edge& e) { return edge_key(e); }
  std::map<EdgeKey, Tensor> sent_;
  EdgeShapes* record_;
};

class ShapeLink final : public StageLink {
 public:
  explicit ShapeLink(const EdgeShapes& shapes) : shapes_(shapes) {}
  void send(const Edge&, const Tensor&) override {}
  Tensor receive(const Edge& e) override {
    const auto it = shapes_.find(edge_key(e));
    if (it == shapes_.end()) throw std::logic_error("pipeline: no recorded shape for an edge");
    return Tensor::empty(it->second.shape, it->second.dtype, e.gradient ? "stage_output_grad" : "stage_input");
  }

 private:
  const EdgeShapes& shapes_;
};

}  // namespace

void PassTiming::write(double* out) const {
  const double v[kFields] = {double(int(pass.kind)), double(pass.micro_batch), double(pass.chunk),
                             start, end, double(live_after), double(peak)};
  std::copy(v, v + kFields, out);
}

PassTiming PassTiming::read(const double* in) {
  return {{in[0] == 2 ? PassKind::weight : in[0] == 1 ? PassKind::backward : PassKind::forward, int(in[1]), int(in[2])},
          in[3], in[4], std::int64_t(in[5]), std::int64_t(in[6])};
}

std::unique_ptr<StageLink> shape_link(const EdgeShapes& shapes) { return std::make_unique<ShapeLink>(shapes); }

RankResult run_rank(const StageStep& step, const Schedule& schedule, const Layout& layout, int rank, StageLink& link) {
  const int M = int(step.micro_batches->size());
  const std::vector<Pass> list = passes(schedule, layout.stages, M)[std::size_t(rank)];
  auto& tracker = MemoryTracker::instance();
  const std::string pool = MemoryTracker::default_pool();
  ExecSpace().fence();
  const auto base = tracker.stats(pool).live;
  const auto base_offload = offload_pool_bytes().live;
  RankResult r;
  StageRunner runner(step, layout, rank, link);  // (before the step's scope: what it counts is none of the step's)
  const StepScope scope(step.options.seed, step.options.step);  // this step's peaks
  {
    ops::AttentionKernelScope kernel(step.options.attention);
    PrecisionScope precision(*step.params, step.options.precision);
    const double start = runner.now();
    for (const Pass& p : list) {
      const auto outer = tracker.begin_peaks();  // the pass's own peak, then the step's again
      runner.run(p);
      ExecSpace().fence();
      // From when its input was there: waiting for a neighbour is the bubble's, not the pass's.
      PassTiming timing{p, runner.ready() - start, runner.now() - start};
      timing.live_after = tracker.stats(pool).live - base;
      timing.peak = tracker.stats(pool).peak - base;
      tracker.end_peaks(outer);
      r.passes.push_back(timing);
    }
  }
  link.finish();
  ExecSpace().fence();
  r.activation_peak = tracker.stats(pool).peak - base;
  r.offload_peak = offload_pool_bytes().peak - base_offload;
  for (const auto& [m, loss] : runner.losses()) r.losses.push_back(loss);
  for (const auto& [m, d] : runner.details()) r.details.push_back(d);
  r.loss_scale = runner.loss_scale();
  return r;
}

std::vector<double> run_in_process(const StageStep& step, const Schedule& schedule, const Layout& layout,
                                   EdgeShapes* record) {
  const int N = layout.stages, M = int(step.micro_batches->size());
  const auto lists = passes(schedule, N, M);
  const Simulation sim = simulate(schedule, N, M, 1, 2);
  // Every pass, in the order of its start in the replay (ties: by rank); a
  // pass's inputs ended no later than it starts, so they are there.
  std::vector<std::tuple<double, int, std::size_t>> order;
  for (int r = 0; r < N; ++r)
    for (std::size_t i = 0; i < lists[std::size_t(r)].size(); ++i)
      order.emplace_back(sim.times[std::size_t(r)][i].first, r, i);
  std::stable_sort(order.begin(), order.end());
  LocalLink link(record);
  std::vector<std::unique_ptr<StageRunner>> runners;
  for (int r = 0; r < N; ++r) runners.push_back(std::make_unique<StageRunner>(step, layout, r, link));
  ops::AttentionKernelScope kernel(step.options.attention);
  PrecisionScope precision(*step.params, step.options.precision);
  for (const auto& [start, r, i] : order) runners[std::size_t(r)]->run(lists[std::size_t(r)][i]);
  std::vector<double> losses;
  for (const auto& [m, loss] : runners[std::size_t(layout.rank_of(layout.count() - 1))]->losses()) losses.push_back(loss);
  return losses;
}

}  // namespace remat::pipeline
