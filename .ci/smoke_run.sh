#!/usr/bin/env bash
# Starts `make run` on the embedded defaults, waits for /healthz 200 and one ingested demo batch,
# then stops it with SIGINT as a user's Ctrl-C would, and checks that none of its processes is left
# (by pid: other runs on the machine are not ours to judge).
set -euo pipefail
cd "$(dirname "$0")/.."
unset DATABASE_URL REDIS_URL
export DRIFTWATCH_VAR_DIR
DRIFTWATCH_VAR_DIR=$(mktemp -d)
export DRIFTWATCH_PORT=${SMOKE_PORT:-8765}
log=$DRIFTWATCH_VAR_DIR/run.log
traffic=$DRIFTWATCH_VAR_DIR/log/demo-traffic.log   # children's output goes to var/log/

setsid make run >"$log" 2>&1 &
group=$!
stop() { kill -INT -- "-$group" 2>/dev/null || true; }
# Every process below $1, by parent pid.
descendants() {
  ps -e -o pid=,ppid= | awk -v root="$1" '
    { parent[$1] = $2 }
    END { found[root] = 1; do { grew = 0; for (p in parent) if (!(p in found) && (parent[p] in found)) { found[p] = 1; grew = 1 } } while (grew)
          for (p in found) if (p != root) print p }'
}
trap stop EXIT

ok=""
for _ in $(seq 180); do
  if curl -fsS "http://127.0.0.1:$DRIFTWATCH_PORT/healthz" >/dev/null 2>&1 && grep -qs "ingested batch 1: accepted=" "$traffic"; then
    ok=1
    break
  fi
  sleep 1
done
if [ -z "$ok" ]; then
  echo "smoke test FAILED: no healthy server with an ingested batch within 180 s"; tail -50 "$log"; exit 1
fi
curl -fsS "http://127.0.0.1:$DRIFTWATCH_PORT/healthz"; echo
grep -m1 "ingested batch 1" "$traffic"
grep -q "Press Ctrl-C to stop." "$log" || { echo "smoke test FAILED: no banner"; tail -30 "$log"; exit 1; }

ours=$(descendants "$group")
stop
trap - EXIT
left=""
for _ in $(seq 10); do
  left=$(for pid in $ours; do ps -o pid=,stat=,args= -p "$pid" | grep -v " Z"; done || true)
  [ -z "$left" ] && break
  sleep 1
done
if [ -n "$left" ]; then
  echo "smoke test FAILED: processes left running 10 s after Ctrl-C:"; echo "$left"; exit 1
fi
grep -q "driftwatch stopped." "$log" || { echo "smoke test FAILED: no clean stop"; tail -30 "$log"; exit 1; }
echo "smoke test passed: healthz 200, demo batch ingested, clean stop"
