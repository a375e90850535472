#!/usr/bin/env bash
# Every fix an error message suggests is followed here, and works: a message
# that says "pass --resume" is answered by the same command with --resume, one
# that names a command or an example value gets that command or value run.
# (lora-merge's suggestion is followed in train_test.sh and hf_test.sh;
# --shard-params' "run it under mpirun" in mpi_test.sh; a full disk's "free
# space and rerun with --resume" in hostile_test.sh.)
#   suggestions_test.sh path/to/remat
set -uo pipefail
source "$(dirname "$0")/lib.sh"
remat=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
says() { grep -qF -- "$1" err.txt || fail "the message does not suggest '$1': $(cat err.txt)"; }
tiny=(--preset tiny --warmup 0 --steps 1)

# train onto a file that holds a run: --resume, --force, or another --out.
train=(train --preset tiny --steps 2)
# (--resume only where the settings are the run's: otherwise it would be refused.)
expect_ok "train" "$remat" "${train[@]}" --out run.h5
expect_error "holds a training run already" "$remat" "${train[@]}" --out run.h5
says "pass --resume"; says "--force"; says "another --out"
expect_ok "train --resume, as suggested" "$remat" "${train[@]}" --out run.h5 --resume
expect_error "holds another training run (it was trained with steps 2, this run asks for 4)" \
  "$remat" train --preset tiny --steps 4 --out run.h5
grep -q "resume" err.txt && fail "--resume suggested for a run with other settings: $(cat err.txt)"
says "--force"; says "another --out"
expect_ok "train --force, as suggested" "$remat" train --preset tiny --steps 4 --out run.h5 --force
expect_ok "train with another --out, as suggested" "$remat" train --preset tiny --steps 4 --out run2.h5

# matrix onto a file that holds its runs: --resume, or another --out.
matrix=(matrix --models gpt2 --strategies full,sqrt "${tiny[@]}")
expect_ok "matrix" "$remat" "${matrix[@]}" --out m.h5
expect_error "already holds run" "$remat" "${matrix[@]}" --out m.h5
says "pass --resume"; says "another --out"
expect_ok "matrix --resume, as suggested" "$remat" "${matrix[@]}" --out m.h5 --resume
expect_ok "matrix with another --out, as suggested" "$remat" "${matrix[@]}" --out m2.h5

# An output that is another kind of file: --force, or another output.
expect_error "refusing to replace it" "$remat" export --preset tiny --out m.h5
says "pass --force"; says "give another output"
expect_ok "export --force, as suggested" "$remat" export --preset tiny --out m2.h5 --force
expect_ok "export to another output, as suggested" "$remat" export --preset tiny --out w.h5

# time takes one strategy: `remat matrix` for several.
expect_error "runs one strategy" "$remat" time --preset tiny --strategy full,sqrt --steps 1 --warmup 0
says "remat matrix"
expect_ok "matrix for several, as suggested" "$remat" matrix --preset tiny --strategies full,sqrt --steps 1 --warmup 0 --out t.h5

# export-hf with nothing to write: --weights, --adapters, or both.
expect_error "give --weights" "$remat" export-hf --out hf
expect_ok "export-hf --weights, as suggested" "$remat" export-hf --weights w.h5 --out hf

# A --freeze pattern that matches nothing: the names it gives as examples work.
expect_error "matches no parameter" "$remat" check --preset tiny --strategies full --freeze 'nomatch*'
examples=$(sed -n 's/.*e\.g\. \(.*\))$/\1/p' err.txt)
[ -n "$examples" ] || fail "--freeze's message gives no example names: $(cat err.txt)"
for name in ${examples//,/ }; do
  expect_ok "--freeze $name, as the message's example" "$remat" check --preset tiny --strategies full --freeze "$name"
done

# A tag a model does not produce: the tags and groups the message lists all work.
for model in gpt2 llama; do
  expect_error "produces no tag" "$remat" check --model $model --preset tiny --strategies selective:nothing
  says "remat strategies"
  tags=$(sed -n 's/.*its tags: \([^;]*\);.*/\1/p' err.txt)
  groups=$(sed -n 's/.*its groups: \(.*\) (see.*/\1/p' err.txt)
  [ -n "$tags" ] && [ -n "$groups" ] || fail "$model: the message lists no tags or groups: $(cat err.txt)"
  for tag in ${tags//,/ } ${groups//,/ }; do
    expect_ok "$model selective:$tag, as listed" "$remat" check --model $model --preset tiny --strategies selective:$tag
  done
done
expect_ok "remat strategies, as suggested" "$remat" strategies

# A size the parser refuses: each example it gives parses.
expect_error "not a positive size" "$remat" check --preset tiny --strategies budget:lots
for size in $(sed -n 's/.*(e\.g\. \(.*\), or a byte count).*/\1/p' err.txt | tr -d ','); do
  expect_ok "budget:$size, as the message's example" "$remat" plan --preset tiny --budget "$size"
done

# --golden on a file that is no golden file: write one with --save-golden.
expect_error "not a golden file" "$remat" check --preset tiny --golden w.h5
says "--save-golden"
expect_ok "check --save-golden, as suggested" "$remat" check --preset tiny --strategies full --save-golden g.h5
expect_ok "check --golden on it" "$remat" check --preset tiny --strategies all --golden g.h5

# A .safetensors file without config.json beside it: --config, or the folder.
expect_ok "export-hf" "$remat" export-hf --weights w.h5 --out hf2
mkdir alone && cp hf2/model.safetensors alone/
expect_error "no config.json beside it" "$remat" import alone/model.safetensors --out i.h5
says "--config"; says "give the model folder"
expect_ok "import --config, as suggested" "$remat" import alone/model.safetensors --config hf2/config.json --out i.h5
expect_ok "import the folder, as suggested" "$remat" import hf2 --out i2.h5

finish suggestions
