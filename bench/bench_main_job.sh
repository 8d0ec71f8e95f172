#!/usr/bin/env bash
# The README's main-job figures, measured as a user gets them: `conductor pipeline run training
# --local` (the embedded default) into a fresh temporary folder; prints the machine, the wall
# time and the run's summary (held-out accuracy of the trained Conductor, the best single worker
# and mixture-of-agents, seconds per task). Run it on a quiet machine, after scripts/setup.sh.
#   bash bench/bench_main_job.sh [--keep] [--set KEY=VALUE ...]   (--keep leaves the run folder)
set -euo pipefail
cd "$(dirname "$0")/.."
keep=""
if [ "${1:-}" = "--keep" ]; then keep=1; shift; fi
work=$(mktemp -d "${TMPDIR:-/tmp}/conductor-main-job-XXXXXX")
[ -n "$keep" ] || trap 'rm -rf "$work"' EXIT
echo "commit: $(git log -1 --format='%h %s' 2>/dev/null | cut -c1-100)"
echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)," \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
start=$(date +%s)
rc=0
# The run's progress lines go to stderr as they come; the log keeps them for the summary below.
.venv/bin/conductor pipeline run training --local --root "$work/runs" "$@" 2>&1 |
  tee "$work/run.log" >&2 || rc=$?
end=$(date +%s)
printf 'main job: exit %s, wall %d min %02d s\n' "$rc" $(((end - start) / 60)) $(((end - start) % 60))
# The summary: from the result line to the task table's end (the paths after it are temporary).
sed -n '/^pipeline training:/,/^what /p' "$work/run.log" | sed '$d'
[ -n "$keep" ] && echo "run folder kept in $work"
exit "$rc"
