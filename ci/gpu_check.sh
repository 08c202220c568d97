#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU (no network needed), check that
# CUDA works from CuPy and PyTorch, run the test suite on cupy and torch-CUDA,
# then the GPU benchmark suite (xpml bench gpu) beside scikit-learn on the CPU.
#
#   bash ci/gpu_check.sh [OUT_DIR] [--quick | --simulate]    (OUT_DIR: bench/results/gpu)
#
#   (default)   full: every GPU test, the benchmarks at full size; under 8 minutes
#   --quick     a subset of the tests and the benchmarks at quick sizes; under 3 minutes
#   --simulate  the same pipeline on the CPU at tiny sizes: torch-CPU stands in for
#               cupy and torch-CUDA in the tests and the first benchmark run, NumPy
#               in the second; no CUDA check, nothing installed (what CI runs)
#
# Needs python3 (or $PYTHON) with numpy, scipy, scikit-learn, pytest, pytest-xdist,
# cupy and a CUDA build of torch. array-api-compat, array-api-extra and
# array-api-strict are installed from the wheels in .whl/ (made on a connected
# machine by ci/fetch_gpu_wheels.sh) into a temporary folder on PYTHONPATH.
#
# Benchmarks: cupy runs the whole suite and times the references; torch-CUDA then
# runs it too, reusing those reference times (--reference-from), in what is left
# of the time budget. Cases that do not fit are listed as stopped, never dropped
# silently.
#
# Writes to OUT_DIR: gpu-check.md (the summary: steps, tests, both benchmark
# tables), gpu-check.json, gpu-check.log (every command's output), and
# bench-gpu-<backend>.md/.json. Exits non-zero when CUDA is unusable, a test
# failed, no GPU test ran (or all were skipped), or a benchmark run timed nothing.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD

MODE=full
OUT_DIR=
for arg in "$@"; do
  case $arg in
    --quick) MODE=quick ;;
    --simulate) MODE=simulate ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    -*) echo "gpu_check: unknown option $arg (use --quick or --simulate)" >&2; exit 2 ;;
    *) OUT_DIR=$arg ;;
  esac
done
OUT_DIR=${OUT_DIR:-bench/results/gpu}
mkdir -p "$OUT_DIR" && OUT_DIR=$(cd "$OUT_DIR" && pwd) || exit 2
PY=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/xpml-gpu-check.XXXXXX") || exit 2
trap 'rm -rf "$WORK"' EXIT
LOG=$OUT_DIR/gpu-check.log
STEPS=$WORK/steps.tsv
rm -f "$OUT_DIR"/gpu-check.md "$OUT_DIR"/gpu-check.json "$OUT_DIR"/bench-gpu-*.md \
      "$OUT_DIR"/bench-gpu-*.json
: > "$LOG"
: > "$STEPS"
export PYTHONUNBUFFERED=1

# mode settings: the deadline (seconds since start) everything is sized to, the
# tests' limit, the benchmark size flag, each cold call's limit, the share kept
# for the second backend, pytest workers
case $MODE in
  full)
    DEADLINE=465; TEST_LIMIT=210; SIZE=; CASE_LIMIT=75; SECOND_SHARE=90
    WORKERS=8; LIBS=cupy,torch_cuda; KEXPR="cupy or torch_cuda"; TESTS=(tests)
    RUNS=("cupy cupy 0" "torch-cuda torch cuda") ;;
  quick)
    # the families the benchmarks time (about a third of the GPU tests)
    DEADLINE=170; TEST_LIMIT=90; SIZE=--quick; CASE_LIMIT=25; SECOND_SHARE=35
    WORKERS=8; LIBS=cupy,torch_cuda; KEXPR="cupy or torch_cuda"
    TESTS=(tests/test_backend.py tests/test_kernels.py tests/test_svm.py
           tests/test_kernel_ridge.py tests/test_neighbors.py tests/test_cluster.py
           tests/test_decomposition.py tests/test_nn_layers.py)
    RUNS=("cupy cupy 0" "torch-cuda torch cuda") ;;
  simulate)
    # tiny sizes: the limits are only there to stop a hang
    DEADLINE=900; TEST_LIMIT=300; SIZE=--tiny; CASE_LIMIT=120; SECOND_SHARE=300
    WORKERS=2; LIBS=torch; KEXPR="torch"; TESTS=(tests/test_metrics.py tests/test_linalg.py)
    RUNS=("simulate-torch-cpu torch cpu" "simulate-numpy numpy -") ;;
