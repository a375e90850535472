// Tensor parallelism's communication as ops (Shoeybi et al. 2019, Megatron's
// f and g), and the cross-entropy of logits split over the vocabulary. The
// group is every rank of the job (comm/); a shape-only run allocates what a
// real one would and sends nothing. Sums over ranks are added in rank order
// from every rank's gathered part, so every rank gets the same bits and a
// recomputation the same bits again.
#include "autodiff/backend.hpp"
#include "autodiff/elementwise.hpp"
#include "autodiff/fast_math.hpp"
#include "autodiff/ops/cross_entropy_grad.hpp"
#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/ops/row_kernel.hpp"
#include "autodiff/ops/split_group.hpp"
#include "autodiff/shape_only.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"
#include "comm/comm.hpp"
#include "core/error.hpp"

namespace remat::ops {
namespace detail {

void require_split_group(const char* op, const RankGroup& g) {
  if (shape_only()) return;
  const char* what = g.axis == Axis::context ? "context" : g.axis == Axis::expert ? "expert" : "tensor";
  if (comm::size(comm_group(g)) != g.size)
    throw UserError(std::string(op) + ": " + what + " parallelism over " + std::to_string(g.size) + " ranks, where " +
                    std::to_string(comm::size(comm_group(g))) + " run this job's group: run it under mpirun");
  if (!kHostMemory) throw UserError(std::string(op) + ": " + what + " parallelism runs on the host backend only");
}

}  // namespace detail
using namespace detail;

namespace {

// Values travel in their tensor's own type (16 bits at bf16 and fp16: what
// a GPU's collectives move) and are added in the compute type on arrival,
// which widens them exactly: the sums are the same as of widened values.
template <class T>
void gather_all_of(const T* mine, std::int64_t n, T* all, comm::Group g) {
  if constexpr (sizeof(T) == 2)
    comm::gather_all(reinterpret_cast<const std::uint16_t*>(mine), n, reinterpret_cast<std::uint16_t*>(all), g);
  else
    comm::gather_all(mine, n, all, g);
}
template <class T>
void all_to_all_of(const T* send, std::int64_t n, T* recv, comm::Group g) {
  if constexpr (sizeof(T) == 2)
    comm::all_to_all(reinterpret_cast<const std::uint16_t*>(send), n, reinterpret_cast<std::uint16_t*>(recv), g);
  else
    comm::all_to_all(send, n, recv, g);
}

// [g.size, n] in x's type: row r holds rank r's x.
Tensor gather_parts(const Tensor& x, const RankGroup& g, const char* label) {
  Tensor parts = Tensor::empty({g.size, x.numel()}, x.dtype(), label);
  parts.set_tag(x.tag());
  // What comm/ counts for it: this rank's values, once to each other rank.
  stats::count_communication(double(dtype_size(x.dtype())) * double(x.numel()) * double(g.size - 1));
  if (shape_only()) return parts;
  REMAT_DISPATCH_COMPUTE(x.dtype(), T, { gather_all_of(x.data<T>(), x.numel(), parts.data<T>(), comm_group(g)); });
  return parts;
}

// The sum over ranks of x, in x's type, moved as a ring all-reduce moves it:
// each rank adds one chunk of every rank's x, in rank order (a
// reduce-scatter), then every rank gathers the summed chunks (an
// all-gather). 2 (N - 1) / N of x sent per rank, and every rank gets the
// same bits: each element is added once, by the rank that owns its chunk.
Tensor summed(const Tensor& x, const RankGroup& g, const char* label) {
  require_split_group(label, g);
  stats::count_forward(label);
  const std::int64_t n = x.numel(), N = g.size, c = (n + N - 1) / N;
  const DType t = x.dtype();
  const Tensor send = Tensor::empty({N, c}, t, "all_reduce_send");
  const Tensor recv = Tensor::empty({N, c}, t, "all_reduce_recv");
  const Tensor chunk = Tensor::empty({c}, t, "all_reduce_chunk");
  Tensor out = Tensor::empty(x.shape(), t, label);
  out.set_tag(x.tag());
  stats::count_communication(2.0 * double(dtype_size(t)) * double(c) * double(N - 1));
  REMAT_DISPATCH_COMPUTE(t, T, {
    const T* px = x.data<T>();
    T *ps = send.data<T>(), *pr = recv.data<T>(), *pc = chunk.data<T>();
    // The chunks of the gather are `out` itself where x divides evenly; else a padded buffer.
    const Tensor padded = n == N * c ? Tensor() : Tensor::empty({N, c}, t, "all_reduce_chunks");
    T* pa = padded.defined() ? padded.data<T>() : out.data<T>();
    for_each_element("all_reduce_pack", N * c, KOKKOS_LAMBDA(std::int64_t i) { ps[i] = i < n ? px[i] : T(0); });
    if (!shape_only()) all_to_all_of(ps, c, pr, comm_group(g));
    for_each_element("all_reduce_add", c, KOKKOS_LAMBDA(std::int64_t j) {
      A acc = A(pr[j]);
      for (std::int64_t r = 1; r < N; ++r) acc += A(pr[r * c + j]);
      pc[j] = T(acc);
    });
    if (!shape_only()) gather_all_of(pc, c, pa, comm_group(g));
    if (padded.defined()) {
      T* y = out.data<T>();
      for_each_element(label, n, KOKKOS_LAMBDA(std::int64_t i) { y[i] = pa[i]; });
    }
  });
  return out;
}

}  // namespace

Tensor all_reduce(const Tensor& x, const RankGroup& g) {
  require_float("all_reduce", x, "x");
  Tensor out = summed(x, g, "all_reduce");
  OpRecorder rec("all_reduce", {&x});
  if (rec) rec.finish({&out}, [](BackwardContext& ctx) { ctx.accumulate(0, ctx.grad_out()); });
  return out;
}

namespace {

// The sum of x over the `share` consecutive ranks this rank is among, in rank order.
Tensor summed_among(const Tensor& x, const RankGroup& g, int share, const char* label) {
  require_split_group(label, g);
  stats::count_forward(label);
  const Tensor parts = gather_parts(x, g, "all_reduce_parts");
  Tensor out = Tensor::empty(x.shape(), x.dtype(), label);
  out.set_tag(x.tag());
  const std::int64_t n = x.numel(), first = g.rank / share * share, last = first + share;
  REMAT_DISPATCH_COMPUTE(x.dtype(), T, {
    const T* p = parts.data<T>();
    T* y = out.data<T>();
    for_each_element(label, n, KOKKOS_LAMBDA(std::int64_t i) {
      A acc = A(p[first * n + i]);
      for (std::int64_t r = first + 1; r < last; ++r) acc += A(p[r * n + i]);
      y[i] = T(acc);
    });
  });
  return out;
}

}  // namespace

Tensor all_reduce_in_backward(const Tensor& x, const RankGroup& g, int share) {
  require_float("all_reduce_in_backward", x, "x");
  if (share <= 0 || share >= g.size) return all_reduce_in_backward(x, g);
  require_split_group("all_reduce_in_backward", g);
  Tensor out = x.view_as(x.shape());
  OpRecorder rec("all_reduce_in_backward", {&x});
  if (!rec) return out;
  rec.finish({&out}, [g, share](BackwardContext& ctx) {
    ctx.accumulate(0, summed_among(ctx.grad_out(), g, share, "all_reduce_backward"));
  });
  out.slot()->dtype = x.slot()->dtype;  // as below
  return out;
}

Tensor all_reduce_in_backward(const Tensor& x, const RankGroup& g) {
  require_float("all_reduce_in_backward", x, "x");
  require_split_group("all_reduce_in_backward", g);
  // The same bytes: what this rank's part of a split layer reads.
  Tensor out = x.view_as(x.shape());
  if (x.recipe()) out.set_recipe(*x.recipe());
  OpRecorder rec("all_reduce_in_backward", {&x});
  if (!rec) return out;
  rec.finish({&out}, [g](BackwardContext& ctx) {
    ctx.accumulate(0, summed(ctx.grad_out(), g, "all_reduce_backward"));
  });
  // The gradient in x's own gradient type: a 16-bit weight copy's is its
  // float32 master's (sequence parallelism reads shared weights through here).
  out.slot()->dtype = x.slot()->dtype;
  return out;
}

namespace {

// [B, N Sp, ...]: every rank's x [B, Sp, ...] in rank order along dim 1.
Tensor gathered_sequence(const Tensor& x, const RankGroup& g, const char* label) {
  require_split_group(label, g);
  require(x.rank() >= 2, [&] { return std::string(label) + ": x must be [B, S, ...], got " + to_string(x.shape()); });
  stats::count_forward(label);
  const std::int64_t B = x.dim(0), Sp = x.dim(1), n = x.numel(), R = n / std::max<std::int64_t>(1, B * Sp),
                     N = g.size;
  const Tensor parts = gather_parts(x, g, "all_gather_parts");
  Shape shape = x.shape();
  shape[1] = Sp * N;
  Tensor out = Tensor::empty(shape, x.dtype(), label);
  out.set_tag(x.tag());
  REMAT_DISPATCH_COMPUTE(x.dtype(), T, {
    const T* p = parts.data<T>();
    T* y = out.data<T>();
    for_each_element(label, n * N, KOKKOS_LAMBDA(std::int64_t i) {
      const std::int64_t c = i % R, s = i / R % (N * Sp), b = i / R / (N * Sp);
      y[i] = p[s / Sp * n + (b * Sp + s % Sp) * R + c];
    });
  });
  return out;
}

// This rank's part of the sequence, [B, S / N, ...], of the sum over ranks
// of x [B, S, ...]: each rank sends every other its part, and adds what it
// receives in rank order.
Tensor scattered_sum(const Tensor& x, const RankGroup& g, const char* label) {
  require_split_group(label, g);
  require(x.rank() >= 2 && x.dim(1) % g.size == 0,
          [&] { return std::string(label) + ": x must be [B, S, ...] with S a multiple of the group, got " + to_string(x.shape()); });
  stats::count_forward(label);
  const std::int64_t B = x.dim(0), S = x.dim(1), N = g.size, Sp = S / N,
                     R = x.numel() / std::max<std::int64_t>(1, B * S), n = B * Sp * R;
  const Tensor send = Tensor::empty({N, n}, x.dtype(), "reduce_scatter_send");
  const Tensor recv = Tensor::empty({N, n}, x.dtype(), "reduce_scatter_recv");
  Shape shape = x.shape();
  shape[1] = Sp;
  Tensor out = Tensor::empty(shape, x.dtype(), label);
  out.set_tag(x.tag());
  REMAT_DISPATCH_COMPUTE(x.dtype(), T, {
    const T* px = x.data<T>();
    T* ps = send.data<T>();
    for_each_element("reduce_scatter_pack", N * n, KOKKOS_LAMBDA(std::int64_t i) {
      const std::int64_t k = i / n, c = i % n % R, j = i % n / R % Sp, b = i % n / R / Sp;
      ps[i] = px[(b * S + k * Sp + j) * R + c];
    });
    stats::count_communication(double(sizeof(T)) * double(n) * double(N - 1));  // each other rank's part, once
    if (!shape_only()) all_to_all_of(send.data<T>(), n, recv.data<T>(), comm_group(g));
    const T* pr = recv.data<T>();
    T* y = out.data<T>();
    for_each_element(label, n, KOKKOS_LAMBDA(std::int64_t i) {
      A acc = A(pr[i]);
      for (std::int64_t k = 1; k < N; ++k) acc += A(pr[k * n + i]);
      y[i] = T(acc);
    });
  });
  return out;
}

// This rank's part of the sequence of x [B, S, ...]: [B, S / N, ...].
Tensor own_part(const Tensor& x, const RankGroup& g, const char* label) {
  require(x.rank() >= 2 && x.dim(1) % g.size == 0,
          [&] { return std::string(label) + ": x must be [B, S, ...] with S a multiple of the group, got " + to_string(x.shape()); });
  const std::int64_t S = x.dim(1), Sp = S / g.size, R = x.numel() / std::max<std::int64_t>(1, x.dim(0) * S),
                     first = std::int64_t(g.rank) * Sp;
  Shape shape = x.shape();
  shape[1] = Sp;
  Tensor out = Tensor::empty(shape, x.dtype(), label);
  REMAT_DISPATCH_COMPUTE(x.dtype(), T, {
    const T* px = x.data<T>();
    T* y = out.data<T>();
    for_each_element(label, out.numel(), KOKKOS_LAMBDA(std::int64_t i) {
      const std::int64_t c = i % R, j = i / R % Sp, b = i / R / Sp;
      y[i] = px[(b * S + first + j) * R + c];
    });
  });
  return out;
}

// The gather as an op, its gradient backward(dy, g). Recomputable alone (its
// tag is x's: a strategy that drops x's kind drops it too): gathered again
// from x, made again by x's own recipe where it has one, so that the recipe
// keeps no more than x's does. Megatron keeps only the rank's part and
// gathers it again in backward; remat's strategies choose, and count the
// gather each recomputation performs.
template <class Backward>
Tensor gathered_op(const Tensor& x, const RankGroup& g, const char* label, Backward backward) {
  require_float(label, x, "x");
  Tensor out = gathered_sequence(x, g, label);
  if (const auto made = x.recipe())
    out.set_recipe([made, g, label] { return gathered_sequence((*made)(), g, label); });
  else
    out.set_recipe([x, g, label] { return gathered_sequence(x, g, label); });
  OpRecorder rec(label, {&x});
  if (rec) rec.finish({&out}, [g, backward](BackwardContext& ctx) { ctx.accumulate(0, backward(ctx.grad_out(), g)); });
  return out;
}

}  // namespace

Tensor all_gather_sequence_whole(const Tensor& x, const RankGroup& g) {
  return gathered_op(x, g, "all_gather_sequence_whole", [](const Tensor& dy, const RankGroup& g) {
    return own_part(dy, g, "all_gather_sequence_whole_backward");
  });
}

Tensor all_gather_sequence(const Tensor& x, const RankGroup& g) {
  return gathered_op(x, g, "all_gather_sequence", [](const Tensor& dy, const RankGroup& g) {
    return scattered_sum(dy, g, "all_gather_sequence_backward");
  });
}

Tensor reduce_scatter_sequence(const Tensor& x, const RankGroup& g) {
  require_float("reduce_scatter_sequence", x, "x");
  Tensor out = scattered_sum(x, g, "reduce_scatter_sequence");
  OpRecorder rec("reduce_scatter_sequence", {&x});
  if (rec)
    rec.finish({&out}, [g](BackwardContext& ctx) {
      ctx.accumulate(0, gathered_sequence(ctx.grad_out(), g, "reduce_scatter_sequence_backward"));
    });
  return out;
}

namespace {

// The forward of cross_entropy_parts: each row's log-sum-exp over every
// rank's slice into lse, the mean loss into loss.
void cross_entropy_parts_forward(const Tensor& logits, const Tensor& targets, std::int64_t first, const RankGroup& g,
                                 const Tensor& lse, const Tensor& loss) {
  const std::int64_t V = logits.dim(-1), M = rows_of(logits);
  const DType a = compute_dtype(logits.dtype());
  // Row maxima over ranks, then each row's [sum of exp, target logit] summed over ranks.
  const Tensor row_max = Tensor::empty({M}, a, "cross_entropy_max");
  const Tensor sums = Tensor::empty({M, 2}, a, "cross_entropy_sums");
  REMAT_DISPATCH_COMPUTE(logits.dtype(), T, {
    const T* z = logits.data<T>();
    const std::int32_t* t = targets.data<std::int32_t>();
    A* pm = row_max.data<A>();
    for_each_row("cross_entropy_part_max", M, V, KOKKOS_LAMBDA(std::int64_t r, const Row& row) {
      const T* zr = z + r * V;
      const A m = row.max<A>([&](std::int64_t j) { return A(zr[j]); });
      row.once([&] { pm[r] = m; });
    });
    {
      const Tensor maxima = gather_parts(row_max, g, "cross_entropy_max_parts");
      const A* pp = maxima.data<A>();
      const std::int64_t ranks = g.size;
      for_each_element("cross_entropy_max_over_ranks", M, KOKKOS_LAMBDA(std::int64_t r) {
        A m = pp[r];
        for (std::int64_t k = 1; k < ranks; ++k) m = pp[k * M + r] > m ? pp[k * M + r] : m;
        pm[r] = m;
      });
    }
    A* ps = sums.data<A>();
    for_each_row("cross_entropy_part_sums", M, V, KOKKOS_LAMBDA(std::int64_t r, const Row& row) {
      const T* zr = z + r * V;
      const A m = pm[r];
      const A s = row.sum<A>([&](std::int64_t j) { return fast_exp(A(zr[j]) - m); });
      const std::int64_t j = std::int64_t(t[r]) - first;
      row.once([&] {
        ps[2 * r] = s;
        ps[2 * r + 1] = (j >= 0 && j < V) ? A(zr[j]) : A(0);
      });
    });
    const Tensor total = summed(sums, g, "cross_entropy_sums_over_ranks");
    const A* pt = total.data<A>();
    A* pl = lse.data<A>();
    double mean = 0;
    if (!shape_only())
      Kokkos::parallel_reduce(
          "cross_entropy_parts_mean", Kokkos::RangePolicy<ExecSpace>(0, M),
          KOKKOS_LAMBDA(std::int64_t r, double& acc) {
            pl[r] = pm[r] + kmath::log(pt[2 * r]);
            acc += double(pl[r]) - double(pt[2 * r + 1]);
          },
          mean);
    A* out = loss.data<A>();
    const A value = A(mean / double(M));
    for_each("cross_entropy_parts_store", 1, KOKKOS_LAMBDA(std::int64_t) { out[0] = value; });
  });
}

}  // namespace

Tensor cross_entropy_parts(const Tensor& logits, const Tensor& targets, std::int64_t first, const RankGroup& g) {
  require_float("cross_entropy_parts", logits, "logits");
  require(targets.dtype() == DType::i32, "cross_entropy_parts: targets must be int32");
  require_split_group("cross_entropy_parts", g);
  const std::int64_t V = logits.dim(-1), M = rows_of(logits);
  require(targets.numel() == M, [&] { return "cross_entropy_parts: " + std::to_string(targets.numel()) + " targets for " +
                                    std::to_string(M) + " rows of logits " + to_string(logits.shape()); });
  if (const auto bad = count_out_of_range(targets, V * g.size))
    throw UserError("cross_entropy: " + std::to_string(bad) + " target(s) outside [0, " + std::to_string(V * g.size) +
                    ")");
  stats::count_forward("cross_entropy");
  Tensor lse = Tensor::empty({M}, compute_dtype(logits.dtype()), "cross_entropy_lse");
  Tensor loss = Tensor::empty({}, compute_dtype(logits.dtype()), "loss");
  lse.set_tag("cross_entropy");
  loss.set_tag("cross_entropy");
  cross_entropy_parts_forward(logits, targets, first, g, lse, loss);

  OpRecorder rec("cross_entropy", {&logits, nullptr});
  if (!rec) return loss;
  const SavedTensor sz = save(logits), sl = save(lse);
  rec.finish({&loss}, cross_entropy_backward(sz, sl, targets, M, V, first));
  return loss;
}

}  // namespace remat::ops
