#!/usr/bin/env bash
# bge-m3-size embedding throughput and 128-pair rerank latency on a GPU, at FP16 and FP32, through
# the product's own install command and ONNX code. Runs on the device machine, in the repository
# root; on an H200 it took 153 s, 107 s of it the two XLM-R large exports and FP16 conversions; it
# writes gpu-fp16.json, gpu-fp32.json and gpu.log to $OUT.
#
# That machine has python3 with PyTorch, CUDA 13 and cuDNN 9, no network, and only the CPU build of
# onnxruntime. Prepare here with bench/gpu_wheels.sh, then, keeping the machine warm (it is given
# back after 30 s idle), one device call per full part of the onnxruntime-gpu wheel:
#     run(command="mkdir -p /tmp/ortparts && cp .whl/ortI/* /tmp/ortparts/", carry=[".whl/ortI"])
# for I = 1 .. N-1, and then, with the small last part:
#     run(command="bash bench/gpu.sh", carry=[".whl/small", ".whl/ortN"], timeout_s=560)
# If that machine's onnxruntime already has the CUDA provider, the part calls can be skipped.
# A CUDA session on a one-node model is opened before the exports, so a CUDA or cuDNN library that
# fails to load ends the run in seconds instead of after minutes of exporting.
set -uo pipefail
OUT=${OUT:-/tmp/agentmemrec-gpu-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu.log") 2>&1
export PYTHONUNBUFFERED=1
PY=python3
SITE=/tmp/agentmemrec-site
SHIM=/tmp/agentmemrec-shim
REPO=$PWD

fail() { echo "gpu.sh: $*"; printf '{"error": "%s"}\n' "$*" >"$OUT/gpu-error.json"; exit 3; }

install_wheels() {
    mkdir -p /tmp/ortparts && cp .whl/ort*/*.part* /tmp/ortparts/ 2>/dev/null  # parts carried by this call
    local wheels=(.whl/small/*.whl)
    [ -e "${wheels[0]}" ] || fail "no .whl/small: run bench/gpu_wheels.sh here and carry .whl/small"
    if ls /tmp/ortparts/*.part* >/dev/null 2>&1; then
        local name; name=$(basename "$(ls /tmp/ortparts/*.part00)" .part00)
        mkdir -p /tmp/ortwheel && cat /tmp/ortparts/"$name".part* >/tmp/ortwheel/"$name"
        (cd /tmp/ortwheel && sha256sum -c "$REPO/.whl/small/onnxruntime-gpu.sha256") \
            || fail "onnxruntime-gpu wheel parts incomplete: carry every .whl/ortI first"
        wheels+=(/tmp/ortwheel/"$name")
    fi
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
        "${wheels[@]}" || fail "pip install of the carried wheels failed"
}

make_shim() {  # the package's folders under the agentmemrec namespace, as `pip install -e .` maps them
    mkdir -p "$SHIM/agentmemrec"
    for d in indexing ranking server; do ln -sfn "$REPO/$d" "$SHIM/agentmemrec/$d"; done
}

cuda_library_path() {  # the CUDA 13 / cuDNN 9 libraries of the nvidia-* packages beside torch
    $PY - <<'PY'
import glob, os, site
dirs = {os.path.dirname(p) for sp in site.getsitepackages()
        for p in glob.glob(os.path.join(sp, "nvidia", "**", "lib*.so*"), recursive=True)}
print(":".join(sorted(dirs)))
PY
}

nvidia-smi -L || true
install_wheels
make_shim
export PYTHONPATH="$SITE:$SHIM"
export LD_LIBRARY_PATH="$(cuda_library_path):${LD_LIBRARY_PATH:-}"
$PY -c "import onnxruntime as o, transformers as t; print('onnxruntime', o.__version__, o.get_available_providers(), 'transformers', t.__version__)"
$PY -c "import onnxruntime as o; assert 'CUDAExecutionProvider' in o.get_available_providers()" \
    || fail "this onnxruntime has no CUDA provider: carry the onnxruntime-gpu parts first"
$PY - <<'PY' || fail "a CUDA session did not open (CUDA or cuDNN libraries; see above)"
import numpy as np, onnx, onnxruntime as ort
from onnx import TensorProto, helper
x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])
model = helper.make_model(helper.make_graph([helper.make_node("MatMul", ["x", "x"], ["y"])], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 9
options = ort.SessionOptions()
options.log_severity_level = 3
s = ort.InferenceSession(model.SerializeToString(), options, providers=["CUDAExecutionProvider"])
print("preflight providers", s.get_providers(), s.run(None, {"x": np.eye(2, dtype=np.float32)})[0].tolist())
assert s.get_providers()[0] == "CUDAExecutionProvider"
PY

bench() {  # precision, then seconds it may take; each run writes its JSON as it ends
    timeout "$2" $PY bench/model_throughput.py --home /tmp/agentmemrec-bench --device cuda --precision "$1" \
        --units 256 --unit-tokens 256 --pairs 128 --pair-tokens 256 --repeats 5 --no-minilm \
        --json "$OUT/gpu-$1.json"
}
start=$SECONDS
bench fp16 450 || fail "the FP16 run failed or ran out of time (see gpu.log)"  # exports both models
bench fp32 $((500 - SECONDS)) || echo "gpu.sh: the FP32 run failed or ran out of time (see gpu.log)"
echo "gpu.sh: done in $((SECONDS - start)) s"
grep -h '"device"' "$OUT"/gpu-fp*.json | sort | uniq -c  # each should say cuda
