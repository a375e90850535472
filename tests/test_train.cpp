// Training: the optimizers against their definitions, gradient accumulation,
// whole trajectories under every strategy against full's, bitwise resume,
// real learning on a text file, and bad settings. (A diverging run, whose
// NaNs the trapping test main would turn into a signal, and kill -9 at any
// moment are tested through the CLI: tests/cli/train_test.sh.)
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "catch.hpp"
#include "core/error.hpp"
#include "datasets/batch_source.hpp"
#include "finetune/fine_tuning.hpp"
#include "harness/check.hpp"
#include "fixtures.hpp"
#include "h5/h5.hpp"
#include "helpers.hpp"
#include "optim/optimizer.hpp"
#include "strategies/registry.hpp"
#include "train/run_file.hpp"
#include "train/trajectory.hpp"

using namespace remat;
namespace fs = std::filesystem;

namespace {

TrainConfig tiny(const std::string& model = "gpt2", double dropout = 0.1) {
  TrainConfig c;
  c.setup = {model, "tiny", preset_sizes("tiny")};
  c.setup.sizes.dropout = dropout;
  c.steps = 12;
  c.schedule.lr = 3e-3;
  c.schedule.warmup = 2;
  c.optimizer.weight_decay = 0.1;
  c.grad_clip = 1.0;
  return c;
}

std::vector<std::vector<double>> weights(const ParamStore& p) {
  std::vector<std::vector<double>> w;
  for (const auto& t : p.tensors()) w.push_back(t.to_host_f64());
  return w;
}

std::vector<double> losses(const TrainState& s) {
  std::vector<double> l;
  for (const auto& r : s.history) l.push_back(r.loss);
  return l;
}

}  // namespace

namespace {

// `c` run to its save at step 3 and killed at step 5 (out: `file`), and the
// run file it left.
SavedRun interrupted(TrainConfig& c, const std::string& file) {
  struct Interrupted {};
  c.out = file;
  c.save_every = 3;
  TrainProgress stop;
  stop.step = [](const TrainConfig&, const TrainState& s) {
    if (s.step == 5) throw Interrupted{};
  };
  CHECK_THROWS_AS(train(c, stop), Interrupted);
  return read_run_file(c.out);
}

}  // namespace

TEST_CASE("AdamW and SGD follow their definitions, with no weight decay on 1-D parameters", "[train][optim]") {
  const std::vector<double> p0 = {0.5, -1.0, 2.0, 0.25}, g = {0.1, -0.2, 0.3, 0.0};
  auto make = [&](const Shape& shape) {
    Tensor p = Tensor::parameter(shape, DType::f64, "p");
    test::upload(p, p0);
    p.slot()->grad = std::make_shared<Tensor>(Tensor::zeros(shape, DType::f64, "grad"));
    test::upload(p.grad(), g);
    return p;
  };
  for (const Shape& shape : {Shape{2, 2}, Shape{4}}) {
    const bool decays = shape.size() == 2;
    {
      INFO("adamw " << to_string(shape));
      Tensor p = make(shape);
      OptimizerConfig c;
      c.weight_decay = 0.1;
      auto opt = make_optimizer(c, {p});
      const double lr = 0.01;
      opt->step(lr);
      opt->step(lr);  // the same gradient twice: t = 2
      const auto got = p.to_host_f64();
      for (std::size_t i = 0; i < p0.size(); ++i) {
        double w = p0[i], m = 0, v = 0;
        for (int t = 1; t <= 2; ++t) {
          w *= decays ? 1 - lr * 0.1 : 1;
          m = 0.9 * m + 0.1 * g[i];
          v = 0.999 * v + 0.001 * g[i] * g[i];
          w -= lr / (1 - std::pow(0.9, t)) * m / (std::sqrt(v) / std::sqrt(1 - std::pow(0.999, t)) + 1e-8);
        }
        CHECK(got[i] == test::Approx(w).epsilon(1e-14));
      }
      CHECK(opt->steps_taken() == 2);
      CHECK(opt->state_names() == std::vector<std::string>{"m", "v"});
    }
    {
      INFO("sgd with momentum " << to_string(shape));
      Tensor p = make(shape);
      OptimizerConfig c;
      c.kind = "sgd";
      c.momentum = 0.5;
      c.weight_decay = 0.1;
      auto opt = make_optimizer(c, {p});
      opt->step(0.1);
      opt->step(0.1);
      const auto got = p.to_host_f64();
      for (std::size_t i = 0; i < p0.size(); ++i) {
        double w = p0[i], b = 0;
        for (int t = 0; t < 2; ++t) {
          b = 0.5 * b + g[i];
          w = w * (decays ? 1 - 0.1 * 0.1 : 1) - 0.1 * b;
        }
        CHECK(got[i] == test::Approx(w).epsilon(1e-14));
      }
    }
  }
  CHECK_THROWS_WITH(make_optimizer({"lamb"}, {}), test::Contains("unknown optimizer 'lamb'"));
}

