#include "train/run_file.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <tuple>
#include <type_traits>

#include "core/error.hpp"
#include "core/text.hpp"
#include "finetune/adapters_file.hpp"
#include "h5/h5.hpp"
#include "train/run_schema.hpp"
#include "weights/weights_schema.hpp"
#include "strategies/registry.hpp"

namespace remat {
namespace {

// What a rank holds, as (name, pointer to the field) pairs (const or not,
// as `m`): written as attributes rank_memory.<name>, in bytes.
template <class M>
auto memory_fields(M& m) {
  using Field = decltype(&m.parameters);
  return std::vector<std::pair<std::string, Field>>{
      {"parameters", &m.parameters}, {"gradients", &m.gradients}, {"optimizer", &m.optimizer},
      {"gathered_peak", &m.gathered_peak}, {"reducing_peak", &m.reducing_peak}};
}

using Setting = std::pair<const h5::Attr<std::string>*, std::string>;

// Every setting of a run with its text: written as attributes, and compared
// one by one when a run is resumed.
std::vector<Setting> settings(const TrainConfig& c) {
  namespace S = run_file::setting;
  auto num = [](double v) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return std::string(buf);
  };
  std::vector<Setting> model_settings;
  const auto& attributes = models().find(c.setup.model).attributes;
  if (std::count(attributes.begin(), attributes.end(), "E")) model_settings.push_back({&S::router_aux, num(c.setup.sizes.router_aux)});
  if (!c.init.empty()) model_settings.push_back({&S::init, c.init});
  std::vector<Setting> all = {{&S::strategy, c.strategy},
          {&S::attention, ops::attention_kernel_name(c.run.attention)},
          {&S::precision, precision_name(c.run.precision)},
          {&S::loss_scale_init, num(c.loss_scale)},
          {&S::data, c.data},
          {&S::seed, std::to_string(c.run.seed)},
          {&S::dropout, num(c.setup.sizes.dropout)},
          {&S::steps, std::to_string(c.steps)},
          {&S::optimizer, c.optimizer.kind},
          {&S::lr, num(c.schedule.lr)},
          {&S::warmup, std::to_string(c.schedule.warmup)},
          {&S::schedule, c.schedule.kind},
          {&S::weight_decay, num(c.optimizer.weight_decay)},
          {&S::beta1, num(c.optimizer.beta1)},
          {&S::beta2, num(c.optimizer.beta2)},
          {&S::eps, num(c.optimizer.eps)},
          {&S::momentum, num(c.optimizer.momentum)},
          {&S::grad_clip, num(c.grad_clip)},
          {&S::accumulate, std::to_string(c.accumulate)},
          {&S::eval_every, std::to_string(c.eval_every)},
          {&S::eval_batches, std::to_string(c.eval_batches)},
          {&S::save_every, std::to_string(c.save_every)},
          {&S::freeze, c.freeze.key()},
          {&S::lora, c.lora.key()},
          {&S::quantize, c.quantize == QuantFormat::none ? "" : quant_format_name(c.quantize)},
          {&S::ranks, std::to_string(c.ranks)},
          {&S::shard_params, c.shard_params ? "yes" : "no"},
          {&S::tensor_parallel, "tp=" + std::to_string(c.setup.sizes.tp.size) +
                                    ";sp=" + (c.setup.sizes.tp.sequence ? "yes" : "no")},
          {&S::expert_parallel, "ep=" + std::to_string(c.setup.sizes.ep.size)},
          {&S::context_parallel, "cp=" + std::to_string(c.setup.sizes.cp.size)}};
  all.insert(all.end(), model_settings.begin(), model_settings.end());
  return all;
}

using TextField = h5::Attr<std::string>;

std::string text_attr(const h5::File& f, const TextField& field) {
  const auto v = field.read(f, "/");
  if (!v) throw UserError(f.path() + ": no '" + std::string(field.name) + "' attribute (not a remat training run?)");
  return *v;
}

double number(const h5::File& f, const TextField& field) {
  const std::string s = text_attr(f, field);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || !std::isfinite(v))
    throw UserError(f.path() + ": '" + std::string(field.name) + "' = '" + s + "' is not a number");
  return v;
}

