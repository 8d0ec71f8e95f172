#!/usr/bin/env bash
# The README's test figures, measured as a new user gets them: a fresh clone of HEAD into a
# temporary folder, then `make test` (setup, the vLLM CPU venv and every CPU test) and
# `make test-fast`, each timed; prints the machine, the wall times, CPU time and pytest's
# summary lines. Run it on a quiet machine: anything else on the cores shows in the figures.
#   bash bench/bench_fresh_clone.sh [--keep]     (--keep leaves the clone for inspection)
set -euo pipefail
cd "$(dirname "$0")/.."
keep=${1:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/conductor-fresh-XXXXXX")
[ "$keep" = "--keep" ] || trap 'rm -rf "$work"' EXIT
git clone -q . "$work/repo"
cd "$work/repo"
echo "commit: $(git log -1 --format='%h %s' | cut -c1-100)"
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)," \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"

timed() {  # timed NAME COMMAND...: runs it, prints wall, CPU and pytest's last summary line
  local name=$1 log="$work/$1.log" start end rc=0
  shift
  start=$(date +%s)
  /usr/bin/env time -f "%U %S" -o "$work/$name.cpu" "$@" >"$log" 2>&1 || rc=$?
  end=$(date +%s)
  read -r user sys <"$work/$name.cpu" || true
  printf '%s: exit %s, wall %d min %02d s, CPU %.1f min\n' "$name" "$rc" \
    $(((end - start) / 60)) $(((end - start) % 60)) "$(awk -v u="${user:-0}" -v s="${sys:-0}" 'BEGIN {print (u + s) / 60}')"
  grep -E "^[0-9]+ (passed|failed)|^=+ .*(passed|failed)" "$log" | tail -n 1 || true
  grep -E "^(FAILED|ERROR) " "$log" || true
  grep -A 16 "slowest" "$log" || true
  return 0
}
timed make-test make test
timed make-test-fast make test-fast
[ "$keep" = "--keep" ] && echo "clone and logs kept in $work"
