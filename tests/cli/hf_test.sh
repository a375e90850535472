#!/usr/bin/env bash
# Hugging Face model folders in and out, with model folders written in the test
# by an independent writer (tests/hf/make_hf.py: torch for the
# values, the safetensors container by hand): import is bitwise the weights
# it was made from, a model folder used directly as --weights gives bitwise
# the imported file's gradients, export-hf and import again are bitwise
# (16-bit exports: the rounded values), sharded and single files, every
# refusal is one line with exit 2 and nothing written, and exported LoRA
# adapters merge in PEFT's way to what remat lora-merge computes.
#   hf_test.sh path/to/remat
set -uo pipefail
source "$(dirname "$0")/lib.sh"
remat=$1
here=$(cd "$(dirname "$0")/../hf" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
ok() {  # ok "what" cmd...
  local what=$1; shift
  "$@" >out.txt 2>err.txt || fail "$what: exit $? ($(cat err.txt))"
}
refused() {  # refused "fragment" cmd...: exit 2, one line naming the fragment, no out.h5
  local fragment=$1; shift
  rm -f out.h5
  "$@" >out.txt 2>err.txt
  local rc=$?
  [ $rc -eq 2 ] || fail "$*: exit $rc, expected 2 ($(cat err.txt))"
  grep -qF -- "$fragment" err.txt || fail "$*: the error does not say '$fragment': $(cat err.txt)"
  [ "$(grep -c . err.txt)" -le 1 ] || fail "$*: more than one line: $(cat err.txt)"
  [ ! -e out.h5 ] && ! ls out.h5.partial* >/dev/null 2>&1 || fail "$*: left an output behind"
}
same_grads() {  # same_grads A.h5 B.h5: loss and every gradient bitwise
  h5diff -q "$1" "$2" /loss /loss && h5diff -q "$1" "$2" /grads /grads || fail "gradients of $1 and $2 differ"
}

for model in gpt2 llama mixtral; do
  ok "export $model" "$remat" export --model "$model" --preset tiny --seed 3 --out "$model.h5"
  # A single file, and shards with an index; with the buffers Hugging Face model folders carry.
  for layout in "--shards 1" "--shards 3 --buffers"; do
    rm -rf hf
    ok "make_hf $model $layout" pyrun "$here/make_hf.py" "$model.h5" hf $layout
    ok "import $model $layout" "$remat" import hf --out imported.h5
    ok "same params" pyrun "$here/check_hf.py" params "$model.h5" imported.h5
    ok "grads on the folder" "$remat" grads --weights hf --out direct.h5
    ok "grads on the import" "$remat" grads --weights imported.h5 --out via.h5
    same_grads direct.h5 via.h5
  done
  # 16-bit model folders are widened exactly.
  for dtype in BF16 F16; do
    rm -rf hf
    ok "make_hf $dtype" pyrun "$here/make_hf.py" "$model.h5" hf --dtype "$dtype"
    ok "import $dtype" "$remat" import hf --out imported.h5
    ok "$dtype widened exactly" pyrun "$here/check_hf.py" params "$model.h5" imported.h5 --rounded "$dtype"
  done
  # A single .safetensors file with --config, and with the config beside it.
  ok "import one file" "$remat" import hf/model.safetensors --config hf/config.json --out one.h5
  ok "--weights one file" "$remat" grads --weights hf/model.safetensors --out direct.h5
  # Out and back in, single and sharded, 32 and 16 bits.
  rm -rf out-hf
  ok "export-hf $model" "$remat" export-hf --weights "$model.h5" --out out-hf
  ok "import again" "$remat" import out-hf --out back.h5
  ok "round trip bitwise" pyrun "$here/check_hf.py" params "$model.h5" back.h5
  rm -rf sharded
  ok "export-hf sharded" "$remat" export-hf --weights "$model.h5" --out sharded --max-shard-size 20KB --dtype bf16
  [ -f sharded/model.safetensors.index.json ] && [ -f sharded/model-00002-of-*.safetensors ] || fail "no shards written"
  ok "import shards" "$remat" import sharded --out back16.h5
  ok "bf16 round trip" pyrun "$here/check_hf.py" params "$model.h5" back16.h5 --rounded BF16
done

# gpt2 model folders come with and without GPT2LMHeadModel's "transformer." prefix, some with the tied head saved.
rm -rf hf && ok "make_hf no prefix" pyrun "$here/make_hf.py" gpt2.h5 hf --no-prefix --tied-head --buffers
ok "import no prefix" "$remat" import hf --out imported.h5
ok "no prefix same params" pyrun "$here/check_hf.py" params gpt2.h5 imported.h5

# Every refusal: one line, exit 2, nothing written.
for case in "header-length:runs beyond the file" "overlap:overlap" "hole:belong to no tensor" \
            "byte-count:needs" "dtype:F64" "duplicate:named twice" "missing:no tensor" \
            "extra:is not a parameter" "nan:non-finite" "eps:layer_norm_epsilon" "bias:add_cross_attention" \
            "tied:tie_word_embeddings" "model-type:model_type" "architecture:architectures" \
            "head-differs:differs from"; do
  kind=${case%%:*} fragment=${case#*:}
  rm -rf bad && pyrun "$here/make_hf.py" gpt2.h5 bad --break "$kind" || fail "make_hf --break $kind"
  refused "$fragment" "$remat" import bad --out out.h5
  refused "$fragment" "$remat" grads --weights bad --out out.h5
done
for case in "eps:rms_norm_eps" "bias:attention_bias" "tied:tie_word_embeddings" "missing:no tensor"; do
  kind=${case%%:*} fragment=${case#*:}
  rm -rf bad && pyrun "$here/make_hf.py" llama.h5 bad --break "$kind" || fail "make_hf llama --break $kind"
  refused "$fragment" "$remat" import bad --out out.h5
done
for case in "index-missing:not in the folder" "index-wrong:but it is in"; do
  kind=${case%%:*} fragment=${case#*:}
  rm -rf bad && pyrun "$here/make_hf.py" gpt2.h5 bad --shards 2 --break "$kind" || fail "make_hf --break $kind"
  refused "$fragment" "$remat" import bad --out out.h5
done
mkdir -p empty
refused "no config.json" "$remat" import empty --out out.h5
refused "not a Hugging Face model folder" "$remat" import gpt2.h5 --out out.h5
"$remat" export --model bert --preset tiny --out bert.h5 >/dev/null
refused "no Hugging Face layout" "$remat" export-hf --weights bert.h5 --out bert-hf
[ ! -e bert-hf/config.json ] || fail "export-hf of bert wrote a config"
refused "already holds a model folder" "$remat" export-hf --weights gpt2.h5 --out out-hf
refused "--dtype" "$remat" export-hf --weights gpt2.h5 --out other --dtype fp8
refused "--max-shard-size" "$remat" export-hf --weights gpt2.h5 --out other --max-shard-size lots

# LoRA adapters in PEFT's layout: PEFT's merge of them equals remat's lora-merge.
for model in gpt2 llama; do
  ok "train lora $model" "$remat" train --model "$model" --preset tiny --steps 3 --lora 4 --lora-alpha 8 \
    --out "run-$model.h5" --adapters-out "adapters-$model.h5"
  ok "merge $model" "$remat" lora-merge --weights "run-$model.h5" --adapters "adapters-$model.h5" --out "merged-$model.h5"
  rm -rf base merged peft
  ok "export base" "$remat" export-hf --weights "run-$model.h5" --out base
  ok "export merged" "$remat" export-hf --weights "merged-$model.h5" --out merged
  ok "export adapters" "$remat" export-hf --adapters "adapters-$model.h5" --out peft
  ok "PEFT merge = remat's" pyrun "$here/check_hf.py" peft peft base merged
done

# A LLaMA-1 checkpoint's norm epsilon (rms_norm_eps 1e-6) becomes the model's
# attribute, used as the folder says, and written back by export-hf.
rm -rf hf && ok "export-hf llama" "$remat" export-hf --weights llama.h5 --out hf
cat > eps.py <<'PY'
import json, sys
c = json.load(open("hf/config.json"))
c["rms_norm_eps"] = 1e-6
json.dump(c, open("hf/config.json", "w"))
PY
pyrun eps.py || fail "could not edit hf/config.json"
ok "import eps 1e-6" "$remat" import hf --out eps.h5
[ "$(h5dump -a /eps eps.h5 | grep -c '1e-06')" -ge 1 ] || fail "the imported file's eps is not 1e-6: $(h5dump -a /eps eps.h5)"
ok "grads on the folder" "$remat" grads --weights hf --out via-folder.h5
ok "grads on the import" "$remat" grads --weights eps.h5 --out via-import.h5
same_grads via-folder.h5 via-import.h5
rm -rf eps-hf && ok "export-hf eps" "$remat" export-hf --weights eps.h5 --out eps-hf
grep -q '"rms_norm_eps": 1e-06' eps-hf/config.json || fail "export-hf did not write rms_norm_eps 1e-6: $(cat eps-hf/config.json)"

# Llama 3.1's rotary scaling (rope_type llama3) becomes the model's, used as
# the folder says and written back; another kind of scaling is refused.
rm -rf hf && ok "export-hf llama" "$remat" export-hf --weights llama.h5 --out hf
cat > rope.py <<'PY'
import json, sys
c = json.load(open("hf/config.json"))
c["rope_scaling"] = {"rope_type": sys.argv[1], "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8}
json.dump(c, open("hf/config.json", "w"))
PY
pyrun rope.py llama3 || fail "could not edit hf/config.json"
ok "import llama3 scaling" "$remat" import hf --out rope.h5
ok "grads on the folder" "$remat" grads --weights hf --out rope-folder.h5
ok "grads on the import" "$remat" grads --weights rope.h5 --out rope-import.h5
same_grads rope-folder.h5 rope-import.h5
rm -rf rope-hf && ok "export-hf rope" "$remat" export-hf --weights rope.h5 --out rope-hf
grep -q '"rope_type": "llama3"' rope-hf/config.json || fail "export-hf did not write the rope scaling: $(cat rope-hf/config.json)"
pyrun rope.py dynamic || fail "could not edit hf/config.json"
refused "rope_type llama3" "$remat" import hf --out out.h5

# Qwen2 (llama with q/k/v biases, the model attribute qkv_bias): out to a
# Qwen2ForCausalLM folder and back, bitwise, the folder's gradients the file's.
cp llama.h5 qwen.h5
cat > qwen.py <<'PY'
import h5py, numpy as np
with h5py.File("qwen.h5", "r+") as f:
    f.attrs["qkv_bias"] = np.int64(1)
    rng = np.random.default_rng(3)
    for w in [n for n in f["params"] if n.endswith((".wq.weight", ".wk.weight", ".wv.weight"))]:
        f["params"][w[:-len("weight")] + "bias"] = rng.uniform(-0.5, 0.5, f["params"][w].shape[0]).astype(np.float32)
PY
pyrun qwen.py || fail "could not make qwen.h5"
rm -rf qwen-hf && ok "export-hf qwen2" "$remat" export-hf --weights qwen.h5 --out qwen-hf
grep -q '"model_type": "qwen2"' qwen-hf/config.json || fail "export-hf of a llama with q/k/v biases is not a qwen2 folder"
ok "import qwen2" "$remat" import qwen-hf --out qwen-back.h5
ok "qwen2 same params" pyrun "$here/check_hf.py" params qwen.h5 qwen-back.h5
ok "grads on the qwen2 import" "$remat" grads --weights qwen-back.h5 --out qwen-file.h5
ok "grads on the qwen2 folder" "$remat" grads --weights qwen-hf --out qwen-folder.h5
same_grads qwen-file.h5 qwen-folder.h5

# QLoRA's base: import --quantize, used only frozen, refused where it would
# train, its file checked as strictly as float weights.
for model in llama mixtral; do
  rm -rf hf && ok "export-hf $model" "$remat" export-hf --weights "$model.h5" --out hf
  ok "import --quantize nf4 $model" "$remat" import hf --quantize nf4 --out "q-$model.h5"
  grep -q "linear weights in nf4" out.txt || fail "import --quantize does not say what it quantized: $(cat out.txt)"
  ok "check on quantized $model" "$remat" check --weights "q-$model.h5" --lora 2 --strategies all
  refused "is quantized (nf4) and cannot train" "$remat" check --weights "q-$model.h5"
  refused "is quantized (nf4) and cannot train" "$remat" check --weights "q-$model.h5" --freeze 'layers.0.*'
done
# QLoRA end to end: adapters trained on the quantized base merge into its dequantized values.
ok "train on quantized" "$remat" train --weights q-llama.h5 --lora 2 --steps 3 --out qrun.h5 --adapters-out qad.h5
ok "merge onto quantized" "$remat" lora-merge --weights q-llama.h5 --adapters qad.h5 --out qmerged.h5
grep -q "quantized weights dequantized to float32" out.txt || fail "lora-merge does not say it dequantized: $(cat out.txt)"
ok "merged is plain" "$remat" check --weights qmerged.h5 --strategies full
refused "cannot train" "$remat" train --weights q-llama.h5 --steps 2 --out out.h5
refused "is quantized (nf4) and cannot train" "$remat" grads --weights q-llama.h5 --out out.h5
# grads of a QLoRA step: the adapters' gradients alone.
ok "grads on quantized" "$remat" grads --weights q-llama.h5 --lora 2 --out qgrads.h5
py qgrads.h5 <<'PY' || fail "grads --lora on a quantized base does not hold the adapters' gradients alone"
import sys, h5py, numpy as np
g = h5py.File(sys.argv[1])["grads"]
assert len(g) > 0 and all(".lora_" in n for n in g), list(g)
assert any(np.abs(g[n][:]).max() > 0 for n in g)
PY
refused "nothing is frozen" "$remat" check --model llama --quantize nf4
refused "--quantize" "$remat" import hf --quantize nf3 --out out.h5
cat > damage.py <<'PY'
import sys, h5py, numpy as np
name, how = sys.argv[1], sys.argv[2]
with h5py.File("bad.h5", "r+") as f:
    d = f["params/" + name]
    if how == "format":
        d.attrs["quantized"] = "nf5"
    else:
        b, attrs = d[()], dict(d.attrs)
        if how == "nan":  # the last second-level scale
            b[-8:-4] = np.frombuffer(np.float32("nan").tobytes(), np.uint8)
        else:
            b = b[:-4]
        del f["params/" + name]
        f["params/" + name] = b
        for k, v in attrs.items():
            f["params/" + name].attrs[k] = v
PY
for flaw in "format|which this build does not know" "short|expected uint8" "nan|not valid nf4"; do
  cp q-llama.h5 bad.h5
  pyrun damage.py layers.0.attention.wq.weight "${flaw%%|*}" || fail "could not damage bad.h5 ($flaw)"
  refused "${flaw#*|}" "$remat" check --weights bad.h5 --lora 2
done

if [ "$failures" -ne 0 ]; then echo "$failures model folder check(s) failed"; exit 1; fi
echo "Hugging Face checks passed"
