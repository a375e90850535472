// The fused attention as Kokkos team kernels: what a GPU runs for
// `--attention fused`. Each team owns a tile of rows, stages the tiles it
// reads through team scratch memory, and writes only what it owns, so every
// result is summed in one fixed order (deterministic, no atomics):
// - forward: a team per (sequence, head, query tile), online softmax over
//   key tiles staged in scratch; keeps out and the log-sum-exp.
// - backward, two kernels, each recomputing the probabilities from the
//   log-sum-exp: dk and dv by a team per (sequence, kv head, key tile) over
//   the query tiles of every head sharing that kv head; dq by a team per
//   (sequence, head, query tile) over the key tiles.
// Inside a team each thread owns a row (a query or a key), whose running
// state lives in scratch, so the same code serves any team size.
#include <Kokkos_Core.hpp>
#include <algorithm>

#include "autodiff/fast_math.hpp"
#include "autodiff/kmath.hpp"
#include "autodiff/ops/attention_fused.hpp"
#include "autodiff/shape_only.hpp"
#include "autodiff/tensor.hpp"

namespace remat::ops::fused {
namespace {

using Policy = Kokkos::TeamPolicy<ExecSpace>;
using Member = Policy::member_type;
template <class T>
using Scratch = Kokkos::View<T*, ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;

constexpr std::int64_t kRows = 32;       // query rows per team (a row per thread on a GPU)
constexpr std::int64_t kKeys = 32;       // keys staged per step
constexpr std::int64_t kStageRows = 16;  // query rows staged per step of the dk/dv kernel
// Scratch beyond this goes to level 1 (global memory per team): a GPU's
// per-block shared memory without opting in.
constexpr std::size_t kLevel0Bytes = 48 * 1024;

constexpr bool kOnHost = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;

// A policy of `teams` teams, each with `arrays` scratch arrays of the given
// lengths; returns the scratch level the kernel must read them from.
template <class T>
Policy team_policy(std::int64_t teams, std::initializer_list<std::int64_t> arrays, int& level) {
  std::size_t bytes = 0;
  for (std::int64_t n : arrays) bytes += Scratch<T>::shmem_size(std::size_t(n));
  level = bytes <= kLevel0Bytes ? 0 : 1;
  // On a GPU a thread per row; on the host whatever Kokkos picks.
  Policy policy = kOnHost ? Policy(int(teams), Kokkos::AUTO) : Policy(int(teams), int(kRows));
  return policy.set_scratch_size(level, Kokkos::PerTeam(bytes));
}

// Copies rows [r0, r0 + n) of one head of q, k, v or dout (row stride ld)
// into dst[n, hd].
// into dst[n, hd] of the compute type (16-bit rows are widened once here).
template <class T>
KOKKOS_INLINE_FUNCTION void stage(const Member& team, const T* src, std::int64_t ld, std::int64_t n, std::int64_t hd,
                                  const Scratch<compute_t<T>>& dst) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n * hd), [&](std::int64_t x) {
    dst(x) = compute_t<T>(src[(x / hd) * ld + x % hd]);
  });
}

template <class T>
KOKKOS_INLINE_FUNCTION T dot(const T* a, const T* b, std::int64_t n) {
  T s = 0;
  for (std::int64_t e = 0; e < n; ++e) s += a[e] * b[e];
  return s;
}

// <dO_i, O_i> of query row i of head h: the softmax backward's correction.
template <class T>
KOKKOS_INLINE_FUNCTION compute_t<T> row_dot(const Problem& p, const T* dout, const T* out, std::int64_t b,
                                            std::int64_t h, std::int64_t i) {
  using A = compute_t<T>;
  const std::int64_t at = (b * p.S + i) * p.H * p.hd + h * p.hd;
  A s = 0;
  for (std::int64_t e = 0; e < p.hd; ++e) s += A(dout[at + e]) * A(out[at + e]);
  return s;
}

