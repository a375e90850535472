#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "autodiff/backend.hpp"
#include "autodiff/elementwise.hpp"
#include "autodiff/memory_tracker.hpp"
#include "autodiff/shape_only.hpp"
#include "autodiff/tape.hpp"
#include "comm/comm.hpp"
#include "core/error.hpp"
#include "datasets/batch_source.hpp"
#include "pipeline/stage_runner.hpp"
#include "step/probe.hpp"
#include "step/step.hpp"
#include "step/step_scope.hpp"
#include "strategies/registry.hpp"
#include "train/run_file.hpp"
#include "finetune/fine_tuning.hpp"
#include "zoo/expert_parallel.hpp"
#include "zoo/tensor_parallel.hpp"

namespace remat {
namespace {

void validate_pipeline(const TrainConfig& c);

void validate(const TrainConfig& c) {
  if (c.steps < 1) throw UserError("--steps must be at least 1");
  if (c.accumulate < 1) throw UserError("--accumulate must be at least 1");
  pipeline::refuse_without_stages(c.pipe);
  if (c.pipe.split()) validate_pipeline(c);  // its refusals before the rank count they would explain
  const RankGroup& tp = c.setup.sizes.tp;
  const int group = tp.size * c.setup.sizes.ep.size * c.setup.sizes.cp.size * c.pipe.stages;
  if (c.ranks * group != comm::size())
    throw UserError("the run is set for " + std::to_string(c.ranks * group) + " ranks, but " +
                    std::to_string(comm::size()) + " are running it");
  if (c.setup.sizes.ep.split() && c.lora.any())
    throw UserError("--ep with --lora: not yet (--freeze splits with the parameters)");
  refuse_planned_under_experts(c.setup.sizes, {c.strategy}, /*training=*/true);
  if (!(c.grad_clip >= 0) || !std::isfinite(c.grad_clip)) throw UserError("--grad-clip must be 0 (none) or positive");
  if (c.eval_every < 0 || c.eval_batches < 1) throw UserError("--eval-every must be >= 0 and --eval-batches >= 1");
  if (c.save_every < 0) throw UserError("--save-every must be >= 0");
  int exponent = 0;
  if (!(c.loss_scale > 0) || !std::isfinite(c.loss_scale) || std::frexp(c.loss_scale, &exponent) != 0.5)
    throw UserError("--loss-scale must be a power of two (scaling by it is then exact), such as 65536");
  // Below float16's smallest normal the scaled gradients lose their bits, and
  // below float's every step "overflows" (1/scale is infinite): none trains.
  // Above 2^100 the scaled loss nears float's range.
  if (c.loss_scale < std::ldexp(1.0, -24) || c.loss_scale > std::ldexp(1.0, 100)) {
    char given[32];
    std::snprintf(given, sizeof given, "%g", c.loss_scale);
    throw UserError("--loss-scale " + std::string(given) + " is outside 2^-24 to 2^100; fp16 trains with scales such as "
                    "65536 (the default)");
  }
  if (c.loss_scale != kInitialLossScale && c.run.precision != Precision::fp16)
    throw UserError("--loss-scale scales fp16's loss; at " + std::string(precision_name(c.run.precision)) +
                    " gradients do not underflow and nothing is scaled");
  if (c.save_every > 0 && c.out.empty()) throw UserError("--save-every needs --out, the run file to save to");
  if (c.shard_params) {
    if (comm::size(comm::Group::data) < 2)
      throw UserError("--shard-params shards the parameters across MPI ranks: run it under mpirun with 2 or more "
                      "ranks" + std::string(group > 1 ? " per tensor- or expert-parallel group (mpirun -n " +
                                                           std::to_string(2 * group) + " for a group of " +
                                                           std::to_string(group) + ")"
                                                     : "") +
                      std::string(comm::built_with_mpi() ? "" : " (this remat was built without MPI)"));
    if (models().find(c.setup.model).reversible)
      throw UserError("--shard-params: " + c.setup.model + "'s reversible blocks rebuild their inputs in backward, "
                      "which sharded parameters do not support yet");
  }
  Schedule s = c.schedule;
  s.steps = c.steps;
  s.validate();
}

void validate_pipeline(const TrainConfig& c) {
  const Sizes& z = c.setup.sizes;
  if (z.tp.split() || z.ep.split() || c.shard_params) throw UserError("--pp with --tp, --ep or --shard-params: not yet");
  pipeline::require_stages(c.setup.model, z);
  if (parse_strategy(c.strategy).planned) throw UserError("--pp with a budget: not yet");
  const pipeline::Schedule schedule = pipeline::parse_schedule(c.pipe.schedule);
  pipeline::validate(schedule, z.L, c.pipe.stages, c.accumulate, c.pipe.stage_layers);
  pipeline::require_sendable_edges(*models().find(c.setup.model).make(z), c.run.precision);
}

// The mean held-out loss over `batches` batches (the same ones each time),
// by `model` built without dropout: forward only, nothing recorded or saved.
// Under context parallelism each rank evaluates its own rows, as it trains
// (the ring passing keys and values): no rank holds a whole sequence's
// activations, and its loss is its share of the mean, added over the group
// in rank order.
double validation_loss(const Model& model, const ParamStore& params, BatchSource& source, int batches,
                       ops::AttentionKernel kernel, Precision precision) {
  NoGradScope no_grad;
  ops::AttentionKernelScope scope(kernel);
  PrecisionScope copies(params, precision);
  source.seek(0);
  double sum = 0;
  for (int b = 0; b < batches; ++b) sum += model.loss(params, source.next()).item();
  if (model.sizes().cp.split()) sum = comm::sum_in_rank_order(sum, comm::Group::context);
  return sum / batches;
}

// The whole model's weights a run starts from: initialised from the seed,
// or read from --weights (its model and sizes are this run's); a resumed
// run's are read later. Under tensor parallelism each rank keeps its parts
// of them afterwards.
std::unique_ptr<ParamStore> starting_weights(const TrainConfig& c, bool resuming) {
  const Sizes whole = c.setup.sizes.whole_model();
  auto params = std::make_unique<ParamStore>(models().find(c.setup.model).make(whole)->params(), DType::f32);
  if (resuming) return params;
  initialize(*params, c.run.seed, whole.L);
  if (c.init.empty()) return params;
  const LoadedWeights w = load_weights(c.init, /*force=*/true, /*skip_adapters=*/true);
  if (w.params->names() != params->names())
    throw UserError(c.init + ": holds other parameters than " + c.setup.model + " at these sizes");
  for (std::size_t i = 0; i < params->tensors().size(); ++i) {
    if (const QuantizedWeight* q = w.params->quantized(params->names()[i]))
      params->set_quantized(params->names()[i], *q);  // QLoRA's base from `remat import --quantize`
    else
      backend::copy(params->tensors()[i], w.params->tensors()[i]);
  }
  return params;
}

// The parameters each of this rank's virtual stages trains, by index (what
// it reads: pipeline::stage_parameters), each in one chunk only, so that each
// is folded once a micro-batch (and exchanged once with the data-parallel
// replicas, as predicted): of the chunks here that read it (a tied
// embedding: encdec's encoder and decoder embeddings), the first, whose
// backward ends a micro-batch's on this rank. (A later chunk may have added
// the next micro-batch's part by then: the step's sum is the same, to the
// rounding a tied parameter's sum has anyway.) Under key -1 the rest (other
// ranks'), whose gradients here stay zero.
std::map<int, std::vector<std::size_t>> chunk_parameters(const Model& model, ParamStore& params,
                                                         const pipeline::Layout& layout, int rank) {
  const std::vector<std::vector<std::size_t>> reads = pipeline::stage_parameters(model, params, layout);
  std::map<int, std::vector<std::size_t>> chunks;
  std::set<std::size_t> taken;
  for (int v = rank; v < layout.count(); v += layout.stages) {
    chunks[v];  // (every chunk has a list, empty or not)
    for (std::size_t i : reads[std::size_t(v)])
      if (taken.insert(i).second) chunks[v].push_back(i);
  }
  std::vector<bool> here(params.names().size(), false);
  for (const auto& [v, chunk] : chunks)
    for (std::size_t i : chunk) here[i] = true;
  for (std::size_t i = 0; i < here.size(); ++i)
    if (!here[i]) chunks[-1].push_back(i);
  return chunks;
}

// The model's loss parts by name and its statistics by shape, zeros (a
// shape-only forward): what every rank of a pipeline records, the last
// stage's values summed into the others' zeros over the pipeline.
StepRecord loss_details_layout(const Model& model, const ParamStore& params) {
  ShapeOnlyScope shape_only;
  NoGradScope no_grad;
  const StepScope scope(0, 0);  // its own counts and random state, given back after
  const Sizes& z = model.sizes();
  const Batch batch = empty_batch(z.B, z.S);
  const LossTerms terms = model.loss_terms(params, batch);
  StepRecord r;
  for (const auto& [name, t] : terms.parts) r.loss_parts.emplace_back(name, 0.0);
  for (const auto& [name, t] : terms.stats) r.stats.push_back({name, t.shape(), std::vector<double>(std::size_t(numel(t.shape())), 0.0)});
  return r;
}

// The frozen linear weights of the whole model quantized as --quantize says
// (which weights only linears read does not depend on the batch's size: a short one).
void quantize_whole(ParamStore& params, const TrainConfig& c) {
  Sizes z = c.setup.sizes.whole_model();
  z.B = 1;
  z.S = std::min(z.S, 8);
  quantize_frozen(params, *models().find(c.setup.model).make(z), random_batch(1, z.S, z.V, c.run.seed), c.quantize);
}

}  // namespace

struct Trainer::Pipeline {
  Pipeline(const TrainConfig& c, const Model& model, ParamStore& params)
      : schedule(pipeline::parse_schedule(c.pipe.schedule)),
        layout(pipeline::make_layout(schedule, c.setup.sizes.L, c.pipe.stages, c.pipe.stage_layers)),
        link(pipeline::mpi_link(layout, c.accumulate)),
        chunks(chunk_parameters(model, params, layout, comm::rank(comm::Group::tensor))),
        details(loss_details_layout(model, params)) {}
  bool interleaved() const { return schedule.virtual_stages > 1; }
  pipeline::Schedule schedule;
  pipeline::Layout layout;
  std::unique_ptr<pipeline::StageLink> link;
  std::map<int, std::vector<std::size_t>> chunks;  // chunk_parameters: what each virtual stage here trains
  StepRecord details;                               // the loss parts and statistics a step records, zeros
};

Trainer::Trainer(const TrainConfig& config, const SavedRun* resume) : config_(config) {
  validate(config_);
  const Sizes& z = config_.setup.sizes;
  model_ = models().find(config_.setup.model).make(z);
  params_ = starting_weights(config_, resume != nullptr);
  if (!resume) state_.scaler.scale = config_.loss_scale;
  require_quantized_frozen(*params_, {config_.freeze, config_.lora, config_.quantize}, z.L);
  if (config_.lora.any())  // the adapters join the store (whole, as one process's), the base is frozen
    params_ = with_lora(*params_, config_.lora, config_.run.seed, z.L);
  apply_freeze(*params_, config_.freeze, z.L, ep::whole_names(config_.setup));  // before the optimizer sees the parameters
  // QLoRA: the frozen linear weights quantized, whole (a resumed run's bytes
  // are the run file's, copied over these below; a split cuts its parts).
  quantize_whole(*params_, config_);
  strategy_ = make_strategy(config_.strategy);
  schedule_ = config_.schedule;
  schedule_.steps = config_.steps;
  data_ = make_batch_source(config_.data, z.B, z.S, z.V, config_.run.seed, DataSplit::train);
  if (config_.eval_every > 0) {
    held_out_ = make_batch_source(config_.data, z.B, z.S, z.V, config_.run.seed, DataSplit::validation);
    Sizes no_dropout = z;
    no_dropout.dropout = 0;
    eval_model_ = models().find(config_.setup.model).make(no_dropout);  // the same parameters, no dropout
  }
  if (resume) {
    state_ = resume->state;
    state_.pipeline_passes.clear();  // the saved run's record, not this one's
    if (resume->weights.params->names() != params_->names())
      throw UserError(config_.out + ": holds other parameters than this run trains (" +
                      std::to_string(resume->weights.params->names().size()) + ", not " +
                      std::to_string(params_->names().size()) + ")");
    for (std::size_t i = 0; i < params_->tensors().size(); ++i)
      backend::copy(params_->tensors()[i], resume->weights.params->tensors()[i]);
  }
  if (z.tp.split() || z.ep.split())  // this rank's parts, LoRA's adapters split with their weights
    params_ = lora_part_of(*params_, model_->params(), z.tp);
  if (config_.lora.any()) require_adapters_used(*model_, *params_, random_batch(z.B, z.S, z.V, config_.run.seed));
  // A planned strategy is planned once, on these weights and a batch of the
  // run's shape (costs depend on shapes, not on values).
  if (strategy_->needs_costs()) {
    PrecisionScope precision(*params_, config_.run.precision);
    SaveProfile costs = measure_costs(*model_, *params_, random_batch(z.B, z.S, z.V, config_.run.seed), config_.run.attention,
                                      config_.run.seed);
    agree_on_costs(costs, comm::Group::world);  // every rank plans alike
    strategy_->plan(costs);
  }
  // From here on, under --shard-params, each rank keeps its shards of the
  // parameters and the optimizer steps them.
  reduction_ = make_reduction(*params_, config_.accumulate, config_.shard_params, config_.setup, config_.run.precision,
                              config_.pipe.stages);
  std::vector<bool> decays;  // as the whole parameters decay, not as 1-D shards would
  for (const auto& p : params_->tensors()) decays.push_back(remat::decays(p));
  optimizer_ = make_optimizer(config_.optimizer, reduction_->trained(), decays);
  if (resume) restore_optimizer(*resume);
  data_->seek(state_.data_position);
  if (config_.pipe.split()) pipeline_ = std::make_unique<Pipeline>(config_, *model_, *params_);
}

Trainer::~Trainer() = default;

namespace {

// The step's record of a micro-batch's parts and statistics: added up.
void add_parts(StepRecord& r, const StepResult& s) {
  if (r.loss_parts.empty()) r.loss_parts.assign(s.loss_parts.begin(), s.loss_parts.end()), r.stats = s.stats;
  else {
    for (std::size_t i = 0; i < s.loss_parts.size(); ++i) r.loss_parts[i].second += s.loss_parts[i].second;
    for (std::size_t i = 0; i < s.stats.size(); ++i)
      for (std::size_t j = 0; j < s.stats[i].values.size(); ++j) r.stats[i].values[j] += s.stats[i].values[j];
  }
}

// The step's loss parts and statistics summed over group g's ranks: the
// data-parallel replicas' micro-batches, or a context-parallel group's rows.
void sum_parts_over_ranks(StepRecord& r, comm::Group g) {
  std::vector<double> mine;  // every rank's, in one order: the parts, then each statistic's values
  for (const auto& p : r.loss_parts) mine.push_back(p.second);
  for (const auto& st : r.stats) mine.insert(mine.end(), st.values.begin(), st.values.end());
  if (mine.empty()) return;
  const int ranks = comm::size(g);
  std::vector<double> all(mine.size() * std::size_t(ranks));
  comm::gather_all(mine.data(), std::int64_t(mine.size()), all.data(), g);
  std::vector<double> sum(mine.size(), 0.0);
  for (int rank = 0; rank < ranks; ++rank)
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += all[std::size_t(rank) * mine.size() + i];
  std::size_t k = 0;
  for (auto& p : r.loss_parts) p.second = sum[k++];
  for (auto& st : r.stats)
    for (double& v : st.values) v = sum[k++];
}

// The bytes sum_parts_over_ranks sends plus receives.
std::int64_t parts_exchange_bytes(const StepRecord& r, int ranks) {
  std::int64_t count = std::int64_t(r.loss_parts.size());
  for (const auto& st : r.stats) count += std::int64_t(st.values.size());
  return ranks > 1 ? 2 * 8 * count * std::int64_t(ranks - 1) : 0;
}

}  // namespace

void Trainer::restore_optimizer(const SavedRun& resume) {
  optimizer_->set_steps_taken(resume.optimizer_steps);
  // The file's buffers are the whole model's, in its order; this rank may
  // hold fewer parameters (expert parallelism): each found by name.
  const ParamStore& whole = *resume.weights.params;
  for (const auto& name : optimizer_->state_names()) {
    auto& buffers = optimizer_->state(name);
    const auto found = resume.optimizer_state.find(name);
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      if (!buffers[i].defined()) continue;  // frozen
      const std::string& param = params_->names()[i];
      const std::size_t j = whole.has(param) ? whole.index_of(param) : whole.names().size();
      if (found == resume.optimizer_state.end() || j >= found->second.size() || found->second[j].empty())
        throw UserError(config_.out + ": missing optimizer state /optimizer/" + name + "/" + param +
                        "; the run file is damaged or not a remat run file, and cannot be resumed");
      backend::upload(buffers[i], reduction_->mine(i, found->second[j]));
    }
  }
}

