// Quantized frozen weights (QLoRA): the formats as docs/fine-tuning.md
// defines them, a quantized linear that is exactly the dense linear over the
// dequantized values, every strategy bitwise `full` with the dequantization
// redone in each recomputation, the bytes in their own pool, and bad input.
#include <cmath>
#include <cstring>

#include "autodiff/quantized.hpp"
#include "autodiff/tape.hpp"
#include "catch.hpp"
#include "core/error.hpp"
#include "estimate/shape_only_step.hpp"
#include "finetune/fine_tuning.hpp"
#include "fixtures.hpp"
#include "harness/check.hpp"
#include "helpers.hpp"
#include "strategies/registry.hpp"
#include "zoo/tensor_parallel.hpp"

using namespace remat;

namespace {

std::vector<float> dequantized_values(const std::vector<float>& w, QuantFormat f) {
  const QuantizedWeight q{f, {std::int64_t(w.size())}, Tensor::from_host(quantize_values(w, f), {quant_layout(f, std::int64_t(w.size())).total}), {}};
  return dequantized(q, "test").to_host_f32();
}

std::vector<float> normal_values(std::size_t n, std::uint64_t seed) {
  std::vector<float> v;
  for (double x : test::random_values(std::int64_t(n), seed, -1, 1)) v.push_back(float(0.02 * std::tan(1.4 * x)));
  return v;
}

// `s` with LoRA on its default targets and every frozen linear weight in `f`.
std::unique_ptr<ParamStore> qlora(const test::TinyModel& s, QuantFormat f, int layers) {
  std::unique_ptr<ParamStore> p = std::make_unique<ParamStore>(s.params->specs(), DType::f32);
  for (std::size_t i = 0; i < p->tensors().size(); ++i)
    Kokkos::deep_copy(p->tensors()[i].bytes(), s.params->tensors()[i].bytes());
  FineTuning ft;
  ft.lora.rank = 4;
  ft.quantize = f;
  ModelSetup setup = s.setup;
  setup.sizes.L = layers;
  apply_fine_tuning(p, *s.model, s.batch, ft, 5, setup);
  return p;
}

// The same store with each quantized weight replaced by its dequantized
// float32 values: what a quantized linear must compute exactly.
std::unique_ptr<ParamStore> dense_twin(const ParamStore& q) {
  auto dense = std::make_unique<ParamStore>(q.specs(), DType::f32);
  for (std::size_t i = 0; i < q.names().size(); ++i) {
    const std::string& name = q.names()[i];
    if (const QuantizedWeight* w = q.quantized(name))
      Kokkos::deep_copy(dense->tensors()[i].bytes(), dequantized(*w, "test").bytes());
    else
      Kokkos::deep_copy(dense->tensors()[i].bytes(), q.tensors()[i].bytes());
    if (!q.trainable(i)) dense->freeze(name);
  }
  for (const auto& weight : q.adapted()) {
    const ParamStore::Adapter* a = q.adapter(weight);
    dense->attach_adapter(weight, a->a, a->b, a->scale);
  }
  return dense;
}

}  // namespace

TEST_CASE("nf4: the levels round-trip exactly, ties go down, and the layout is QLoRA's", "[quantize]") {
  std::vector<float> w;
  for (int k = 0; k < 64; ++k) w.push_back(nf4_level(k % 16) * 2.5f);  // one block: absmax 2.5, stored exactly
  const auto back = dequantized_values(w, QuantFormat::nf4);
  CHECK(std::memcmp(back.data(), w.data(), w.size() * sizeof(float)) == 0);
  // A value on the midpoint of two levels takes the lower one.
  std::vector<float> tie(64, 0.0f);
  tie[0] = 1.0f;  // absmax 1
  tie[1] = (nf4_level(14) + nf4_level(15)) * 0.5f;
  CHECK(dequantized_values(tie, QuantFormat::nf4)[1] == nf4_level(14));
  // Codes, absmax codes, second-level scales and the mean: 4 + 8/64 + 32/(64*256) bits a weight, and the mean.
  const QuantLayout l = quant_layout(QuantFormat::nf4, 64 * 512);
  CHECK(l.codes == 0);
  CHECK(l.absmax == 64 * 256);
  CHECK(l.scales == l.absmax + 512);
  CHECK(l.offset == l.scales + 2 * 4);
  CHECK(l.total == l.offset + 4);
  CHECK(quant_layout(QuantFormat::int8, 128).total == 128 + 2 * 4);
  // The first weight of a pair is the high nibble.
  std::vector<float> two(64, 0.0f);
  two[0] = -1.0f;
  const auto bytes = quantize_values(two, QuantFormat::nf4);
  CHECK(bytes[0] == ((0 << 4) | 7));
  CHECK(bytes[1] == ((7 << 4) | 7));
}