int whole(const h5::File& f, const TextField& field) {
  const double v = number(f, field);
  if (v != std::floor(v) || v < 0 || v > 2e9)
    throw UserError(f.path() + ": '" + std::string(field.name) + "' = " + text_attr(f, field) + " is not a count");
  return int(v);
}

// A history dataset of one value per step (n of them); `path` is the
// dataset's path from the root.
template <class T>
std::vector<T> history(const h5::File& f, const std::string& path, std::size_t n) {
  if (!h5::exists(f, "/" + path)) throw UserError(f.path() + ": no /" + path);
  std::vector<T> v;
  if constexpr (std::is_same_v<T, double>) v = h5::read_f64(f, "/" + path);
  else v = h5::read_i64(f, "/" + path);
  if (v.size() != n)
    throw UserError(f.path() + ": /" + path + " holds " + std::to_string(v.size()) + " values, expected " +
                    std::to_string(n));
  return v;
}

template <class T>
std::vector<T> history(const h5::File& f, const h5::Dataset<T>& d, std::size_t n) {
  return history<T>(f, std::string(d.name), n);
}

// The same for a dataset that older files lack: `missing` per step there.
template <class T>
std::vector<T> history_or(const h5::File& f, const h5::Dataset<T>& d, std::size_t n, T missing) {
  return d.exists_in(f, "") ? history(f, d, n) : std::vector<T>(n, missing);
}

// The tensor-, expert- and context-parallel layouts a run was trained under
// (files before them: none).
void read_layout(const h5::File& f, Sizes& z) {
  if (const auto t = run_file::setting::tensor_parallel.read(f, "/")) {
    int size = 0;
    char sp[4] = {};
    if (std::sscanf(t->c_str(), "tp=%d;sp=%3s", &size, sp) != 2 || size < 1 ||
        (std::string(sp) != "yes" && std::string(sp) != "no"))
      throw UserError(f.path() + ": 'train.tensor_parallel' = '" + *t + "' is not tp=N;sp=yes or tp=N;sp=no");
    z.tp = RankGroup::tensor(size, 0, std::string(sp) == "yes");
  }
  if (const auto e = run_file::setting::expert_parallel.read(f, "/")) {
    int size = 0;
    if (std::sscanf(e->c_str(), "ep=%d", &size) != 1 || size < 1)
      throw UserError(f.path() + ": 'train.expert_parallel' = '" + *e + "' is not ep=N");
    z.ep = RankGroup::expert(size);
  }
  if (const auto c = run_file::setting::context_parallel.read(f, "/")) {
    int size = 0;
    if (std::sscanf(c->c_str(), "cp=%d", &size) != 1 || size < 1)
      throw UserError(f.path() + ": 'train.context_parallel' = '" + *c + "' is not cp=N");
    z.cp = RankGroup::context(size);
  }
}

