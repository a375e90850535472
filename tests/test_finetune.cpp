// Fine-tuning: frozen parameters get no gradient, ops save only what the
// remaining gradients read, regions below every trainable parameter keep
// nothing; the trainable parameters' gradients stay bitwise those of the
// unfrozen model under every strategy, the loss never changes, and the
// memory prediction follows.
#include <cmath>
#include <cstring>

#include "autodiff/tape.hpp"
#include "catch.hpp"
#include "core/error.hpp"
#include "finetune/freeze.hpp"
#include "fixtures.hpp"
#include "harness/check.hpp"
#include "strategies/registry.hpp"
#include "zoo/common.hpp"
#include "zoo/expert_parallel.hpp"

using namespace remat;

namespace {

test::TinyModel frozen_model(const std::string& name, int layers, const FreezeOptions& freeze = {}) {
  test::TinyModel s = test::tiny_model(name, layers, 2, 0.1);
  if (freeze.any()) apply_freeze(*s.params, freeze, layers);
  return s;
}

// Within reversible's tolerance: 1e-4 of the reference's largest magnitude.
bool close(const std::vector<float>& got, const std::vector<float>& ref) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    diff = std::max(diff, double(std::abs(got[i] - ref[i])));
    scale = std::max(scale, double(std::abs(ref[i])));
  }
  return diff <= 1e-4 * scale + 1e-7;
}

}  // namespace

TEST_CASE("frozen parameters change no trainable gradient, under every strategy, on every model", "[finetune]") {
  for (const auto& info : models().all()) {
    test::TinyModel open = frozen_model(info.name, 4);
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
      test::TinyModel frozen = frozen_model(info.name, 4, freeze);
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
          else CHECK(close(got[i], ref[i]));
        }
      }
    }
  }
}

