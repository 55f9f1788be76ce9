#!/usr/bin/env bash
# Unpack one device call's kernels-sweep.tar.gz into a call folder of a generation.
#
#   tools/h200-kernels/ingest.sh TARBALL results/h200/gen7/call3 [CLI_LOG_DIR]
#
# The sweep's state persists on a warm machine, so the tarball of a later call also holds the
# records of the calls before it: only records no other call folder of the generation holds are
# copied. Its load.txt accumulates too, each call's samples counting seconds from that call's
# start: the call's own are the lines after the last drop in the first column. CLI_LOG_DIR, when
# given, receives the call's cli-*.log files and its workers' events (work-TAG/events-N.jsonl,
# work-TAG/alone/events-N.jsonl), kept out of the results: they are the run's own output, already
# summarised in the records, and a warm machine's tarball also holds earlier calls' events.
set -euo pipefail
tarball=$1; dest=$2; logs=${3:-}
generation=$(dirname "$dest")
unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked"' EXIT
tar -xzf "$tarball" -C "$unpacked"
mkdir -p "$dest"
copied=0
for record in "$unpacked"/records/*.json; do
    [ -e "$record" ] || continue
    name=$(basename "$record")
    if ! compgen -G "$generation/*/$name" >/dev/null; then
        cp "$record" "$dest/"
        copied=$((copied + 1))
    fi
done
if [ -f "$unpacked/load.txt" ]; then
    awk 'NR > 1 && $1 < last { n = NR } { last = $1; line[NR] = $0 }
         END { for (i = n ? n : 1; i <= NR; i++) print line[i] }' \
        "$unpacked/load.txt" >"$dest/load.txt"
fi
if [ -n "$logs" ]; then
    mkdir -p "$logs"
    cp "$unpacked"/cli-*.log "$logs/" 2>/dev/null || true
    (cd "$unpacked" && find . -path './work-*' -name 'events-*.jsonl' -exec cp --parents {} "$logs/" \;)
fi
echo "$dest: $copied new records; done: $(tr '\n' ' ' <"$unpacked/done.txt" 2>/dev/null)"