TrainConfig read_config(const h5::File& f, const ModelSetup& setup) {
  TrainConfig c;
  c.setup = setup;
  c.strategy = text_attr(f, run_file::setting::strategy);
  c.run.attention = ops::parse_attention_kernel(text_attr(f, run_file::setting::attention));
  // Run files from before mixed precision ran at fp32.
  if (const auto precision = run_file::setting::precision.read(f, "/")) c.run.precision = parse_precision(*precision);
  if (run_file::setting::loss_scale_init.read(f, "/")) c.loss_scale = number(f, run_file::setting::loss_scale_init);
  c.data = text_attr(f, run_file::setting::data);
  const std::string seed = text_attr(f, run_file::setting::seed);
  char* end = nullptr;
  c.run.seed = std::strtoull(seed.c_str(), &end, 10);
  if (seed.empty() || *end != '\0') throw UserError(f.path() + ": 'train.seed' = '" + seed + "' is not a seed");
  c.setup.sizes.dropout = number(f, run_file::setting::dropout);
  if (run_file::setting::router_aux.read(f, "/")) c.setup.sizes.router_aux = number(f, run_file::setting::router_aux);
  if (const auto init = run_file::setting::init.read(f, "/")) c.init = *init;
  c.steps = whole(f, run_file::setting::steps);
  c.optimizer.kind = text_attr(f, run_file::setting::optimizer);
  c.schedule.lr = number(f, run_file::setting::lr);
  c.schedule.warmup = whole(f, run_file::setting::warmup);
  c.schedule.kind = text_attr(f, run_file::setting::schedule);
  c.optimizer.weight_decay = number(f, run_file::setting::weight_decay);
  c.optimizer.beta1 = number(f, run_file::setting::beta1);
  c.optimizer.beta2 = number(f, run_file::setting::beta2);
  c.optimizer.eps = number(f, run_file::setting::eps);
  c.optimizer.momentum = number(f, run_file::setting::momentum);
  c.grad_clip = number(f, run_file::setting::grad_clip);
  c.accumulate = whole(f, run_file::setting::accumulate);
  c.eval_every = whole(f, run_file::setting::eval_every);
  c.eval_batches = whole(f, run_file::setting::eval_batches);
  c.save_every = whole(f, run_file::setting::save_every);
  // "patterns=a,b;below=N" (absent or empty: nothing frozen; files before fine-tuning have none).
  if (const auto freeze = run_file::setting::freeze.read(f, "/"); freeze && !freeze->empty()) {
    const auto below = freeze->rfind(";below=");
    if (freeze->rfind("patterns=", 0) != 0 || below == std::string::npos)
      throw UserError(f.path() + ": 'train.freeze' = '" + *freeze + "' is not a freeze setting");
    const std::string patterns = freeze->substr(9, below - 9);
    if (!patterns.empty()) c.freeze.patterns = split(patterns);
    c.freeze.below = std::atoi(freeze->c_str() + below + 7);
  }
  c.ranks = run_file::setting::ranks.read(f, "/") ? whole(f, run_file::setting::ranks) : 1;  // files before MPI: one process
  if (const auto shard = run_file::setting::shard_params.read(f, "/")) {  // files before it: unsharded
    if (*shard != "yes" && *shard != "no")
      throw UserError(f.path() + ": 'train.shard_params' = '" + *shard + "' is neither yes nor no");
    c.shard_params = *shard == "yes";
  }
  read_layout(f, c.setup.sizes);
  // "rank=R;alpha=A;targets=..." (absent or empty: no LoRA).
  if (const auto lora = run_file::setting::lora.read(f, "/"); lora && !lora->empty())
    c.lora = LoraOptions::parse(*lora, f.path() + ": 'train.lora'");
  // "nf4" or "int8" (absent or empty: none).
  if (const auto q = run_file::setting::quantize.read(f, "/"); q && !q->empty()) {
    if (*q != "nf4" && *q != "int8") throw UserError(f.path() + ": 'train.quantize' = '" + *q + "' is not nf4 or int8");
    c.quantize = parse_quant_format(*q);
  }
  c.out = f.path();
  return c;
}

void check_version(const h5::File& f) {
  const auto v = run_file::root::version.read(f, "/");
  if (!v) throw UserError(f.path() + ": not a remat training run (no '" + std::string(run_file::root::version.name) + "' attribute)");
  if (*v != kRunFileVersion)
    throw UserError(f.path() + ": training run version " + std::to_string(*v) + ", this remat reads " +
                    std::to_string(kRunFileVersion));
}

