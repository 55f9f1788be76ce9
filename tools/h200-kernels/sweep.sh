#!/usr/bin/env bash
# Run the kernel tier for several humming-kernels releases on a GPU machine with no network.
#
#   tools/h200-kernels/sweep.sh WHEELHOUSE DEADLINE_S PARALLEL "0.1.0 0.1.0#2 ..." [kernels args...]
#
# WHEELHOUSE holds hk/humming_kernels-*.whl and deps/ (the pure-Python wheels the machine lacks:
# pyelftools for <= 0.1.11, msgspec). Each release is installed once, with pip --no-index --no-deps
# --target, into its own folder and run against the preinstalled torch, PARALLEL runs at a time
# (timing loops take the GPU alone through one lock; compiles, checks and numpy work overlap;
# pass `--jobs N` for N workers per run). "0.1.10#2" is a second, independent run of 0.1.10 in
# the same call (the A/A pair): it runs from the same folder, so it shares the release's JIT cache.
#
# Resumable: state lives in /tmp/kernels-sweep, which a warm device machine keeps between calls.
# A run that completed is listed in done.txt and skipped by the next call of the same command;
# a run the deadline cut leaves a partial record, and the next call runs the cases it lacks.
#
# A run tagged "0.1.20#3@47-84" runs cases 47 - 84 of the suite alone; "0.1.5@45,73-74" runs
# cases 45, 73 and 74 (a probe of chosen cases); "0.1.4@37-84!13-16" runs cases 37 - 84 and,
# each with the GPU to itself from the start (`kernels --alone`), cases 13 - 16: hangs beside
# other workers that no rerun alone decided (pending.py prints such tags). SWEEP_SKIP="0.1.20 0.1.20#2"
# names runs whose records an earlier machine (now given back) made. A cut run that the next call
# resumes runs only the cases its earlier records lack (its own record then holds those alone).
#
# Optional, once per machine and release (each also listed in done.txt, as "full-0.1.20"):
#   SWEEP_GPU_TESTS=0.1.20   first run tests/gpu (pytest -m gpu) against that release
#                            (SWEEP_GPU_TESTS_K="rerun_alone" passes pytest -k: only those tests);
#   SWEEP_SCREEN=0.1.20      then time `humming-matrix kernels` with its default settings alone on
#                            the machine, cold JIT cache (the default screen), as the run "screen";
#   SWEEP_SCREEN_WARM=1      and once more right after it, warm JIT cache ("screen-warm");
#   SWEEP_SCREEN_ALL=1       then the screen compiling every dense kernel (`--compile all`, the
#                            default before 2026-12-06), cold in a JIT cache of its own
#                            ("screen-all"): the baseline for the screen's time, in the same call;
#   SWEEP_FULL=0.1.20        then `humming-matrix kernels --full` with its other settings default,
#                            alone, cold in a JIT cache of its own (the full sweep, "full");
#   SWEEP_FULL_WARM=1        and again from that cache ("full-warm", here or in a later call).
# Records and logs go to $OUT (or ./sweep-out) as one tarball, refreshed every 30 s (so a call
# killed at its time limit still returns the runs finished by then); a run still going at
# DEADLINE_S is stopped (SIGTERM: the CLI saves the finished cases in a record marked incomplete).
set -u
wheelhouse=$(cd "$1" && pwd); deadline=$2; parallel=$3; versions=$4; shift 4
out=${OUT:-$PWD/sweep-out}
work=/tmp/kernels-sweep
mkdir -p "$work/deps" "$out" "$work/records"
touch "$work/done.txt"
start=$(date +%s)
[ -e "$work/deps/.installed" ] || {
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target "$work/deps" "$wheelhouse"/deps/*.whl >"$work/pip-deps.log" 2>&1 \
        && touch "$work/deps/.installed" || cat "$work/pip-deps.log"; }
# Many workers on 16 cores: one CPU thread each for numpy's BLAS and torch (their compiles and
# checks are what runs in parallel).
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1

install_release() {
    # Once per machine: humming's JIT cache key holds the absolute path and mtime of every header
    # it installed, so a reinstall (or a second folder) would miss every cached kernel.
    # The runs of an A/A pair start together: one installs while the other waits on the lock (two
    # pip --target runs into one folder collide: "Directory not empty", 2026-12-06).
    v=$1; site="$work/site-$v"
    (
        flock 9
        [ -e "$site/.installed" ] && exit 0
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
            --target "$site" "$wheelhouse"/hk/humming_kernels-"$v"-*.whl >"$work/pip-$v.log" 2>&1 \
            && touch "$site/.installed"
    ) 9>"$work/install-$v.lock"
}

kernels() {
    # kernels VERSION TAG LEFT_S [args...]: the CLI against that release's folder and JIT cache.
    local v=$1 t=$2 left=$3
    shift 3
    # JIT names another cache (a cold run beside this release's usual one).
    HUMMING_CACHE_DIR="${JIT:-$work/jit-$v}" PYTHONPATH="$work/site-$v:$work/deps:$PWD/src" \
        timeout -k 10 "$left" python3 -m humming_matrix kernels --results "$work/records" \
        --input-cache "$work/inputs" --workdir "$work/work-$t" "$@" >"$work/cli-$t.log" 2>&1
}

pending() {
    # pending SPAN RECORDS: `--cases` and the cases still to run, one a line. "0.1.16#2@47-84"
    # is that run over cases 47 - 84 of the suite (1-based, in its order), to finish what an
    # earlier machine's deadline cut; RECORDS lists the records this tag's earlier attempts on
    # this machine left (a cut run resumes with the cases they lack, not from its first case:
    # gen6 calls 10 - 11 reran 14 - 23 cases of each run); a hang the watchdog never reran alone
    # counts as not run (pending.py says why), and runs alone (`--alone`, after the cases), as
    # do the cases of ALONE ("13-16" of a tag "0.1.4@37-84!13-16"). Nothing (the whole suite)
    # when none of this applies; a lone `--cases` when nothing is left. The record module needs
    # msgspec: $work/deps has it.
    PYTHONPATH="$work/deps:$PWD/src" python3 -c '
import json, sys
from pathlib import Path
from humming_matrix.kernels.models import SUITE
from humming_matrix.kernels.record import hang_not_rerun
span, alone_span, listed = sys.argv[1], sys.argv[2], Path(sys.argv[3])
suite = [c.name for c in SUITE]
def cases(spans):
    picked = set()
    for part in filter(None, spans.split(",")):
        first, _, last = part.partition("-")
        picked.update(suite[int(first) - 1 : int(last or first)])
    return picked
alone = cases(alone_span)
names = [n for n in suite if n in cases(span) | alone] if span or alone else suite
done, hung = set(), set()
for line in listed.read_text().split() if listed.is_file() else []:
    if Path(line).is_file():
        for c in json.loads(Path(line).read_text())["cases"]:
            (hung if hang_not_rerun(c) else done).add(c["name"])
rest = [n for n in names if n not in done]
if span or alone or done:
    print("\n".join(["--cases", *rest]))
alone = [n for n in rest if n in alone | hung]
if alone:
    print("\n".join(["--alone", *alone]))
' "$1" "$2" "$3"
}

run_one() {
    tag=$1; v=${1%%[#@!]*}; t=${tag//[#@!]/-}; shift
    if grep -qx "$tag" "$work/done.txt"; then echo "$tag: done in an earlier call"; return; fi
    case " ${SWEEP_SKIP:-} " in *" $tag "*) echo "$tag: done on an earlier machine"; return;; esac
    span=""; alone=""; head=${tag%%!*}
    [[ $tag == *!* ]] && alone=${tag#*!}
    [[ $head == *@* ]] && span=${head#*@}
    mapfile -t cases < <(pending "$span" "$alone" "$work/records-$t.txt")
    if [ "${#cases[@]}" -eq 1 ]; then
        echo "$tag: every case in earlier records"; echo "$tag" >>"$work/done.txt"; return
    fi
    if [ -s "$work/records-$t.txt" ]; then
        # Earlier records that hold no case (cut before the first finished) leave the whole
        # suite: no `--cases` at all (gen6 call 17 printed "resuming with -1 cases" for it).
        if [ "${#cases[@]}" -eq 0 ]; then echo "$tag: resuming with the whole suite"
        else
            # The names after `--cases`, and of them those after `--alone`.
            local n=0 a=0 where=""
            for c in "${cases[@]}"; do
                case $c in --*) where=$c ;; *) [ "$where" = --cases ] && n=$((n + 1)) || a=$((a + 1)) ;; esac
            done
            echo "$tag: resuming with $n cases, $a of them alone"
        fi
    fi
    install_release "$v" || { echo "$tag: install failed"; cat "$work/pip-$v.log"; return; }
    left=$(( deadline - ($(date +%s) - start) ))
    if [ "$left" -lt 20 ]; then echo "$tag: skipped, deadline"; return; fi
    # An earlier call's events on this machine came back in its tarball; left here, those of
    # workers this call never starts would pass for this call's (gen7 call 23's two stale files).
    rm -f "$work/work-$t"/events-*.jsonl "$work/work-$t"/alone/events-*.jsonl
    kernels "$v" "$t" "$left" --gpu-lock "$work/gpu.lock" "$@" "${cases[@]}"
    rc=$?
    echo "$tag: exit $rc after $(( $(date +%s) - start )) s"
    tail -n 2 "$work/cli-$t.log"
    grep -o '^record: .*' "$work/cli-$t.log" | cut -d' ' -f2- >>"$work/records-$t.txt"
    # 0 and 1 are complete records (1: a case out of tolerance); 3 is an interrupted one.
    if [ "$rc" -eq 0 ] || [ "$rc" -eq 1 ]; then echo "$tag" >>"$work/done.txt"; fi
}
export -f run_one pending install_release kernels
export work wheelhouse deadline start

snapshot() {
    # The records and logs so far, as one tarball in $out, replaced whole: a call its time limit
    # kills still brings back what the runs finished before the last snapshot.
    # The workers' events too (small JSON lines, each with its time): where a run's time went.
    tar -czf "$out/.kernels-sweep.tmp" -C "$work" records load.txt done.txt \
        $(cd "$work" && ls cli-*.log work-*/events-*.jsonl work-*/alone/events-*.jsonl \
            2>/dev/null) 2>/dev/null \
        && mv -f "$out/.kernels-sweep.tmp" "$out/kernels-sweep.tar.gz"
}