TEST_CASE("nf4 and int8: the error stays within half a step of each block's grid", "[quantize]") {
  const auto w = normal_values(64 * 600, 3);  // 600 blocks: three second-level scales
  for (QuantFormat f : {QuantFormat::nf4, QuantFormat::int8}) {
    INFO(quant_format_name(f));
    const auto back = dequantized_values(w, f);
    double worst = 0, sum = 0;
    for (std::size_t b = 0; b < w.size() / 64; ++b) {
      float absmax = 0;
      for (std::size_t i = b * 64; i < b * 64 + 64; ++i) absmax = std::max(absmax, std::fabs(w[i]));
      // nf4's widest gap is between -1 and its neighbour; its absmax is
      // itself stored in 8 bits (within 1/254 of the group's spread, 1% here).
      const double bound = f == QuantFormat::nf4 ? absmax * ((1 - 0.6961928) / 2 + 0.01) : absmax / 254.0 * 1.0001;
      for (std::size_t i = b * 64; i < b * 64 + 64; ++i) {
        worst = std::max(worst, std::fabs(back[i] - w[i]) / bound);
        sum += std::fabs(back[i] - w[i]);
      }
    }
    CHECK(worst <= 1.0);
    CHECK(sum > 0);  // it did quantize
  }
}

TEST_CASE("dequantizing into 16 bits rounds the float32 values once", "[quantize]") {
  const auto w = normal_values(64 * 8, 4);
  const auto bytes = quantize_values(w, QuantFormat::nf4);
  const QuantizedWeight q{QuantFormat::nf4, {8, 64}, Tensor::from_host(bytes, {std::int64_t(bytes.size())}), {}};
  const auto f32 = dequantized(q, "test").to_host_f32();
  Tensor h = Tensor::empty({8, 64}, DType::bf16);
  dequantize(q, h.data<bf16>());
  const auto got = h.to_host_f64();
  for (std::size_t i = 0; i < f32.size(); ++i) CHECK(got[i] == double(float(bf16(f32[i]))));
}

TEST_CASE("a quantized linear is the dense linear over the dequantized weights, bitwise", "[quantize]") {
  for (const auto& info : models().all()) {
    test::TinyModel s = test::tiny_model(info.name, 2, 2, 0.1);
    for (QuantFormat f : {QuantFormat::nf4, QuantFormat::int8}) {
      INFO(info.name << " " << quant_format_name(f));
      auto q = qlora(s, f, 2);
      auto dense = dense_twin(*q);
      auto full = make_strategy("full");
      const StepResult a = run_step(*s.model, *q, s.batch, {full.get(), 3, 0});
      const StepResult b = run_step(*s.model, *dense, s.batch, {full.get(), 3, 0});
      CHECK(std::memcmp(&a.loss, &b.loss, sizeof a.loss) == 0);
      const auto ga = gradients(*q), gb = gradients(*dense);
      for (std::size_t i = 0; i < ga.size(); ++i)
        if (!ga[i].empty()) CHECK(std::memcmp(ga[i].data(), gb[i].data(), ga[i].size() * sizeof(float)) == 0);
      // The quantized bytes sit in their own pool; the dense twin has none.
      CHECK(a.pool_peaks.at(kQuantPool) > 0);
      CHECK(a.forward_ops.at("dequantize") > 0);
    }
  }
}

