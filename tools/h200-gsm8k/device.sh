#!/usr/bin/env bash
# The H200 GSM8K runs, device side (lent H200: no network, files under /tmp stay only while the
# machine is warm). Run from the repo root ON THE DEVICE; README.md beside this file gives the
# exact sequence of device calls.
#
#   device.sh stash DIR          move a carried chunk (.h200/chunk-K) into $H/stash
#   device.sh install            join the chunks, verify them, pip --target installs, and
#                                build humming-matrix from this checkout (run rebuilds it
#                                whenever src/ changed)
#   device.sh model              convert SmolLM2-135M to bf16 under $H/models
#   device.sh run VERSION [N]    one release: `humming-matrix session humming-VERSION`, under
#                                `timeout`, nvidia-smi sampled beside the record; with N, only
#                                N questions, into $H/scratch (never collected as a result);
#                                exits with the session's code, or 75: not started (CALL_DEADLINE)
#   device.sh collect            tar everything so far into $OUT (run does this itself)
#   device.sh check [VERSION]    imports and versions, to diagnose an install
set -uo pipefail

# ---- settings -------------------------------------------------------------------------------
# How `humming-matrix session` is given tools/h200-gsm8k/matrix.toml: "flag" passes
# `--matrix FILE` (as the noxfile does), "env" exports HUMMING_MATRIX_FILE instead.
MATRIX_VIA="flag"
H=${H200_DIR:-/tmp/h200}              # payload, installs, model, results: all under here
PY=${PYTHON:-python3}                # the image's python (3.12, torch 2.11.0+cu130)
HANGS="0.1.5 0.1.4"                       # releases known to hang in startup: the short-wait config
RUN_TIMEOUT=${RUN_TIMEOUT:-540}      # one session, start to end; a device call allows 600 s
# CALL_DEADLINE (epoch seconds, optional): when the device call ends. A run then gets at most
# the time left (so `timeout` stops it cleanly and it is collected, rather than the device tool
# killing everything), and is not started with less than MIN_RUN_SECONDS left.
MIN_RUN_SECONDS=200                  # trial: preflight 23 s + ready 92-107 s + asking 28-40 s
KILL_AFTER=30                        # SIGTERM first (the product tears its server down), then KILL
GPU_SAMPLE_SECONDS=2
MODEL=$H/models/smollm2-135m-bf16    # the path the configs name
# model.safetensors as convert_smollm2.py wrote it on a CPU (transformers 5.17.0, torch 2.11.0)
MODEL_SHA256=7ef915c9bf9d94d8d70211970476878352a5b95855c589ae987916d7a455242b
# ---------------------------------------------------------------------------------------------

KIT=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$KIT/../.." && pwd)       # the checkout this call carried
T0=$(date +%s)
ts() { echo "[device $(( $(date +%s) - T0 ))s $(date -u +%H:%M:%S)] $*"; }
die() { echo "device.sh: error: $*" >&2; exit 2; }
mkdir -p "$H/results/device"

useenv() {  # useenv VERSION: that release first on sys.path, then the product, then the rest
  export PYTHONPATH=$H/hk/$1:$H/hm:$H/site
  export PATH=$H/hm/bin:$H/site/bin:$PATH
  # One JIT cache per release, as the nox cells have (HUMMING_CACHE_DIR per session).
  export HUMMING_CACHE_DIR=$H/hcache/$1 HUMMING_TMP_DIR=$H/htmp/$1
  mkdir -p "$HUMMING_CACHE_DIR" "$HUMMING_TMP_DIR"
  export HUMMING_MATRIX_GSM8K_DIR=$H/payload/gsm8k HUMMING_MATRIX_SLOT_DIR=$H/slots
  # vLLM 0.24's sampler imports FlashInfer unless this is 0, and FlashInfer is not carried.
  export VLLM_USE_FLASHINFER_SAMPLER=0
  export PYTHONUNBUFFERED=1
}

collect() {
  if [[ -z "${OUT:-}" ]]; then
    echo "collect: \$OUT is not set (not on the device tool): nothing copied"
    return 0
  fi
  # Cumulative: $OUT is emptied before every call, and a later call may be cut short.
  tar czf "$OUT/h200-gsm8k.tgz" -C "$H/results" .
  if [[ -d "$H/scratch" ]]; then tar czf "$OUT/h200-scratch.tgz" -C "$H/scratch" .; fi
  ls -l "$OUT"
}

src_sha256() {  # what the product's code is: pyproject.toml and every module under src/
  (cd "$REPO" && { cat pyproject.toml; find src -type f -name '*.py' -print0 | sort -z \
    | xargs -0r cat; } | sha256sum | cut -d' ' -f1)
}