# Every 5 s: seconds since start, GPU memory used (MiB), the 1-minute load average, RAM used
# (MiB); every 30 s a snapshot. The trap lets a tar under way finish before the loop ends, so it
# never writes beside the final snapshot (killed outright, the loop's tar would run on).
( trap 'exit 0' TERM; n=0; while sleep 5; do
    echo "$(( $(date +%s) - start )) $(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null) $(cut -d' ' -f1 /proc/loadavg) $(free -m | awk '/^Mem/ {print $3}')" >>"$work/load.txt"
    n=$(( n + 1 )); [ $(( n % 6 )) -eq 0 ] && snapshot
  done ) &
sampler=$!

# The seeded weights once per machine, in parallel (one process per distinct weight set); every
# release's workers then load the same bytes from the cache. tests/gpu runs beside it: neither
# times anything.
if ! grep -qx inputs "$work/done.txt"; then
    PYTHONPATH="$PWD/src" python3 -c '
from humming_matrix.kernels.models import SUITE
print(" ".join({c.weight_key(): c for c in SUITE}))
' | tr ' ' '\n' | xargs -P 8 -I{} env PYTHONPATH="$PWD/src" python3 -c '
import sys
from pathlib import Path
from humming_matrix.kernels.models import SUITE
from humming_matrix.kernels.runner import load_weights
case = next(c for c in SUITE if c.weight_key() == sys.argv[1])
load_weights(case, 0, Path(sys.argv[2]))
' {} "$work/inputs" &
    inputs=$!
