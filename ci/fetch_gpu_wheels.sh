#!/usr/bin/env bash
# Download the pure-Python wheels the GPU image lacks into .whl/ (ignored by git),
# so ci/gpu_check.sh can install them on a machine without a package index.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux2014_x86_64 -d .whl \
    "array-api-compat==$(python3 -c 'import array_api_compat as m; print(m.__version__)')" \
    "array-api-extra==$(python3 -c 'import array_api_extra as m; print(m.__version__)')" \
    "array-api-strict==$(python3 -c 'import array_api_strict as m; print(m.__version__)')"
ls -l .whl
