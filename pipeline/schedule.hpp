#pragma once
// Pipeline schedules: the order in which each of N stages runs the forward
// and backward passes of M micro-batches. A schedule is data (a list of
// passes per stage); a stage runner (pipeline/stage_runner.hpp) executes
// one stage's list, and a simulation (simulate) replays all of them against
// their dependencies, which is how the tests prove a schedule never waits
// forever and how its bubble is counted.
//
//   gpipe          every forward, then every backward (each stage holds all M)
//   1f1b           N-1-s forwards to warm up stage s, then one forward and one
//                  backward in turn: stage s holds at most N-s micro-batches
//   interleaved:V  each rank runs V model chunks (virtual stages s, s+N, ...),
//                  Megatron's order: groups of N micro-batches per chunk
//   zb-h1          Qi et al.'s zero-bubble schedule (ICLR 2024): backward
//                  split into B (the activations' gradients, what the
//                  previous stage waits for) and W (the parameters'), W
//                  delayed into the bubble. Stage s runs, for x = 0, 1, ...,
//                  forward x, B of x - (N-1-s) and W of x - (N-1), each that
//                  exists: 1F1B's forwards and B passes, so 1F1B's
//                  micro-batches in flight, and stage s holds the W inputs of
//                  s micro-batches besides (autodiff/weight_gradients.hpp)
//
// Backward passes run micro-batches in order 0..M-1 on every stage, so each
// parameter's gradient sums micro-batches in the order a single rank's
// gradient accumulation does.
#include <functional>
#include <string>
#include <vector>

namespace remat::pipeline {

// What --pp, --micro-batches, --schedule and --stage-layers ask for.
struct PipelineSettings {
  int stages = 1;         // N, pipeline ranks
  int micro_batches = 1;  // M per step, B sequences each
  std::string schedule = "1f1b";
  std::string stage_layers;  // "" for an even split
  bool split() const { return stages > 1; }
  bool stepped() const { return split() || micro_batches > 1; }  // a step of micro-batches, pipelined or accumulated
};

// backward: the whole backward, or zb-h1's B; weight: zb-h1's W.
enum class PassKind { forward, backward, weight };

struct Pass {
  PassKind kind = PassKind::forward;
  int micro_batch = 0;
  int chunk = 0;  // the model chunk (interleaved: 0..V-1; else 0)
};

struct Schedule {
  std::string name;        // "gpipe", "1f1b", "interleaved"
  int virtual_stages = 1;  // V, model chunks per rank
  std::string spec() const;
  // Whether backward comes as B and W passes (zb-h1).
  bool splits_backward() const { return name == "zb-h1"; }
};

// "gpipe", "1f1b", "interleaved:V" (V >= 2), "zb-h1"; UserError naming the
// choices for anything else.
Schedule parse_schedule(const std::string& spec);

// Layers per stage: `given` (comma-separated counts, "" for an even split).
// UserError, one line, where N does not divide L without `given`, where the
// counts do not sum to L or are not N positive numbers.
std::vector<int> stage_layers(int layers, int stages, const std::string& given);

// UserError where --schedule or --stage-layers are given without --pp.
void refuse_without_stages(const PipelineSettings& p);

// Checks a layout before anything runs (UserError, one line): M at least
// what the schedule needs (interleaved: a multiple of N), and under
// interleaved:V an even split of L into N x V chunks.
void validate(const Schedule& s, int layers, int stages, int micro_batches, const std::string& given_layers);

// The passes of each rank, in order: result[s] is rank s's list.
std::vector<std::vector<Pass>> passes(const Schedule& s, int stages, int micro_batches);

// The replay of every rank's list with each pass taking `forward_cost` or
// `backward_cost` (zb-h1: half of it each for B and W) and waiting for its
// inputs (the previous virtual stage's forward; the next one's backward; W
// its own B). UserError if the lists deadlock.
struct Simulation {
  double makespan = 0;
  double bubble = 0;                // idle share of N x makespan
  std::vector<int> most_in_flight;  // per rank: micro-batch chunks forwarded, not yet backwarded
  // Per rank, each pass's start and end, in the rank's order.
  std::vector<std::vector<std::pair<double, double>>> times;
};
Simulation simulate(const Schedule& s, int stages, int micro_batches, double forward_cost, double backward_cost);
// The same with each pass's own cost, `cost(rank, pass)`, and `transfer`
// seconds for every tensor sent between ranks (its receiver waits for it).
Simulation simulate(const Schedule& s, int stages, int micro_batches,
                    const std::function<double(int, const Pass&)>& cost, double transfer = 0);

// 1F1B's bubble by the usual formula: (p - 1) / (M + p - 1); with the
// backward split (zb-h1), Qi et al.'s (p - 1) / (3M + p - 1), for F, B and W
// passes of equal length.
double bubble_formula(int stages, int micro_batches, bool split_backward = false);

}  // namespace remat::pipeline