TEST_CASE("the learning-rate schedule warms up linearly and decays by a cosine to zero", "[train][optim]") {
  Schedule s{"cosine", 1.0, 4, 14};
  CHECK(s.at(0) == test::Approx(0.25));
  CHECK(s.at(3) == test::Approx(1.0));
  CHECK(s.at(4) == test::Approx(1.0));
  CHECK(s.at(9) == test::Approx(0.5));
  CHECK(s.at(13) < 0.03);
  s.kind = "constant";
  CHECK(s.at(13) == 1.0);
  for (double bad : std::vector<double>{0.0, -1.0, NAN}) {
    s.lr = bad;
    CHECK_THROWS_WITH(s.validate(), test::Contains("--lr must be a positive number"));
  }
}

TEST_CASE("gradient accumulation over K micro-batches trains as one K-times larger batch", "[train]") {
  test::TempDir dir("remat-train");
  std::ofstream(dir.file("text.txt")) << std::string(4000, 'a') + "the quick brown fox jumps over the lazy dog " +
                                             std::string(200, 'b');
  TrainConfig big = tiny("gpt2", 0.0);
  big.setup.sizes.V = 256;
  big.data = "text:" + dir.file("text.txt");
  big.setup.sizes.B = 4;
  TrainConfig small = big;
  small.setup.sizes.B = 2;
  small.accumulate = 2;  // the same rows, in the same order, two at a time
  const TrainResult a = train(big), b = train(small);
  for (std::size_t s = 0; s < a.state.history.size(); ++s) {
    INFO("step " << s);
    CHECK(b.state.history[s].loss == test::Approx(a.state.history[s].loss).epsilon(1e-6));
    CHECK(b.state.history[s].grad_norm == test::Approx(a.state.history[s].grad_norm).epsilon(1e-5));
  }
  const auto wa = weights(*a.params), wb = weights(*b.params);
  double worst = 0;
  for (std::size_t i = 0; i < wa.size(); ++i) worst = std::max(worst, test::max_abs_diff(wa[i], wb[i]));
  CHECK(worst < 1e-5);
}

TEST_CASE("50 steps with dropout under every strategy: the loss at every step and the final weights equal full's",
          "[train][trajectory][slow]") {
  for (const auto& m : models().all()) {
    TrainConfig c = tiny(m.name, 0.1);
    c.steps = 50;
    const auto specs = all_strategies(ModelTraits{m.reversible});
    for (const auto& r : compare_trajectories(c, specs)) {
      INFO(m.name << " " << r.strategy << ": first divergence at step " << r.first_divergence << ", weights rel "
                  << r.weights_max_rel);
      if (r.exact) {
        CHECK(r.bitwise);
      } else {  // reversible: reconstruction rounds, the trajectory stays close
        CHECK(r.max_loss_diff < 1e-4);
        CHECK(r.weights_max_rel < 1e-2);
      }
    }
  }
}

