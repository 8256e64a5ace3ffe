#!/usr/bin/env bash
# The server's resident memory growth from five SUBSCRIBEs to a table of
# 1,000,000 rows (about 120 bytes each), and after an UPDATE of 1,000 of
# its rows that each subscription replays.
# usage: subscription_memory.sh WEIR_BINARY
set -euo pipefail
weir=$1
port=55461
source "$(dirname "$0")/server.sh"
q "CREATE TABLE t (id BIGINT PRIMARY KEY, v BIGINT, s TEXT)" >/dev/null
q "INSERT INTO t SELECT g, g % 100, repeat('x', 100) FROM generate_series(1, 1000000) AS g" >/dev/null
q "CHECKPOINT" >/dev/null
sleep 3
rss() { awk '/VmRSS/ {print $2}' /proc/$pid/status; }
before=$(rss)
for _ in 1 2 3 4 5; do
  psql -h 127.0.0.1 -p $port -U weir -d weir -XAtqc "SUBSCRIBE t WITH (SNAPSHOT = false)" >/dev/null 2>&1 &
done
sleep 10
subscribed=$(rss)
q "UPDATE t SET v = v + 1 WHERE id % 1000 = 0" >/dev/null
sleep 10
updated=$(rss)
echo "resident KiB: $before; with 5 subscriptions $subscribed (+$(( (subscribed - before) / 1024 )) MiB);" \
  "after an update of 1,000 rows $updated (+$(( (updated - before) / 1024 )) MiB)"
