#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU, run the test matrix on cupy and
# torch-CUDA and the benchmarks on both backends, writing everything to one folder.
#
#   bash ci/gpu_check.sh [OUT_DIR]        (default: bench/results/gpu)
#
# Needs python3 with numpy, cupy, torch (CUDA), pytest, pytest-xdist, scikit-learn
# and scipy. array-api-compat, array-api-extra and array-api-strict are installed
# from wheels in .whl/ when that folder exists (see ci/fetch_gpu_wheels.sh), for
# machines that cannot reach a package index.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-bench/results/gpu}}
mkdir -p "$OUT_DIR"
PY=${PYTHON:-python3}

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/xpml-site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/xpml-site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-}
export PYTHONUNBUFFERED=1

status=0
{ nvidia-smi || true; } > "$OUT_DIR/nvidia-smi.txt" 2>&1
$PY -m xpml info > "$OUT_DIR/info.txt" 2>&1 || status=1

# every test parametrised over libraries, on the GPU libraries only
XPML_TEST_LIBS=cupy,torch_cuda $PY -m pytest -q -n 4 -p no:cacheprovider -k "cupy or torch_cuda" \
    tests > "$OUT_DIR/tests-gpu.txt" 2>&1 || status=1
tail -n 3 "$OUT_DIR/tests-gpu.txt"

# benchmarks: xpml on the GPU beside scikit-learn / PyTorch-CPU references
$PY -m xpml bench --backend cupy --device 0 --out "$OUT_DIR" --tag cupy \
    > "$OUT_DIR/bench-cupy.log" 2>&1 || status=1
$PY -m xpml bench --backend torch --device cuda --out "$OUT_DIR" --tag torch-cuda \
    > "$OUT_DIR/bench-torch-cuda.log" 2>&1 || status=1
tail -n 40 "$OUT_DIR"/bench-*.log
exit $status