esac
[ -n "${XPML_GPU_CHECK_WORKERS:-}" ] && WORKERS=$XPML_GPU_CHECK_WORKERS

say() { echo "gpu_check: $*" | tee -a "$LOG"; }
step() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$STEPS"; }
fail_early() {  # before xpml can be imported: a plain summary, then exit 1
  say "FAILED: $1"
  printf '# xpml GPU check: FAILED\n\n%s\n\nSee gpu-check.log.\n' "$1" > "$OUT_DIR/gpu-check.md"
  "$PY" -c 'import json,sys; json.dump({"ok": False, "mode": sys.argv[1], "problems": [sys.argv[2]]}, open(sys.argv[3], "w"))' \
    "$MODE" "$1" "$OUT_DIR/gpu-check.json" 2>/dev/null
  exit 1
}
say "mode $MODE, output in $OUT_DIR, python $("$PY" -c 'import sys; print(sys.version.split()[0])' 2>&1)"

# 1. CUDA from CuPy and PyTorch (not in --simulate)
if [ "$MODE" != simulate ]; then
  t0=$SECONDS
  { command -v nvidia-smi >/dev/null && nvidia-smi; } >> "$LOG" 2>&1
  if ! timeout -k 10 120 "$PY" - >> "$LOG" 2>&1 <<'EOF'
import sys
problems = []
try:
    import cupy
    n = cupy.cuda.runtime.getDeviceCount()
    if n < 1:
        problems.append("CuPy sees no CUDA device")
    else:
        x = cupy.arange(1000, dtype=cupy.float64)
        assert float((2 * x).sum()) == 999000.0
        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
        print(f"cupy {cupy.__version__}: {n} device(s), {name.decode() if isinstance(name, bytes) else name}")
except Exception as exc:
    problems.append(f"CuPy cannot be imported or used ({type(exc).__name__}: {exc})")
try:
    import torch
    if torch.version.cuda is None:
        problems.append(f"torch {torch.__version__} is not a CUDA build")
    elif not torch.cuda.is_available():
        problems.append(f"torch {torch.__version__} sees no CUDA device")
    else:
        assert torch.ones(10, device="cuda").sum().item() == 10
        print(f"torch {torch.__version__} (CUDA {torch.version.cuda}): {torch.cuda.get_device_name(0)}")
except Exception as exc:
    problems.append(f"torch cannot be imported or used ({type(exc).__name__}: {exc})")
for p in problems:
    print(f"gpu_check: problem: {p}")