TEST_CASE("a run interrupted after a save and resumed is bitwise the uninterrupted run", "[train][resume]") {
  test::TempDir dir("remat-train");
  TrainConfig c = tiny("llama", 0.1);
  c.steps = 20;
  c.eval_every = 5;
  c.out = dir.file("whole.h5");
  const TrainResult whole = train(c);

  struct Interrupted {};
  c.out = dir.file("cut.h5");
  c.save_every = 7;
  TrainProgress stop;
  stop.step = [](const TrainConfig&, const TrainState& s) {
    if (s.step == 16) throw Interrupted{};  // after the save at 14, before the save at 20
  };
  CHECK_THROWS_AS(train(c, stop), Interrupted);
  const SavedRun saved = read_run_file(c.out);
  CHECK(saved.state.step == 14);
  require_same_run(c.out, saved.config, c);
  const TrainResult resumed = train(c, {}, &saved);
  CHECK(losses(resumed.state) == losses(whole.state));
  CHECK(weights(*resumed.params) == weights(*whole.params));
  REQUIRE(resumed.state.evals.size() == whole.state.evals.size());
  for (std::size_t i = 0; i < whole.state.evals.size(); ++i) CHECK(resumed.state.evals[i].loss == whole.state.evals[i].loss);

  // The run file is a weights file too.
  const LoadedWeights w = load_weights(c.out);
  CHECK(weights(*w.params) == weights(*whole.params));

  TrainConfig other = c;
  other.schedule.lr = 1e-2;
  CHECK_THROWS_WITH(require_same_run(c.out, saved.config, other),
                    test::Contains("was trained with lr 0.0030000000000000001, this run asks for 0.01"));
  other = c;
  other.setup.sizes.D = 64;
  CHECK_THROWS_WITH(require_same_run(c.out, saved.config, other), test::Contains("was trained with D 32"));
  other = c;
  other.optimizer.kind = "sgd";
  CHECK_THROWS_WITH(require_same_run(c.out, saved.config, other), test::Contains("optimizer adamw"));
  other = c;
  other.strategy = "per-layer";  // exact strategies give the same run: allowed
  CHECK_NOTHROW(require_same_run(c.out, saved.config, other));
}

// Two of the four models a run (seed mod 4 and the next), drawn by the run's
// sample seed (printed on a failure; REMAT_SAMPLE_SEED=N repeats it): each
// model learns in one run of two.
TEST_CASE("byte-level gpt2, llama, mixtral and encdec learn a text well below its unigram entropy", "[train][learning][slow]") {
  const std::string text = "/usr/share/common-licenses/GPL-3";
  std::ifstream in(text, std::ios::binary);
  REQUIRE(in);
  std::map<unsigned char, double> counts;
  double n = 0;
  for (std::istreambuf_iterator<char> it(in), end; it != end; ++it, ++n) counts[static_cast<unsigned char>(*it)] += 1;
  double entropy = 0;
  for (const auto& [byte, k] : counts) entropy -= k / n * std::log(k / n);
  const char* models[] = {"gpt2", "llama", "mixtral", "encdec"};
  const std::uint64_t seed = test::sample_seed();
  INFO("sample seed " << seed);
  // One model a run (150 steps each, the suite's longest case with two):
  // the sample seed picks it, and REMAT_SAMPLE_SEED=0..3 runs each.
  const char* model = models[seed % 4];
  TrainConfig c;
  c.setup = {model, "small", preset_sizes("small")};
  c.setup.sizes.L = 2;
  c.setup.sizes.S = c.setup.sizes.S_max = 64;
  c.data = "text:" + text;
  c.steps = 150;
  c.schedule = {"constant", 3e-3, 10, 150};
  const TrainResult r = train(c);
  double last = 0;  // the cross-entropy (mixtral's loss adds its load-balancing term)
  for (std::size_t i = r.state.history.size() - 20; i < r.state.history.size(); ++i) {
    const StepRecord& h = r.state.history[i];
    double ce = h.loss;
    for (const auto& [name, value] : h.loss_parts)
      if (name == "ce") ce = value;
    last += ce / 20;
  }
  INFO(model << ": unigram entropy " << entropy << " nats, mean loss of the last 20 steps " << last);
  CHECK(last < entropy - 0.25);
}

TEST_CASE("the fp16 loss scaler follows GradScaler: x0.5 on an overflow, x2 after 2000 clean steps", "[train][precision]") {
  LossScaler s;
  CHECK(s.scale == 65536.0);
  s.update(true);
  CHECK(s.scale == 32768.0);
  for (int i = 0; i < 1999; ++i) s.update(false);
  CHECK(s.scale == 32768.0);
  CHECK(s.good_steps == 1999);
  s.update(false);
  CHECK(s.scale == 65536.0);
  CHECK(s.good_steps == 0);
  for (int i = 0; i < 1500; ++i) s.update(false);
  s.update(true);  // an overflow restarts the count
  CHECK(s.scale == 32768.0);
  CHECK(s.good_steps == 0);
}