template <class T>
struct ForwardKernel {
  using A = compute_t<T>;
  Problem p;
  const T *q, *k, *v;
  T* out;
  A* lse;
  std::int64_t tiles;
  int level;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t hd = p.hd, W = p.H * hd;
    const std::int64_t t = team.league_rank();
    const std::int64_t b = t / (p.H * tiles), h = t / tiles % p.H, i0 = t % tiles * kRows;
    const std::int64_t rows = p.S - i0 < kRows ? p.S - i0 : kRows, keys = p.causal ? i0 + rows : p.S;
    const std::int64_t kvh = h / (p.H / p.Hkv);
    Scratch<A> sq(team.team_scratch(level), kRows * hd), acc(team.team_scratch(level), kRows * hd),
        sk(team.team_scratch(level), kKeys * hd), sv(team.team_scratch(level), kKeys * hd),
        m(team.team_scratch(level), kRows), l(team.team_scratch(level), kRows);
    stage(team, q + p.q.offset + b * p.q.batch_stride + i0 * p.q.ld + h * hd, p.q.ld, rows, hd, sq);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](std::int64_t r) {
      m(r) = A(-1e30);
      l(r) = 0;
      for (std::int64_t e = 0; e < hd; ++e) acc(r * hd + e) = 0;
    });
    const T* kb = k + p.k.offset + b * p.k.batch_stride + kvh * hd;
    const T* vb = v + p.v.offset + b * p.v.batch_stride + kvh * hd;
    for (std::int64_t j0 = 0; j0 < keys; j0 += kKeys) {
      const std::int64_t nk = keys - j0 < kKeys ? keys - j0 : kKeys;
      team.team_barrier();  // everyone is done with the previous tile
      stage(team, kb + j0 * p.k.ld, p.k.ld, nk, hd, sk);
      stage(team, vb + j0 * p.v.ld, p.v.ld, nk, hd, sv);
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](std::int64_t r) {
        const std::int64_t i = i0 + r, visible = p.causal ? (i + 1 - j0 < nk ? i + 1 - j0 : nk) : nk;
        A mr = m(r), lr = l(r);
        A* a = &acc(r * hd);
        for (std::int64_t j = 0; j < visible; ++j) {
          const A s = dot(&sq(r * hd), &sk(j * hd), hd) * A(p.scale);
          if (s > mr) {  // a new maximum: rescale what is summed so far
            const A c = fast_exp(mr - s);
            lr *= c;
            for (std::int64_t e = 0; e < hd; ++e) a[e] *= c;
            mr = s;
          }
          const A e_s = fast_exp(s - mr), w = e_s * keep<A>(p, b, h, i, j0 + j);
          lr += e_s;
          for (std::int64_t e = 0; e < hd; ++e) a[e] += w * sv(j * hd + e);
        }
        m(r) = mr;
        l(r) = lr;
      });
    }
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](std::int64_t r) {
      const A inv = A(1) / l(r);
      T* o = out + (b * p.S + i0 + r) * W + h * hd;
      for (std::int64_t e = 0; e < hd; ++e) o[e] = T(acc(r * hd + e) * inv);
      lse[(b * p.H + h) * p.S + i0 + r] = m(r) + kmath::log(l(r));
    });
  }
};