// This rank's micro-batches of the step, forward and backward, their
// gradients summed (still scaled) and the loss summed over micro-batches and ranks.
StepRecord Trainer::forward_backward_all(double loss_scale) {
  if (config_.pipe.split()) return forward_backward_pipelined(loss_scale);
  GradientReduction& reduce = *reduction_;
  const int N = reduce.ranks(), M = reduce.micro_batches();
  StepRecord r;
  r.loss_scale = loss_scale;
  for (int k = 0; k < reduce.accumulate(); ++k) {
    const std::uint64_t m = reduce.micro_batch(k);
    if (N > 1) data_->seek(state_.data_position + m);
    StepOptions o = step_options(config_.run, strategy_.get(), std::uint64_t(state_.step) * std::uint64_t(M) + m);
    o.loss_scale = loss_scale;
    o.keep_scaled = true;  // unscaled once, summed over micro-batches and ranks, by the caller
    o.zero_grad = reduce.zero_grad();
    reduce.begin(k);
    const StepResult s = run_step(*model_, *params_, data_->next(), o);
    r.activation_peak = std::max(r.activation_peak, s.activation_peak);
    // The step's own collectives (tensor parallelism), each receiving what it sends.
    r.predicted_comm_bytes += 2 * std::int64_t(s.comm_bytes);
    add_parts(r, s);
    reduce.add(k, s.loss);
  }
  state_.data_position += std::uint64_t(M);
  r.loss = reduce.finish();
  return r;
}

