// Mixture-of-experts routing and dispatch, dropless (MegaBlocks, Hugging
// Face's Mixtral block): the router picks each token's top-k experts, the
// token rows are gathered into one buffer grouped by expert (T k rows in
// all, however the load falls), each expert's rows go through its own GEMM,
// and the results are scattered back weighted. One Routing, made once per
// block, serves the forward and the backward of every op here.
#include <algorithm>

#include "autodiff/elementwise.hpp"
#include "autodiff/gemm.hpp"
#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"
#include "core/error.hpp"

namespace remat::ops {
using namespace detail;
using gemm::Op;

namespace {

// A hash of the dispatch slots: backward compares the slots it reads (which
// a checkpoint may have recomputed) with forward's, so a recomputation that
// routed differently is an error, never a silently wrong gradient.
std::uint64_t fingerprint(const std::vector<std::int32_t>& slots) {
  std::uint64_t h = 0x9e3779b97f4a7c15ull;
  for (std::int32_t s : slots) h = (h ^ std::uint64_t(std::uint32_t(s))) * 0x100000001b3ull;
  return h;
}

void check_routing(std::uint64_t forward, const Tensor& slots, const char* op) {
  if (shape_only()) return;  // no slots to read back
  if (fingerprint(slots.to_host_i32()) != forward)
    throw RecomputeMismatch(std::string(op) +
                            ": the dispatch slots read in backward differ from forward's: a recomputation routed "
                            "tokens to other experts (is the block deterministic?)");
}

void require_routing(const char* op, const Routing& r, std::int64_t rows) {
  require(r.slots.defined() && r.tokens == rows,
          [&] { return std::string(op) + ": a routing of " + std::to_string(r.tokens) + " tokens for " + std::to_string(rows) +
              " rows"; });
}

Tensor dispatch_forward(const Tensor& x, const Tensor& slots, std::int64_t k) {
  stats::count_forward("dispatch");
  const std::int64_t T = rows_of(x), D = x.dim(-1);
  Tensor out = Tensor::empty({T * k, D}, x.dtype(), "dispatch");
  out.set_tag("dispatch");
  REMAT_DISPATCH_COMPUTE(x.dtype(), V, {
    const V* px = x.data<V>();
    const std::int32_t* s = slots.data<std::int32_t>();
    V* y = out.data<V>();
    for_each("dispatch_forward", T * k, KOKKOS_LAMBDA(std::int64_t i) {
      const V* src = px + (i / k) * D;
      V* dst = y + std::int64_t(s[i]) * D;
      for (std::int64_t d = 0; d < D; ++d) dst[d] = src[d];
    });
  });
  return out;
}

Tensor combine_forward(const Tensor& y, const Tensor& w, const Tensor& slots, const Shape& shape) {
  stats::count_forward("combine");
  const std::int64_t k = w.dim(-1), T = rows_of(w), D = y.dim(-1);
  Tensor out = Tensor::empty(shape, y.dtype(), "combine");
  out.set_tag("combine");
  REMAT_DISPATCH_COMPUTE(y.dtype(), V, {
    const V *py = y.data<V>(), *pw = w.data<V>();
    const std::int32_t* s = slots.data<std::int32_t>();
    V* o = out.data<V>();
    for_each("combine_forward", T, KOKKOS_LAMBDA(std::int64_t t) {
      V* dst = o + t * D;
      // In choice order (the sum is the same on every run), in the compute
      // type, rounded once.
      for (std::int64_t d = 0; d < D; ++d) {
        A acc = A(pw[t * k]) * A(py[std::int64_t(s[t * k]) * D + d]);
        for (std::int64_t j = 1; j < k; ++j) acc += A(pw[t * k + j]) * A(py[std::int64_t(s[t * k + j]) * D + d]);
        dst[d] = V(acc);
      }
    });
  });
  return out;
}

Tensor routing_weights_forward(const Tensor& probs, const Tensor& selected) {
  stats::count_forward("routing_weights");
  const std::int64_t T = rows_of(probs), E = probs.dim(-1), k = selected.dim(-1);
  Tensor out = Tensor::empty({T, k}, probs.dtype(), "routing_weights");
  out.set_tag("routing_weights");
  REMAT_DISPATCH_COMPUTE(probs.dtype(), V, {
    const V* p = probs.data<V>();
    const std::int32_t* sel = selected.data<std::int32_t>();
    V* w = out.data<V>();
    for_each("routing_weights", T, KOKKOS_LAMBDA(std::int64_t t) {
      A s = 0;
      for (std::int64_t j = 0; j < k; ++j) s += A(p[t * E + sel[t * k + j]]);
      for (std::int64_t j = 0; j < k; ++j) w[t * k + j] = V(A(p[t * E + sel[t * k + j]]) / s);
    });
  });
  return out;
}

// A shape-only run has no router values: a balanced routing, each token's
// k experts distinct (choice i goes to expert i % E), in closed form, so
// that the host's work and memory do not grow with the tokens modelled. The
// same tensors are made as for a real routing, of the same sizes.
void balanced_routing(Routing& r, DType counts_dtype) {
  const std::int64_t T = r.tokens, k = r.k, E = r.experts, n = T * k;
  r.offsets.assign(std::size_t(E) + 1, 0);
  for (std::int64_t e = 0; e < E; ++e)
    r.offsets[std::size_t(e) + 1] = r.offsets[std::size_t(e)] + n / E + (e < n % E ? 1 : 0);
  r.slots = Tensor::empty({T, k}, DType::i32, "routing");
  r.slots.set_tag("routing");
  r.counts = Tensor::empty({E}, counts_dtype, "routing");
  r.counts.set_tag("routing");
}

}  // namespace

Routing route_top_k(const Tensor& probs, int k) {
  require_float("route_top_k", probs, "probs");
  const std::int64_t T = rows_of(probs), E = probs.dim(-1);
  require(probs.rank() >= 1 && k >= 1 && k <= E,
          [&] { return "route_top_k: top-" + std::to_string(k) + " of probabilities " + to_string(probs.shape()); });
  stats::count_forward("route_top_k");
  Routing r;
  r.experts = int(E);
  r.k = k;
  r.tokens = T;
  r.selected = Tensor::empty({T, k}, DType::i32, "routing");
  r.selected.set_tag("routing");
  REMAT_DISPATCH_COMPUTE(probs.dtype(), V, {
    const V* p = probs.data<V>();
    std::int32_t* sel = r.selected.data<std::int32_t>();
    for_each("route_top_k", T, KOKKOS_LAMBDA(std::int64_t t) {
      const V* row = p + t * E;
      for (std::int64_t j = 0; j < k; ++j) {
        std::int64_t best = -1;
        for (std::int64_t e = 0; e < E; ++e) {
          bool taken = false;
          for (std::int64_t i = 0; i < j; ++i) taken = taken || sel[t * k + i] == e;
          // Strictly greater: among equal probabilities the lower index wins.
          if (!taken && (best < 0 || A(row[e]) > A(row[best]))) best = e;
        }
        sel[t * k + j] = std::int32_t(best);
      }
    });
  });
  if (shape_only()) {
    balanced_routing(r, compute_dtype(probs.dtype()));
    return r;  // fingerprint 0: never compared in a shape-only run
  }
  require(T * k <= INT32_MAX, [&] { return "route_top_k: " + std::to_string(T * k) + " routed rows overflow the int32 slots"; });
  // The dispatch plan, on the host (a few thousand ids): expert e's rows
  // are [offsets[e], offsets[e+1]), its tokens in order within them.
  std::vector<std::int32_t> sel = r.selected.to_host_i32();
  std::vector<std::int64_t> count(std::size_t(E), 0);
  for (std::int32_t e : sel) ++count[std::size_t(e)];
  r.offsets.assign(std::size_t(E) + 1, 0);
  for (std::int64_t e = 0; e < E; ++e) r.offsets[std::size_t(e) + 1] = r.offsets[std::size_t(e)] + count[std::size_t(e)];
  std::vector<std::int64_t> next(r.offsets.begin(), r.offsets.end() - 1);
  std::vector<std::int32_t> slots(sel.size());
  for (std::size_t i = 0; i < sel.size(); ++i) slots[i] = std::int32_t(next[std::size_t(sel[i])]++);
  r.slots = Tensor::from_host(slots, {T, k}, "routing");
  r.slots.set_tag("routing");
  r.fingerprint = fingerprint(slots);
  // Counts in the compute type (a 16-bit count would be inexact past 256).
  std::vector<double> load(count.begin(), count.end());
  REMAT_DISPATCH_FLOAT(compute_dtype(probs.dtype()), V, {
    r.counts = Tensor::from_host(std::vector<V>(load.begin(), load.end()), {E}, "routing");
  });
  r.counts.set_tag("routing");
  return r;
}

Tensor routing_weights(const Tensor& probs, const Routing& r) {
  require_float("routing_weights", probs, "probs");
  require_routing("routing_weights", r, rows_of(probs));
  require(probs.dim(-1) == r.experts, [&] { return "routing_weights: probabilities over " + std::to_string(probs.dim(-1)) +
                                          " experts for a routing over " + std::to_string(r.experts); });
  Tensor out = routing_weights_forward(probs, r.selected);
  OpRecorder rec("routing_weights", {&probs});
  if (!rec) return out;
  const SavedTensor sp = save(probs), ss = save(r.selected);
  out.set_recipe([sp, ss] { return routing_weights_forward(sp.unpack(), ss.unpack()); });
  const std::int64_t T = r.tokens, E = r.experts, k = r.k;
  rec.finish({&out}, [sp, ss, T, E, k](BackwardContext& ctx) {
    Tensor dw = ctx.grad_out(), p = sp.unpack(), selected = ss.unpack();
    GradTarget dp = ctx.grad_in(0);
    REMAT_DISPATCH_COMPUTE(dw.dtype(), V, {
      const V *pp = p.data<V>(), *g = dw.data<V>();
      const std::int32_t* sel = selected.data<std::int32_t>();
      V* gp = dp.t.data<V>();
      const bool fresh = dp.fresh;
      // w_j = p_j / s: dp_j = (dw_j - sum_i dw_i w_i) / s on the selected, 0 elsewhere.
      for_each("routing_weights_backward", T, KOKKOS_LAMBDA(std::int64_t t) {
        A s = 0, dot = 0;
        for (std::int64_t j = 0; j < k; ++j) s += A(pp[t * E + sel[t * k + j]]);
        for (std::int64_t j = 0; j < k; ++j) dot += A(g[t * k + j]) * (A(pp[t * E + sel[t * k + j]]) / s);
        for (std::int64_t e = 0; e < E; ++e) {
          A v = 0;
          for (std::int64_t j = 0; j < k; ++j)
            if (sel[t * k + j] == e) v = (A(g[t * k + j]) - dot) / s;
          accumulate(gp[t * E + e], v, fresh);
        }
      });
    });
  });
  return out;
}

Tensor dispatch(const Tensor& x, const Routing& r) {
  require_float("dispatch", x, "x");
  require_routing("dispatch", r, rows_of(x));
  Tensor out = dispatch_forward(x, r.slots, r.k);
  OpRecorder rec("dispatch", {&x});
  if (!rec) return out;
  // x only for the recipe: the router's linear keeps the same tensor.
  const SavedTensor sx = save(x), ss = save(r.slots);
  const std::int64_t k = r.k, T = r.tokens, D = x.dim(-1);
  out.set_recipe([sx, ss, k] { return dispatch_forward(sx.unpack(), ss.unpack(), k); });
  rec.finish({&out}, [ss, k, T, D, print = r.fingerprint](BackwardContext& ctx) {
    Tensor dy = ctx.grad_out(), slots = ss.unpack();
    check_routing(print, slots, "dispatch");
    GradTarget dx = ctx.grad_in(0);
    REMAT_DISPATCH_COMPUTE(dy.dtype(), V, {
      const V* g = dy.data<V>();
      const std::int32_t* s = slots.data<std::int32_t>();
      V* gx = dx.t.data<V>();
      const bool fresh = dx.fresh;
      for_each("dispatch_backward", T, KOKKOS_LAMBDA(std::int64_t t) {
        V* dst = gx + t * D;
        for (std::int64_t d = 0; d < D; ++d) {
          A acc = 0;
          for (std::int64_t j = 0; j < k; ++j) acc += A(g[std::int64_t(s[t * k + j]) * D + d]);
          accumulate(dst[d], acc, fresh);
        }
      });
    });
  });
  return out;
}

Tensor combine(const Tensor& y, const Tensor& weights, const Routing& r, const Shape& shape) {
  require_float("combine", y, "y");
  require_float("combine", weights, "weights");
  require_routing("combine", r, rows_of(weights));
  require(y.rank() == 2 && y.dim(0) == r.tokens * r.k && weights.shape() == Shape{r.tokens, r.k} &&
              numel(shape) == r.tokens * y.dim(1) && shape.back() == y.dim(1) && y.dtype() == weights.dtype(),
          [&] { return "combine: y " + to_string(y.shape()) + ", weights " + to_string(weights.shape()) + " into " + to_string(shape); });
  Tensor out = combine_forward(y, weights, r.slots, shape);
  OpRecorder rec("combine", {&y, &weights});
  if (!rec) return out;
  const SavedTensor sy = save(y), sw = save(weights), ss = save(r.slots);
  out.set_recipe([sy, sw, ss, shape] { return combine_forward(sy.unpack(), sw.unpack(), ss.unpack(), shape); });
  const std::int64_t T = r.tokens, k = r.k, D = y.dim(1);
  rec.finish({&out}, [sy, sw, ss, T, k, D, print = r.fingerprint](BackwardContext& ctx) {
    Tensor dout = ctx.grad_out(), slots = ss.unpack();
    check_routing(print, slots, "combine");
    Tensor yv = ctx.needs_grad(1) ? sy.unpack() : Tensor(), wv = ctx.needs_grad(0) ? sw.unpack() : Tensor();
    GradTarget dy = ctx.grad_in(0), dw = ctx.grad_in(1);
    REMAT_DISPATCH_COMPUTE(dout.dtype(), V, {
      const V* g = dout.data<V>();
      const std::int32_t* s = slots.data<std::int32_t>();
      if (dy) {  // every dispatched row is one (token, choice): written once
        const V* pw = wv.data<V>();
        V* gy = dy.t.data<V>();
        const bool fresh = dy.fresh;
        for_each("combine_backward_y", T * k, KOKKOS_LAMBDA(std::int64_t i) {
          const V* src = g + (i / k) * D;
          V* dst = gy + std::int64_t(s[i]) * D;
          const A wi = A(pw[i]);
          for (std::int64_t d = 0; d < D; ++d) accumulate(dst[d], wi * A(src[d]), fresh);
        });
      }
      if (dw) {
        const V* py = yv.data<V>();
        V* gw = dw.t.data<V>();
        const bool fresh = dw.fresh;
        for_each("combine_backward_weights", T * k, KOKKOS_LAMBDA(std::int64_t i) {
          const V *a = g + (i / k) * D, *b = py + std::int64_t(s[i]) * D;
          accumulate(gw[i], lane_sum<A>(D, [&](std::int64_t d) { return A(a[d]) * A(b[d]); }), fresh);
        });
      }
    });
  });
  return out;
}

Tensor expert_load(const Tensor& load, int layer, const Routing& r) {
  require_float("expert_load", load, "load");
  require(load.rank() == 2 && load.dim(1) == r.experts && layer >= 0 && layer < load.dim(0),
          [&] { return "expert_load: layer " + std::to_string(layer) + " of a load table " + to_string(load.shape()) + " for " +
              std::to_string(r.experts) + " experts"; });
  require(!load.requires_grad(), "expert_load: the load table takes no gradient");
  Tensor out = Tensor::empty(load.shape(), load.dtype(), "expert_load");
  out.set_tag("expert_load");
  const std::int64_t E = r.experts, row = layer;
  REMAT_DISPATCH_FLOAT(load.dtype(), V, {
    const V *in = load.data<V>(), *c = r.counts.data<V>();
    V* o = out.data<V>();
    for_each("expert_load", load.numel(), KOKKOS_LAMBDA(std::int64_t i) {
      o[i] = in[i] + (i / E == row ? c[i % E] : V(0));
    });
  });
  return out;
}

Tensor sum_rows(const Tensor& x) {
  require_float("sum_rows", x, "x");
  stats::count_forward("sum_rows");
  const std::int64_t N = rows_of(x), E = x.dim(-1);
  // A reduction: summed, and kept, in the compute type.
  Tensor out = Tensor::empty({E}, compute_dtype(x.dtype()), "sum_rows");
  out.set_tag("sum_rows");
  REMAT_DISPATCH_COMPUTE(x.dtype(), V, { column_sums(x.data<V>(), N, E, out.data<A>(), false); });
  OpRecorder rec("sum_rows", {&x});
  if (rec)
    rec.finish({&out}, [N, E](BackwardContext& ctx) {
      Tensor dy = ctx.grad_out();
      GradTarget dx = ctx.grad_in(0);
      REMAT_DISPATCH_COMPUTE(dx.t.dtype(), V, {
        const A* g = dy.data<A>();
        write_gradient("sum_rows_backward", N * E, dx.t.data<V>(), dx.fresh,
                       KOKKOS_LAMBDA(std::int64_t i) { return g[i % E]; });
      });
    });
  return out;
}

Tensor load_balancing_loss(const Tensor& prob_sums, const Tensor& load, std::int64_t rows) {
  require_float("load_balancing_loss", prob_sums, "prob_sums");
  require_float("load_balancing_loss", load, "load");
  const std::int64_t E = prob_sums.numel();
  require(prob_sums.rank() == 1 && load.rank() == 2 && load.dim(1) == E && rows > 0,
          [&] { return "load_balancing_loss: sums " + to_string(prob_sums.shape()) + ", load " + to_string(load.shape()); });
  stats::count_forward("load_balancing_loss");
  Tensor out = Tensor::empty({}, prob_sums.dtype(), "loss");
  out.set_tag("load_balancing_loss");
  const std::int64_t L = load.dim(0);
  // E * sum_e (C_e / N) (P_e / N), C_e the rows routed to e over all layers.
  const double scale = double(E) / (double(rows) * double(rows));
  REMAT_DISPATCH_FLOAT(prob_sums.dtype(), V, {
    const V *p = prob_sums.data<V>(), *c = load.data<V>();
    V* o = out.data<V>();
    for_each("load_balancing_loss", 1, KOKKOS_LAMBDA(std::int64_t) {
      double acc = 0;
      for (std::int64_t e = 0; e < E; ++e) {
        double count = 0;
        for (std::int64_t l = 0; l < L; ++l) count += double(c[l * E + e]);
        acc += count * double(p[e]);
      }
      o[0] = V(acc * scale);
    });
  });
  OpRecorder rec("load_balancing_loss", {&prob_sums, nullptr});
  if (!rec) return out;
  const SavedTensor sl = save(load);
  rec.finish({&out}, [sl, E, L, scale](BackwardContext& ctx) {
    Tensor dy = ctx.grad_out(), lv = sl.unpack();
    GradTarget dp = ctx.grad_in(0);
    REMAT_DISPATCH_FLOAT(dy.dtype(), V, {
      const V *g = dy.data<V>(), *c = lv.data<V>();
      write_gradient("load_balancing_loss_backward", E, dp.t.data<V>(), dp.fresh, KOKKOS_LAMBDA(std::int64_t e) {
        double count = 0;
        for (std::int64_t l = 0; l < L; ++l) count += double(c[l * E + e]);
        return V(double(g[0]) * count * scale);
      });
    });
  });
  return out;
}

}  // namespace remat::ops