// dk and dv: a team per key tile, over every query that sees it.
template <class T>
struct KeyValueGradKernel {
  using A = compute_t<T>;
  Problem p;
  const T *q, *k, *v, *out;
  const A* lse;
  const T* dout;
  T *dk, *dv;
  std::int64_t tiles;
  int level;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t hd = p.hd, W = p.H * hd, group = p.H / p.Hkv;
    const A scale = A(p.scale);
    const std::int64_t t = team.league_rank();
    const std::int64_t b = t / (p.Hkv * tiles), kvh = t / tiles % p.Hkv, j0 = t % tiles * kKeys;
    const std::int64_t nk = p.S - j0 < kKeys ? p.S - j0 : kKeys;
    Scratch<A> sk(team.team_scratch(level), kKeys * hd), sv(team.team_scratch(level), kKeys * hd),
        gk(team.team_scratch(level), kKeys * hd), gv(team.team_scratch(level), kKeys * hd),
        sq(team.team_scratch(level), kStageRows * hd), sdo(team.team_scratch(level), kStageRows * hd),
        sl(team.team_scratch(level), kStageRows), sd(team.team_scratch(level), kStageRows);
    stage(team, k + p.k.offset + b * p.k.batch_stride + j0 * p.k.ld + kvh * hd, p.k.ld, nk, hd, sk);
    stage(team, v + p.v.offset + b * p.v.batch_stride + j0 * p.v.ld + kvh * hd, p.v.ld, nk, hd, sv);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nk * hd), [&](std::int64_t x) {
      gk(x) = 0;
      gv(x) = 0;
    });
    const std::int64_t first = p.causal ? j0 : 0;  // no earlier query sees these keys
    for (std::int64_t h = kvh * group; h < (kvh + 1) * group; ++h)
      for (std::int64_t i0 = first; i0 < p.S; i0 += kStageRows) {
        const std::int64_t rows = p.S - i0 < kStageRows ? p.S - i0 : kStageRows;
        team.team_barrier();
        stage(team, q + p.q.offset + b * p.q.batch_stride + i0 * p.q.ld + h * hd, p.q.ld, rows, hd, sq);
        stage(team, dout + (b * p.S + i0) * W + h * hd, W, rows, hd, sdo);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](std::int64_t r) {
          sl(r) = lse[(b * p.H + h) * p.S + i0 + r];
          sd(r) = row_dot(p, dout, out, b, h, i0 + r);
        });
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nk), [&](std::int64_t j) {
          const std::int64_t key = j0 + j;
          A *a = &gk(j * hd), *c = &gv(j * hd);
          for (std::int64_t r = 0; r < rows; ++r) {
            const std::int64_t i = i0 + r;
            if (p.causal && i < key) continue;
            const A pr = fast_exp(dot(&sq(r * hd), &sk(j * hd), hd) * scale - sl(r));
            const A kp = keep<A>(p, b, h, i, key);
            const A dp = dot(&sdo(r * hd), &sv(j * hd), hd) * kp;
            const A ds = pr * (dp - sd(r)) * scale, pv = pr * kp;
            for (std::int64_t e = 0; e < hd; ++e) {
              c[e] += pv * sdo(r * hd + e);
              a[e] += ds * sq(r * hd + e);
            }
          }
        });
      }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nk * hd), [&](std::int64_t x) {
      const std::int64_t j = x / hd, e = x % hd;
      const std::int64_t at_k = p.k.offset + b * p.k.batch_stride + (j0 + j) * p.k.ld + kvh * hd + e;
      const std::int64_t at_v = p.v.offset + b * p.v.batch_stride + (j0 + j) * p.v.ld + kvh * hd + e;
      if (dk) dk[at_k] = T(A(dk[at_k]) + gk(x));
      if (dv) dv[at_v] = T(A(dv[at_v]) + gv(x));
    });
  }
};

// dq: a team per query tile, over the keys it sees.
template <class T>
struct QueryGradKernel {
  using A = compute_t<T>;
  Problem p;
  const T *q, *k, *v, *out;
  const A* lse;
  const T* dout;
  T* dq;
  std::int64_t tiles;
  int level;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const std::int64_t hd = p.hd, group = p.H / p.Hkv;
    const A scale = A(p.scale);
    const std::int64_t t = team.league_rank();
    const std::int64_t b = t / (p.H * tiles), h = t / tiles % p.H, i0 = t % tiles * kRows;
    const std::int64_t rows = p.S - i0 < kRows ? p.S - i0 : kRows, keys = p.causal ? i0 + rows : p.S;
    const std::int64_t kvh = h / group;
    Scratch<A> sq(team.team_scratch(level), kRows * hd), sdo(team.team_scratch(level), kRows * hd),
        gq(team.team_scratch(level), kRows * hd), sk(team.team_scratch(level), kKeys * hd),
        sv(team.team_scratch(level), kKeys * hd), sl(team.team_scratch(level), kRows),
        sd(team.team_scratch(level), kRows);
    stage(team, q + p.q.offset + b * p.q.batch_stride + i0 * p.q.ld + h * hd, p.q.ld, rows, hd, sq);
    stage(team, dout + (b * p.S + i0) * p.H * hd + h * hd, p.H * hd, rows, hd, sdo);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](std::int64_t r) {
      sl(r) = lse[(b * p.H + h) * p.S + i0 + r];
      sd(r) = row_dot(p, dout, out, b, h, i0 + r);
      for (std::int64_t e = 0; e < hd; ++e) gq(r * hd + e) = 0;
    });
    const T* kb = k + p.k.offset + b * p.k.batch_stride + kvh * hd;
    const T* vb = v + p.v.offset + b * p.v.batch_stride + kvh * hd;
    for (std::int64_t j0 = 0; j0 < keys; j0 += kKeys) {
      const std::int64_t nk = keys - j0 < kKeys ? keys - j0 : kKeys;
      team.team_barrier();
      stage(team, kb + j0 * p.k.ld, p.k.ld, nk, hd, sk);
      stage(team, vb + j0 * p.v.ld, p.v.ld, nk, hd, sv);
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](std::int64_t r) {
        const std::int64_t i = i0 + r, visible = p.causal ? (i + 1 - j0 < nk ? i + 1 - j0 : nk) : nk;
        A* a = &gq(r * hd);
        for (std::int64_t j = 0; j < visible; ++j) {
          const A pr = fast_exp(dot(&sq(r * hd), &sk(j * hd), hd) * scale - sl(r));
          const A dp = dot(&sdo(r * hd), &sv(j * hd), hd) * keep<A>(p, b, h, i, j0 + j);
          const A ds = pr * (dp - sd(r)) * scale;
          for (std::int64_t e = 0; e < hd; ++e) a[e] += ds * sk(j * hd + e);
        }
      });
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * hd), [&](std::int64_t x) {
      const std::int64_t at = p.q.offset + b * p.q.batch_stride + (i0 + x / hd) * p.q.ld + h * hd + x % hd;
      dq[at] = T(A(dq[at]) + gq(x));
    });
  }
};

}  // namespace

