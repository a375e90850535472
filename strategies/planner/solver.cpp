#include "strategies/planner/solver.hpp"

#include <algorithm>
#include <limits>
#include <memory>
#include <stdexcept>

namespace remat::planner {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr std::int16_t kInfeasible = -1;
constexpr std::int16_t kOffload = 999;   // a plain block that moves what it saves to the host pool
constexpr std::int16_t kSegment = 1000;  // a choice >= kSegment: a (sub-)segment ending at block choice - kSegment

class Program {
 public:
  Program(const ChainCosts& c, std::int64_t budget, int steps)
      : c_(c), L_(int(c.blocks.size())), u_(std::max<std::int64_t>(1, budget / steps)), M_(int(budget / u_)) {
    for (const auto& b : c.blocks) {
      in_.push_back(units(b.input));
      backward_.push_back(units(b.backward_peak));
    }
    seconds_before_.push_back(0);
    for (const auto& b : c.blocks) seconds_before_.push_back(seconds_before_.back() + b.forward_seconds);
    // Sizes in units, once: the program reads them in its innermost loops.
    need_.assign(std::size_t(L_) * L_, 0);
    context_.assign(need_.size(), 0);
    for (int k = 0; k < L_; ++k) {
      int need = 0;
      std::int64_t held = 0;
      for (int j = k; j < L_; ++j) {
        const auto& b = c.blocks[std::size_t(j)];
        need = std::max(need, units(c.blocks[std::size_t(k)].input +
                                    (j > k ? std::max(b.segment_forward, b.outside_before) : b.segment_first_forward)));
        held += b.context;
        need_[std::size_t(k) * L_ + j] = need;
        context_[std::size_t(k) * L_ + j] = units(held);
      }
    }
    // The spans' tables: one for spans that start at their first block, one
    // per distinct input a first block leaves held for the rest (0 included:
    // a sub-segment first keeps its input as it saves).
    kept_values_.push_back(0);
    for (const auto& b : c.blocks) {
      const int v = units(b.unsaved_input);
      auto x = std::find(kept_values_.begin(), kept_values_.end(), v);
      if (x == kept_values_.end()) x = kept_values_.insert(x, v);
      kept_table_.push_back(1 + int(x - kept_values_.begin()));
    }
    tables_ = 1 + int(kept_values_.size());
    // Left unset: each row is set as its turn comes (solve_span, solve_top),
    // while it is in cache, and only the rows the program uses are touched.
    span_ = std::make_unique<float[]>(std::size_t(tables_) * L_ * (L_ + 1) / 2 * (M_ + 1));
    span_choice_ = std::make_unique<std::int16_t[]>(std::size_t(tables_) * L_ * (L_ + 1) / 2 * (M_ + 1));
    G_ = c.allow_offload ? L_ + 1 : 1;
    top_ = std::make_unique<float[]>(std::size_t(L_ + 1) * G_ * (M_ + 1));
    top_choice_ = std::make_unique<std::int16_t[]>(std::size_t(L_ + 1) * G_ * (M_ + 1));
  }

  std::optional<std::vector<PlanPart>> run() {
    if (L_ == 0) return std::vector<PlanPart>{};
    for (int b = 0; b < L_; ++b)
      for (int k = b; k >= 0; --k) solve_span(k, b);
    for (int i = L_; i >= 0; --i)
      for (int g = 0; g < std::min(i + 1, G_); ++g) solve_top(i, g);
    if (top(0, 0, M_) == kInf) return std::nullopt;
    return top_parts();
  }

