#!/usr/bin/env bash
# Run HERE (a machine with pip and network), in the repository root, before a GPU session.
#
# The GPU machine's image has PyTorch, CUDA 13 and cuDNN 9 but only the CPU build of onnxruntime,
# and transformers 5 (optimum-onnx needs < 4.58). This fetches the wheels bench/gpu.sh installs
# there into .whl/ (ignored by git through .git/info/exclude). One device call carries at most
# 64 MiB, so the 255 MB onnxruntime-gpu wheel is split into 60 MiB parts .whl/ort1 .. .whl/ortN: each
# full part is carried by its own call, the small last one with .whl/small; see bench/gpu.sh.
set -euo pipefail
PY=${PY:-.venv/bin/python}
exclude=$(git rev-parse --git-path info/exclude)
grep -qxF '/.whl/' "$exclude" || echo '/.whl/' >>"$exclude"
rm -rf .whl && mkdir -p .whl/small .whl/big
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl/small \
    optimum==2.1.0 optimum-onnx==0.1.0 transformers==4.57.6 huggingface-hub==0.36.2 tokenizers==0.22.2
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 -d .whl/big onnxruntime-gpu==1.31.1
wheel=$(basename .whl/big/onnxruntime_gpu-*.whl)
(cd .whl/big && sha256sum "$wheel" >../small/onnxruntime-gpu.sha256 && split -b 60M -d "$wheel" "$wheel.part")
n=0
for part in .whl/big/"$wheel".part*; do
    n=$((n + 1)) && mkdir -p ".whl/ort$n" && mv "$part" ".whl/ort$n/"
done
rm -rf .whl/big
echo "prepared .whl/small and $n parts .whl/ort1 .. .whl/ort$n" >&2
du -sh .whl/* >&2