TEST_CASE("under nf4 and int8 every strategy is bitwise full, dequantizing again as it recomputes", "[quantize]") {
  for (const auto& info : models().all()) {
    test::TinyModel s = test::tiny_model(info.name, 4, 6, 0.1);
    for (QuantFormat f : {QuantFormat::nf4, QuantFormat::int8}) {
      auto q = qlora(s, f, 4);
      auto full = make_strategy("full");
      const StepResult reference = run_step(*s.model, *q, s.batch, {full.get(), 3, 0});
      const auto ref = gradients(*q);
      auto specs = all_strategies({info.reversible});
      specs.push_back("budget:range:50%");
      for (const auto& spec : specs) {
        INFO(info.name << " " << quant_format_name(f) << " " << spec);
        auto strategy = make_strategy(spec);
        if (!strategy->exact()) continue;  // reversible: within tolerance, as unquantized (test_finetune)
        prepare_strategy(*strategy, *s.model, *q, s.batch, ops::AttentionKernel::fused, 3);
        const StepResult r = run_step(*s.model, *q, s.batch, {strategy.get(), 3, 0});
        CHECK(std::memcmp(&r.loss, &reference.loss, sizeof r.loss) == 0);
        const auto got = gradients(*q);
        for (std::size_t i = 0; i < got.size(); ++i)  // frozen: no gradient
          if (!got[i].empty()) CHECK(std::memcmp(got[i].data(), ref[i].data(), got[i].size() * sizeof(float)) == 0);
        const auto again = r.recomputed_ops.find("dequantize");
        const auto linear = r.recomputed_ops.find("linear");
        // Every recomputed product over a quantized weight dequantized it again.
        if (linear != r.recomputed_ops.end() && linear->second > 0 && spec != "selective")
          CHECK((again != r.recomputed_ops.end() && again->second > 0));
        // Dequantization's FLOPs and time beside recomputation's: what a
        // strategy dequantizes beyond full's is exactly its recomputation's.
        CHECK(r.dequantize_flops - r.recompute_dequantize_flops == reference.dequantize_flops);
        CHECK((r.recompute_dequantize_flops > 0) == (again != r.recomputed_ops.end() && again->second > 0));
        // (Seconds are the clock's: only what holds whatever its resolution.)
        CHECK((r.recompute_dequantize_flops > 0 || r.recompute_dequantize_seconds == 0));
        CHECK(r.dequantize_seconds >= r.recompute_dequantize_seconds);
      }
      // full recomputes nothing; dequantizing is counted whatever the strategy.
      CHECK(reference.dequantize_flops > 0);
      CHECK(reference.recompute_dequantize_flops == 0);
      CHECK(reference.recompute_dequantize_seconds == 0);
    }
  }
}