 private:
  // Whole units covering `bytes` (never fewer: rounding up keeps plans within the budget).
  int units(std::int64_t bytes) const {
    if (bytes <= 0) return 0;
    const std::int64_t n = (bytes + u_ - 1) / u_;
    return int(std::min<std::int64_t>(n, std::int64_t(M_) + 1));
  }
  // Table t of the spans (0: the span starts at block k; 1 + x: block k
  // continues one, whose first block left kept_values_[x] held). Spans k <= b
  // only: a table is a triangle, row b's spans side by side.
  std::size_t at(int t, int k, int b, int m) const {
    const std::size_t triangle = std::size_t(L_) * (L_ + 1) / 2;
    return (std::size_t(t) * triangle + std::size_t(b) * (b + 1) / 2 + k) * (M_ + 1) + m;
  }
  // A row of budgets before its first offer: nothing fits yet.
  void unset(float* best, std::int16_t* choice) const {
    std::fill(best, best + M_ + 1, kInf);
    std::fill(choice, choice + M_ + 1, kInfeasible);
  }
  // g: 0, or 1 + the last block before i that offloaded (the group its backward's fetch brings along).
  std::size_t top_at(int i, int g, int m) const { return (std::size_t(i) * G_ + g) * (M_ + 1) + m; }
  float top(int i, int g, int m) const { return m < 0 ? kInf : top_[top_at(i, g, m)]; }
  int group(int g) const { return g == 0 ? 0 : units(c_.blocks[std::size_t(g - 1)].saved); }
  int flight(int g) const { return c_.copies_in_flight ? group(g) : 0; }  // ChainCosts::copies_in_flight
  float forward(int first, int last) const { return float(seconds_before_[last + 1] - seconds_before_[first]); }
  // Running blocks k..j, saving nothing, inside a segment whose input (block k's) is held: the most any needs.
  int need(int k, int j) const { return need_[std::size_t(k) * L_ + j]; }
  // Context (BlockCosts::context) held from block `first` on, through `last`.
  int context(int first, int last) const { return context_[std::size_t(first) * L_ + last]; }
  int kept(int k, const Variant& v) const { return units(c_.blocks[std::size_t(k)].saved - v.dropped); }

  // Takes `cost(m)` at every m in [from, M] where it is cheaper than the best
  // so far: one choice for a whole row of budgets, each m as the program
  // would at that m alone (choices tried in the same order, ties kept).
  template <class Cost>
  void offer(float* best, std::int16_t* choice, int from, std::int16_t what, Cost cost) const {
    for (int m = std::max(from, 0); m <= M_; ++m) {
      const float c = cost(m);
      const bool better = c < best[m];
      best[m] = better ? c : best[m];
      choice[m] = better ? what : choice[m];
    }
  }

  // Blocks k..b of a recomputation, at every m, in every table (at()):
  // block k plain (re-run, keeping what it saves less a variant's drops),
  // or a sub-segment [k, r], r < b (its blocks re-run without saving; its
  // input kept; recomputed in its turn). A choice that does not fit m is
  // not offered there. A span's first block leaves its unsaved input held
  // through the rest of the recomputation (not its backward): the later
  // blocks' forwards count it (in the table the first block chose).
  void solve_span(int k, int b) {
    for (int t = 0; t < tables_; ++t) solve_span(t, k, b);
  }
  void solve_span(int t, int k, int b) {
    const auto& blk = c_.blocks[std::size_t(k)];
    const std::int64_t beside = c_.blocks[std::size_t(b)].recompute_beside;  // what block b's backward made
    const int held = t == 0 ? 0 : kept_values_[std::size_t(t - 1)];  // the span's input, through forwards
    float* best = &span_[at(t, k, b, 0)];
    std::int16_t* choice = &span_choice_[at(t, k, b, 0)];
    unset(best, choice);
    for (std::size_t v = 0; v < blk.variants.size(); ++v) {
      const auto& var = blk.variants[v];
      // The span's last block is recomputed up to its last save only.
      const int fits = std::max(units((k == b ? var.recompute_peak : var.forward_peak) + beside) + held,
                                backward_[std::size_t(k)]);
      const float run = float(blk.forward_seconds + var.seconds);
      if (k == b) {
        offer(best, choice, fits, std::int16_t(v), [run](int) { return run + 0.f; });
      } else {
        const int keep = kept(k, var);
        const float* rest = &span_[at(t == 0 ? kept_table_[std::size_t(k)] : t, k + 1, b, 0)];
        offer(best, choice, std::max(fits, keep), std::int16_t(v), [run, rest, keep](int m) { return run + rest[m - keep]; });
      }
    }
    const int input = in_[std::size_t(k)];
    for (int r = k; r < b; ++r) {
      const int fits = std::max(input, need(k, r) + units(beside) + held);
      if (fits > M_) break;  // nor any longer sub-segment: its need only grows
      const float run = forward(k, r);
      const float *after = &span_[at(t == 0 ? 1 : t, r + 1, b, 0)], *inner = &span_[at(0, k, r, 0)];
      offer(best, choice, fits, std::int16_t(kSegment + r),
            [run, after, inner, input](int m) { return run + after[m - input] + inner[m]; });
    }
  }