TEST_CASE("16-bit training: every strategy follows full bitwise on every model, and fp16's loss scale is recorded and "
          "resumed", "[train][precision][resume]") {
  // (Overflowing scales, whose NaNs the trapping test main would turn into a
  // signal, are tested through the CLI: tests/cli/precision_test.sh.)
  for (const auto precision : {Precision::bf16, Precision::fp16})
    for (const auto& m : models().all()) {
      TrainConfig c = tiny(m.name, 0.1);
      c.run.precision = precision;
      for (const auto& r : compare_trajectories(c, all_strategies(ModelTraits{m.reversible}))) {
        INFO(m.name << " " << precision_name(precision) << " " << r.strategy << ": first divergence at step "
                    << r.first_divergence << ", weights rel " << r.weights_max_rel);
        if (r.exact) {
          CHECK(r.bitwise);
        } else {
          // reversible: its reconstruction rounds to 16 bits, and the loss
          // stays close. (Its weights are not held close parameter by
          // parameter: AdamW moves a weight whose gradient is near zero by
          // about lr a step whatever the gradient's size, so the 16-bit
          // noise in such a gradient's sign moves, e.g., a bias as far as
          // training has.)
          CHECK(r.max_loss_diff < 1e-2);
        }
      }
    }
  test::TempDir dir("remat-train");
  TrainConfig c = tiny("gpt2", 0.1);
  c.run.precision = Precision::fp16;
  c.loss_scale = 1024;
  c.steps = 20;
  c.out = dir.file("whole.h5");
  const TrainResult whole = train(c);
  for (const auto& r : whole.state.history) {
    CHECK(r.loss_scale == 1024);
    CHECK_FALSE(r.skipped);
  }
  CHECK(whole.state.scaler.good_steps == 20);
  // Near fp32's run: the same model, data and seed.
  TrainConfig wide = c;
  wide.run.precision = Precision::fp32;
  wide.loss_scale = kInitialLossScale;
  wide.out.clear();
  const TrainResult reference = train(wide);
  CHECK(whole.state.history.back().loss == test::Approx(reference.state.history.back().loss).epsilon(0.02));
  CHECK(reference.state.history.back().loss_scale == 1);

  struct Interrupted {};
  c.out = dir.file("cut.h5");
  c.save_every = 7;
  TrainProgress stop;
  stop.step = [](const TrainConfig&, const TrainState& s) {
    if (s.step == 16) throw Interrupted{};
  };
  CHECK_THROWS_AS(train(c, stop), Interrupted);
  const SavedRun saved = read_run_file(c.out);
  CHECK(saved.state.step == 14);
  CHECK(saved.state.scaler.scale == 1024);
  CHECK(saved.state.scaler.good_steps == 14);
  const TrainResult resumed = train(c, {}, &saved);
  CHECK(losses(resumed.state) == losses(whole.state));
  CHECK(weights(*resumed.params) == weights(*whole.params));
  CHECK(resumed.state.scaler.good_steps == 20);
  TrainConfig other = c;
  other.loss_scale = 2048;
  CHECK_THROWS_WITH(require_same_run(c.out, saved.config, other), test::Contains("was trained with loss_scale_init 1024"));
}

TEST_CASE("bad training settings are refused before anything runs", "[train][errors]") {
  TrainConfig c = tiny();
  c.schedule.lr = -1;
  CHECK_THROWS_WITH(train(c), test::Contains("--lr must be a positive number"));
  c = tiny();
  c.save_every = 5;
  CHECK_THROWS_WITH(train(c), test::Contains("--save-every needs --out"));
  c = tiny();
  c.schedule.warmup = 50;
  CHECK_THROWS_WITH(train(c), test::Contains("--warmup"));
  c = tiny();
  c.run.precision = Precision::fp16;
  c.loss_scale = 1000;
  CHECK_THROWS_WITH(train(c), test::Contains("--loss-scale must be a power of two"));
  c.run.precision = Precision::bf16;
  c.loss_scale = 1024;
  CHECK_THROWS_WITH(train(c), test::Contains("at bf16 gradients do not underflow"));
  test::TempDir dir("remat-train");
  std::ofstream(dir.file("short.txt")) << "too short";
  c = tiny();
  c.setup.sizes.V = 256;
  c.data = "text:" + dir.file("short.txt");
  CHECK_THROWS_WITH(train(c), test::Contains("one batch of [2, 16] needs 33"));
  const std::string foreign = dir.file("w.h5");
  h5::File::create(foreign).save();
  CHECK_THROWS_WITH(read_run_file(foreign), test::Contains("no 'model' attribute"));
}

