#pragma once
// One pipeline rank's share of a training step: the passes a schedule gives
// it (pipeline/schedule.hpp) over its model chunks. Each micro-batch's
// forward through a chunk is recorded on a tape of its own, so its backward
// comes whenever the schedule says, with other micro-batches' forwards in
// between. What crosses a chunk's edges (the activation forward, its
// gradient back) goes through a StageLink: MPI to the neighbouring rank,
// tensors handed over inside one process, or (shape-only) shapes alone.
//
// A chunk's input is a leaf of its tape whose gradient is kept; a chunk's
// output is what backward starts from, with the gradient received for it.
// Backward passes run micro-batches in order, so every parameter's gradient
// sums them in the order of a single rank's gradient accumulation.
#include <functional>
#include <map>
#include <tuple>
#include <memory>
#include <vector>

#include "autodiff/tape.hpp"
#include "autodiff/weight_gradients.hpp"
#include "datasets/batch.hpp"
#include "pipeline/schedule.hpp"
#include "step/step.hpp"
#include "zoo/model.hpp"

namespace remat::pipeline {

// Which layers each virtual stage runs: virtual stage v = chunk * N + rank
// (interleaved: rank r runs chunks r, r + N, ...; otherwise one per rank).
struct Layout {
  int stages = 1;          // N, pipeline ranks
  int virtual_stages = 1;  // V, chunks per rank
  std::vector<int> first;  // per virtual stage: its first layer; and one past the last at the end
  bool split_backward = false;  // zb-h1: backward passes are B, the parameters' gradients come in W passes
  int count() const { return stages * virtual_stages; }
  int rank_of(int v) const { return v % stages; }
  int begin(int v) const { return first[std::size_t(v)]; }
  int end(int v) const { return first[std::size_t(v) + 1]; }
  // Rank r's layers in words: "4-7", or its chunks' ("0-1, 4-5").
  std::string layers_of(int rank) const;
};
// UserError unless `model` at `sizes` runs under --pp: split into stages
// (Model::staged). Every command asks before it runs; a StageRunner takes it
// as given.
void require_stages(const std::string& model, const Sizes& sizes);

// The layout of `layers` under `schedule` over N ranks (validate() first).
Layout make_layout(const Schedule& schedule, int layers, int stages, const std::string& given_layers);

// The parameters (indices into `params`) each virtual stage reads: its
// blocks', and what runs before, between and after them there (the
// embedding on the first, a model's work between two blocks, the head and
// the loss on the last), from a shape-only forward of each; a tied
// parameter is in every stage that reads it.
std::vector<std::vector<std::size_t>> stage_parameters(const Model& model, ParamStore& params, const Layout& layout);

// A tensor at an edge between virtual stages `boundary` and `boundary + 1`:
// the index-th of those a block hands on (Model::stage_edges).
struct Edge {
  int boundary = 0;
  int micro_batch = 0;
  bool gradient = false;  // the gradient going back, not the activation going forward
  int index = 0;
};

class StageLink {
 public:
  virtual ~StageLink() = default;
  virtual void send(const Edge& e, const Tensor& t) = 0;
  // A fresh tensor holding what was sent for `e` (made here, so its bytes
  // are the receiving rank's).
  virtual Tensor receive(const Edge& e) = 0;
  // Waits until everything sent is delivered (the step's end).
  virtual void finish() {}
};

// The shape and type of what crosses each edge, as a run of every rank
// records them (what a shape-only run of one rank receives).
struct EdgeShape {
  Shape shape;
  DType dtype = DType::f32;
};
using EdgeKey = std::tuple<int, int, bool, int>;  // (boundary, micro-batch, gradient, index)
using EdgeShapes = std::map<EdgeKey, EdgeShape>;
inline EdgeKey edge_key(const Edge& e) { return {e.boundary, e.micro_batch, e.gradient, e.index}; }

// MPI to the ranks of the neighbouring virtual stages: v's rank is v mod N
// in this rank's pipeline, the job's model-parallel group (comm's tensor
// group: N consecutive ranks; the whole job where none was set).
std::unique_ptr<StageLink> mpi_link(const Layout& layout, int micro_batches);
// The bytes rank `rank` sends plus receives over mpi_link in a step of M
// micro-batches: each of the model's edge tensors (Model::stage_edges: the
// residual stream [B, S, D] in the precision's compute type, and what else its
// blocks hand on) with its shape ahead, its gradient back where it has one.
std::int64_t edge_bytes(const Layout& layout, int rank, int micro_batches, const Model& model, Precision precision);
// UserError where one edge's tensor is more than one MPI message carries (1 GiB).
void require_sendable_edges(const Model& model, Precision precision);
// Shape-only: what is sent goes nowhere; what is received is a tensor of
// the recorded shape, made where the rank would make it.
std::unique_ptr<StageLink> shape_link(const EdgeShapes& shapes);

// What every rank's passes compute with.
struct StageStep {
  const Model* model = nullptr;
  const ParamStore* params = nullptr;
  const std::vector<Batch>* micro_batches = nullptr;  // all M: the first stage reads tokens, the last targets
  StepOptions options;  // strategy, seed, attention, precision, loss scale (zero_grad: the caller's)
  // Around each micro-batch's backward through this rank's stages (the
  // last chunk's, interleaved, begins it; the first chunk's ends it):
  // `begin(m)` before (a trainer zeroes the gradients), `end(m, loss)` after,
  // its gradients in the parameters and its loss (0 off the last stage).
  // Under zb-h1 around its W pass, which alone writes parameters' gradients.
  // Micro-batches come in order. None: the gradients accumulate in place.
  std::function<void(int)> begin_backward;
  std::function<void(int, double)> end_backward;
  // After micro-batch m's backward through virtual stage v (interleaved, a
  // rank's chunks' backward passes have others' between them): its
  // gradients of v's parameters are whole now. Before end_backward.
  std::function<void(int, int)> end_chunk_backward;
  // The step micro-batch m draws its dropout as (one process accumulating
  // the step's micro-batches gives each its own); none: options.step + m.
  std::function<std::uint64_t(int)> micro_batch_step;
  // What the passes are timed by, in seconds (null: the wall clock; a
  // shape-only run: a device model's, estimate/device_model.hpp).
  std::function<double()> clock;
};

class StageRunner {
 public:
  StageRunner(const StageStep& step, const Layout& layout, int rank, StageLink& link);
  void run(const Pass& pass);
  // Of the last virtual stage: each micro-batch's loss, in order (empty elsewhere).
  const std::map<int, double>& losses() const { return losses_; }
  // Of the last virtual stage: each micro-batch's loss parts and statistics
  // (mixtral: ce, aux, expert_load), as a step records them (those alone).
  const std::map<int, StepResult>& details() const { return details_; }
  // The step's clock now, and when the last pass had its inputs: its
  // start, or when what it received arrived.
  double now() const;
  double ready() const { return ready_; }
  double loss_scale() const { return loss_scale_; }

