#pragma once
// Row-wise kernels (the norms, cross-entropy): the body for one row is
// written once, and its sums and loops over the row go through a Row, which
// the backend picks. On the host a thread runs a whole row (sums in eight
// lanes, lane_sum; loops vectorise). On a device a team runs a row: sums are
// team reductions and loops spread over the team's threads, because a thread
// per row leaves most of a GPU idle and reads rows far apart. Both are
// deterministic: the team reductions combine in the team's fixed order.
#include <Kokkos_Core.hpp>
#include <type_traits>

#include "autodiff/ops/kernel.hpp"

namespace remat::ops::detail {

// A row run by one thread.
struct SerialRow {
  std::int64_t n;
  template <class T, class F>
  KOKKOS_INLINE_FUNCTION T sum(const F& f) const {
    return lane_sum<T>(n, f);
  }
  template <class T, class F>
  KOKKOS_INLINE_FUNCTION T max(const F& f) const {
    T m = f(0);
    for (std::int64_t j = 1; j < n; ++j) {
      const T v = f(j);
      m = v > m ? v : m;
    }
    return m;
  }
  template <class F>
  KOKKOS_INLINE_FUNCTION void each(const F& f) const {
    for (std::int64_t j = 0; j < n; ++j) f(j);
  }
  template <class F>
  KOKKOS_INLINE_FUNCTION void once(const F& f) const {
    f();
  }
};

// A row run by a team. `each` does not wait for the team: a body reads what
// its own `each` wrote only through `sum`/`max` (which end in a barrier) or
// not at all.
struct TeamRow {
  using Member = Kokkos::TeamPolicy<ExecSpace>::member_type;
  const Member& team;
  std::int64_t n;
  template <class T, class F>
  KOKKOS_INLINE_FUNCTION T sum(const F& f) const {
    T s = 0;
    Kokkos::parallel_reduce(Kokkos::TeamThreadRange(team, n), [&](std::int64_t j, T& acc) { acc += f(j); }, s);
    return s;
  }
  template <class T, class F>
  KOKKOS_INLINE_FUNCTION T max(const F& f) const {
    T m;  // the reducer starts it at the lowest value
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(team, n),
        [&](std::int64_t j, T& acc) {
          const T v = f(j);
          acc = v > acc ? v : acc;
        },
        Kokkos::Max<T>(m));
    return m;
  }
  template <class F>
  KOKKOS_INLINE_FUNCTION void each(const F& f) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), f);
  }
  template <class F>
  KOKKOS_INLINE_FUNCTION void once(const F& f) const {
    Kokkos::single(Kokkos::PerTeam(team), f);
  }
};

constexpr bool kHostRows = Kokkos::SpaceAccessibility<Kokkos::HostSpace, ExecSpace::memory_space>::accessible;

// The Row a body takes in this build.
using Row = std::conditional_t<kHostRows, SerialRow, TeamRow>;

// Internal linkage (an unnamed namespace) for each function here that holds
// a KOKKOS_LAMBDA: nvcc keeps a device lambda's host-side copy helpers in a
// per-file unnamed namespace, set where the lambda is made. An inline or
// template function with external linkage compiled in two files lets the
// linker keep one file's kernel launch and another file's lambda, whose
// helpers in the first file were never set: the launch jumps to address 0
// (seen on an H100). With internal linkage each file keeps its own pair.
namespace {

// body(r, row) for every row r in [0, rows), each row `len` long.
template <class Body>
void for_each_row(const char* name, std::int64_t rows, std::int64_t len, const Body& body) {
  if (shape_only()) return;
  if constexpr (kHostRows) {
    for_each(name, rows, KOKKOS_LAMBDA(std::int64_t r) { body(r, SerialRow{len}); });
  } else {
    using Policy = Kokkos::TeamPolicy<ExecSpace>;
    Kokkos::parallel_for(name, Policy(int(rows), Kokkos::AUTO), KOKKOS_LAMBDA(const Policy::member_type& team) {
      body(std::int64_t(team.league_rank()), TeamRow{team, len});
    });
  }
}

}  // namespace

}  // namespace remat::ops::detail
