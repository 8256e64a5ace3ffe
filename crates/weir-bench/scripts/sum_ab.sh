#!/usr/bin/env bash
# Server CPU of one grouped view over 24,000,000 datagen bids, from its
# CREATE to the CHECKPOINT after the last row (generator included).
# usage: sum_ab.sh WEIR_BINARY "<aggregate expression>"
#   e.g. sum_ab.sh target/release/weir "sum(price)"
set -euo pipefail
weir=$1
expr=$2
port=55460
source "$(dirname "$0")/server.sh"
q "CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel TEXT, url TEXT,
   date_time TIMESTAMP, extra TEXT) WITH (connector = 'datagen', rows_per_second = '100000000',
   total_rows = '24000000', seed = '7', fields.auction.min = '1', fields.auction.max = '10000',
   fields.bidder.min = '1', fields.bidder.max = '1000000', fields.price.min = '1',
   fields.price.max = '10000000', fields.channel.length = '8', fields.url.length = '48',
   fields.extra.length = '16')" >/dev/null
ticks() { awk '{print $14 + $15}' /proc/$pid/stat; }
before=$(ticks)
q "CREATE MATERIALIZED VIEW v AS SELECT auction, count(*) AS n, $expr AS total FROM bid GROUP BY auction" >/dev/null
until [ "$(q "SELECT position FROM weir_source_readers WHERE view = 'v'")" = 24000000 ]; do
    sleep 0.05
done
q "CHECKPOINT" >/dev/null
after=$(ticks)
echo "$expr: $((after - before)) CPU ticks ($(getconf CLK_TCK)/s), total is $(q "SELECT pg_typeof(total) FROM v LIMIT 1")"