// A pipelined run's last step, per stage (none: an empty list).
std::vector<std::vector<pipeline::PassTiming>> read_pipeline_passes(const h5::File& f) {
  namespace D = run_file::data;
  const std::string passes = "/" + D::pipeline_passes.at("");
  std::vector<std::vector<pipeline::PassTiming>> out;
  if (!h5::exists(f, passes)) return out;
  const Shape shape = h5::info(f, passes).shape;
  if (shape.size() != 3 || shape[2] != pipeline::PassTiming::kFields)
    throw UserError(f.path() + ": " + passes + " is " + to_string(shape) + ", expected [stages, passes, 7]");
  const auto v = h5::read_f64(f, passes);
  out.resize(std::size_t(shape[0]));
  for (std::int64_t r = 0; r < shape[0]; ++r)
    for (std::int64_t i = 0; i < shape[1]; ++i)
      out[std::size_t(r)].push_back(
          pipeline::PassTiming::read(v.data() + std::size_t((r * shape[1] + i) * pipeline::PassTiming::kFields)));
  return out;
}

// The record part: state and history, checked for consistency.
TrainState read_state(const h5::File& f, const TrainConfig& c) {
  TrainState s;
  s.step = whole(f, run_file::root::done);
  if (s.step > c.steps) throw UserError(f.path() + ": 'train.done' exceeds 'train.steps'");
  s.data_position = std::uint64_t(number(f, run_file::root::data_position));
  const std::size_t n = std::size_t(s.step);
  namespace D = run_file::data;
  const auto loss = history(f, D::loss, n), lr = history(f, D::lr, n), norm = history(f, D::grad_norm, n),
             seconds = history(f, D::step_time, n);
  const auto peak = history(f, D::activation_peak, n);
  // Files before data parallelism have no communication record: none was made.
  const auto comm_bytes = history_or<std::int64_t>(f, D::comm_bytes, n, 0);
  const auto comm_seconds = history_or(f, D::comm_seconds, n, 0.0);
  const auto predicted = history_or<std::int64_t>(f, D::predicted_comm_bytes, n, 0);
  // Files before fp16 ran unscaled and skipped nothing.
  const auto loss_scale = history_or(f, D::loss_scale, n, 1.0);
  const auto skipped = history_or<std::int64_t>(f, D::skipped, n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    StepRecord r;
    r.loss = loss[i], r.lr = lr[i], r.grad_norm = norm[i], r.seconds = seconds[i], r.activation_peak = peak[i];
    r.comm_bytes = comm_bytes[i], r.comm_seconds = comm_seconds[i], r.predicted_comm_bytes = predicted[i];
    r.loss_scale = loss_scale[i], r.skipped = skipped[i] != 0;
    s.history.push_back(std::move(r));
  }
  if (run_file::root::loss_scale.read(f, "/")) {
    s.scaler.scale = number(f, run_file::root::loss_scale);
    s.scaler.good_steps = whole(f, run_file::root::loss_scale_good_steps);
    if (!(s.scaler.scale > 0) || s.scaler.good_steps >= LossScaler::kGrowthInterval)
      throw UserError(f.path() + ": 'train.loss_scale' = " + text_attr(f, run_file::root::loss_scale) + " after " +
                      text_attr(f, run_file::root::loss_scale_good_steps) + " good steps is not a loss scaler's state");
  }
  // The model's loss parts (/history/loss_parts/<name> [n]) and statistics
  // (/history/stats/<name> [n, ...]), where it has them.
  const std::string parts = "/" + D::loss_part.at(""), stats = "/" + D::stat.at("");
  for (const auto& name : h5::list(f, parts.substr(0, parts.size() - 1))) {
    const auto v = history<double>(f, D::loss_part.at(name), n);
    for (std::size_t i = 0; i < n; ++i) s.history[i].loss_parts.emplace_back(name, v[i]);
  }
  for (const auto& name : h5::list(f, stats.substr(0, stats.size() - 1))) {
    const std::string path = "/" + D::stat.at(name);
    const Shape shape = h5::info(f, path).shape;
    if (shape.empty() || shape[0] != std::int64_t(n))
      throw UserError(f.path() + ": " + path + " is " + to_string(shape) + ", expected " + std::to_string(n) + " steps");
    const auto v = h5::read_f64(f, path);
    const Shape one(shape.begin() + 1, shape.end());
    const std::size_t each = std::size_t(numel(one));
    for (std::size_t i = 0; i < n; ++i)
      s.history[i].stats.push_back({name, one, std::vector<double>(v.begin() + std::ptrdiff_t(i * each),
                                                                   v.begin() + std::ptrdiff_t((i + 1) * each))});
  }
  for (const auto& [name, bytes] : memory_fields(s.memory))  // files before it: zeros
    if (const auto v = h5::read_attr_int(f, run_file::root::rank_memory.at(name))) {
      if (*v < 0) throw UserError(f.path() + ": '" + run_file::root::rank_memory.at(name) + "' is negative");
      *bytes = *v;
    }
  const auto eval_step = D::eval_step.exists_in(f, "") ? D::eval_step.read(f, "") : std::vector<std::int64_t>{};
  const auto eval_loss = history(f, D::eval_loss, eval_step.size());
  for (std::size_t i = 0; i < eval_step.size(); ++i) s.evals.push_back({int(eval_step[i]), eval_loss[i]});
  return s;
}

}  // namespace