TEST_CASE("a tensor-parallel part of a quantized weight dequantizes to the whole's values at its places",
          "[quantize][tp]") {
  // A column-parallel weight of three row blocks (q, k, v) and a row-parallel
  // one, each over 2 and 4 ranks, and key/value rows in 2 parts over 4 ranks
  // (each part on 2 ranks), nf4 (its second-level scales span parts) and
  // int8; every rank's bytes placed back give the whole's bytes.
  const std::int64_t out = 3 * 256, in = 128;
  for (const QuantFormat f : {QuantFormat::nf4, QuantFormat::int8})
    for (const int ranks : {2, 4})
      for (const int kind : {0, 1, 2}) {  // column-parallel; row-parallel; key/value rows 2 parts share (4 ranks)
        if (kind == 2 && ranks != 4) continue;
        const bool column = kind != 1;
        const Shape whole = column ? Shape{out, in} : Shape{in, out};
        const std::vector<float> w = normal_values(std::size_t(out * in), 7);
        const std::vector<std::uint8_t> bytes = quantize_values(w, f);
        const QuantizedWeight q = quantized_from_bytes(f, whole, bytes);
        const std::vector<float> values = dequantized(q, "test").to_host_f32();
        const std::vector<double> whole_values(values.begin(), values.end());
        std::vector<std::uint8_t> placed(bytes.size(), 0);
        for (int r = 0; r < ranks; ++r) {
          const RankGroup g = RankGroup::tensor(ranks, r);
          std::vector<ParamSpec> specs;
          if (kind == 2)
            tp::append_column(specs, "w", out, in, g, Init::normal, /*bias=*/false, /*blocks=*/1, /*parts=*/2);
          else if (column)
            tp::append_column(specs, "w", out, in, g, Init::normal, /*bias=*/false, /*blocks=*/3);
          else
            tp::append_row(specs, "w", in, out, g, Init::normal, /*bias=*/false);
          const ParamSpec& spec = specs.front();
          const QuantizedWeight part = tp::quantized_part_of(q, spec, g);
          REQUIRE(part.shape == spec.shape);
          REQUIRE(part.bytes.nbytes() == std::size_t(quant_layout(f, numel(spec.shape), numel(whole) / kQuantBlock).total));
          const std::vector<float> mine = dequantized(part, "test").to_host_f32();
          const std::vector<double> expected = tp::part_values(whole_values, spec, whole, g);
          for (std::size_t i = 0; i < mine.size(); ++i) REQUIRE(double(mine[i]) == expected[i]);
          place_part(f, part.bytes.to_host<std::uint8_t>(), spec.shape, part.blocks, placed);
        }
        REQUIRE(placed == bytes);
      }
  // A split that leaves runs of other than whole blocks is refused in one line.
  std::vector<ParamSpec> specs;
  tp::append_row(specs, "h.0.mlp.w2", 64, 96, RankGroup::tensor(2, 0), Init::normal, false);
  REQUIRE_THROWS_WITH(tp::quant_blocks(specs.front(), {64, 96}, RankGroup::tensor(2, 0)),
                      Catch::Matchers::Contains("runs of 48 values, not whole blocks of 64"));
}

TEST_CASE("a dequantization's FLOPs: int8 a multiply a weight and a division a block, nf4 19 a block",
          "[quantize]") {
  Tensor w = Tensor::from_host(std::vector<float>(128 * 64, 0.5f), {128, 64}, "w");
  const std::int64_t blocks = 128 * 64 / kQuantBlock;
  CHECK(dequantize_flops(quantize(w, QuantFormat::int8)) == double(128 * 64 + blocks));
  CHECK(dequantize_flops(quantize(w, QuantFormat::nf4)) == double(19 * blocks));
  // A dense model dequantizes nothing.
  test::TinyModel s = test::tiny_model("gpt2", 2, 1, 0.0);
  auto full = make_strategy("full");
  const StepResult r = run_step(*s.model, *s.params, s.batch, {full.get(), 1, 0});
  CHECK(r.dequantize_flops == 0);
  CHECK(r.dequantize_seconds == 0);
}

TEST_CASE("no dequantized copy of the model: one weight's workspace at a time", "[quantize][memory]") {
  test::TinyModel s = test::tiny_model("llama", 4, 7, 0.0);
  auto q = qlora(s, QuantFormat::nf4, 4);
  auto dense = dense_twin(*q);
  std::int64_t largest = 0, all = 0;
  for (const auto& name : q->names())
    if (const QuantizedWeight* w = q->quantized(name)) {
      largest = std::max(largest, w->numel() * 4);
      all += w->numel() * 4;
    }
  REQUIRE(all > 2 * largest);
  MemoryTracker& tracker = MemoryTracker::instance();
  auto full = make_strategy("full");
  tracker.start_census();
  const StepResult r = run_step(*s.model, *q, s.batch, {full.get(), 3, 0});
  tracker.stop_census();
  const auto census = tracker.census().at("dequantized_weight");
  CHECK(census.allocations == r.forward_ops.at("dequantize"));  // a workspace per product, forward and backward
  // The dense twin holds the same activations and no workspace: the
  // quantized step's peak is above it by one weight's workspace at most.
  const StepResult d = run_step(*s.model, *dense, s.batch, {full.get(), 3, 0});
  CHECK(r.activation_peak >= d.activation_peak);
  CHECK(r.activation_peak <= d.activation_peak + largest);
}

