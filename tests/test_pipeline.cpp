// Pipeline schedules (pipeline/schedule.hpp): every pass once, backward in
// micro-batch order on every chunk (the order a single rank accumulates),
// no schedule waits forever, and the bubble and the micro-batches in flight
// are the published ones.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include "autodiff/elementwise.hpp"
#include "autodiff/weight_gradients.hpp"
#include "core/error.hpp"
#include "harness/layout_search.hpp"
#include "pipeline/schedule.hpp"
#include "pipeline/stage_runner.hpp"
#include "step/step.hpp"
#include "strategies/registry.hpp"
#include "zoo/configs.hpp"
#include "zoo/params.hpp"

using namespace remat;
using namespace remat::pipeline;

namespace {

std::vector<pipeline::Schedule> schedules_for(int stages) {
  std::vector<pipeline::Schedule> out = {parse_schedule("gpipe"), parse_schedule("1f1b"), parse_schedule("zb-h1")};
  if (stages > 1) out.push_back(parse_schedule("interleaved:2"));
  if (stages > 1) out.push_back(parse_schedule("interleaved:3"));
  return out;
}

}  // namespace

TEST_CASE("every schedule runs each pass once, backward in micro-batch order, and never waits forever",
          "[pipeline][quick]") {
  for (int N = 1; N <= 4; ++N)
    for (const pipeline::Schedule& s : schedules_for(N))
      for (int M = 1; M <= 8; ++M) {
        if (s.name == "interleaved" && M % N != 0) continue;
        INFO(s.spec() << " N " << N << " M " << M);
        const auto lists = passes(s, N, M);
        REQUIRE(int(lists.size()) == N);
        for (const auto& list : lists) {
          std::map<std::pair<int, int>, int> count;  // (kind, chunk) -> passes so far, which is the next micro-batch
          for (const Pass& p : list) {
            int& seen = count[{int(p.kind), p.chunk}];
            CHECK(p.micro_batch == seen);  // forward, backward (B) and W each in order 0..M-1, per chunk
            if (p.kind == PassKind::weight) CHECK(count[{int(PassKind::backward), p.chunk}] > p.micro_batch);
            ++seen;
          }
          CHECK(int(list.size()) == (s.splits_backward() ? 3 : 2) * M * s.virtual_stages);
          for (const auto& [key, n] : count) CHECK(n == M);
        }
        const Simulation sim = simulate(s, N, M, 1, 2);  // throws if it deadlocks
        CHECK(sim.bubble >= 0);
      }
}

TEST_CASE("1F1B's bubble is (p-1)/(M+p-1) and stage s holds min(p-s, M) micro-batches; GPipe holds M",
          "[pipeline][quick]") {
  for (int N = 1; N <= 4; ++N)
    for (int M = 1; M <= 8; ++M) {
      INFO("N " << N << " M " << M);
      const Simulation one = simulate(parse_schedule("1f1b"), N, M, 1, 2);
      CHECK(one.bubble == Approx(bubble_formula(N, M)).margin(1e-12));
      const Simulation g = simulate(parse_schedule("gpipe"), N, M, 1, 2);
      CHECK(g.bubble == Approx(bubble_formula(N, M)).margin(1e-12));  // the same bubble, more memory
      for (int r = 0; r < N; ++r) {
        CHECK(one.most_in_flight[std::size_t(r)] == std::min(N - r, M));
        CHECK(g.most_in_flight[std::size_t(r)] == M);
      }
    }
}

// Qi et al.'s ZB-H1 with passes of equal length (F = B = W): 1F1B's
// forwards and B passes, so 1F1B's micro-batches in flight on every stage,
// and a bubble of (p-1)(F + B - W) where 1F1B's is (p-1)(F + B + W): a
// third (M >= p: the W passes fill the rest).
TEST_CASE("ZB-H1 holds 1F1B's micro-batches in flight with a third of its bubble", "[pipeline][quick]") {
  for (int N = 1; N <= 4; ++N)
    for (int M = N; M <= 8; ++M) {
      INFO("N " << N << " M " << M);
      const Simulation zb = simulate(parse_schedule("zb-h1"), N, M, 1, 2), one = simulate(parse_schedule("1f1b"), N, M, 1, 2);
      CHECK(zb.makespan == Approx(3.0 * M + (N - 1)).margin(1e-12));
      CHECK(one.makespan - 3.0 * M == Approx(3 * (zb.makespan - 3.0 * M)).margin(1e-12));
      CHECK(zb.most_in_flight == one.most_in_flight);
    }
}

