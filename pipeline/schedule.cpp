#include "pipeline/schedule.hpp"

#include <algorithm>
#include <cctype>
#include <functional>
#include <sstream>

#include "core/error.hpp"

namespace remat::pipeline {

std::string Schedule::spec() const { return name == "interleaved" ? name + ":" + std::to_string(virtual_stages) : name; }

Schedule parse_schedule(const std::string& spec) {
  if (spec == "gpipe" || spec == "1f1b") return {spec, 1};
  const std::string prefix = "interleaved:";
  if (spec.rfind(prefix, 0) == 0) {
    const std::string v = spec.substr(prefix.size());
    int V = 0;
    if (!v.empty() && v.size() < 4 && std::all_of(v.begin(), v.end(), ::isdigit)) V = std::stoi(v);
    if (V < 2) throw UserError("--schedule '" + spec + "': interleaved:V takes V >= 2 model chunks per rank");
    return {"interleaved", V};
  }
  if (spec == "zb-h1") return {spec, 1};
  throw UserError("--schedule '" + spec + "': not a schedule (gpipe, 1f1b, interleaved:V, zb-h1)");
}

std::vector<int> stage_layers(int layers, int stages, const std::string& given) {
  if (stages < 1) throw UserError("--pp " + std::to_string(stages) + ": at least 1 stage");
  if (given.empty()) {
    if (layers % stages != 0)
      throw UserError("--pp " + std::to_string(stages) + ": does not divide the " + std::to_string(layers) +
                      " layers; give --stage-layers for an uneven split");
    return std::vector<int>(std::size_t(stages), layers / stages);
  }
  if (given.back() == ',') throw UserError("--stage-layers '" + given + "': takes positive layer counts, comma-separated");
  std::vector<int> counts;
  std::stringstream in(given);
  for (std::string part; std::getline(in, part, ',');) {
    const bool digits = !part.empty() && part.size() < 7 && std::all_of(part.begin(), part.end(), ::isdigit);
    if (!digits || std::stoi(part) < 1)
      throw UserError("--stage-layers '" + given + "': takes positive layer counts, comma-separated");
    counts.push_back(std::stoi(part));
  }
  if (int(counts.size()) != stages)
    throw UserError("--stage-layers '" + given + "': " + std::to_string(counts.size()) + " counts for --pp " +
                    std::to_string(stages));
  int sum = 0;
  for (int c : counts) sum += c;
  if (sum != layers)
    throw UserError("--stage-layers '" + given + "': sums to " + std::to_string(sum) + ", not the model's " +
                    std::to_string(layers) + " layers");
  return counts;
}

void refuse_without_stages(const PipelineSettings& p) {
  if (!p.split() && (p.schedule != PipelineSettings{}.schedule || !p.stage_layers.empty()))
    throw UserError("a pipeline schedule and --stage-layers apply with --pp N (N of 2 or more)");
}

void validate(const Schedule& s, int layers, int stages, int micro_batches, const std::string& given_layers) {
  if (micro_batches < 1) throw UserError("--micro-batches " + std::to_string(micro_batches) + ": at least 1");
  if (s.name != "interleaved") {
    stage_layers(layers, stages, given_layers);
    return;
  }
  const int N = stages, V = s.virtual_stages;
  if (!given_layers.empty()) throw UserError("--stage-layers with --schedule " + s.spec() + ": chunks split evenly");
  if (layers % (N * V) != 0)
    throw UserError("--schedule " + s.spec() + ": " + std::to_string(layers) + " layers do not split into " +
                    std::to_string(N) + " x " + std::to_string(V) + " chunks");
  if (micro_batches % N != 0)
    throw UserError("--schedule " + s.spec() + ": --micro-batches " + std::to_string(micro_batches) +
                    " is not a multiple of --pp " + std::to_string(N) + " (micro-batches go round in groups of N)");
}

namespace {

// Rank s's 1F1B list over `count` passes, where forward k and backward k are
// made by `forward(k)` and `backward(k)`, after `warmup` forwards.
std::vector<Pass> one_forward_one_backward(int count, int warmup, const std::function<Pass(int)>& forward,
                                           const std::function<Pass(int)>& backward) {
  warmup = std::min(warmup, count);
  std::vector<Pass> out;
  for (int k = 0; k < warmup; ++k) out.push_back(forward(k));
  for (int k = 0; k < count - warmup; ++k) {
    out.push_back(forward(warmup + k));
    out.push_back(backward(k));
  }
  for (int k = count - warmup; k < count; ++k) out.push_back(backward(k));
  return out;
}

}  // namespace

std::vector<std::vector<Pass>> passes(const Schedule& s, int stages, int micro_batches) {
  const int N = stages, M = micro_batches, V = s.virtual_stages;
  std::vector<std::vector<Pass>> out(static_cast<std::size_t>(N));
  for (int r = 0; r < N; ++r) {
    if (s.name == "gpipe") {
      for (int m = 0; m < M; ++m) out[std::size_t(r)].push_back({PassKind::forward, m, 0});
      for (int m = 0; m < M; ++m) out[std::size_t(r)].push_back({PassKind::backward, m, 0});
    } else if (s.name == "zb-h1") {
      auto& list = out[std::size_t(r)];
      for (int x = 0; x < M + N - 1; ++x) {
        const int b = x - (N - 1 - r), w = x - (N - 1);
        if (x < M) list.push_back({PassKind::forward, x, 0});
        if (b >= 0 && b < M) list.push_back({PassKind::backward, b, 0});
        if (w >= 0 && w < M) list.push_back({PassKind::weight, w, 0});
      }
    } else if (s.name == "1f1b") {
      out[std::size_t(r)] = one_forward_one_backward(
          M, N - 1 - r, [](int k) { return Pass{PassKind::forward, k, 0}; },
          [](int k) { return Pass{PassKind::backward, k, 0}; });
    } else {
      // Megatron's interleaved order: the k-th pass of a kind runs chunk
      // (k mod NV) / N (backward: counted from the last chunk) on
      // micro-batch (k / NV) N + k mod N.
      const auto micro = [N, V](int k) { return (k / (N * V)) * N + k % N; };
      const auto chunk = [N, V](int k) { return (k % (N * V)) / N; };
      const int warmup = M == N ? M * V : (N - r - 1) * 2 + (V - 1) * N;
      out[std::size_t(r)] = one_forward_one_backward(
          M * V, warmup, [&](int k) { return Pass{PassKind::forward, micro(k), chunk(k)}; },
          [&](int k) { return Pass{PassKind::backward, micro(k), V - 1 - chunk(k)}; });
    }
  }
  return out;
}

Simulation simulate(const Schedule& s, int stages, int micro_batches, double forward_cost, double backward_cost) {
  const double V = s.virtual_stages, halves = s.splits_backward() ? 2 : 1;
  return simulate(s, stages, micro_batches, [=](int, const Pass& p) {
    return (p.kind == PassKind::forward ? forward_cost : backward_cost / halves) / V;
  });
}

Simulation simulate(const Schedule& s, int stages, int micro_batches,
                    const std::function<double(int, const Pass&)>& cost, double transfer) {
  const int N = stages, M = micro_batches, V = s.virtual_stages, last = N * V - 1;
  const auto lists = passes(s, N, M);
  // End times of each (kind, micro-batch, virtual stage); < 0: not yet run.
  std::vector<double> forward_end(std::size_t(M * N * V), -1), backward_end(std::size_t(M * N * V), -1);
  const auto at = [N, V](int m, int vs) { return std::size_t(m * N * V + vs); };
  Simulation sim;
  sim.times.resize(std::size_t(N));
  sim.most_in_flight.assign(std::size_t(N), 0);
  std::vector<std::size_t> next(std::size_t(N), 0);
  std::vector<double> clock(std::size_t(N), 0);
  std::vector<int> in_flight(std::size_t(N), 0);
  double busy = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < N; ++r)
      for (auto& i = next[std::size_t(r)]; i < lists[std::size_t(r)].size(); ++i) {
        const Pass& p = lists[std::size_t(r)][i];
        const int vs = p.chunk * N + r;
        if (p.kind == PassKind::weight) {  // after its own B, earlier in this rank's list: nothing to wait for
          const double start = clock[std::size_t(r)], end = start + cost(r, p);
          busy += end - start;
          clock[std::size_t(r)] = end;
          sim.times[std::size_t(r)].push_back({start, end});
          progress = true;
          continue;
        }
        const bool forward = p.kind == PassKind::forward;
        // What it waits for: the previous virtual stage's forward, the next one's backward (or its own forward).
        const double before = forward ? (vs == 0 ? 0 : forward_end[at(p.micro_batch, vs - 1)])
                                      : (vs == last ? forward_end[at(p.micro_batch, vs)]
                                                    : backward_end[at(p.micro_batch, vs + 1)]);
        if (before < 0) break;
        const bool sent = N > 1 && (forward ? vs > 0 : vs < last);  // its input came from another rank
        const double ready = before + (sent ? transfer : 0);
        const double start = std::max(clock[std::size_t(r)], ready);
        const double end = start + cost(r, p);
        busy += end - start;
        (forward ? forward_end : backward_end)[at(p.micro_batch, vs)] = end;
        clock[std::size_t(r)] = end;
        sim.times[std::size_t(r)].push_back({start, end});
        in_flight[std::size_t(r)] += forward ? 1 : -1;
        sim.most_in_flight[std::size_t(r)] = std::max(sim.most_in_flight[std::size_t(r)], in_flight[std::size_t(r)]);
        progress = true;
      }
  }
  for (int r = 0; r < N; ++r)
    if (next[std::size_t(r)] < lists[std::size_t(r)].size())
      throw UserError("pipeline schedule " + s.spec() + ": rank " + std::to_string(r) + " waits forever at pass " +
                      std::to_string(next[std::size_t(r)]));
  sim.makespan = *std::max_element(clock.begin(), clock.end());
  sim.bubble = sim.makespan > 0 ? 1 - busy / (double(N) * sim.makespan) : 0;
  return sim;
}

double bubble_formula(int stages, int micro_batches, bool split_backward) {
  return double(stages - 1) / double((split_backward ? 3 : 1) * micro_batches + stages - 1);
}

}  // namespace remat::pipeline
