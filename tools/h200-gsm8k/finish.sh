#!/usr/bin/env bash
# After the device calls, HERE (no GPU needed): put what device.sh collected into
# results/h200-gsm8k/, compare the runs, render the product's report and the README table.
#
#   bash tools/h200-gsm8k/finish.sh FILE.tgz [FILE.tgz ...]   # h200-gsm8k.tgz from the device's $OUT
#   bash tools/h200-gsm8k/finish.sh                           # only re-render from what is there
#
# Run from the repo root, with this checkout's humming-matrix importable by $PYTHON (default:
# .venv/bin/python). A run directory already in results/h200-gsm8k/ must match the archive's copy
# byte for byte (device.sh collects cumulatively, so later archives repeat earlier runs).
set -euo pipefail

PY=${PYTHON:-.venv/bin/python}
RESULTS=results/h200-gsm8k
KIT=tools/h200-gsm8k
die() { echo "finish.sh: error: $*" >&2; exit 2; }
[[ -f "$KIT/table.py" ]] || die "run from the repo root"
"$PY" -c "import humming_matrix" 2>/dev/null || die "$PY cannot import humming_matrix (set PYTHON)"
mkdir -p "$RESULTS"

for archive in "$@"; do
  [[ -f "$archive" ]] || die "$archive: no such file"
  unpacked=$(mktemp -d)
  tar xzf "$archive" -C "$unpacked"
  for item in "$unpacked"/* "$unpacked"/device/*; do
    [[ -e "$item" && "$(basename "$item")" != device ]] || continue
    rel=${item#"$unpacked"/}
    if [[ -e "$RESULTS/$rel" ]]; then
      diff -rq "$item" "$RESULTS/$rel" >/dev/null \
        || die "$RESULTS/$rel differs from the copy in $archive; not overwriting it"
    else
      mkdir -p "$(dirname "$RESULTS/$rel")"
      cp -a "$item" "$RESULTS/$rel"
      echo "added $RESULTS/$rel"
    fi
  done
  rm -rf "$unpacked"
done

# The product judges: the A/A floor and each release against the next (table.py picks the pairs).
mkdir -p "$RESULTS/compare"
"$PY" "$KIT/table.py" "$RESULTS" --pairs | while read -r base cand; do
  out=$RESULTS/compare/${base}__${cand}
  code=0
  "$PY" -m humming_matrix compare "$RESULTS/$base" "$RESULTS/$cand" \
      --markdown "$out.md" --json "$out.json" > "$out.txt" 2>&1 || code=$?
  echo "$code" > "$out.exit"
  echo "compare $base -> $cand: exit $code"
done
code=0
"$PY" -m humming_matrix report "$RESULTS" --markdown "$RESULTS/report.md" \
    --junit "$RESULTS/report.xml" --html "$RESULTS/report.html" || code=$?
echo "report: exit $code"
"$PY" "$KIT/table.py" "$RESULTS" --write "$RESULTS/README.md"
