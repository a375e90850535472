#!/usr/bin/env bash
# The remat command line as a user meets it: help, the happy path, and an
# exit code of 2 with a one-line error and no output file for bad input.
#   cli_test.sh path/to/remat
set -uo pipefail
remat=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

expect_ok() {  # expect_ok "description" cmd...
  local what=$1; shift
  "$@" >out.txt 2>err.txt || fail "$what: exit $? ($(cat err.txt))"
}
expect_error() {  # expect_error "fragment" cmd...: exit 2, one line naming the fragment, no r.h5
  local fragment=$1; shift
  rm -f r.h5
  "$@" >out.txt 2>err.txt
  local rc=$?
  [ $rc -eq 2 ] || fail "$*: exit $rc, expected 2"
  grep -qF -- "$fragment" err.txt || fail "$*: error does not mention '$fragment': $(cat err.txt)"
  [ "$(grep -c . err.txt)" -le 1 ] || fail "$*: error is more than one line: $(cat err.txt)"
  [ ! -e r.h5 ] && [ ! -e r.h5.partial ] || fail "$*: left an output file behind"
}

for sub in "" models export grads; do
  expect_ok "help $sub" "$remat" $sub --help
  grep -q "Usage" out.txt || fail "no usage text for '$sub --help'"
done
"$remat" export --help | grep -q "gpt2" || fail "export --help does not list the models"
"$remat" export --help | grep -q "small" || fail "export --help does not list the presets"

expect_ok "models" "$remat" models
grep -q "gpt2" out.txt || fail "models does not list gpt2"
grep -q "28.0k" out.txt || fail "models does not show gpt2 tiny's parameter count"

expect_ok "export" "$remat" export --model gpt2 --preset tiny --seed 1 --out w.h5
expect_ok "grads" "$remat" grads --weights w.h5 --out r.h5
grep -qE "^loss [0-9.]+" out.txt || fail "grads does not print the loss"
[ -s r.h5 ] || fail "grads wrote no r.h5"
expect_ok "threads" "$remat" --kokkos-num-threads=1 grads --weights w.h5
one_thread=$(cat out.txt)
expect_ok "threads" "$remat" --kokkos-num-threads=2 grads --weights w.h5
[ "$one_thread" = "$(cat out.txt)" ] || fail "the loss depends on the thread count"

expect_error "gpt5" "$remat" export --model gpt5 --out r.h5
expect_error "no such file" "$remat" grads --weights absent.h5 --out r.h5
echo "not hdf5" > bad.h5
expect_error "not an HDF5 file" "$remat" grads --weights bad.h5 --out r.h5
head -c 4000 w.h5 > truncated.h5
expect_error "truncated.h5" "$remat" grads --weights truncated.h5 --out r.h5
"${PYTHON:-python3}" - <<'PY' || fail "could not prepare the malformed files with h5py"
import h5py, shutil
for name, edit in {
    "missing.h5": lambda f: f["params"].pop("h.0.attn.c_proj.bias"),
    "extra.h5": lambda f: f.create_dataset("params/h.9.ln_1.weight", data=[0.0] * 32, dtype="f4"),
    "shape.h5": lambda f: (f["params"].pop("wte.weight"), f.create_dataset("params/wte.weight", shape=(64, 31), dtype="f4")),
    "dtype.h5": lambda f: (f["params"].pop("wte.weight"), f.create_dataset("params/wte.weight", shape=(64, 32), dtype="f8")),
    "model.h5": lambda f: f.attrs.__setitem__("model", "gpt5"),
}.items():
    shutil.copy("w.h5", name)
    with h5py.File(name, "r+") as f:
        edit(f)
PY
expect_error "missing parameter 'h.0.attn.c_proj.bias'" "$remat" grads --weights missing.h5 --out r.h5
expect_error "unexpected parameter 'h.9.ln_1.weight'" "$remat" grads --weights extra.h5 --out r.h5
expect_error "'wte.weight' has shape [64, 31], expected [64, 32]" "$remat" grads --weights shape.h5 --out r.h5
expect_error "'wte.weight' holds float64, expected float32" "$remat" grads --weights dtype.h5 --out r.h5
expect_error "unknown model 'gpt5'" "$remat" grads --weights model.h5 --out r.h5

# Golden regression: a drifted gradient fails and names the parameter.
expect_ok "save golden" "$remat" check --preset tiny --strategies full --save-golden golden.h5
expect_ok "golden" "$remat" check --golden golden.h5 --strategies full,per-layer
"${PYTHON:-python3}" -c "
import h5py
with h5py.File('golden.h5', 'r+') as f:
    f['grads/h.1.mlp.c_fc.weight'][0, 0] += 1.0
" || fail "could not perturb the golden file"
"$remat" check --golden golden.h5 --strategies full >out.txt 2>err.txt
rc=$?
[ $rc -eq 1 ] || fail "a drifted golden file: exit $rc, expected 1"
grep -q "h.1.mlp.c_fc.weight" err.txt || fail "the drift error does not name the parameter: $(cat err.txt)"

# remat time: steps timed in this process, the resident set and the tracker beside it.
expect_ok "time" "$remat" time --preset tiny --strategy per-layer --steps 2
grep -q "step time: median" out.txt || fail "time does not print the median step time"
grep -q "resident set: peak" out.txt || fail "time does not print the resident set"
expect_ok "time --json" "$remat" time --preset tiny --model llama --strategy full --steps 1 --json
"${PYTHON:-python3}" -c "import json,sys; d=json.load(open('out.txt')); sys.exit(0 if d['median_s'] > 0 and d['activation_peak_bytes'] > 0 else 1)" \
  || fail "time --json is not the expected JSON: $(cat out.txt)"
expect_error "runs one strategy" "$remat" time --preset tiny --strategy all
expect_error "reversible" "$remat" time --preset tiny --model gpt2 --strategy reversible

if [ $failures -eq 0 ]; then echo "cli: all checks passed"; else echo "cli: $failures check(s) failed"; exit 1; fi