TEST_CASE("training with frozen layers: frozen weights stay, every strategy follows full, resume is bitwise", "[train][finetune]") {
  test::TempDir dir("remat-train");
  TrainConfig c = tiny("gpt2", 0.1);
  c.steps = 8;
  c.freeze.below = 1;
  c.out = dir.file("frozen.h5");
  const TrainResult whole = train(c);
  TrainConfig open = tiny("gpt2", 0.1);
  open.steps = 8;
  const TrainResult unfrozen = train(open);
  CHECK(losses(whole.state) != losses(unfrozen.state));
  ParamStore initial(whole.model->params(), DType::f32);
  initialize(initial, c.run.seed, c.setup.sizes.L);
  const auto w0 = weights(initial), w = weights(*whole.params);
  for (std::size_t i = 0; i < w.size(); ++i) {
    INFO(whole.params->names()[i]);
    CHECK((w[i] == w0[i]) == !whole.params->trainable(i));  // frozen: unchanged (no decay either); the rest: trained
  }
  for (const char* spec : {"per-layer", "selective", "budget:range:50%"}) {
    TrainConfig s = c;
    s.out.clear();
    s.strategy = spec;
    INFO(spec);
    CHECK(losses(train(s).state) == losses(whole.state));
  }
  // A run cut after a save resumes bitwise, and keeps its freezing.
  struct Interrupted {};
  c.out = dir.file("cut.h5");
  c.save_every = 3;
  TrainProgress stop;
  stop.step = [](const TrainConfig&, const TrainState& s) {
    if (s.step == 5) throw Interrupted{};
  };
  CHECK_THROWS_AS(train(c, stop), Interrupted);
  const SavedRun saved = read_run_file(c.out);
  CHECK(saved.config.freeze.below == 1);
  require_same_run(c.out, saved.config, c);
  TrainConfig unfreeze = c;
  unfreeze.freeze = {};
  CHECK_THROWS_WITH(require_same_run(c.out, saved.config, unfreeze), test::Contains("was trained with freeze"));
  CHECK(losses(train(c, {}, &saved).state) == losses(whole.state));
}

TEST_CASE("training LoRA adapters: the base stays, every strategy follows full, resume is bitwise", "[train][finetune][lora]") {
  test::TempDir dir("remat-train");
  TrainConfig c = tiny("llama", 0.1);
  c.steps = 8;
  c.lora.rank = 4;
  c.out = dir.file("lora.h5");
  const TrainResult whole = train(c);
  ParamStore initial(whole.model->params(), DType::f32);
  initialize(initial, c.run.seed, c.setup.sizes.L);
  const auto w0 = weights(initial), w = weights(*whole.params);
  std::size_t adapters = 0;
  for (std::size_t i = 0; i < whole.params->names().size(); ++i) {
    INFO(whole.params->names()[i]);
    if (i < w0.size()) {
      CHECK(w[i] == w0[i]);  // the base: frozen, unchanged
    } else {
      CHECK(whole.params->trainable(i));
      CHECK(w[i] != std::vector<double>(w[i].size(), 0.0));
      ++adapters;
    }
  }
  CHECK(adapters == 2 * 2 * 2);  // wq and wv of 2 blocks, A and B each
  // Optimizer state for the adapters alone.
  const h5::File f = h5::File::open(c.out);
  CHECK(h5::list(f, "/optimizer/m").size() == adapters);
  for (const char* spec : {"per-layer", "offload-checkpoint", "budget:range:50%"}) {
    TrainConfig s = c;
    s.out.clear();
    s.strategy = spec;
    INFO(spec);
    CHECK(losses(train(s).state) == losses(whole.state));
  }
  const SavedRun saved = interrupted(c, dir.file("cut.h5"));
  CHECK(saved.config.lora.key() == c.lora.key());
  TrainConfig other = c;
  other.lora.rank = 2;
  CHECK_THROWS_WITH(require_same_run(c.out, saved.config, other), test::Contains("was trained with lora"));
  const TrainResult resumed = train(c, {}, &saved);
  CHECK(losses(resumed.state) == losses(whole.state));
  CHECK(weights(*resumed.params) == weights(*whole.params));
}

