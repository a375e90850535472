# What every tests/cli/*.sh script checks with; sourced, not run.
#   source "$(dirname "$0")/lib.sh"
# A check that fails is counted and the script goes on, so one run lists
# every failure; `finish NAME` ends the script with the verdict.
failures=0
cli_tests=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)  # this folder, whoever sources it, from wherever (before its cd)
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
expect_ok() {  # expect_ok "what" cmd...: exit 0
  local what=$1; shift
  "$@" >out.txt 2>err.txt || fail "$what: exit $? ($(cat err.txt))"
}
expect_error() {  # expect_error "fragment" cmd...: exit 2, one line naming the fragment
  local fragment=$1; shift
  "$@" >out.txt 2>err.txt
  local rc=$?
  [ $rc -eq 2 ] || fail "$*: exit $rc, expected 2 ($(cat err.txt))"
  grep -qF -- "$fragment" err.txt || fail "$*: error does not mention '$fragment': $(cat err.txt)"
  [ "$(grep -c . err.txt)" -le 1 ] || fail "$*: error is more than one line: $(cat err.txt)"
}
mpi_test_start() {  # mpi_test_start REMAT MPIEXEC: `remat`, `mpiexec`, a scratch folder to work in (gone at the
  # end), and the arrays `mpi4` and `mpi` that launch 4 and 2 ranks: every MPI script's start
  remat=$1
  mpiexec=$2
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cd "$work" || exit 1
  mpi_ranks "$mpiexec" 4
  mpi4=("${mpi[@]}")
  mpi_ranks "$mpiexec" 2
}
mpi_ranks() {  # mpi_ranks MPIEXEC N: the array `mpi` launches N ranks on however few cores (as root, allowed)
  mpi=("$1" --oversubscribe -n "$2")
  [ "$(id -u)" -eq 0 ] && mpi=("$1" --allow-run-as-root --oversubscribe -n "$2")
  return 0
}
close_grads() {  # close_grads ONE.h5 SPLIT.h5 [TOL [LOSS_TOL]]: a split run's loss and gradients against one process's
  # The loss within LOSS_TOL (default TOL) of one process's, each gradient within TOL (default 1e-5) of its tensor's
  # largest value, but at least TOL / 10 of the model's (a millionth at 1e-5): a gradient zero in exact arithmetic
  # (bert's key biases: softmax ignores a shift every key shares) is rounding noise, the larger the coarser the type.
  py "$1" "$2" "${3:-1e-5}" "${4:-${3:-1e-5}}" <<'PY'
import sys, h5py, numpy as np
one, two, tol, loss_tol = h5py.File(sys.argv[1]), h5py.File(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
l1, l2 = float(one["loss"][()]), float(two["loss"][()])
assert abs(l1 - l2) <= loss_tol * abs(l1), (l1, l2)
assert sorted(one["grads"]) == sorted(two["grads"])
floor = 0.1 * tol * max(np.abs(one["grads"][n][:]).max() for n in one["grads"])
for name in one["grads"]:
    a, b = one["grads"][name][:], two["grads"][name][:]
    assert a.shape == b.shape, (name, a.shape, b.shape)
    scale = max(np.abs(a).max(), floor)
    assert np.abs(a - b).max() <= tol * scale, (name, np.abs(a - b).max() / scale)
PY
}
state_as_estimated() {  # state_as_estimated RUN.h5 ESTIMATE.json: a training run's communication as predicted,
  # and what each rank holds (parameters, gradients, optimizer state, gathered and reducing peaks, its last
  # step's activation peak) what `estimate --json` says of its first row
  py "$1" "$2" <<'PY'
import sys, json, h5py
b, row = h5py.File(sys.argv[1]), json.load(open(sys.argv[2]))[0]
assert b["history/comm_bytes"][:].tolist() == b["history/predicted_comm_bytes"][:].tolist()
held = {k: int(b.attrs["rank_memory." + k]) for k in ("parameters", "gradients", "optimizer", "gathered_peak", "reducing_peak")}
said = {"parameters": row["parameter_bytes"], "gradients": row["gradient_bytes"], "optimizer": row["optimizer_bytes"],
        "gathered_peak": row["gathered_peak_bytes"], "reducing_peak": row["reducing_peak_bytes"]}
assert held == said, (held, said)
assert int(b["history/activation_peak"][-1]) == row["activation_peak_bytes"]
PY
}
cut_at_first_save() {  # cut_at_first_save FILE CMD...: runs CMD, killed (every rank) once FILE exists
  # Saves replace the file atomically; a file test every 10 ms cuts the run after its first save on any machine.
  # The ranks (mpiexec's children) get SIGKILL at once: mpiexec's own SIGTERM reaches them late, and a fast
  # machine would finish the run first.
  "${@:2}" >/dev/null 2>&1 &
  local job=$! _ child
  for _ in $(seq 3000); do
    [ -e "$1" ] && break
    sleep 0.01
  done
  for child in $(cat /proc/"$job"/task/*/children 2>/dev/null); do kill -9 "$child" 2>/dev/null; done
  kill "$job" 2>/dev/null
  wait "$job" 2>/dev/null
  return 0
}
same_run() {  # same_run A B: two training run files bitwise alike (losses, weights, optimizer state)
  "${PYTHON:-python3}" - "$1" "$2" <<'PY'
import sys, h5py
a, b = (h5py.File(p) for p in sys.argv[1:])
assert a["history/loss"][:].tobytes() == b["history/loss"][:].tobytes(), "losses differ"
for n in a["params"]:
    assert a["params"][n][:].tobytes() == b["params"][n][:].tobytes(), n
for k in a["optimizer"]:
    for n in a["optimizer"][k]:
        assert a["optimizer"][k][n][:].tobytes() == b["optimizer"][k][n][:].tobytes(), (k, n)
PY
}
# Sampled sweeps (README, "A few sweeps are sampled"). draw_sample_seed sets sample_seed, drawn once a
# script and printed: REMAT_SAMPLE_SEED=N repeats the draw, and 0 takes every case.
draw_sample_seed() {
  [ -n "${sample_seed:-}" ] && return 0
  sample_seed=${REMAT_SAMPLE_SEED:-$((RANDOM * 32768 + RANDOM))}
  echo "sample seed $sample_seed (REMAT_SAMPLE_SEED=$sample_seed repeats the draw, 0 takes every case)"
}
# sample NAME K ITEM...: the array NAME set to K of the items, in their order, as this run's seed draws
# them, so that runs together cover them all.
sample() {
  local -n chosen=$1
  local k=$2 i j t
  shift 2
  local items=("$@") picked=()
  draw_sample_seed
  sample_draws=$((${sample_draws:-0} + 1))
  if [ "$sample_seed" -eq 0 ] || [ "$k" -ge ${#items[@]} ]; then chosen=("${items[@]}"); return 0; fi
  local index=("${!items[@]}")
  RANDOM=$((sample_seed + 7919 * sample_draws))  # a draw of its own for each sweep of the script
  for ((i = 0; i < k; i++)); do  # the first k of a Fisher-Yates shuffle of the positions
    j=$((i + RANDOM % (${#index[@]} - i)))
    t=${index[i]} index[i]=${index[j]} index[j]=$t
  done
  for i in $(printf '%s\n' "${index[@]:0:k}" | sort -n); do picked+=("${items[i]}"); done
  chosen=("${picked[@]}")
}
finish() {  # finish NAME: the verdict and the exit code
  if [ "$failures" -eq 0 ]; then echo "$1: all checks passed"; else echo "$1: $failures check(s) failed"; exit 1; fi
}
# pyrun SCRIPT ARGS...: as "$PYTHON" SCRIPT ARGS..., in one Python process for
# the whole test (py_worker.py), so torch is imported once, not once a script.
# The worker's pipes are copied to descriptors of our own: bash closes a
# coprocess's in every subshell, and $(pyrun ...) or pyrun | grep is one.
pyrun() {
  if [ -z "${PY_WORKER_PID:-}" ]; then
    py_files=$(mktemp -d)
    coproc PY_WORKER { exec "${PYTHON:-python3}" "$cli_tests/py_worker.py" "$py_files"; }
    exec {py_to}>&"${PY_WORKER[1]}" {py_from}<&"${PY_WORKER[0]}"
  fi
  local rc
  printf '%s\0' "$#" "$PWD" "$py_files/out" "$py_files/err" "$@" >&"$py_to"
  read -r rc <&"$py_from" || { echo "pyrun: the Python worker died" >&2; return 1; }
  cat "$py_files/out"
  cat "$py_files/err" >&2
  return "$rc"
}
# py [-c CODE] ARGS...: as "$PYTHON" - ARGS... with the script on stdin (a
# heredoc), or "$PYTHON" -c CODE ARGS..., in the same shared worker (h5py and
# numpy imported once: a quarter of a second each time otherwise).
py() {
  local script rc
  script=$(mktemp "${TMPDIR:-/tmp}/remat-py.XXXXXX")
  if [ "${1:-}" = -c ]; then printf '%s\n' "$2" >"$script"; shift 2; else cat >"$script"; fi
  pyrun "$script" "$@"; rc=$?
  rm -f "$script"
  return "$rc"
}
