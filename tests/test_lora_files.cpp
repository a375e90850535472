// LoRA adapters on disk: written and read back bitwise, refused for another
// model or shape, folded into plain weights by lora-merge (which then give
// the adapted model's loss), and never silently ignored by a plain loader.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "catch.hpp"
#include "core/error.hpp"
#include "finetune/adapters_file.hpp"
#include "fixtures.hpp"
#include "harness/check.hpp"
#include "helpers.hpp"
#include "strategies/registry.hpp"

using namespace remat;
namespace fs = std::filesystem;

namespace {

// The base with rank-4 adapters whose B is drawn at random (a trained adapter).
std::unique_ptr<ParamStore> adapted(const test::TinyModel& b, const LoraOptions& o) {
  auto store = with_lora(*b.params, o, 5, b.setup.sizes.L);
  for (std::size_t i = 0; i < store->names().size(); ++i)
    if (store->names()[i].find(".lora_B") != std::string::npos)
      test::upload(store->tensors()[i], test::random_values(store->tensors()[i].numel(), 40 + i, -1, 1));
  return store;
}

double loss(const test::TinyModel& b, const ParamStore& params) {
  auto full = make_strategy("full");
  return forward_backward(*b.model, params, b.batch, {full.get(), 1, 0});
}

LoraOptions rank(int r, double alpha = 0) {
  LoraOptions o;
  o.rank = r;
  o.alpha = alpha;
  return o;
}

}  // namespace

TEST_CASE("adapters written and read back are bitwise the trained ones, on every model", "[finetune][lora][files]") {
  test::TempDir dir("remat-lora");
  for (const auto& info : models().all()) {
    INFO(info.name);
    const test::TinyModel b = test::tiny_model(info.name, 2, 4);
    const LoraOptions o = rank(4, 8);
    const auto trained = adapted(b, o);
    write_adapters(dir.file("a.h5"), b.setup, *trained, o);
    const AdapterFile file = read_adapters(dir.file("a.h5"));
    CHECK(file.options.key() == o.key());
    CHECK(file.weights().size() == trained->adapted().size());
    auto fresh = with_lora(*b.params, file.options, 99, b.setup.sizes.L);
    load_adapters(*fresh, b.setup, file, dir.file("a.h5"));
    for (std::size_t i = 0; i < fresh->tensors().size(); ++i) {
      INFO(fresh->names()[i]);
      CHECK(fresh->tensors()[i].to_host_f64() == trained->tensors()[i].to_host_f64());
    }
    const double a = loss(b, *trained), c = loss(b, *fresh);
    CHECK(std::memcmp(&a, &c, sizeof a) == 0);
  }
}

TEST_CASE("lora-merge folds W + (alpha/R) B A: the merged weights give the adapted model's loss", "[finetune][lora][files]") {
  test::TempDir dir("remat-lora");
  for (const auto& info : models().all()) {
    INFO(info.name);
    const test::TinyModel b = test::tiny_model(info.name, 2, 4);
    const LoraOptions o = rank(4, 6);
    const auto trained = adapted(b, o);
    write_adapters(dir.file("a.h5"), b.setup, *trained, o);
    const AdapterFile file = read_adapters(dir.file("a.h5"));
    const test::TinyModel merged = test::tiny_model(info.name, 2, 4);
    merge_adapters(*merged.params, merged.setup, file, dir.file("a.h5"));
    const double want = loss(b, *trained), got = loss(merged, *merged.params);
    CHECK(std::abs(got - want) <= 1e-5 * std::abs(want));
    CHECK(std::abs(loss(b, *b.params) - want) > 1e-4);  // the adapters do change the model
    // One weight by hand, in double.
    const std::string w = file.weights().front();
    const auto W = (*b.params)[w].to_host_f64(), M = (*merged.params)[w].to_host_f64();
    const auto& A = file.params.at(w + ".lora_A").data;
    const auto& B = file.params.at(w + ".lora_B").data;
    const std::int64_t in = (*b.params)[w].dim(1), out = (*b.params)[w].dim(0);
    double worst = 0;
    for (std::int64_t r = 0; r < out; ++r)
      for (std::int64_t c = 0; c < in; ++c) {
        double d = 0;
        for (int k = 0; k < 4; ++k) d += double(B[r * 4 + k]) * A[k * in + c];
        worst = std::max(worst, std::abs(M[r * in + c] - float(W[r * in + c] + 1.5 * d)));
      }
    CHECK(worst <= 1e-6);
  }
}

TEST_CASE("untrained adapters (B = 0) merge into the base weights bitwise", "[finetune][lora][files]") {
  test::TempDir dir("remat-lora");
  const test::TinyModel b = test::tiny_model("llama", 2, 4);
  const LoraOptions o = rank(2);
  write_adapters(dir.file("a.h5"), b.setup, *with_lora(*b.params, o, 1, 2), o);
  const test::TinyModel merged = test::tiny_model("llama", 2, 4);
  merge_adapters(*merged.params, merged.setup, read_adapters(dir.file("a.h5")), dir.file("a.h5"));
  for (std::size_t i = 0; i < b.params->tensors().size(); ++i)
    CHECK(b.params->tensors()[i].to_host_f64() == merged.params->tensors()[i].to_host_f64());
}

TEST_CASE("adapters for another model or shape, and adapters where plain weights are read, are one clear error",
          "[finetune][lora][files][errors]") {
  test::TempDir dir("remat-lora");
  const test::TinyModel gpt2 = test::tiny_model("gpt2", 2, 4), llama = test::tiny_model("llama", 2, 4), deeper = test::tiny_model("gpt2", 3, 4);
  const LoraOptions o = rank(2);
  write_adapters(dir.file("gpt2.h5"), gpt2.setup, *with_lora(*gpt2.params, o, 1, 2), o);
  const AdapterFile file = read_adapters(dir.file("gpt2.h5"));
  CHECK_THROWS_WITH(merge_adapters(*llama.params, llama.setup, file, "gpt2.h5"),
                    Catch::Contains("adapters for another model or shape: model gpt2 (not llama)"));
  CHECK_THROWS_WITH(merge_adapters(*deeper.params, deeper.setup, file, "gpt2.h5"),
                    Catch::Contains("adapters for another model or shape: L = 2 (not 3)"));
  auto other_rank = with_lora(*gpt2.params, rank(3), 1, 2);
  CHECK_THROWS_WITH(load_adapters(*other_rank, gpt2.setup, file, "gpt2.h5"), Catch::Contains("has shape [2, 32], the adapters asked for [3, 32]"));
  LoraOptions mlp = o;
  mlp.targets = {"*.mlp.c_fc.weight"};
  auto other_targets = with_lora(*gpt2.params, mlp, 1, 2);
  CHECK_THROWS_WITH(load_adapters(*other_targets, gpt2.setup, file, "gpt2.h5"), Catch::Contains("not the 2 asked for"));

  // A plain weight file holds no adapters; a file with adapters is not read as plain weights.
  write_weights(dir.file("plain.h5"), gpt2.setup, *gpt2.params, nullptr);
  CHECK_THROWS_WITH(read_adapters(dir.file("plain.h5")), Catch::Contains("holds no LoRA adapters"));
  write_weights(dir.file("both.h5"), gpt2.setup, *with_lora(*gpt2.params, o, 1, 2), nullptr);
  CHECK_THROWS_WITH(load_weights(dir.file("both.h5")), Catch::Contains("remat lora-merge"));
  CHECK(load_weights(dir.file("both.h5"), false, true).params->names() == gpt2.params->names());
}
