#!/usr/bin/env bash
# Download the pure-Python wheels the GPU machine lacks (array-api-compat,
# array-api-extra, array-api-strict) into .whl/ (ignored by git), on a machine
# that reaches PyPI, for the GPU machine's Python; ci/gpu_check.sh installs them
# there without a package index.
#
#   bash ci/fetch_gpu_wheels.sh [PYTHON_VERSION]      (default 3.12)
#
# Any python3 with pip will do (or $PYTHON); nothing is installed here. The
# newest versions within pyproject.toml's bounds are taken, as CI's install
# takes them. array-api-strict needs NumPy, which the GPU machine has.
set -euo pipefail
cd "$(dirname "$0")/.."
PYV=${1:-3.12}
PY=${PYTHON:-python3}
mkdir -p .whl
# one version of each: two would stop the offline install
rm -f .whl/array_api_compat-*.whl .whl/array_api_extra-*.whl .whl/array_api_strict-*.whl
"$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --python-version "$PYV" --dest .whl \
    "array-api-compat>=1.11" "array-api-extra>=0.7" "array-api-strict>=2.3"
n=0
for w in .whl/array_api_compat-*.whl .whl/array_api_extra-*.whl .whl/array_api_strict-*.whl; do
  case $w in
    *-none-any.whl) n=$((n + 1)) ;;
    *) echo "fetch_gpu_wheels: $w is not a pure-Python wheel" >&2; exit 1 ;;
  esac
done
[ "$n" -eq 3 ] || { echo "fetch_gpu_wheels: expected 3 wheels in .whl/, found $n" >&2; exit 1; }
echo "wheels for Python $PYV in .whl/ (copy the tree with it to the GPU machine):"
ls -1 .whl/array_api_*.whl
