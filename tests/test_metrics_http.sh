#!/bin/bash
# test_metrics_http.sh FOXD FOXCTL — the opt-in /metrics endpoint: foxd
# serves Prometheus' text format on a loopback port and the HTTP errors
# for anything else, a real Prometheus
# server (Debian's prometheus, started here on loopback) scrapes it, and one
# foxd series comes back through Prometheus' query API. Skipped with a
# message where Prometheus is not installed or cannot start.
set -u
FOXD=$(realpath "$1") FOXCTL=$(realpath "$2")
. "$(dirname "$(realpath "$0")")/lib.sh"
test_init foxd-metrics
prom_pid=
trap 'test_cleanup; [ -n "$prom_pid" ] && kill -9 "$prom_pid" 2>/dev/null' EXIT
# get URL: the body of an HTTP GET (python3 is there: meson needs it).
get() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1"; }

url="ipc://$dir/foxd.sock"
mport=$(free_port)
"$FOXD" --backend cpu --set data.synth_bars=3000 --set "daemon.runtime_dir=$dir/rt" \
    --set "daemon.state_dir=$dir/st" --set daemon.metrics_listen=http://0.0.0.0:$mport 2>"$dir/refused.log"
[ $? -eq 2 ] && grep -q "beyond loopback" "$dir/refused.log" || fail "/metrics on 0.0.0.0 was not refused"
ok "/metrics beyond loopback is refused"
start_with_metrics() {
    mport=$port
    foxd_start --url "$url" -- --backend cpu --set model.h1=32 --set model.h2=16 \
        --set data.synth_bars=3000 --listen "$url" --pub "ipc://$dir/ev.sock" \
        --set "daemon.runtime_dir=$dir/rt" --set "daemon.state_dir=$dir/st" \
        --set daemon.metrics_listen=http://127.0.0.1:$mport
}
on_free_port start_with_metrics
body=$(get "http://127.0.0.1:$mport/metrics") || fail "GET /metrics failed"
grep -q '^foxd_state{state="idle"} 1$' <<<"$body" && grep -q '^# TYPE foxd_healthy gauge$' <<<"$body" ||
    fail "/metrics: ${body:0:300}"
ok "GET /metrics answers in Prometheus' text format"
# status REQUEST: the status line of foxd's reply to the raw bytes REQUEST.
status() {
    python3 -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(sys.argv[2].encode().decode("unicode_escape").encode("latin-1"))
reply = b""
while True:
    got = s.recv(65536)
    if not got:
        break
    reply += got
print(reply.split(b"\r\n")[0].decode(), len(reply.split(b"\r\n\r\n", 1)[1]))' "$mport" "$1"
}
for want in "404:GET /nope HTTP/1.1\r\n\r\n" "405:POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi" \
    "400:hello\r\n\r\n" "431:GET /metrics HTTP/1.1\r\nX: $(head -c 9000 /dev/zero | tr '\0' a)\r\n\r\n"; do
    got=$(status "${want#*:}") || fail "no reply to ${want:0:40}"
    [[ $got == "HTTP/1.1 ${want%%:*} "* ]] || fail "${want:4:30}: got $got, want ${want%%:*}"
done
got=$(status "HEAD /metrics HTTP/1.0\n\n")
[[ $got == "HTTP/1.1 200 OK 0" ]] || fail "HEAD /metrics: $got"
ok "other paths get 404, other methods 405, garbage 400, 9 KB of headers 431, HEAD no body"

prom=$(command -v prometheus)
if [ -z "$prom" ]; then
    echo "prometheus not installed: the scrape by a real Prometheus is skipped"
    exit 77
fi
# Prometheus on a port of its own; 98 when another program took it first.
start_prometheus() {
    pport=$port
    cat > "$dir/prometheus.yml" <<EOT
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: foxd
    static_configs:
      - targets: ['127.0.0.1:$mport']
EOT
    "$prom" --config.file="$dir/prometheus.yml" --storage.tsdb.path="$dir/tsdb" \
        --web.listen-address="127.0.0.1:$pport" >"$dir/prometheus.log" 2>&1 &
    prom_pid=$!
    for _ in $(seq 1 100); do get "http://127.0.0.1:$pport/-/ready" >/dev/null 2>&1 && return 0; sleep 0.2; done
    kill -0 "$prom_pid" 2>/dev/null || { prom_pid=; grep -qi "address already in use" "$dir/prometheus.log" && return 98; }
    return 1
}
if ! on_free_port start_prometheus; then
    echo "prometheus did not start here: the scrape is skipped"
    tail -5 "$dir/prometheus.log"
    exit 77
fi
q="http://127.0.0.1:$pport/api/v1/query?query=foxd_healthy%7Bjob%3D%22foxd%22%7D"
for _ in $(seq 1 60); do
    out=$(get "$q" 2>/dev/null)
    [[ $out == *'"__name__":"foxd_healthy"'*'"value":['*',"1"]'* ]] && break
    sleep 0.5
done
[[ $out == *'"__name__":"foxd_healthy"'*',"1"]'* ]] || fail "Prometheus never returned foxd_healthy: $out"
ok "Prometheus scraped foxd and returns foxd_healthy=1 through its query API"
kill "$pid"; wait "$pid"; pid=
kill "$prom_pid"; wait "$prom_pid" 2>/dev/null; prom_pid=
echo "all $checks checks passed"