TEST_CASE("QLoRA training: every strategy follows full bitwise, the quantized base stays, resume is bitwise",
          "[train][finetune][quantize]") {
  test::TempDir dir("remat-train");
  for (QuantFormat format : {QuantFormat::nf4, QuantFormat::int8}) {
    INFO(quant_format_name(format));
    TrainConfig c = tiny("llama", 0.1);
    c.steps = 8;
    c.lora.rank = 4;
    c.quantize = format;
    c.out = dir.file(std::string("q-") + quant_format_name(format) + ".h5");
    const TrainResult whole = train(c);
    std::size_t quantized = 0;
    for (const auto& name : whole.params->names()) quantized += whole.params->quantized(name) ? 1 : 0;
    CHECK(quantized == 2 * 7);  // every linear weight of the 2 blocks
    for (const char* spec : {"per-layer", "offload-checkpoint", "selective"}) {
      TrainConfig s = c;
      s.out.clear();
      s.strategy = spec;
      INFO(spec);
      CHECK(losses(train(s).state) == losses(whole.state));
    }
    // The run file holds the quantized bytes as they were made.
    const SavedRun done = read_run_file(c.out);
    CHECK(done.config.quantize == format);
    CHECK(weights(*done.weights.params) == weights(*whole.params));
    const SavedRun saved = interrupted(c, dir.file(std::string("cut-") + quant_format_name(format) + ".h5"));
    TrainConfig other = c;
    other.quantize = QuantFormat::none;
    CHECK_THROWS_WITH(require_same_run(c.out, saved.config, other), test::Contains("was trained with quantize"));
    const TrainResult resumed = train(c, {}, &saved);
    CHECK(losses(resumed.state) == losses(whole.state));
    CHECK(weights(*resumed.params) == weights(*whole.params));
  }
}

TEST_CASE("QLoRA on real text: within 3% of the same LoRA training's validation loss at bf16",
          "[train][quantize][learning][slow]") {
  // A base that has learned something (full training on the text), then the
  // same LoRA fine-tuning of it with its frozen weights in float32 and in
  // nf4: NF4's error is small beside what the adapters learn.
  test::TempDir dir("remat-qlora");
  TrainConfig base;
  base.setup = {"llama", "small", preset_sizes("small")};
  base.setup.sizes.L = 2;
  base.setup.sizes.S = base.setup.sizes.S_max = 64;
  base.data = "text:/usr/share/common-licenses/GPL-3";
  base.steps = 60;
  base.schedule = {"constant", 3e-3, 10, 60};
  base.out = dir.file("base.h5");
  base.save_every = 60;
  train(base);
  const auto fine_tune = [&](QuantFormat format) {
    TrainConfig c = base;
    c.init = base.out;
    c.out.clear();
    c.save_every = 0;
    c.steps = 40;
    c.schedule = {"constant", 3e-3, 5, 40};
    c.run.precision = Precision::bf16;
    c.lora.rank = 8;
    c.lora.targets = {"*.attention.w*", "*.feed_forward.w*"};
    c.quantize = format;
    c.eval_every = 40;
    c.eval_batches = 4;
    return train(c).state.evals.back().loss;
  };
  // The base's own loss on a batch of the text, in float32 and with its block weights in nf4.
  LoadedWeights w = load_weights(base.out, false, true);
  const auto model = models().find("llama").make(base.setup.sizes);
  const Batch batch = make_batch_source(base.data, 8, 64, 256, 7)->next();
  auto full = make_strategy("full");
  const double plain = forward_backward(*model, *w.params, batch, {full.get(), 1, 0});
  FineTuning frozen;
  frozen.freeze.below = 2;
  frozen.quantize = QuantFormat::nf4;
  apply_fine_tuning(w.params, *model, batch, frozen, 1, base.setup);
  const double quantized = forward_backward(*model, *w.params, batch, {full.get(), 1, 0});
  INFO("the base's loss: float32 " << plain << ", nf4 " << quantized);
  CHECK(std::abs(quantized - plain) <= 0.03 * plain);
  const double lora = fine_tune(QuantFormat::none), qlora = fine_tune(QuantFormat::nf4);
  INFO("validation loss: LoRA " << lora << ", QLoRA (nf4) " << qlora);
  CHECK(std::abs(qlora - lora) <= 0.03 * lora);
  CHECK(qlora < std::log(256.0) - 1);  // it learned: far below a uniform guess over the bytes
}
