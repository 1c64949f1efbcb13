#!/usr/bin/env bash
# `npm run bench:read-command [-- N]`: what one read costs Redis itself, per command, from Redis's own
# INFO commandstats (usec_per_call: time inside the command, not the I/O around it). A throwaway
# redis-server on a free port holds one 120-byte value; redis-benchmark (20 clients, N requests,
# default 200,000) sends each command in turn: a bare GET, our read script (src/lock/scripts.ts READ:
# GET, PTTL and the size cap in Lua), the same as a Redis function (FCALL), a script that only GETs,
# an empty script (what any EVALSHA costs), GETRANGE up to the size cap, and PTTL. Issue 12 §1: why
# a fresh hit's read is dearer than a bare GET even before the client does anything.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}
PORT=$(node -e "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")
DIR=$(mktemp -d)
redis-server --port "$PORT" --dir "$DIR" --save '' --appendonly no --daemonize yes --pidfile "$DIR/pid" >/dev/null
trap 'redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$DIR"' EXIT
R=(redis-cli -p "$PORT")
for _ in $(seq 50); do "${R[@]}" ping >/dev/null 2>&1 && break; sleep 0.1; done
"${R[@]}" set k "$(head -c 90 /dev/urandom | base64 | head -c 120)" px 3600000 >/dev/null
READ=$(node --import tsx -e "import('./src/lock/scripts.ts').then((m) => process.stdout.write(m.READ))")
SHA_READ=$("${R[@]}" script load "$READ")
SHA_GET=$("${R[@]}" script load "return redis.call('GET', KEYS[1])")
SHA_EMPTY=$("${R[@]}" script load "return 1")
# The same body as a function (Redis ≥ 7.0), declared no-writes; its parameters carry the script's names.
"${R[@]}" function load "#!lua name=sgbench
redis.register_function{function_name='sgread', flags={'no-writes'}, callback=function(KEYS, ARGV)
$READ
end}" >/dev/null
echo "npm run bench:read-command -- $N   (redis-benchmark -c 20 -n $N per command; $(redis-server --version | cut -d' ' -f3))"
echo
echo "| command | µs inside Redis per call | ÷ GET |"
echo "|---|---:|---:|"
GET_US=""
while IFS='|' read -r label cmd stat; do
  "${R[@]}" config resetstat >/dev/null
  # shellcheck disable=SC2086
  redis-benchmark -p "$PORT" -c 20 -n "$N" -q $cmd >/dev/null 2>&1
  us=$("${R[@]}" info commandstats | tr -d '\r' | grep "^cmdstat_$stat:" | sed 's/.*usec_per_call=\([0-9.]*\).*/\1/')
  [ -z "$GET_US" ] && GET_US=$us
  printf '| %s | %s | %s |\n' "$label" "$us" "$(node -e "console.log(($us / $GET_US).toFixed(1))")"
done <<EOF
GET|get k|get
our read script (EVALSHA: GET + PTTL + cap)|evalsha $SHA_READ 1 k 1048576|evalsha
the same as a function (FCALL)|fcall sgread 1 k 1048576|fcall
a script that only GETs|evalsha $SHA_GET 1 k|evalsha
an empty script (return 1)|evalsha $SHA_EMPTY 0|evalsha
GETRANGE k 0 cap|getrange k 0 1048576|getrange
PTTL|pttl k|pttl
EOF