namespace {

// Every stage's passes of the pipeline (each has the same number), on every rank of it.
std::vector<std::vector<pipeline::PassTiming>> gather_passes(const std::vector<pipeline::PassTiming>& mine) {
  constexpr int F = pipeline::PassTiming::kFields;
  const int P = comm::size(comm::Group::tensor);
  std::vector<double> flat(mine.size() * F), all(flat.size() * std::size_t(P));
  for (std::size_t i = 0; i < mine.size(); ++i) mine[i].write(flat.data() + i * F);
  comm::gather_all(flat.data(), std::int64_t(flat.size()), all.data(), comm::Group::tensor);
  std::vector<std::vector<pipeline::PassTiming>> out(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r)
    for (std::size_t i = 0; i < mine.size(); ++i)
      out[std::size_t(r)].push_back(pipeline::PassTiming::read(all.data() + (std::size_t(r) * mine.size() + i) * F));
  return out;
}

}  // namespace

// The same through this rank's pipeline stage: every rank of a pipeline
// reads the pipeline's micro-batches (the first stage their tokens, the
// last their targets); each micro-batch's backward on this rank begins and
// ends the reduction's round, as run_step's do on one rank.
StepRecord Trainer::forward_backward_pipelined(double loss_scale) {
  GradientReduction& reduce = *reduction_;
  const int N = reduce.ranks(), M = reduce.micro_batches();
  std::vector<Batch> batches;
  for (int k = 0; k < reduce.accumulate(); ++k) {
    if (N > 1) data_->seek(state_.data_position + reduce.micro_batch(k));
    batches.push_back(data_->next());
  }
  pipeline::StageStep step;
  step.model = model_.get();
  step.params = params_.get();
  step.micro_batches = &batches;
  step.options = step_options(config_.run, strategy_.get(), std::uint64_t(state_.step) * std::uint64_t(M));
  step.options.loss_scale = loss_scale;
  step.begin_backward = [&](int k) {
    reduce.begin(k);
    if (reduce.zero_grad() && !pipeline_->interleaved()) params_->zero_grad();
  };
  step.end_backward = [&](int k, double loss) { reduce.add(k, loss); };
  if (pipeline_->interleaved()) {
    // A micro-batch's gradients are whole chunk by chunk: each chunk's folded
    // in as its backward ends, then zeroed for the next micro-batch's.
    step.end_chunk_backward = [&](int k, int v) {
      const std::vector<std::size_t>& only = pipeline_->chunks.at(v);
      reduce.add_part(k, only);
      for (std::size_t i : only)
        if (const Tensor& g = params_->tensors()[i].grad(); g.defined()) fill(g, 0.0);
    };
    // The other ranks' parameters (zero here) too, as a whole round folds every parameter.
    step.end_backward = [&](int k, double loss) {
      reduce.add_part(k, pipeline_->chunks[-1]);
      reduce.add_loss(k, loss);
    };
  }
  // Dropout as forward_backward_all draws it: the k-th of this rank's micro-batches is the step's micro_batch(k).
  step.micro_batch_step = [&](int k) { return step.options.step + reduce.micro_batch(k); };
  const int P = config_.pipe.stages, rank = comm::rank(comm::Group::tensor);
  const pipeline::Layout& layout = pipeline_->layout;
  params_->zero_grad();  // allocates the gradients before the step's baseline is read, as run_step does
  const pipeline::RankResult mine = pipeline::run_rank(step, pipeline_->schedule, layout, rank, *pipeline_->link);
  state_.pipeline_passes = gather_passes(mine.passes);
  const std::int64_t pass_values = std::int64_t(mine.passes.size()) * pipeline::PassTiming::kFields;
  // The loss parts and statistics: the last stage's, summed over its micro-batches, to every stage.
  StepRecord r = pipeline_->details;
  for (const StepResult& d : mine.details) add_parts(r, d);
  if (P > 1) sum_parts_over_ranks(r, comm::Group::tensor);
  r.loss_scale = loss_scale;
  r.activation_peak = mine.activation_peak;
  r.predicted_comm_bytes += pipeline::edge_bytes(layout, rank, reduce.accumulate(), *model_, config_.run.precision) +
                            2 * 8 * pass_values * (P - 1) +  // and the passes' timings, to every stage
                            parts_exchange_bytes(r, P);
  state_.data_position += std::uint64_t(M);
  r.loss = reduce.finish();
  return r;
}