product() {
  # humming-matrix is built from the checkout this call carried, and rebuilt when that code
  # changed: the product that runs is the one in the repo, never a copy from an older payload.
  local sum
  sum=$(src_sha256)
  [[ -f "$H/hm/SOURCE_SHA256" && "$(cat "$H/hm/SOURCE_SHA256")" == "$sum" ]] && return 0
  ts "humming-matrix: building $REPO (src sha256 ${sum:0:16}) into $H/hm"
  rm -rf "$H/hm" "$H/hm-wheel"
  PYTHONPATH=$H/site "$PY" -m pip wheel -q --no-deps --no-build-isolation --no-index "$REPO" \
      -w "$H/hm-wheel" || die "building humming-matrix from $REPO failed"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$H/hm" \
      "$H"/hm-wheel/humming_matrix-*.whl || die "installing humming-matrix into $H/hm failed"
  echo "$sum" > "$H/hm/SOURCE_SHA256"
}

run_pids() {  # the processes of one run: they all inherit H200_RUN=<run dir> from the session
  grep -lsxzF "H200_RUN=$1" /proc/[0-9]*/environ | cut -d/ -f3
}

cmd_stash() {
  local from=${1:?usage: device.sh stash DIR}
  compgen -G "$from/payload.tar.xz.part-*" >/dev/null || die "$from holds no payload chunk"
  mkdir -p "$H/stash"
  mv "$from"/payload.tar.xz.part-* "$H/stash/"
  ls -l "$H/stash"; df -h "$H" | tail -n 1
}