// Functors rather than lambdas: each kernel's inputs are named in one place.
template <class T>
void team_forward(const Problem& p, const T* q, const T* k, const T* v, T* out, compute_t<T>* lse) {
  if (shape_only()) return;
  const std::int64_t tiles = (p.S + kRows - 1) / kRows, hd = p.hd;
  int level = 0;
  const Policy policy =
      team_policy<compute_t<T>>(p.B * p.H * tiles, {kRows * hd, kRows * hd, kKeys * hd, kKeys * hd, kRows, kRows}, level);
  Kokkos::parallel_for("attention_fused_team_forward", policy, ForwardKernel<T>{p, q, k, v, out, lse, tiles, level});
}

template <class T>
void team_backward(const Problem& p, const T* q, const T* k, const T* v, const T* out, const compute_t<T>* lse,
                   const T* dout, T* dq, T* dk, T* dv) {
  if (shape_only()) return;
  const std::int64_t hd = p.hd;
  int level = 0;
  if (dk || dv) {
    const std::int64_t tiles = (p.S + kKeys - 1) / kKeys;
    const Policy policy = team_policy<compute_t<T>>(
        p.B * p.Hkv * tiles,
        {kKeys * hd, kKeys * hd, kKeys * hd, kKeys * hd, kStageRows * hd, kStageRows * hd, kStageRows, kStageRows},
        level);
    Kokkos::parallel_for("attention_fused_team_dkdv", policy,
                         KeyValueGradKernel<T>{p, q, k, v, out, lse, dout, dk, dv, tiles, level});
  }
  if (dq) {
    const std::int64_t tiles = (p.S + kRows - 1) / kRows;
    const Policy policy = team_policy<compute_t<T>>(
        p.B * p.H * tiles, {kRows * hd, kRows * hd, kRows * hd, kKeys * hd, kKeys * hd, kRows, kRows}, level);
    Kokkos::parallel_for("attention_fused_team_dq", policy,
                         QueryGradKernel<T>{p, q, k, v, out, lse, dout, dq, tiles, level});
  }
}

#define REMAT_FUSED_TEAM_INSTANTIATE(T)                                                                     \
  template void team_forward<T>(const Problem&, const T*, const T*, const T*, T*, compute_t<T>*);            \
  template void team_backward<T>(const Problem&, const T*, const T*, const T*, const T*, const compute_t<T>*, \
                                 const T*, T*, T*, T*);
REMAT_FUSED_TEAM_INSTANTIATE(float)
REMAT_FUSED_TEAM_INSTANTIATE(double)
REMAT_FUSED_TEAM_INSTANTIATE(bf16)
REMAT_FUSED_TEAM_INSTANTIATE(f16)

}  // namespace remat::ops::fused