sys.exit(1 if problems else 0)
EOF
  then
    why=$(grep "^gpu_check: problem: " "$LOG" | sed 's/^gpu_check: problem: //' | paste -sd ';' - | sed 's/;/; /g')
    fail_early "no usable CUDA device (CuPy and a CUDA build of torch must both see the GPU): ${why:-see gpu-check.log}"
  fi
  step cuda ok $((SECONDS - t0)) "$(grep -E '^(cupy|torch) ' "$LOG" | tr '\n' ' ')"

  # 2. the pure-Python packages the GPU image lacks, from .whl/
  t0=$SECONDS
  if ls .whl/*.whl >/dev/null 2>&1; then
    timeout 120 "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps \
        --no-cache-dir --target "$WORK/site" \
        .whl/*.whl >> "$LOG" 2>&1 || fail_early "installing the wheels in .whl/ failed (see gpu-check.log)"
    export PYTHONPATH=$WORK/site${PYTHONPATH:+:$PYTHONPATH}
  fi
  "$PY" -c 'import array_api_compat, array_api_extra, array_api_strict' >> "$LOG" 2>&1 ||
    fail_early "array-api-compat, array-api-extra and array-api-strict are needed: on a connected machine run 'bash ci/fetch_gpu_wheels.sh' and copy .whl/ here"
  step install ok $((SECONDS - t0)) "$(cd .whl 2>/dev/null && echo *.whl)"
fi
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
timeout -k 10 120 "$PY" -m xpml info >> "$LOG" 2>&1 ||
  fail_early "xpml cannot be imported, or 'xpml info' hung (see gpu-check.log)"

# 3. the tests on the GPU libraries (XPML_TEST_LIBS restricts the xp fixture)
t0=$SECONDS
say "tests on $LIBS: ${TESTS[*]} (-n $WORKERS, limit ${TEST_LIMIT} s)"
XPML_TEST_LIBS=$LIBS timeout -s INT -k 15 "$TEST_LIMIT" "$PY" -m pytest -q -rfEs \
    -n "$WORKERS" -p no:cacheprovider -k "$KEXPR" --ignore=tests/test_gpu_check.py \
    --junitxml="$WORK/tests.xml" --durations=10 "${TESTS[@]}" >> "$LOG" 2>&1
rc=$?
if "$PY" -m xpml.bench.gpu tests "$WORK/tests.xml" --libs "$LIBS" --rc $rc \
    --out "$WORK/tests.json" > "$WORK/tests.txt" 2>&1; then
  status=ok
else
  status=fail
fi
tee -a "$LOG" < "$WORK/tests.txt"
step tests $status $((SECONDS - t0)) "$(head -n 1 "$WORK/tests.txt")"

# 4. the benchmarks: the first run times the references, the second reuses them
BENCH_ARGS=()
first_json=
i=0
for run in "${RUNS[@]}"; do
  read -r label backend device <<< "$run"
  i=$((i + 1))
  left=$((DEADLINE - SECONDS - 8))
  budget=$left
  [ $i -lt ${#RUNS[@]} ] && budget=$((left - SECOND_SHARE))
  tag=gpu-$label
  BENCH_ARGS+=(--bench "$label=$OUT_DIR/bench-$tag.json")
  if [ "$budget" -lt 10 ]; then
    step "bench $label" fail 0 "no time left (${budget} s) after the steps before"
    continue
  fi
  t0=$SECONDS
  # one cold process per side and no prefault (bench/README.md), to fit the
  # device time the check is sized to
  args=(gpu --backend "$backend" --repeats 2 --ref-once-over 2 --case-timeout "$CASE_LIMIT"
        --cold-runs 1 --cold-prefault-mb 0
        --budget "$budget" --out "$WORK/bench" --tag "$tag")
  [ "$device" != - ] && args+=(--device "$device")
  [ -n "$SIZE" ] && args+=("$SIZE")
  [ -n "$first_json" ] && [ -f "$first_json" ] && args+=(--reference-from "$first_json")
  say "bench on $label: budget ${budget} s"
  # the budget is kept inside; the hard limit only catches a call that overruns it
  timeout -k 10 $((budget + 40)) "$PY" -m xpml bench "${args[@]}" >> "$LOG" 2>&1
  rc=$?
  for ext in md json; do
    [ -f "$WORK/bench/bench-$tag.$ext" ] && cp "$WORK/bench/bench-$tag.$ext" "$OUT_DIR/"
  done
  [ -z "$first_json" ] && first_json=$OUT_DIR/bench-$tag.json
  case $rc in
    0) step "bench $label" ok $((SECONDS - t0)) "budget ${budget} s" ;;
    124|137) step "bench $label" fail $((SECONDS - t0)) "stopped at the hard limit (results so far kept)" ;;
    *) step "bench $label" fail $((SECONDS - t0)) "xpml bench exited with status $rc (see gpu-check.log)" ;;
  esac
done

# 5. the summary
if "$PY" -m xpml.bench.gpu report "$OUT_DIR" --mode "$MODE" --steps "$STEPS" \
    --tests "$WORK/tests.json" "${BENCH_ARGS[@]}" >> "$LOG" 2>&1; then
  say "PASSED in $SECONDS s: $OUT_DIR/gpu-check.md"
  exit 0
fi
say "FAILED in $SECONDS s: $OUT_DIR/gpu-check.md"
sed -n '/^## Problems/,/^## Steps/p' "$OUT_DIR/gpu-check.md" | grep '^\*' >&2
exit 1
