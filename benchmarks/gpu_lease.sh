#!/usr/bin/env bash
# One lease of a GPU: install the wheels carried in .whl/ whose distribution the machine's
# Python lacks (optuna and its dependencies, on the one run so far) beside its packages,
# then run the GPU suite within a time limit, writing its files under $OUT (the folder
# that comes back from a lent machine).
#
#   bash benchmarks/gpu_lease.sh                   # --within 9m
#   bash benchmarks/gpu_lease.sh 9m --winner PATH  # a second lease: no search this time
#
# Arguments after the time limit go to benchmarks/gpu_suite.py. benchmarks/gpu_suite.py's
# docstring says which wheels to fetch into .whl/ and how.
set -euo pipefail
cd "$(dirname "$0")/.."

within="${1:-9m}"
shift || true
out="${OUT:-gpu_out}"
site="${GPU_LEASE_SITE:-/tmp/site}"
carry="${GPU_LEASE_WHEELS:-.whl}"  # the carried wheels' folder

shopt -s nullglob
carried=("$carry"/*.whl)
if ((${#carried[@]})); then
    mapfile -t wheels < <(python3 benchmarks/_lease_wheels.py "$carry")
    if ((${#wheels[@]})); then
        python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "${wheels[@]}"
    fi
else
    echo "gpu_lease.sh: no wheels in $carry/; the suite says what is missing" >&2
fi
PYTHONPATH="$site:.${PYTHONPATH:+:$PYTHONPATH}" exec python3 benchmarks/gpu_suite.py \
    --within "$within" --out "$out/gpu_suite.md" --work /tmp/gpu-work "$@"
