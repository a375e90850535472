// Fine-tuning: frozen parameters get no gradient, ops save only what the
// remaining gradients read, regions below every trainable parameter keep
// nothing; the trainable parameters' gradients stay bitwise those of the
// unfrozen model under every strategy, the loss never changes, and the
// memory prediction follows.
#include <cstring>

#include "autodiff/error.hpp"
#include "autodiff/tape.hpp"
#include "catch.hpp"
#include "harness/check.hpp"
#include "harness/finetune/freeze.hpp"
#include "strategies/registry.hpp"

using namespace remat;

namespace {

struct Setup {
  Sizes sizes;
  std::unique_ptr<Model> model;
  std::unique_ptr<ParamStore> params;
  Batch batch;
};

Setup make(const std::string& name, int layers, const FreezeOptions& freeze = {}) {
  Setup s;
  s.sizes = preset_sizes("tiny");
  s.sizes.L = layers;
  s.sizes.dropout = 0.1;
  s.model = models().find(name).make(s.sizes);
  s.params = std::make_unique<ParamStore>(s.model->params(), DType::f32);
  initialize(*s.params, 2, layers);
  if (freeze.any()) apply_freeze(*s.params, freeze, layers);
  s.batch = random_batch(s.sizes.B, s.sizes.S, s.sizes.V, 2);
  return s;
}

}  // namespace

TEST_CASE("frozen parameters change no trainable gradient, under every strategy, on every model", "[finetune]") {
  for (const auto& info : models().all()) {
    Setup open = make(info.name, 4);
    auto full = make_strategy("full");
    const StepResult reference = run_step(*open.model, *open.params, open.batch, {full.get(), 3, 0});
    const auto ref = gradients(*open.params);
    FreezeOptions below;
    below.below = 2;
    FreezeOptions pattern;
    pattern.patterns = {open.params->names()[open.params->names().size() / 2]};
    auto specs = all_strategies({info.reversible});
    specs.push_back("budget:range:50%");
    specs.push_back("every:2+offload");
    for (const auto& freeze : {below, pattern}) {
      Setup frozen = make(info.name, 4, freeze);
      for (const auto& spec : specs) {
        INFO(info.name << " " << spec << " frozen " << freeze.key());
        auto strategy = make_strategy(spec);
        prepare_strategy(*strategy, *frozen.model, *frozen.params, frozen.batch, ops::AttentionKernel::fused, 3);
        const StepResult r = run_step(*frozen.model, *frozen.params, frozen.batch, {strategy.get(), 3, 0});
        const auto got = gradients(*frozen.params);
        if (strategy->exact()) CHECK(std::memcmp(&r.loss, &reference.loss, sizeof r.loss) == 0);
        else CHECK(r.loss == Approx(reference.loss).epsilon(1e-5));
        for (std::size_t i = 0; i < got.size(); ++i) {
          if (!frozen.params->trainable(i)) {
            CHECK(got[i].empty());
            continue;
          }
          INFO(frozen.params->names()[i]);
          REQUIRE(got[i].size() == ref[i].size());
          if (strategy->exact()) CHECK(std::memcmp(got[i].data(), ref[i].data(), got[i].size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

TEST_CASE("freezing the bottom half saves what its gradients no longer need, as predicted", "[finetune][memory]") {
  for (const char* name : {"gpt2", "llama"}) {
    FreezeOptions below;
    below.below = 3;
    Setup open = make(name, 6), frozen = make(name, 6, below);
    for (const char* spec : {"full", "per-layer", "selective", "every:2"}) {
      INFO(name << " " << spec);
      auto a = make_strategy(spec), b = make_strategy(spec);
      const StepResult unfrozen = run_step(*open.model, *open.params, open.batch, {a.get(), 3, 0});
      const StepResult r = run_step(*frozen.model, *frozen.params, frozen.batch, {b.get(), 3, 0});
      CHECK(r.activation_peak < unfrozen.activation_peak);
      const SaveProfile profile = profile_saves(*frozen.model, *frozen.params, frozen.batch);
      CHECK(std::abs(double(b->predict(profile).device - r.activation_peak)) <= 0.05 * double(r.activation_peak));
    }
  }
}

TEST_CASE("a frozen model has no gradient buffers for its frozen parameters", "[finetune]") {
  FreezeOptions f;
  f.patterns = {"h.0.*", "wpe.*"};
  Setup s = make("gpt2", 2, f);
  s.params->zero_grad();
  for (std::size_t i = 0; i < s.params->names().size(); ++i) {
    const bool frozen = s.params->names()[i].rfind("h.0.", 0) == 0 || s.params->names()[i] == "wpe.weight";
    CHECK(s.params->trainable(i) == !frozen);
    CHECK(s.params->tensors()[i].grad().defined() == !frozen);
  }
  CHECK(block_of("h.3.attn.c_attn.weight") == 3);
  CHECK(block_of("encoder.layer.12.output.dense.bias") == 12);
  CHECK(block_of("wte.weight") == -1);
}

TEST_CASE("bad freezing is one clear error", "[finetune][errors]") {
  Setup s = make("gpt2", 2);
  FreezeOptions none;
  none.patterns = {"nothing.*"};
  CHECK_THROWS_WITH(frozen_names(*s.params, none, 2), Catch::Contains("'nothing.*' matches no parameter"));
  FreezeOptions deep;
  deep.below = 3;
  CHECK_THROWS_WITH(frozen_names(*s.params, deep, 2), Catch::Contains("the model has 2 blocks"));
  FreezeOptions all;
  all.patterns = {"*"};
  CHECK_THROWS_WITH(frozen_names(*s.params, all, 2), Catch::Contains("leaves nothing to train"));
  FreezeOptions empty;
  empty.patterns = {""};
  CHECK_THROWS_AS(frozen_names(*s.params, empty, 2), UserError);
}
