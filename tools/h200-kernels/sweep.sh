#!/usr/bin/env bash
# Run the kernel tier for several humming-kernels releases on a GPU machine with no network.
#
#   tools/h200-kernels/sweep.sh WHEELHOUSE DEADLINE_S PARALLEL "0.1.0 0.1.1 ..." [kernels args...]
#
# WHEELHOUSE holds humming_kernels-*.whl and the pure-Python wheels they need that the machine
# lacks (pyelftools for <= 0.1.11). Each version is installed with pip --no-index --no-deps
# --target into its own folder and run against the preinstalled torch, PARALLEL versions at a
# time (each release with its own HUMMING_CACHE_DIR; timing loops take the GPU alone through one
# lock, compiles, checks and numpy work overlap; pass `--jobs N` for N workers per release).
# Records and logs
# go to $OUT (or ./sweep-out) as one tarball; a version still running at DEADLINE_S is stopped.
set -u
wheelhouse=$1; deadline=$2; parallel=$3; versions=$4; shift 4
out=${OUT:-$PWD/sweep-out}
work=/tmp/kernels-sweep
mkdir -p "$work/deps" "$out" "$work/records"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$work/deps" \
    "$wheelhouse"/deps/*.whl >"$work/pip-deps.log" 2>&1 || cat "$work/pip-deps.log"
start=$(date +%s)
# Many workers on 16 cores: one CPU thread each for numpy's BLAS and torch (their compiles and
# checks are what runs in parallel).
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
run_one() {
    # "0.1.10#2" is a second run of 0.1.10 (its own folders): run-to-run spread in one call.
    tag=$1; v=${1%%#*}; shift
    site="$work/site-${tag//#/-}"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" \
        "$wheelhouse"/hk/humming_kernels-"$v"-*.whl >"$work/pip-${tag//#/-}.log" 2>&1 || {
        echo "$tag: install failed"; cat "$work/pip-${tag//#/-}.log"; return; }
    left=$(( deadline - ($(date +%s) - start) ))
    if [ "$left" -lt 20 ]; then echo "$tag: skipped, deadline"; return; fi
    t=${tag//#/-}
    # One JIT cache per release: its A/A runs compile each kernel once (humming locks the cache).
    HUMMING_CACHE_DIR="$work/jit-$v" PYTHONPATH="$site:$work/deps:$PWD/src" \
        timeout -k 10 "$left" python3 -m humming_matrix kernels --results "$work/records" \
        --input-cache "$work/inputs" --gpu-lock "$work/gpu.lock" --workdir "$work/work-$t" "$@" \
        >"$work/cli-$t.log" 2>&1
    echo "$tag: exit $? after $(( $(date +%s) - start )) s"
    tail -n 2 "$work/cli-$t.log"
}
export -f run_one
export work wheelhouse deadline start
# Generate the seeded weights once, in parallel (one process per distinct weight set); every
# version's worker then loads the same bytes from the cache.
PYTHONPATH="$PWD/src" python3 -c '
import sys
from pathlib import Path
from humming_matrix.kernels.models import SUITE
from humming_matrix.kernels.runner import load_weights
keys = {c.weight_key(): c for c in SUITE}
print(" ".join(keys))
' | tr ' ' '\n' | xargs -P 8 -I{} env PYTHONPATH="$PWD/src" python3 -c '
import sys
from pathlib import Path
from humming_matrix.kernels.models import SUITE
from humming_matrix.kernels.runner import load_weights
case = next(c for c in SUITE if c.weight_key() == sys.argv[1])
load_weights(case, 0, Path(sys.argv[2]))
' {} "$work/inputs"
echo "inputs ready after $(( $(date +%s) - start )) s"
# Every 5 s: seconds since start, GPU memory used (MiB), the 1-minute load average.
( while sleep 5; do
    echo "$(( $(date +%s) - start )) $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null) $(cut -d' ' -f1 /proc/loadavg)"
  done ) >"$work/load.txt" &
sampler=$!
printf '%s\n' $versions | xargs -P "$parallel" -I{} bash -c 'run_one "$@"' _ {} "$@"
kill "$sampler" 2>/dev/null
tar -czf "$out/kernels-sweep.tar.gz" -C "$work" records load.txt \
    $(cd "$work" && ls cli-*.log 2>/dev/null)
ls -la "$out"