 private:
  struct InFlight {
    Tape tape;
    // The slots alone, not the values: the tape keeps what its strategy
    // saves of the received input, and the output's values went on.
    // Of the received tensors that take a gradient, leaves (none on the first virtual stage).
    std::vector<std::shared_ptr<GradSlot>> inputs;
    // What backward starts from: the chunk's outputs that take a gradient, or the loss on the last.
    std::vector<std::shared_ptr<GradSlot>> outputs;
    DeferredWeightGradients weight_gradients;  // zb-h1: what B set apart for W
  };
  void forward(int micro_batch, int v);
  void backward(int micro_batch, int v);
  void weight(int micro_batch, int v);  // zb-h1's W: the gradients backward set apart
  void begin_backward(int micro_batch, int v);
  void end_backward(int micro_batch, int v);
  // With dropout: the random draws of micro-batch m as one process
  // accumulating the micro-batches draws them (its own step, m after the
  // step's), from where that process's forward is at virtual stage v (v < 0:
  // the cursor left as it is).
  void draw_as_one_process(int micro_batch, int v) const;

  StageStep step_;
  Layout layout_;
  int rank_;
  StageLink& link_;
  double loss_scale_ = 1;
  std::map<std::pair<int, int>, std::unique_ptr<InFlight>> in_flight_;  // (micro-batch, virtual stage)
  std::map<int, double> losses_;
  std::map<int, StepResult> details_;
  double ready_ = 0;
  std::vector<std::uint64_t> cursors_;  // with dropout: each virtual stage's first random op id in one process
  Tensor receive(const Edge& e);  // through the link, noting when it arrived
};

// Every rank's passes in one process, in the order a replay of the
// schedule runs them (simulate's start times), the links handing tensors
// over: the pipeline's arithmetic, on one rank, for its tests, and the
// edges' shapes for a shape-only run of one rank (`record`). Returns the
// losses of the micro-batches in order. The caller zeroes the gradients.
std::vector<double> run_in_process(const StageStep& step, const Schedule& schedule, const Layout& layout,
                                   EdgeShapes* record = nullptr);

// One pass as it ran on its rank: when (seconds from the rank's step start)
// and what the rank held (the device pool above the step's start).
struct PassTiming {
  Pass pass;
  double start = 0, end = 0;
  std::int64_t live_after = 0;  // at its end
  std::int64_t peak = 0;        // the most during it
  static constexpr int kFields = 7;  // as numbers: kind (0 forward, 1 backward or B, 2 W), micro-batch, chunk,
                                     // start, end, live_after, peak
  void write(double* out) const;
  static PassTiming read(const double* in);
};

// One rank's passes, measured as run_step measures a step: the activation
// peak over all of them (the device pool's peak less what was live before:
// the micro-batches in flight at once, as the schedule keeps them). The
// caller zeroes the gradients.
struct RankResult {
  std::vector<double> losses;  // the last virtual stage's rank: each micro-batch's, in order
  std::vector<StepResult> details;  // and their loss parts and statistics
  std::int64_t activation_peak = 0;
  std::int64_t offload_peak = 0;
  double loss_scale = 1;
  std::vector<PassTiming> passes;  // in the rank's order
};
RankResult run_rank(const StageStep& step, const Schedule& schedule, const Layout& layout, int rank, StageLink& link);

}  // namespace remat::pipeline