TEST_CASE("bad quantization is one clear error", "[quantize][errors]") {
  test::TinyModel s = test::tiny_model("gpt2", 2, 1, 0.0);
  FineTuning ft;
  ft.quantize = QuantFormat::nf4;
  CHECK_THROWS_WITH(apply_fine_tuning(s.params, *s.model, s.batch, ft, 1, s.setup), Catch::Contains("nothing is frozen"));
  ft.freeze.patterns = {"wte.weight"};  // frozen, but an embedding (and the tied head): no linear's alone
  CHECK_THROWS_WITH(apply_fine_tuning(s.params, *s.model, s.batch, ft, 1, s.setup),
                    Catch::Contains("no frozen weight is a linear layer's"));
  CHECK_THROWS_WITH(parse_quant_format("nf3"), Catch::Contains("nf4, int8"));
  ParamStore odd({{"l.weight", {3, 5}}}, DType::f32);
  CHECK_THROWS_AS(odd.quantize("l.weight", QuantFormat::nf4), std::logic_error);  // trainable
  odd.freeze("l.weight");
  CHECK_THROWS_WITH(odd.quantize("l.weight", QuantFormat::nf4), Catch::Contains("not whole blocks of 64"));
  ParamStore store({{"l.weight", {4, 64}}}, DType::f32);
  store.freeze("l.weight");
  store.quantize("l.weight", QuantFormat::int8);
  CHECK_THROWS_WITH(store["l.weight"], Catch::Contains("is quantized"));
  CHECK(store.tensors()[0].dtype() == DType::u8);
}

TEST_CASE("shape-only: a QLoRA step holds the measured bytes, the quantized base in its pool", "[quantize][shape_only]") {
  for (const char* name : {"gpt2", "llama", "encdec"})
    for (Precision precision : {Precision::fp32, Precision::bf16}) {
      INFO(name << " " << precision_name(precision));
      test::TinyModel s = test::tiny_model(name, 2, 1, 0.1);
      FineTuning ft;
      ft.lora.rank = 4;
      ft.quantize = QuantFormat::nf4;
      const auto specs = strategies_for(name, "all", ops::AttentionKernel::fused);
      ShapeOnlyExtras extras;
      extras.prepare = [&](std::unique_ptr<ParamStore>& p, const Model& model, const Batch& batch) {
        apply_fine_tuning(p, model, batch, ft, 1, s.setup);
      };
      const ShapeOnlyRun shape = shape_only_run(s.setup, specs, ops::AttentionKernel::fused, "adamw", nullptr, precision,
                                                extras);
      auto q = qlora(s, QuantFormat::nf4, 2);
      std::int64_t quantized = 0;
      for (const auto& n : q->names())
        if (q->quantized(n)) quantized += std::int64_t(q->tensors()[q->index_of(n)].nbytes() + 7) / 8 * 8;
      CHECK(shape.state.quantized_bytes == quantized);
      std::int64_t adapters = 0, widest = 0;
      for (std::size_t i = 0; i < q->names().size(); ++i) {
        if (q->trainable(i)) adapters += std::int64_t(q->tensors()[i].nbytes());
        if (const QuantizedWeight* w = q->quantized(q->names()[i])) widest = std::max(widest, w->numel());
      }
      CHECK(shape.state.trainable_bytes == adapters);
      CHECK(shape.state.dequantize_bytes == (widest * (precision == Precision::fp32 ? 4 : 2) + 7) / 8 * 8);
      auto full = make_strategy("full");
      StepOptions warm{full.get(), 1, 0, false, ops::AttentionKernel::fused};
      warm.precision = precision;
      forward_backward(*s.model, *q, s.batch, warm);
      for (std::size_t i = 0; i < specs.size(); ++i) {
        INFO(specs[i]);
        auto strategy = make_strategy(specs[i]);
        StepOptions o{strategy.get(), 1, 0, false, ops::AttentionKernel::fused};
        o.precision = precision;
        const StepResult r = run_step(*s.model, *q, s.batch, o);
        CHECK(shape.steps[i].activation_peak == r.activation_peak);
        CHECK(shape.steps[i].flops == r.flops);
      }
    }
}