fi
if [ -n "${SWEEP_GPU_TESTS:-}" ] && ! grep -qx gpu-tests "$work/done.txt"; then
    v=$SWEEP_GPU_TESTS
    install_release "$v"
    began=$(date +%s)
    # Its own JIT cache, so that the screen below starts cold.
    HUMMING_CACHE_DIR="$work/jit-tests-$v" PYTHONPATH="$work/site-$v:$work/deps:$PWD/src" \
        timeout 300 python3 -m pytest -m gpu tests/gpu -p no:cacheprovider -q -rA \
        ${SWEEP_GPU_TESTS_K:+-k "$SWEEP_GPU_TESTS_K"} \
        >"$work/cli-gpu-tests-$v.log" 2>&1
    echo "tests/gpu against $v: exit $? in $(( $(date +%s) - began )) s"
    tail -n 3 "$work/cli-gpu-tests-$v.log"
    echo gpu-tests >>"$work/done.txt"
fi
if [ -n "${inputs:-}" ]; then
    wait "$inputs" && echo inputs >>"$work/done.txt"
    echo "inputs ready after $(( $(date +%s) - start )) s"
fi
screen() {
    # screen TAG CACHE [args...]: `humming-matrix kernels` with its default settings but args,
    # alone on the machine.
    # Locals here and in `kernels` (gen6 call 27: its t was global, and the screen's log and
    # done.txt took the tag `kernels` had set). done.txt names the release too: a warm machine's
    # next call may screen or sweep another.
    local t=$1 cache=$2 began left
    shift 2
    began=$(date +%s)
    left=$(( deadline - (began - start) ))
    if [ "$left" -lt 30 ]; then echo "$t of $v: skipped, deadline"; return; fi
    kernels "$v" "$t-$v" "$left" "$@"
    rc=$?
    echo "$t of $v (defaults${*:+ but $*}, alone, $cache JIT cache): exit $rc in $(( $(date +%s) - began )) s"
    tail -n 2 "$work/cli-$t-$v.log"
    echo "$t-$v" >>"$work/done.txt"
}
if [ -n "${SWEEP_SCREEN:-}" ] && ! grep -qx "screen-$SWEEP_SCREEN" "$work/done.txt"; then
    v=$SWEEP_SCREEN
    install_release "$v"
    screen screen cold
    # The same release again from the same folder: the screen of a runner that keeps
    # HUMMING_CACHE_DIR (humming's cache key holds the install path), and an A/A pair.
    [ -n "${SWEEP_SCREEN_WARM:-}" ] && screen screen-warm warm
    [ -n "${SWEEP_SCREEN_ALL:-}" ] && JIT="$work/jit-all-$v" screen screen-all cold --compile all
fi
if [ -n "${SWEEP_FULL:-}" ]; then
    v=$SWEEP_FULL
    install_release "$v"
    grep -qx "full-$v" "$work/done.txt" || JIT="$work/jit-full-$v" screen full cold --full
    if [ -n "${SWEEP_FULL_WARM:-}" ] && ! grep -qx "full-warm-$v" "$work/done.txt"; then
        JIT="$work/jit-full-$v" screen full-warm warm --full
    fi
fi

printf '%s\n' $versions | xargs -P "$parallel" -I{} bash -c 'run_one "$@"' _ {} "$@"
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
snapshot
ls -la "$out"
