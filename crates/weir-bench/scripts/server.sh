# Sourced by the scripts here: starts `$weir` on a fresh data folder at
# 127.0.0.1:$port, sets `pid`, stops the server and removes the folder
# on exit, and defines `q SQL` (psql, unaligned, tuples only) once the
# server answers.
data=$(mktemp -d)
"$weir" --data-dir "$data" --listen 127.0.0.1:$port >"$data.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; pkill -f "psql -h 127.0.0.1 -p $port" || true; rm -rf "$data" "$data.log"' EXIT
q() { psql -h 127.0.0.1 -p $port -U weir -d weir -XAtc "$1"; }
until q "SELECT 1" >/dev/null 2>&1; do sleep 0.1; done