const StepRecord& Trainer::step() {
  const auto t0 = std::chrono::steady_clock::now();
  const comm::Stats comm0 = comm::stats();
  GradientReduction& reduce = *reduction_;
  const int N = reduce.ranks(), M = reduce.micro_batches();
  const bool scaling = config_.run.precision == Precision::fp16;
  const double loss_scale = scaling ? state_.scaler.scale : 1.0;
  StepRecord r = forward_backward_all(loss_scale);
  if (N > 1) sum_parts_over_ranks(r, comm::Group::data);
  const int C = config_.setup.sizes.cp.size;  // context parallelism: each rank's parts are its rows' shares
  if (C > 1) sum_parts_over_ranks(r, comm::Group::context);
  for (auto& part : r.loss_parts) part.second /= M;
  const std::vector<Tensor>& trained = reduce.trained();
  if (M > 1 || loss_scale != 1) scale_gradients(trained, 1.0 / (M * loss_scale));  // the mean, unscaled
  r.loss /= M;
  r.grad_norm = reduce.gradient_norm();  // the same on every rank: an overflow anywhere skips everywhere
  r.skipped = scaling && std::isfinite(r.loss) && !std::isfinite(r.grad_norm);
  if (scaling) state_.scaler.update(r.skipped);
  if (!r.skipped && (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm))) {
    try {
      require_finite_result(r.loss, *params_);
    } catch (const UserError& e) {
      throw UserError("step " + std::to_string(state_.step + 1) + ": " + e.what() + "; stopped" + run_file_kept());
    }
  }
  if (config_.grad_clip > 0 && r.grad_norm > config_.grad_clip && !r.skipped)
    scale_gradients(trained, config_.grad_clip / (r.grad_norm + 1e-6));
  r.lr = schedule_.at(state_.step);
  if (!r.skipped) optimizer_->step(r.lr);  // skipped: weights and optimizer state (its step count too) stay
  backend::fence_compute();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const comm::Stats comm1 = comm::stats();
  r.comm_bytes = comm1.bytes_sent + comm1.bytes_received - comm0.bytes_sent - comm0.bytes_received;
  r.comm_seconds = comm1.seconds - comm0.seconds;
  r.predicted_comm_bytes += reduce.predicted_bytes(*strategy_) + parts_exchange_bytes(r, N) +
                            parts_exchange_bytes(r, C);
  state_.history.push_back(r);
  stop_if_every_step_overflows();
  state_.memory = rank_memory();
  const int done = ++state_.step;
  if (held_out_ && (done % config_.eval_every == 0 || done == config_.steps))
    state_.evals.push_back(
        {done, validation_loss(*eval_model_, *params_, *held_out_, config_.eval_batches, config_.run.attention,
                                config_.run.precision)});
  reduce.release_weights();  // what validation gathered outside blocks
  saved_ = !config_.out.empty() && ((config_.save_every > 0 && done % config_.save_every == 0) || done == config_.steps);
  if (saved_) save();
  return state_.history.back();
}

