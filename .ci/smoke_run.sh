#!/usr/bin/env bash
# Starts `make run` on the embedded defaults, waits for /healthz 200 and one ingested demo batch,
# then stops it with SIGINT as a user's Ctrl-C would, and checks that nothing is left running.
set -euo pipefail
cd "$(dirname "$0")/.."
unset DATABASE_URL REDIS_URL
export DRIFTWATCH_VAR_DIR
DRIFTWATCH_VAR_DIR=$(mktemp -d)
export PORT=${SMOKE_PORT:-8765}
log=$DRIFTWATCH_VAR_DIR/run.log

setsid make run >"$log" 2>&1 &
group=$!
stop() { kill -INT -- "-$group" 2>/dev/null || true; }
trap stop EXIT

ok=""
for _ in $(seq 180); do
  if curl -fsS "http://127.0.0.1:$PORT/healthz" >/dev/null 2>&1 && grep -q "ingested batch 1: accepted=" "$log"; then
    ok=1
    break
  fi
  sleep 1
done
if [ -z "$ok" ]; then
  echo "smoke test FAILED: no healthy server with an ingested batch within 180 s"; tail -50 "$log"; exit 1
fi
curl -fsS "http://127.0.0.1:$PORT/healthz"; echo
grep -m1 "ingested batch 1" "$log"

stop
trap - EXIT
for _ in $(seq 40); do
  pgrep -f "run_platform|workers.celery_app|gunicorn driftwatch" >/dev/null || break
  sleep 1
done
if pgrep -af "run_platform|workers.celery_app|gunicorn driftwatch"; then
  echo "smoke test FAILED: processes left running after Ctrl-C"; exit 1
fi
grep -q "driftwatch stopped." "$log" || { echo "smoke test FAILED: no clean stop"; tail -30 "$log"; exit 1; }
echo "smoke test passed: healthz 200, demo batch ingested, clean stop"