TEST_CASE("interleaving V chunks divides 1F1B's bubble by V: (p-1)/(VM+p-1)", "[pipeline][quick]") {
  for (int N = 2; N <= 4; ++N)
    for (int V = 2; V <= 3; ++V)
      for (int M = N; M <= 3 * N; M += N) {
        INFO("N " << N << " V " << V << " M " << M);
        const Simulation sim = simulate(parse_schedule("interleaved:" + std::to_string(V)), N, M, 1, 2);
        CHECK(sim.bubble == Approx(double(N - 1) / double(V * M + N - 1)).margin(1e-12));
      }
}

TEST_CASE("bad pipeline layouts: one line each", "[pipeline][quick]") {
  const auto error_of = [](const std::function<void()>& fn) {
    try {
      fn();
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const pipeline::Schedule one = parse_schedule("1f1b"), inter = parse_schedule("interleaved:2");
  CHECK(error_of([&] { validate(one, 10, 4, 4, ""); }) ==
        "--pp 4: does not divide the 10 layers; give --stage-layers for an uneven split");
  CHECK(error_of([&] { validate(one, 10, 4, 4, "3,3,3,3"); }) ==
        "--stage-layers '3,3,3,3': sums to 12, not the model's 10 layers");
  CHECK(error_of([&] { validate(one, 10, 4, 4, "3,3,4"); }) == "--stage-layers '3,3,4': 3 counts for --pp 4");
  CHECK(error_of([&] { validate(one, 10, 4, 4, "3,x,3,1"); }) ==
        "--stage-layers '3,x,3,1': takes positive layer counts, comma-separated");
  CHECK(error_of([&] { validate(one, 8, 4, 0, ""); }) == "--micro-batches 0: at least 1");
  CHECK(error_of([&] { validate(inter, 12, 4, 8, ""); }) ==
        "--schedule interleaved:2: 12 layers do not split into 4 x 2 chunks");
  CHECK(error_of([&] { validate(inter, 16, 4, 6, ""); }) ==
        "--schedule interleaved:2: --micro-batches 6 is not a multiple of --pp 4 (micro-batches go round in groups "
        "of N)");
  CHECK(error_of([&] { parse_schedule("interleaved:1"); }) ==
        "--schedule 'interleaved:1': interleaved:V takes V >= 2 model chunks per rank");
  CHECK(error_of([&] { parse_schedule("pipedream"); }) ==
        "--schedule 'pipedream': not a schedule (gpipe, 1f1b, interleaved:V, zb-h1)");
  CHECK(stage_layers(22, 4, "5,6,6,5") == std::vector<int>{5, 6, 6, 5});
  CHECK(stage_layers(8, 4, "") == std::vector<int>{2, 2, 2, 2});
  CHECK_NOTHROW(validate(inter, 16, 4, 8, ""));
}

namespace {

struct Accumulated {
  std::vector<double> losses;
  std::vector<std::vector<double>> grads;  // per parameter, in the store's order
};

std::vector<std::vector<double>> grads_of(const ParamStore& params) {
  std::vector<std::vector<double>> out;
  for (const auto& t : params.tensors()) out.push_back(t.grad().defined() ? t.grad().to_host_f64() : std::vector<double>{});
  return out;
}

// A single rank accumulating the M micro-batches, one step each, in order
// (micro-batch m its own step m, as a training's, so that dropout draws anew).
Accumulated accumulated(const Model& model, const ParamStore& params, const std::vector<Batch>& batches,
                        const std::string& spec) {
  auto strategy = make_strategy(spec);
  Accumulated a;
  for (std::size_t m = 0; m < batches.size(); ++m) {
    StepOptions o;
    o.strategy = strategy.get();
    o.zero_grad = m == 0;
    o.step = m;
    a.losses.push_back(forward_backward(model, params, batches[m], o));
  }
  a.grads = grads_of(params);
  return a;
}

}  // namespace

// The pipeline's arithmetic, every stage in this process: each schedule
// under each strategy gives the losses and the gradients of a single rank
// accumulating the same micro-batches, bitwise (the tied embedding of gpt2
// included: the stages' backward passes reach it in the single rank's order),
// with and without dropout (each stage draws from where the single rank's
// forward is in its count of random ops, for the micro-batch's own step).
TEST_CASE("every schedule and strategy: a pipelined step's losses and gradients are a single rank's accumulation, "
          "bitwise",
          "[pipeline]") {
  const int M = 4;
  for (const double dropout : {0.0, 0.1})
  for (const std::string name : {"gpt2", "llama", "mixtral", "encdec"})
    for (const auto& [N, spec_schedule, L] : std::vector<std::tuple<int, std::string, int>>{
             {2, "gpipe", 4}, {2, "1f1b", 4}, {4, "1f1b", 4}, {2, "interleaved:2", 4}, {2, "zb-h1", 4},
             {4, "zb-h1", 4}}) {
      Sizes z = preset_sizes("tiny");
      z.L = L;
      z.dropout = dropout;
      const auto model = models().find(name).make(z);
      ParamStore params(model->params(), DType::f32);
      initialize(params, 1, z.L);
      std::vector<Batch> batches;
      for (int m = 0; m < M; ++m) batches.push_back(random_batch(z.B, z.S, z.V, 10 + m));
      const pipeline::Schedule schedule = parse_schedule(spec_schedule);
      validate(schedule, z.L, N, M, "");
      const Layout layout = make_layout(schedule, z.L, N, "");
      for (const std::string spec : {"full", "per-layer", "every:2", "selective", "offload", "offload-checkpoint"}) {
        INFO(name << " " << spec_schedule << " over " << N << ", " << spec << ", dropout " << dropout);
        const Accumulated want = accumulated(*model, params, batches, spec);
        params.zero_grad();
        auto strategy = make_strategy(spec);
        StageStep step;
        step.model = model.get();
        step.params = &params;
        step.micro_batches = &batches;
        step.options.strategy = strategy.get();
        const std::vector<double> losses = run_in_process(step, schedule, layout);
        CHECK(losses == want.losses);
        const auto got = grads_of(params);
        for (std::size_t i = 0; i < got.size(); ++i) {
          INFO(params.names()[i]);
          // gpt2's tied embedding sums the head's and the embedding's parts
          // of each micro-batch in turn on one rank; a schedule whose first
          // stage runs micro-batch m's backward after the last stage ran
          // m + 1's adds them in another order: equal to rounding only.
          // (encdec's is read on three stages: the encoder's embedding, the
          // decoder's and the head.)
          const bool reordered = (name == "encdec" || (name == "gpt2" && !(spec_schedule == "gpipe" ||
                                                                           (spec_schedule == "1f1b" && N == 2)))) &&
                                 params.names()[i] == "wte.weight";
          if (!reordered) {
            CHECK(got[i] == want.grads[i]);
            continue;
          }
          double largest = 0, worst = 0;
          for (std::size_t j = 0; j < got[i].size(); ++j) {
            largest = std::max(largest, std::abs(want.grads[i][j]));
            worst = std::max(worst, std::abs(got[i][j] - want.grads[i][j]));
          }
          CHECK(worst <= 1e-6 * largest);
        }
      }
    }
}

// The tape's split of a backward (zb-h1's B and W, autodiff/weight_gradients.hpp):
// B leaves every parameter's gradient as it was and gives the activations'
// gradients; W then gives each parameter's, and both are one backward's bits.
TEST_CASE("a backward split into B and W: B writes no parameter gradient, B + W is one backward, bitwise",
          "[pipeline][quick]") {
  for (const std::string name : {"gpt2", "llama", "mixtral", "encdec"}) {  // (the models split into stages)
    INFO(name);
    Sizes z = preset_sizes("tiny");
    z.L = 2;
    const auto model = models().find(name).make(z);
    ParamStore params(model->params(), DType::f32);
    initialize(params, 1, z.L);
    const Batch batch = random_batch(z.B, z.S, z.V, 3);
    // The loss's gradient through the blocks alone, from a leaf input of the blocks.
    const auto run = [&](bool split) {
      params.zero_grad();
      NoGradScope no_grad;
      Tensors x = model->embed(params, batch);
      x[0] = clone(x[0]);
      EnableGradScope grad;
      auto slot = std::make_shared<GradSlot>();
      slot->shape = x[0].shape();
      slot->retain = true;
      x[0].attach_slot(slot);
      const Tensor loss = model->head_loss(params, model->layers(params, x, 0, z.L, batch), batch).total;
      DeferredWeightGradients apart;
      {
        std::optional<DeferWeightGradientsScope> scope;
        if (split) scope.emplace(apart);
        backward(loss);
      }
      if (split) {
        for (const auto& g : grads_of(params))
          for (double v : g) REQUIRE(v == 0);  // B: no parameter's gradient yet
        CHECK_FALSE(apart.empty());
        apart.run();
      }
      return std::make_pair(slot->grad->to_host_f64(), grads_of(params));
    };
    const auto whole = run(false), split = run(true);
    CHECK(split.first == whole.first);
    CHECK(split.second == whole.second);
  }
}

TEST_CASE("an uneven split (--stage-layers) is exact too", "[pipeline]") {
  Sizes z = preset_sizes("tiny");
  z.L = 5;
  const auto model = models().find("llama").make(z);
  ParamStore params(model->params(), DType::f32);
  initialize(params, 1, z.L);
  std::vector<Batch> batches;
  for (int m = 0; m < 3; ++m) batches.push_back(random_batch(z.B, z.S, z.V, 20 + m));
  const Accumulated want = accumulated(*model, params, batches, "per-layer");
  params.zero_grad();
  auto strategy = make_strategy("per-layer");
  const pipeline::Schedule schedule = parse_schedule("1f1b");
  StageStep step;
  step.model = model.get();
  step.params = &params;
  step.micro_batches = &batches;
  step.options.strategy = strategy.get();
  CHECK(run_in_process(step, schedule, make_layout(schedule, z.L, 3, "1,3,1")) == want.losses);
  CHECK(grads_of(params) == want.grads);
}

TEST_CASE("a replay with each pass's own cost waits for what crosses between ranks", "[pipeline][quick]") {
  const auto cost = [](int, const Pass& p) { return p.kind == PassKind::forward ? 1.0 : 2.0; };
  // One micro-batch through two stages: F0, send, F1, B1, send back, B0.
  const Simulation one = simulate(parse_schedule("1f1b"), 2, 1, cost, 0.5);
  CHECK(one.makespan == 7.0);
  CHECK(one.bubble == Approx(1 - 6.0 / 14.0));
  // Without transfers it is the uniform replay.
  CHECK(simulate(parse_schedule("1f1b"), 3, 5, cost, 0).makespan == simulate(parse_schedule("1f1b"), 3, 5, 1, 2).makespan);
}

// `remat plan --gpus` splits L blocks over pp stages as Llama 3 did: as
// even as L allows, the extra blocks on the middle stages.
TEST_CASE("the layout planner's stages: as even as L allows, the extra blocks in the middle", "[pipeline][quick]") {
  std::vector<int> llama3(16, 8);
  llama3.front() = llama3.back() = 7;
  CHECK(balanced_stage_layers(126, 16) == llama3);
  CHECK(balanced_stage_layers(12, 4) == std::vector<int>{3, 3, 3, 3});
  CHECK(balanced_stage_layers(10, 4) == std::vector<int>{2, 3, 3, 2});
  CHECK(balanced_stage_layers(7, 2) == std::vector<int>{4, 3});
}