TEST_CASE("freezing the bottom half saves what its gradients no longer need, as predicted", "[finetune][memory]") {
  for (const char* name : {"gpt2", "llama"}) {
    FreezeOptions below;
    below.below = 3;
    test::TinyModel open = frozen_model(name, 6), frozen = frozen_model(name, 6, below);
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
  test::TinyModel s = frozen_model("gpt2", 2, f);
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
  test::TinyModel s = frozen_model("gpt2", 2);
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

TEST_CASE("a rank holding part of the model freezes as the whole model says", "[finetune][errors]") {
  // Expert parallelism's rank 0 of 2: experts 0 and 1 of 4 (zoo/expert_parallel.hpp).
  ModelSetup setup{"mixtral", "tiny", preset_sizes("tiny")};
  setup.sizes.ep = RankGroup::expert(2);
  ParamStore part(models().find("mixtral").make(setup.sizes)->params(), DType::f32);
  const std::vector<std::string> whole = ep::whole_names(setup);
  REQUIRE(whole.size() > part.names().size());
  FreezeOptions theirs;  // only rank 1's experts: no error here, nothing of rank 0's frozen
  theirs.patterns = {"layers.*.block_sparse_moe.experts.3.*"};
  CHECK(apply_freeze(part, theirs, setup.sizes.L, whole).empty());
  CHECK_THROWS_WITH(apply_freeze(part, theirs, setup.sizes.L), Catch::Contains("matches no parameter"));
  FreezeOptions below;
  below.below = 1;
  const auto frozen = apply_freeze(part, below, setup.sizes.L, whole);
  CHECK(frozen == frozen_names(part, below, setup.sizes.L));  // the same blocks whichever names are read
  for (const auto& n : frozen) CHECK(part.has(n));
  FreezeOptions none;
  none.patterns = {"nothing.*"};
  CHECK_THROWS_WITH(apply_freeze(part, none, setup.sizes.L, whole), Catch::Contains("'nothing.*' matches no parameter"));
}

// ---- LoRA ----

#include "finetune/lora.hpp"
#include "helpers.hpp"

namespace {

// `base` with adapters on the default targets, trainable everywhere (the
// unfrozen LoRA model), B drawn at random so that every adapter gradient flows.
std::unique_ptr<ParamStore> lora_unfrozen(const ParamStore& base, int rank, std::uint64_t seed) {
  LoraOptions o;
  o.rank = rank;
  auto frozen = with_lora(base, o, seed, 4);
  auto open = std::make_unique<ParamStore>(frozen->specs(), DType::f32);
  for (std::size_t i = 0; i < open->tensors().size(); ++i)
    Kokkos::deep_copy(open->tensors()[i].bytes(), frozen->tensors()[i].bytes());
  for (std::size_t i = 0; i < open->names().size(); ++i) {
    const std::string& n = open->names()[i];
    if (n.size() > 7 && n.compare(n.size() - 7, 7, ".lora_B") == 0) {
      test::upload(open->tensors()[i], test::random_values(open->tensors()[i].numel(), seed + i, -0.05, 0.05));
      Kokkos::deep_copy(frozen->tensors()[i].bytes(), open->tensors()[i].bytes());
      const std::string w = n.substr(0, n.size() - 7);
      open->attach_adapter(w, w + ".lora_A", n, o.scale());
    }
  }
  return open;
}

}  // namespace

TEST_CASE("LoRA with B = 0 is exactly the base model, on every model", "[finetune][lora]") {
  for (const auto& info : models().all()) {
    test::TinyModel s = frozen_model(info.name, 2);
    auto full = make_strategy("full");
    const double base = forward_backward(*s.model, *s.params, s.batch, {full.get(), 3, 0});
    LoraOptions o;
    o.rank = 4;
    auto lora = with_lora(*s.params, o, 2, 2);
    CHECK_FALSE(lora->adapted().empty());
    require_adapters_used(*s.model, *lora, s.batch);
    const double adapted = forward_backward(*s.model, *lora, s.batch, {full.get(), 3, 0});
    INFO(info.name);
    CHECK(std::memcmp(&base, &adapted, sizeof base) == 0);
  }
}

TEST_CASE("LoRA adapters' gradients: bitwise the unfrozen LoRA model's under every strategy", "[finetune][lora]") {
  for (const auto& info : models().all()) {
    test::TinyModel s = frozen_model(info.name, 4);
    auto open = lora_unfrozen(*s.params, 4, 9);
    LoraOptions o;
    o.rank = 4;
    auto frozen = with_lora(*s.params, o, 9, 4);
    for (std::size_t i = 0; i < frozen->tensors().size(); ++i)  // the same random B
      Kokkos::deep_copy(frozen->tensors()[i].bytes(), open->tensors()[i].bytes());
    auto full = make_strategy("full");
    const StepResult reference = run_step(*s.model, *open, s.batch, {full.get(), 3, 0});
    const auto ref = gradients(*open);
    auto specs = all_strategies({info.reversible});
    specs.push_back("budget:range:50%");
    for (const auto& spec : specs) {
      INFO(info.name << " " << spec);
      auto strategy = make_strategy(spec);
      prepare_strategy(*strategy, *s.model, *frozen, s.batch, ops::AttentionKernel::fused, 3);
      const StepResult r = run_step(*s.model, *frozen, s.batch, {strategy.get(), 3, 0});
      const auto got = gradients(*frozen);
      if (strategy->exact()) CHECK(std::memcmp(&r.loss, &reference.loss, sizeof r.loss) == 0);
      std::size_t adapters = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (!frozen->trainable(i)) continue;
        ++adapters;
        INFO(frozen->names()[i]);
        REQUIRE(got[i].size() == ref[i].size());
        if (strategy->exact()) CHECK(std::memcmp(got[i].data(), ref[i].data(), got[i].size() * sizeof(float)) == 0);
        else CHECK(close(got[i], ref[i]));
      }
      CHECK(adapters == 2 * frozen->adapted().size());
    }
  }
}

TEST_CASE("a LoRA linear's gradients against finite differences", "[finetune][lora][backward]") {
  // The zoo's linear on a store whose weight has an adapter: every
  // parameter's gradient (weight, bias, A, B) against central differences of
  // sum(c * y), in float64.
  ParamStore store({{"l.weight", {4, 5}}, {"l.bias", {4}}, {"l.weight.lora_A", {2, 5}}, {"l.weight.lora_B", {4, 2}}},
                   DType::f64);
  for (std::size_t i = 0; i < store.tensors().size(); ++i)
    test::upload(store.tensors()[i], test::random_values(store.tensors()[i].numel(), 10 + i));
  store.attach_adapter("l.weight", "l.weight.lora_A", "l.weight.lora_B", 0.75);
  const Tensor x = test::random_tensor({3, 5}, 1), c = test::random_tensor({3, 4}, 2);
  const auto cv = c.to_host_f64();
  auto objective = [&] {
    const auto y = linear(store, "l", x).to_host_f64();
    double s = 0;
    for (std::size_t k = 0; k < y.size(); ++k) s += cv[k] * y[k];
    return s;
  };
  store.zero_grad();
  backward(linear(store, "l", x), c);
  NoGradScope no_grad;
  double worst = 0;
  for (std::size_t i = 0; i < store.tensors().size(); ++i) {
    const Tensor& t = store.tensors()[i];
    const auto grad = t.grad().to_host_f64();
    auto v = t.to_host_f64();
    for (std::size_t k = 0; k < v.size(); ++k) {
      const double keep = v[k], eps = 1e-6;
      v[k] = keep + eps;
      test::upload(t, v);
      const double plus = objective();
      v[k] = keep - eps;
      test::upload(t, v);
      const double minus = objective();
      v[k] = keep;
      test::upload(t, v);
      worst = std::max(worst, std::abs(grad[k] - (plus - minus) / (2 * eps)) / (1 + std::abs(grad[k])));
    }
  }
  CHECK(worst < 1e-6);
  CHECK(store.take_adapter_uses() == std::set<std::string>{"l.weight"});
}

TEST_CASE("bad LoRA options are one clear error", "[finetune][lora][errors]") {
  test::TinyModel s = frozen_model("gpt2", 2);
  LoraOptions o;
  o.rank = 4;
  o.targets = {"nothing.*"};
  CHECK_THROWS_WITH(with_lora(*s.params, o, 1, 2), Catch::Contains("'nothing.*' matches no parameter"));
  o.targets = {"h.0.ln_1.weight"};
  CHECK_THROWS_WITH(with_lora(*s.params, o, 1, 2), Catch::Contains("is not a linear weight"));
  o.targets = {};
  o.rank = 100;
  CHECK_THROWS_WITH(with_lora(*s.params, o, 1, 2), Catch::Contains("above the smaller dimension"));
  o.rank = 0;
  CHECK_THROWS_WITH(with_lora(*s.params, o, 1, 2), Catch::Contains("at least 1"));
  o.rank = 2;
  o.targets = {"wpe.weight"};  // 2-D, but an embedding table
  auto lora = with_lora(*s.params, o, 1, 2);
  CHECK_THROWS_WITH(require_adapters_used(*s.model, *lora, s.batch), Catch::Contains("'wpe.weight' is not a linear weight"));
}
