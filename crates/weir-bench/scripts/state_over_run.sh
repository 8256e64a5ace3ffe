#!/usr/bin/env bash
# Samples a running benchmark's server every INTERVAL seconds (10 by
# default) until it exits: its resident memory and its views' operator
# state (`weir_view_operators`), one line per sample, for the memory
# tables of long Nexmark runs. Run it beside `weir-bench nexmark ...`;
# it follows the newest `weir` server listening on 127.0.0.1 (waiting
# for one to start).
# usage: state_over_run.sh [INTERVAL]
set -euo pipefail
interval=${1:-10}
until pid=$(pgrep -n -f -- "weir --listen 127.0.0.1:"); do sleep 0.2; done
port=$(tr '\0' ' ' </proc/$pid/cmdline | sed -E 's/.*--listen 127\.0\.0\.1:([0-9]+).*/\1/')
echo "seconds resident_mib state_rows state_mib (server $pid, port $port)"
started=$SECONDS
while kill -0 "$pid" 2>/dev/null; do
  rss=$(awk '/VmRSS/ {print int($2 / 1024)}' /proc/$pid/status 2>/dev/null || echo -)
  state=$(psql -h 127.0.0.1 -p "$port" -U weir -d weir -XAtF ' ' -c \
    "SELECT coalesce(sum(state_rows), 0), coalesce(sum(state_bytes), 0) / 1048576 FROM weir_view_operators" \
    2>/dev/null || echo "- -")
  echo "$((SECONDS - started)) $rss $state"
  sleep "$interval"
done