  // Blocks i.. at the top level, at every m (which leaves out the context of
  // blocks before i), g as in top(): block i plain (a variant), offloaded (if
  // allowed), or a segment [i, e] (never across a new stack).
  void solve_top(int i, int g) {
    float* best = &top_[top_at(i, g, 0)];
    std::int16_t* choice = &top_choice_[top_at(i, g, 0)];
    unset(best, choice);
    if (i == L_) {
      offer(best, choice, units(c_.outside_peak), 0, [](int) { return 0.f; });
      return;
    }
    const int own = context(i, i), f = flight(g);  // m here is the budget less own
    const auto& blk = c_.blocks[std::size_t(i)];
    const int before = units(blk.outside_before) + f;  // before its forward, beside what earlier blocks keep
    for (std::size_t v = 0; v < blk.variants.size(); ++v) {
      const auto& var = blk.variants[v];
      const int fits = std::max(units(var.forward_peak) + f, backward_[std::size_t(i)]), keep = kept(i, var);
      const float run = float(var.seconds);
      const float* rest = &top_[top_at(i + 1, g, 0)];
      offer(best, choice, std::max(before, own + std::max(fits, keep)), std::int16_t(v),
            [run, rest, own, keep](int m) { return run + rest[m - own - keep]; });
    }
    if (c_.allow_offload) {
      const int fits = std::max(units(blk.forward_peak) + f, group(g) + backward_[std::size_t(i)]);
      const float run = float(blk.offload_seconds);
      const float* rest = &top_[top_at(i + 1, i + 1, 0)];
      offer(best, choice, std::max(before, own + fits), kOffload, [run, rest, own](int m) { return run + rest[m - own]; });
    }
    const int input = in_[std::size_t(i)];
    for (int e = i; e < L_; ++e) {
      if (e > i && c_.blocks[std::size_t(e)].new_stack) break;
      const int held = context(i, e);  // the segment's context, kept before its recomputation
      const int fits = std::max({own + input, held + need(i, e) + f, held + input});
      if (std::max(own + input, held + need(i, e) + f) > M_) break;  // nor any longer segment: both only grow
      const float *inner = &span_[at(0, i, e, 0)], *rest = &top_[top_at(e + 1, g, 0)];
      offer(best, choice, std::max(before, fits), std::int16_t(kSegment + e),
            [inner, rest, held, input](int m) { return inner[m - held] + rest[m - held - input]; });
    }
  }

  PlanPart plain(int k, std::int16_t v) const {
    PlanPart p;
    p.first = p.last = k;
    p.drops = c_.blocks[std::size_t(k)].variants[std::size_t(v)].tags;
    return p;
  }
  // A segment whose recomputation keeps everything is written without inner parts.
  static PlanPart segment(int first, int last, std::vector<PlanPart> inner) {
    PlanPart p;
    p.first = first;
    p.last = last;
    p.segment = true;
    const bool flat = std::all_of(inner.begin(), inner.end(), [](const PlanPart& q) { return !q.segment && q.drops.empty(); });
    if (!flat) p.inner = std::move(inner);
    return p;
  }