void Trainer::stop_if_every_step_overflows() const {
  const auto& h = state_.history;
  int in_a_row = 0;
  for (auto it = h.rbegin(); it != h.rend() && it->skipped && in_a_row < kMaxSkippedInARow; ++it) ++in_a_row;
  if (in_a_row < kMaxSkippedInARow) return;
  char scale[32];
  std::snprintf(scale, sizeof scale, "%g", state_.scaler.scale);
  throw UserError("step " + std::to_string(state_.step + 1) + ": " + std::to_string(kMaxSkippedInARow) +
                  " steps in a row skipped on an fp16 overflow (the loss scale is now " + scale +
                  "): the gradients are not finite at any scale; stopped" + run_file_kept() +
                  "; try --precision bf16, a lower --lr or --grad-clip");
}

std::string Trainer::run_file_kept() const {
  if (config_.out.empty()) return "";
  std::error_code ec;
  return std::filesystem::exists(config_.out, ec) ? ", " + config_.out + " keeps the last save"
                                                  : ", " + config_.out + " was not written (no save was due)";
}

void Trainer::save() {
  // Every rank gathers (collectives), rank 0 writes whole weights and state.
  reduction_->gather_weights();
  OptimizerState whole = optimizer_state(*optimizer_);
  for (auto& named : whole.buffers) named.second = reduction_->whole_buffers(named.second);
  const auto whole_params = reduction_->whole_params();  // tensor parallelism: every rank's parts joined
  if (comm::rank() == 0) write_run_file(config_.out, config_, state_, whole_params ? *whole_params : *params_, whole);
  reduction_->release_weights();
}

RankMemory Trainer::rank_memory() const { return reduction_->memory(*optimizer_); }

TrainResult Trainer::finish() {
  TrainResult r;
  reduction_->gather_weights();  // the caller gets whole weights: sharded ones gathered,
  auto whole = reduction_->whole_params();  // split ones joined (LoRA's adapters too), on every rank alike
  reduction_.reset();
  r.state = state_;
  r.model = std::move(model_);
  r.params = std::move(params_);
  if (whole) {  // the whole model's, for the whole parameters
    r.model = models().find(config_.setup.model).make(config_.setup.sizes.whole_model());
    r.params = std::move(whole);
  }
  return r;
}

std::uint64_t Trainer::epoch_batches() const { return data_->epoch_batches(); }

TrainResult train(const TrainConfig& config, const TrainProgress& progress, const SavedRun* resume) {
  Trainer t(config, resume);
  if (progress.started) progress.started(t.config(), t.epoch_batches());
  while (!t.done()) {
    t.step();
    if (progress.step) progress.step(t.config(), t.state());
    if (t.saved() && progress.saved) progress.saved(t.config(), t.state());
  }
  return t.finish();
}

}  // namespace remat