OptimizerState optimizer_state(Optimizer& optimizer) {
  OptimizerState s;
  s.steps = optimizer.steps_taken();
  for (const auto& name : optimizer.state_names()) s.buffers.emplace_back(name, optimizer.state(name));
  return s;
}

namespace {

// One value per step done (and per validation loss), the model's loss
// parts and statistics per step.
void write_history(const h5::File& f, const TrainState& state) {
  namespace D = run_file::data;
  std::vector<double> loss, lr, norm, seconds, comm_seconds, loss_scale;
  std::vector<std::int64_t> peak, eval_step, comm_bytes, predicted_comm, skipped;
  std::vector<double> eval_loss;
  for (const auto& r : state.history) {
    loss.push_back(r.loss);
    lr.push_back(r.lr);
    norm.push_back(r.grad_norm);
    seconds.push_back(r.seconds);
    peak.push_back(r.activation_peak);
    comm_bytes.push_back(r.comm_bytes);
    comm_seconds.push_back(r.comm_seconds);
    predicted_comm.push_back(r.predicted_comm_bytes);
    loss_scale.push_back(r.loss_scale);
    skipped.push_back(r.skipped ? 1 : 0);
  }
  for (const auto& e : state.evals) {
    eval_step.push_back(e.step);
    eval_loss.push_back(e.loss);
  }
  const Shape n{std::int64_t(loss.size())};
  D::loss.write(f, "", loss);
  D::lr.write(f, "", lr);
  D::grad_norm.write(f, "", norm);
  D::step_time.write(f, "", seconds);
  D::activation_peak.write(f, "", peak);
  D::comm_bytes.write(f, "", comm_bytes);
  D::comm_seconds.write(f, "", comm_seconds);
  D::predicted_comm_bytes.write(f, "", predicted_comm);
  D::loss_scale.write(f, "", loss_scale);
  D::skipped.write(f, "", skipped);
  D::eval_step.write(f, "", eval_step);
  D::eval_loss.write(f, "", eval_loss);
  if (!state.pipeline_passes.empty()) {
    constexpr int F = pipeline::PassTiming::kFields;
    const auto& stages = state.pipeline_passes;
    std::vector<double> v(stages.size() * stages.front().size() * F);
    for (std::size_t r = 0; r < stages.size(); ++r)
      for (std::size_t i = 0; i < stages[r].size(); ++i) stages[r][i].write(v.data() + (r * stages[r].size() + i) * F);
    h5::write(f, "/" + D::pipeline_passes.at(""), v,
              Shape{std::int64_t(stages.size()), std::int64_t(stages.front().size()), F});
  }
  if (!state.history.empty()) {
    const StepRecord& first = state.history.front();
    for (std::size_t k = 0; k < first.loss_parts.size(); ++k) {
      std::vector<double> v;
      for (const auto& r : state.history) v.push_back(r.loss_parts.at(k).second);
      h5::write(f, "/" + D::loss_part.at(first.loss_parts[k].first), v, n);
    }
    for (std::size_t k = 0; k < first.stats.size(); ++k) {
      std::vector<double> v;
      for (const auto& r : state.history) v.insert(v.end(), r.stats.at(k).values.begin(), r.stats.at(k).values.end());
      Shape shape = first.stats[k].shape;
      shape.insert(shape.begin(), std::int64_t(state.history.size()));
      h5::write(f, "/" + D::stat.at(first.stats[k].name), v, shape);
    }
  }
}

}  // namespace