cmd_install() {
  local log
  log=$H/results/device/install-$(date -u +%Y%m%dT%H%M%SZ).log
  {
    local parts=("$H"/stash/payload.tar.xz.part-*-of-*)
    [[ -f "${parts[0]}" ]] || die "no chunks in $H/stash (device.sh stash .h200/chunk-K first)"
    local total=${parts[0]##*-of-} k missing=""
    for k in $(seq 1 "$total"); do
      [[ -f "$H/stash/payload.tar.xz.part-$k-of-$total" ]] || missing+=" $k"
    done
    [[ -z "$missing" ]] || die "chunk(s)$missing of $total missing: carry .h200/chunk-K and stash it"
    ts "joining $total chunks"
    rm -rf "$H/payload"
    for k in $(seq 1 "$total"); do cat "$H/stash/payload.tar.xz.part-$k-of-$total"; done \
      | xz -dc | tar x -C "$H" || die "the chunks do not make a whole payload (same prepare.sh run?)"
    (cd "$H/payload" && sha256sum -c --quiet SHA256SUMS) || die "payload checksums differ"
    ts "pip --target $H/site: vLLM and its missing deps"
    rm -rf "$H/site" "$H/hk" "$H/hm"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$H/site" \
        "$H"/payload/site/*.whl || die "pip install into $H/site failed"
    local whl v start
    for whl in "$H"/payload/hk/humming_kernels-*.whl; do
      v=$(basename "$whl" | cut -d- -f2)
      ts "pip --target $H/hk/$v: humming-kernels $v"
      start=$(date +%s.%N)
      "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
          --target "$H/hk/$v" "$whl" || die "pip install of humming-kernels $v failed"
      # The release's own install step; `run` hands it to the session (timings.install).
      echo "$start $(date +%s.%N)" | awk '{printf "%.3f\n", $2 - $1}' > "$H/hk/$v.install-seconds"
    done
    product
    du -sh "$H/site" "$H/hk" "$H/hm"
    ts "installed"
  } 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  collect >/dev/null
  return "$rc"
}

cmd_model() {
  local log
  log=$H/results/device/model-$(date -u +%Y%m%dT%H%M%SZ).log
  {
    [[ -f "$H/payload/model/SmolLM2-135M-Instruct.Q4_1.gguf" ]] || die "no GGUF: device.sh install first"
    if [[ -f "$MODEL/model.safetensors" ]]; then
      ts "$MODEL exists"
    else
      ts "converting SmolLM2 to $MODEL"
      PYTHONPATH=$H/site TQDM_DISABLE=1 "$PY" "$KIT/convert_smollm2.py" \
          --gguf "$H/payload/model/SmolLM2-135M-Instruct.Q4_1.gguf" --out "$MODEL" \
          || die "conversion failed"
    fi
    local got
    got=$(sha256sum "$MODEL/model.safetensors" | cut -d' ' -f1)
    if [[ "$got" == "$MODEL_SHA256" ]]; then
      ts "model.safetensors sha256 $got: the same bytes as the CPU conversion"
    else
      ts "model.safetensors sha256 $got: NOT the CPU conversion's $MODEL_SHA256 (another transformers?)"
    fi
  } 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  collect >/dev/null
  return "$rc"
}

cmd_run() {
  local v=${1:?usage: device.sh run VERSION [N]} n=${2:-}
  if [[ ! -d "$H/hk/$v" ]]; then
    local carried=("$H"/hk/*)
    die "humming-kernels $v is not installed here (device.sh install; installed: ${carried[*]##*/})"
  fi
  [[ -f "$MODEL/model.safetensors" ]] || die "no model at $MODEL (device.sh model)"
  local limit_s=$RUN_TIMEOUT
  if [[ -n "${CALL_DEADLINE:-}" ]]; then
    local left=$(( CALL_DEADLINE - $(date +%s) - KILL_AFTER - 15 ))
    if (( left < MIN_RUN_SECONDS )); then
      ts "humming $v: not started, ${left}s left in this call (MIN_RUN_SECONDS=$MIN_RUN_SECONDS)"
      return 75
    fi
    (( left < limit_s )) && limit_s=$left
  fi
  local stamp dir config limit=() matrix=() installed=() h
  stamp=$(date -u +%Y%m%dT%H%M%SZ)
  if [[ -n "$n" ]]; then
    dir=$H/scratch/humming-$v-$stamp; limit=(--limit "$n")
  else
    dir=$H/results/humming-$v-$stamp
  fi
  config=$KIT/configs/smollm2-135m-humming.yaml
  for h in $HANGS; do
    [[ "$h" == "$v" ]] && config=$KIT/configs/smollm2-135m-humming-short-wait.yaml
  done
  mkdir -p "$dir"
  product
  cp "$H/hm/SOURCE_SHA256" "$dir/humming-matrix-src.sha256"
  useenv "$v"
  case "$MATRIX_VIA" in
    env) export HUMMING_MATRIX_FILE=$KIT/matrix.toml ;;
    flag) matrix=(--matrix "$KIT/matrix.toml") ;;
    *) die "MATRIX_VIA must be env or flag, not $MATRIX_VIA" ;;
  esac
  if [[ -f "$H/hk/$v.install-seconds" ]]; then
    installed=(--install-seconds "$(cat "$H/hk/$v.install-seconds")")
  fi
  # Session options go before the session name: everything after it is handed to `run`.
  export HUMMING_MATRIX_SESSION=humming-$v HUMMING_MATRIX_INSTALL_RECORD=$dir/humming-install.json
  # What the server inherits, which the record does not hold.
  env | grep -E '^(PYTHONPATH|PATH|HUMMING_|VLLM_|CUDA_|NCCL_|TORCH_)' | sort > "$dir/env.txt"

  local mon=""
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=timestamp,memory.used,memory.total,utilization.gpu \
        --format=csv,nounits -l "$GPU_SAMPLE_SECONDS" > "$dir/gpu.csv" 2>&1 &
    mon=$!
  fi
  ts "humming $v: $(basename "$config"), timeout ${limit_s}s, into $dir"
  local start=$SECONDS rc
  H200_RUN=$dir timeout -k "$KILL_AFTER" "$limit_s" \
      humming-matrix session "${matrix[@]}" "${installed[@]}" --record "$dir/humming-install.json" \
      --results "$dir" "humming-$v" -- --config "$config" "${limit[@]}" 2>&1 | tee "$dir/session.log"
  rc=${PIPESTATUS[0]}
  [[ -n "$mon" ]] && kill "$mon" 2>/dev/null
  echo "$rc" > "$dir/exit-code"
  ts "humming $v: exit $rc after $(( SECONDS - start ))s$( [[ $rc == 124 || $rc == 137 ]] && echo ' (timeout)')"

  # The product must leave no process behind; if it did, say so in the run dir, then end them.
  local stray=()
  mapfile -t stray < <(run_pids "$dir")
  if (( ${#stray[@]} )); then
    ps -o pid,pgid,etimes,args -p "$(IFS=,; echo "${stray[*]}")" | tee "$dir/leftovers.txt"
    kill -TERM "${stray[@]}" 2>/dev/null
    sleep 5
    mapfile -t stray < <(run_pids "$dir")
    (( ${#stray[@]} )) && kill -KILL "${stray[@]}" 2>/dev/null
    ts "humming $v: process(es) were left running; ended them (leftovers.txt)"
  fi
  # Any vLLM process at all (another run's, or one that dropped the marker) is worth seeing.
  pgrep -af 'vllm|EngineCore' | sed 's/^/still running: /' | cut -c1-200
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-compute-apps=pid,used_memory --format=csv > "$dir/gpu-after.csv" 2>&1
  fi
  find "$HUMMING_CACHE_DIR" -mindepth 1 -maxdepth 1 | wc -l > "$dir/humming-cache-entries"
  collect
  return "$rc"
}

cmd_check() {
  local v=${1:-0.1.6}
  useenv "$v"
  ts "import vllm, humming"
  "$PY" -c "import vllm, humming, importlib.metadata as m; print('vllm', vllm.__version__, vllm.__file__); print('humming-kernels', m.version('humming-kernels'), humming.__file__)"
  ts "import vllm.entrypoints.openai.api_server"
  "$PY" -c "import vllm.entrypoints.openai.api_server" 2>&1 | tail -n 3
  ts "humming-matrix"; humming-matrix --version
  ts "nvidia-smi"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
}

case "${1:-}" in
  stash) shift; cmd_stash "$@" ;;
  install) cmd_install ;;
  model) cmd_model ;;
  run) shift; cmd_run "$@" ;;
  collect) collect ;;
  check) shift; cmd_check "$@" ;;
  *) sed -n '2,16p' "$0"; exit 2 ;;
esac
