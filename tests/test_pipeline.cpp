// Pipeline schedules (pipeline/schedule.hpp): every pass once, backward in
// micro-batch order on every chunk (the order a single rank accumulates),
// no schedule waits forever, and the bubble and the micro-batches in flight
// are the published ones.
#include <catch2/catch.hpp>

#include <map>

#include "core/error.hpp"
#include "pipeline/schedule.hpp"

using namespace remat;
using namespace remat::pipeline;

namespace {

std::vector<pipeline::Schedule> schedules_for(int stages) {
  std::vector<pipeline::Schedule> out = {parse_schedule("gpipe"), parse_schedule("1f1b")};
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
            CHECK(p.micro_batch == seen);  // forward and backward each in order 0..M-1, per chunk
            ++seen;
          }
          CHECK(int(list.size()) == 2 * M * s.virtual_stages);
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
        "--schedule 'pipedream': not a schedule (gpipe, 1f1b, interleaved:V)");
  CHECK(stage_layers(22, 4, "5,6,6,5") == std::vector<int>{5, 6, 6, 5});
  CHECK(stage_layers(8, 4, "") == std::vector<int>{2, 2, 2, 2});
  CHECK_NOTHROW(validate(inter, 16, 4, 8, ""));
}