void write_run_file(const std::string& path, const TrainConfig& config, const TrainState& state,
                    const ParamStore& params, const OptimizerState& optimizer) {
  h5::File f = h5::File::create(path);
  namespace R = run_file::root;
  namespace D = run_file::data;
  R::version.write(f, "/", kRunFileVersion);
  write_model_setup(f, config.setup);
  for (const auto& [field, value] : settings(config)) field->write(f, "/", value);
  R::done.write(f, "/", std::to_string(state.step));
  R::data_position.write(f, "/", std::to_string(state.data_position));
  R::optimizer_steps.write(f, "/", std::to_string(optimizer.steps));
  // fp16's loss scaler, for the next step (written at every precision: the
  // file says what a resumed run starts from).
  char scale[40];
  std::snprintf(scale, sizeof scale, "%.17g", state.scaler.scale);
  R::loss_scale.write(f, "/", std::string(scale));
  R::loss_scale_good_steps.write(f, "/", std::to_string(state.scaler.good_steps));
  for (const auto& [name, bytes] : memory_fields(state.memory)) h5::write_attr(f, R::rank_memory.at(name), *bytes);
  write_params(f, params);  // with --lora, the adapters too: the run is also an adapter file
  if (config.lora.any()) write_lora_setting(f, config.lora);
  for (const auto& [name, buffers] : optimizer.buffers) {
    for (std::size_t i = 0; i < buffers.size(); ++i)  // frozen parameters have none
      if (buffers[i].defined())
        h5::write(f, "/" + D::optimizer_state.at(name + "/" + params.names()[i]), buffers[i].to_host_f32(), buffers[i].shape());
  }
  write_history(f, state);
  f.save();
}

SavedRun read_run_record(const std::string& path) {
  const h5::File f = h5::File::open(path);
  check_version(f);
  SavedRun run;
  ModelSetup setup;
  namespace W = weights_file::root;
  setup.model = W::model.read(f, "/").value_or("?");
  setup.preset = W::preset.read(f, "/").value_or("?");
  using Size = std::pair<const h5::Attr<std::int64_t>*, int*>;  // spelled out for nvcc's front end
  for (auto [attribute, size] : std::initializer_list<Size>{{&W::L, &setup.sizes.L}, {&W::D, &setup.sizes.D},
                                                            {&W::S, &setup.sizes.S}, {&W::B, &setup.sizes.B},
                                                            {&W::V, &setup.sizes.V}})
    *size = int(attribute->read(f, "/").value_or(0));
  run.config = read_config(f, setup);
  run.state = read_state(f, run.config);
  run.state.pipeline_passes = read_pipeline_passes(f);
  return run;
}

