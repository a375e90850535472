// Expert parallelism's communication as ops: the rows a rank dispatched to
// experts go to the ranks holding those experts and come back, dropless, by
// all-to-all (each rank's rows are grouped by expert, so by the rank holding
// it: what goes to rank q is one contiguous run). The group is comm's
// split group, as for tensor parallelism; a shape-only run allocates what a
// real one would, for a balanced routing, and sends nothing.
#include <cstring>

#include "autodiff/backend.hpp"
#include "autodiff/ops/kernel.hpp"
#include "autodiff/ops/ops.hpp"
#include "autodiff/ops/split_group.hpp"
#include "autodiff/shape_only.hpp"
#include "autodiff/stats.hpp"
#include "autodiff/tape.hpp"
#include "comm/comm.hpp"
#include "core/error.hpp"

namespace remat::ops {
using namespace detail;

namespace {

std::int64_t total_of(const std::vector<std::int64_t>& v) {
  std::int64_t n = 0;
  for (std::int64_t x : v) n += x;
  return n;
}

// [N]: the rows this rank's experts receive from each rank.
std::vector<std::int64_t> rows_from(const ExpertExchange& x) {
  std::vector<std::int64_t> rows(std::size_t(x.ranks), 0);
  for (int r = 0; r < x.ranks; ++r)
    for (int e = 0; e < x.experts_here; ++e) rows[std::size_t(r)] += x.received[std::size_t(e * x.ranks + r)];
  return rows;
}

// Rows from every rank, by rank, each rank's grouped by this rank's experts
// (the order they arrive in), into [R, D] grouped by expert, rank by rank
// within each (`to_expert_major`), or back.
void reorder(const unsigned char* from, unsigned char* to, const ExpertExchange& x, std::size_t row_bytes,
             bool to_expert_major) {
  const int N = x.ranks, El = x.experts_here;
  std::vector<std::int64_t> by_rank(std::size_t(El) * std::size_t(N)), by_expert(by_rank.size());
  std::int64_t at = 0;
  for (int r = 0; r < N; ++r)
    for (int e = 0; e < El; ++e) by_rank[std::size_t(e * N + r)] = at, at += x.received[std::size_t(e * N + r)];
  at = 0;
  for (int e = 0; e < El; ++e)
    for (int r = 0; r < N; ++r) by_expert[std::size_t(e * N + r)] = at, at += x.received[std::size_t(e * N + r)];
  for (std::size_t i = 0; i < by_rank.size(); ++i) {
    const std::size_t bytes = std::size_t(x.received[i]) * row_bytes;
    const std::int64_t src = to_expert_major ? by_rank[i] : by_expert[i];
    const std::int64_t dst = to_expert_major ? by_expert[i] : by_rank[i];
    if (bytes) std::memcpy(to + std::size_t(dst) * row_bytes, from + std::size_t(src) * row_bytes, bytes);
  }
}

// This rank's dispatched rows [T k, D] to the ranks holding their experts:
// [R, D], the rows of this rank's experts from every rank, grouped by expert.
Tensor sent_to_experts(const Tensor& rows, const ExpertExchange& x, const char* label) {
  stats::count_forward(label);
  const std::int64_t D = rows.dim(-1), R = x.local.offsets.back();
  const std::size_t row_bytes = std::size_t(D) * dtype_size(rows.dtype());
  const Tensor arrived = Tensor::empty({R, D}, rows.dtype(), "expert_exchange");
  Tensor out = Tensor::empty({R, D}, rows.dtype(), label);
  out.set_tag(label);
  const std::vector<std::int64_t> send = x.sent, recv = rows_from(x);
  stats::count_communication(double(total_of(send) - send[std::size_t(x.rank)]) * double(row_bytes));
  if (shape_only()) return out;
  comm::all_to_all_rows(rows.raw(), send, arrived.raw(), recv, row_bytes, comm::Group::expert);
  reorder(static_cast<const unsigned char*>(arrived.raw()), static_cast<unsigned char*>(out.raw()), x, row_bytes, true);
  return out;
}

// The reverse: [R, D] of this rank's experts back to the ranks whose rows
// they were, [T k, D] as dispatched here.
Tensor returned_from_experts(const Tensor& rows, const ExpertExchange& x, const char* label) {
  stats::count_forward(label);
  const std::int64_t D = rows.dim(-1), Tk = total_of(x.sent);
  const std::size_t row_bytes = std::size_t(D) * dtype_size(rows.dtype());
  const Tensor leaving = Tensor::empty(rows.shape(), rows.dtype(), "expert_exchange");
  Tensor out = Tensor::empty({Tk, D}, rows.dtype(), label);
  out.set_tag(label);
  const std::vector<std::int64_t> send = rows_from(x), recv = x.sent;
  stats::count_communication(double(total_of(send) - send[std::size_t(x.rank)]) * double(row_bytes));
  if (shape_only()) return out;
  reorder(static_cast<const unsigned char*>(rows.raw()), static_cast<unsigned char*>(leaving.raw()), x, row_bytes,
          false);
  comm::all_to_all_rows(leaving.raw(), send, out.raw(), recv, row_bytes, comm::Group::expert);
  return out;
}

}  // namespace

ExpertExchange plan_expert_exchange(const Routing& r, const RankGroup& g) {
  require_split_group("plan_expert_exchange", g);
  require(r.experts % g.size == 0 && std::int64_t(r.offsets.size()) == r.experts + 1,
          [&] { return "plan_expert_exchange: " + std::to_string(r.experts) + " experts over " + std::to_string(g.size) + " ranks"; });
  ExpertExchange x;
  x.ranks = g.size;
  x.rank = g.rank;
  x.experts_here = r.experts / g.size;
  const int N = g.size, El = x.experts_here;
  const auto rows_of_expert = [&](int e) { return r.offsets[std::size_t(e) + 1] - r.offsets[std::size_t(e)]; };
  // What goes to rank q: its experts' rows, one run. And what each rank
  // sends this rank's experts: exchanged (as exact doubles), or in a
  // shape-only run every rank's balanced routing, the same as this one's.
  std::vector<double> mine(std::size_t(El) * std::size_t(N)), theirs(mine.size());
  x.sent.assign(std::size_t(N), 0);
  for (int q = 0; q < N; ++q)
    for (int e = 0; e < El; ++e) {
      x.sent[std::size_t(q)] += rows_of_expert(q * El + e);
      mine[std::size_t(q * El + e)] = double(rows_of_expert(q * El + e));
    }
  stats::count_communication(8.0 * double(El) * double(N - 1));
  if (shape_only())
    for (int q = 0; q < N; ++q)
      for (int e = 0; e < El; ++e) theirs[std::size_t(q * El + e)] = double(rows_of_expert(g.rank * El + e));
  else
    comm::all_to_all(mine.data(), El, theirs.data(), comm::Group::expert);
  // theirs[q El + e]: rows rank q sends this rank's expert e.
  x.received.assign(mine.size(), 0);
  x.local.experts = El;
  x.local.k = r.k;
  x.local.offsets.assign(std::size_t(El) + 1, 0);
  for (int e = 0; e < El; ++e) {
    for (int q = 0; q < N; ++q) x.received[std::size_t(e * N + q)] = std::int64_t(theirs[std::size_t(q * El + e)]);
    std::int64_t n = 0;
    for (int q = 0; q < N; ++q) n += x.received[std::size_t(e * N + q)];
    x.local.offsets[std::size_t(e) + 1] = x.local.offsets[std::size_t(e)] + n;
  }
  x.local.tokens = x.local.offsets.back();
  return x;
}

Tensor to_experts(const Tensor& rows, const ExpertExchange& x, const RankGroup& g) {
  require_float("to_experts", rows, "rows");
  require_split_group("to_experts", g);
  require(rows.rank() == 2 && rows.dim(0) == total_of(x.sent),
          [&] { return "to_experts: rows " + to_string(rows.shape()) + " for " + std::to_string(total_of(x.sent)) + " routed rows"; });
  Tensor out = sent_to_experts(rows, x, "to_experts");
  OpRecorder rec("to_experts", {&rows});
  if (rec) rec.finish({&out}, [x](BackwardContext& ctx) {
    ctx.accumulate(0, returned_from_experts(ctx.grad_out(), x, "to_experts_backward"));
  });
  return out;
}

Tensor from_experts(const Tensor& rows, const ExpertExchange& x, const RankGroup& g) {
  require_float("from_experts", rows, "rows");
  require_split_group("from_experts", g);
  require(rows.rank() == 2 && rows.dim(0) == x.local.offsets.back(),
          [&] { return "from_experts: rows " + to_string(rows.shape()) + " for " + std::to_string(x.local.offsets.back()) +
              " rows of this rank's experts"; });
  Tensor out = returned_from_experts(rows, x, "from_experts");
  OpRecorder rec("from_experts", {&rows});
  if (rec) rec.finish({&out}, [x](BackwardContext& ctx) {
    ctx.accumulate(0, sent_to_experts(ctx.grad_out(), x, "from_experts_backward"));
  });
  return out;
}

}  // namespace remat::ops