namespace {

// Every strategy's measured activation peak against its prediction, on the
// small preset's blocks at a small batch (2 x 32), fine-tuned as `ft` says.
void check_predicted_to_the_byte(const std::string& name, int layers, const FineTuning& ft,
                                 const std::vector<std::string>& specs) {
  Sizes z = preset_sizes("small");
  z.L = layers, z.B = 2, z.S = 32, z.dropout = 0;
  const auto model = models().find(name).make(z);
  auto params = std::make_unique<ParamStore>(model->params(), DType::f32);
  initialize(*params, 3, z.L);
  const Batch batch = random_batch(z.B, z.S, z.V, 3);
  apply_fine_tuning(params, *model, batch, ft, 3, {name, "small", z});
  const CheckReport report = run_check(*model, *params, batch, specs, {});  // a step over its budget throws
  for (const auto& row : report.rows) {
    INFO(name << " " << row.strategy);
    CHECK(row.vs_full.bitwise);
    // Which plan a budget picks follows the probe's timings (this CPU's): a
    // plan dropping tags inside a recomputation may be over-predicted
    // (test_planner), so only the fixed strategies are held to the byte.
    if (row.strategy.rfind("budget:", 0) == 0) CHECK(row.step.activation_peak <= row.predicted.device);
    else CHECK(row.step.activation_peak == row.predicted.device);
  }
}

}  // namespace

TEST_CASE("a recomputation runs beside its segment's output gradient: QLoRA peaks predicted to the byte",
          "[quantize][memory]") {
  // At a small batch a frozen product's dequantized weight makes a block's
  // recomputation the step's peak, run beside what the backward had made
  // when it asked for it: the segment output's gradient and, behind a LoRA
  // product, its scaled gradient. Predictions that counted neither (or the
  // segment's input in their place) were over- or under-budget here.
  FineTuning ft;
  ft.lora.rank = 4;
  ft.lora.targets = {"*.attn.c_attn.weight", "*.mlp.c_proj.weight"};
  ft.quantize = QuantFormat::int8;
  check_predicted_to_the_byte("gpt2", 4, ft, {"per-layer", "every:2", "offload-checkpoint", "budget:60%", "budget:70%"});
}

TEST_CASE("an offloaded block's backward that peaks before its first read runs without its fetched groups",
          "[quantize][memory][offload]") {
  // A frozen product's input gradient dequantizes its weight before the
  // block's backward reads anything it saved, so before the fetch that
  // brings the block's group back and sends for the one before it. The
  // prediction put that group beside the block's whole backward: `offload`
  // under QLoRA was over-predicted by it (96 KiB on gpt2 and llama here).
  FineTuning ft;
  ft.lora.rank = 4;
  ft.quantize = QuantFormat::nf4;
  for (const std::string name : {"gpt2", "llama"})
    check_predicted_to_the_byte(name, 4, ft, {"offload", "offload-checkpoint", "full"});
}

TEST_CASE("revformer under QLoRA: no handle keeps the embeddings past the first block", "[quantize][memory]") {
  // Under LoRA nothing saves the frozen embeddings, and the model's code held
  // them (both streams' start) through the whole forward: every block's
  // forward counted them beside the checkpoint that keeps them (one stream
  // over on every checkpointing strategy), and full held them for nothing.
  FineTuning ft;
  ft.lora.rank = 4;
  ft.quantize = QuantFormat::nf4;
  check_predicted_to_the_byte("revformer", 4, ft, {"full", "per-layer", "every:2", "offload-checkpoint"});
}

TEST_CASE("a saved tensor let go before backward is kept by no strategy: mixtral's LoRA peaks to the byte",
          "[quantize][memory]") {
  // Under LoRA the frozen router's input, saved by its norm, is let go with
  // the node that saved it before backward runs (no gradient needs it): the
  // probe counted it as kept through the step, over-predicting every
  // strategy by one such tensor per block.
  FineTuning ft;
  ft.lora.rank = 4;
  check_predicted_to_the_byte("mixtral", 2, ft, {"full", "per-layer", "selective", "budget:min"});
  ft.quantize = QuantFormat::nf4;
  check_predicted_to_the_byte("mixtral", 2, ft, {"full", "per-layer", "selective", "budget:min"});
}