SavedRun read_run_file(const std::string& path) {
  SavedRun run;
  run.weights = load_weights(path, false, /*skip_adapters=*/true);
  const h5::File f = h5::File::open(path);
  check_version(f);
  run.config = read_config(f, run.weights.setup);
  if (run.config.lora.any()) {  // the store the trainer makes: base, then adapters
    auto store = with_lora(*run.weights.params, run.config.lora, run.config.run.seed, run.weights.setup.sizes.L);
    load_adapters(*store, run.weights.setup, read_adapters(path), path);
    run.weights.params = std::move(store);
  }
  run.state = read_state(f, run.config);
  run.state.pipeline_passes = read_pipeline_passes(f);
  run.optimizer_steps = std::int64_t(number(f, run_file::root::optimizer_steps));
  for (const char* name : {"m", "v", "momentum"}) {
    const std::string buffer = "/" + run_file::data::optimizer_state.at(name);
    if (!h5::exists(f, buffer)) continue;
    auto& buffers = run.optimizer_state[name];
    for (const auto& spec : run.weights.params->specs()) {
      const std::string p = buffer + "/" + spec.name;
      if (!h5::exists(f, p)) {  // a frozen parameter's (the trainer checks that it is one)
        buffers.emplace_back();
        continue;
      }
      if (h5::info(f, p).shape != spec.shape)
        throw UserError(path + ": optimizer state " + p + " has shape " + to_string(h5::info(f, p).shape) +
                        ", expected " + to_string(spec.shape));
      buffers.push_back(h5::read_f32(f, p));
      for (float v : buffers.back())
        if (!std::isfinite(v)) throw UserError(path + ": optimizer state " + p + " holds a non-finite value");
    }
  }
  return run;
}

std::string run_difference(const TrainConfig& run, const TrainConfig& asked) {
  const ModelSetup &a = run.setup, &b = asked.setup;
  std::string first;  // the first setting that differs, in the order below
  auto differ = [&](const std::string& what, const std::string& was, const std::string& now) {
    if (first.empty()) first = "was trained with " + what + " " + was + ", this run asks for " + now;
  };
  if (a.model != b.model) differ("model", a.model, b.model);
  const Sizes &x = a.sizes, &y = b.sizes;
  for (auto [name, u, v] : std::initializer_list<std::tuple<const char*, int, int>>{{"L", x.L, y.L}, {"D", x.D, y.D}, {"H", x.H, y.H}, {"Hkv", x.Hkv, y.Hkv},
                            {"F", x.F, y.F}, {"S", x.S, y.S}, {"V", x.V, y.V}, {"B", x.B, y.B}})
    if (u != v) differ(name, std::to_string(u), std::to_string(v));
  for (const auto& attribute : models().find(a.model).attributes) {  // those the model reads
    if (attribute == "E" && x.E != y.E) differ("E", std::to_string(x.E), std::to_string(y.E));
    if (attribute == "K" && x.K != y.K) differ("K", std::to_string(x.K), std::to_string(y.K));
    if (attribute == "theta" && x.theta != y.theta) differ("theta", std::to_string(x.theta), std::to_string(y.theta));
  }
  const auto was = settings(run), now = settings(asked);
  for (std::size_t i = 0; i < was.size(); ++i) {
    const auto* field = was[i].first;
    if (field == &run_file::setting::strategy || field == &run_file::setting::save_every) continue;  // see below
    if (was[i].second != now[i].second) differ(run_file::short_name(*field), was[i].second, now[i].second);
  }
  // Exact strategies give bitwise the same run: one may resume under another
  // (to fit the memory of another machine, say). A non-exact one may not.
  if (run.strategy != asked.strategy) {
    const bool exact = parse_strategy(run.strategy).exact && parse_strategy(asked.strategy).exact;
    if (!exact) differ("strategy", run.strategy, asked.strategy);
  }
  return first;
}

void require_same_run(const std::string& path, const TrainConfig& run, const TrainConfig& asked) {
  const std::string difference = run_difference(run, asked);
  if (!difference.empty())
    throw UserError(path + ": " + difference + "; resume with the same settings, or give another --out");
}

}  // namespace remat