  std::vector<PlanPart> span_parts(int k, int b, int m) const {
    std::vector<PlanPart> parts;
    for (int t = 0; k <= b;) {
      const std::int16_t choice = span_choice_[at(t, k, b, m)];
      if (choice == kInfeasible) throw std::logic_error("planner: reconstructing an infeasible span");
      if (choice < kSegment) {
        parts.push_back(plain(k, choice));
        m -= units(c_.blocks[std::size_t(k)].saved - c_.blocks[std::size_t(k)].variants[std::size_t(choice)].dropped);
        if (t == 0) t = kept_table_[std::size_t(k)];
        ++k;
      } else {
        const int r = choice - kSegment;
        parts.push_back(segment(k, r, span_parts(k, r, m)));
        m -= in_[std::size_t(k)];
        if (t == 0) t = 1;
        k = r + 1;
      }
    }
    return parts;
  }

  std::vector<PlanPart> top_parts() const {
    std::vector<PlanPart> parts;
    int i = 0, g = 0, m = M_;
    while (i < L_) {
      const std::int16_t choice = top_choice_[top_at(i, g, m)];
      if (choice == kInfeasible) throw std::logic_error("planner: reconstructing an infeasible plan");
      if (choice == kOffload) {
        PlanPart p;
        p.first = p.last = i;
        p.offload = true;
        parts.push_back(p);
        m -= context(i, i);
        g = ++i;
      } else if (choice < kSegment) {
        parts.push_back(plain(i, choice));
        m -= context(i, i) +
             units(c_.blocks[std::size_t(i)].saved - c_.blocks[std::size_t(i)].variants[std::size_t(choice)].dropped);
        ++i;
      } else {
        const int e = choice - kSegment;
        m -= context(i, e);
        parts.push_back(segment(i, e, span_parts(i, e, m)));
        m -= in_[std::size_t(i)];
        i = e + 1;
      }
    }
    return parts;
  }

  const ChainCosts& c_;
  int L_;
  std::int64_t u_;
  int M_;
  int G_ = 1;  // values of top()'s g: 1 without offload
  std::vector<int> in_, backward_;
  std::vector<int> kept_values_;   // the distinct BlockCosts::unsaved_input in units, 0 first
  std::vector<int> kept_table_;    // per block, the span table its unsaved input leads to
  int tables_ = 1;
  std::vector<int> need_, context_;  // need() and context(), L x L
  std::vector<double> seconds_before_;
  std::unique_ptr<float[]> span_, top_;
  std::unique_ptr<std::int16_t[]> span_choice_, top_choice_;
};

}  // namespace

int default_steps(int blocks) {
  const double l = std::max(1, blocks);
  return int(std::clamp(3e8 / (l * l * l), 256.0, 4096.0));
}

std::optional<Plan> solve(const ChainCosts& c, const SaveProfile& p, std::int64_t budget, int steps) {
  if (budget <= 0 || budget < c.tail_peak) return std::nullopt;
  if (c.blocks.size() >= std::size_t(kSegment)) throw std::invalid_argument("planner: at most 999 blocks");
  Program program(c, budget, steps > 0 ? steps : default_steps(int(c.blocks.size())));
  auto parts = program.run();
  if (!parts) return std::nullopt;
  Plan plan;
  plan.parts = std::move(*parts);
  plan.budget = budget;
  predict(plan, c, p);
  return plan;
}

std::int64_t smallest_budget(const ChainCosts& c, const SaveProfile& p) {
  // Feasible: everything kept (full's peak, with a margin for rounding).
  std::int64_t hi = 0;
  for (const auto& b : c.blocks) hi += b.saved + b.forward_peak + b.backward_peak + b.context + b.outside_before;
  hi += c.outside_peak + 1;
  hi = std::max(hi, c.tail_peak + 1);
  std::int64_t lo = std::max(c.outside_peak, c.tail_peak);
  for (const auto& b : c.blocks) lo = std::max({lo, b.backward_peak, b.outside_before});
  if (solve(c, p, lo)) return lo;
  while (hi - lo > std::max<std::int64_t>(1, hi / 200)) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (solve(c, p, mid, 512) ? hi : lo) = mid;
  }
  while (!solve(c, p, hi)) hi += std::max<std::int64_t>(1, hi / 200);  // the default resolution may round differently
  return hi;
}

}  // namespace remat::planner
