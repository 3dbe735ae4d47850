#!/bin/bash
# test_daemon_tls.sh FOXD FOXCTL — remote endpoints: mutual TLS and the
# insecure-remote rule. Certificates are made here with openssl (ECDSA
# P-256: a CA, a server certificate for localhost, a client certificate from
# the CA, and a client certificate from a foreign CA).
set -u
FOXD=$(realpath "$1") FOXCTL=$(realpath "$2")
command -v openssl >/dev/null || { echo "openssl not installed: skipping"; exit 77; }
. "$(dirname "$(realpath "$0")")/lib.sh"

test_init foxd-tls
TINY=(--backend cpu --set model.h1=32 --set model.h2=16 --set data.synth_bars=3000
      --set "daemon.state_dir=$dir/state" --set "daemon.runtime_dir=$dir"
      --pub "ipc://$dir/events.sock" --set daemon.metrics_interval_ms=0)

# ------------------------------------------------------------ certificates
cd "$dir" || exit 1
mkcert() { # mkcert NAME CN CA_NAME [SAN]
    openssl ecparam -name prime256v1 -genkey -noout -out "$1.key" 2>/dev/null
    openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr" 2>/dev/null
    if [ -n "${4:-}" ]; then printf 'subjectAltName=%s\n' "$4" > "$1.ext"; else : > "$1.ext"; fi
    openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -days 2 \
        -extfile "$1.ext" -out "$1.pem" 2>/dev/null
}
for ca in ca foreign; do
    openssl ecparam -name prime256v1 -genkey -noout -out "$ca.key" 2>/dev/null
    openssl req -x509 -new -key "$ca.key" -subj "/CN=foxd test $ca" -days 2 -out "$ca.pem" 2>/dev/null
done
mkcert server localhost ca "DNS:localhost,IP:127.0.0.1"
mkcert client operator ca
mkcert stranger stranger foreign
[ -s server.pem ] && [ -s client.pem ] && [ -s stranger.pem ] || fail "openssl could not make the certificates"
ok "certificates made"

# The refusals below never open the listener; the served one takes on_free_port's port.
port=$(free_port)
url="tls+tcp://127.0.0.1:$port"

# ------------------------------------------------------- the remote rules
"$FOXD" --listen "tcp://0.0.0.0:$port" "${TINY[@]}" 2>"$dir/refused.log"
[ $? -eq 2 ] && grep -q "allow_insecure_remote" "$dir/refused.log" || fail "plain tcp beyond loopback was not refused"
ok "plain tcp:// beyond loopback refused without allow_insecure_remote"
"$FOXD" --listen "$url" "${TINY[@]}" 2>"$dir/refused.log"
[ $? -eq 2 ] && grep -q "daemon.tls.ca" "$dir/refused.log" || fail "tls+tcp without a CA was not refused"
ok "tls+tcp:// without a client CA refused"

# ------------------------------------------------------------- mutual TLS
start_tls() {
    url="tls+tcp://127.0.0.1:$port"
    good=(--url "$url" --timeout 5000 --cert "$dir/client.pem" --key "$dir/client.key"
          --ca "$dir/ca.pem" --server-name localhost)
    foxd_start "${good[@]}" -- --listen "$url" --set daemon.tls.cert="$dir/server.pem" \
        --set daemon.tls.key="$dir/server.key" --set daemon.tls.ca="$dir/ca.pem" "${TINY[@]}"
}
on_free_port start_tls
"$FOXCTL" "${good[@]}" status | grep -q "^state" || fail "client with a CA-signed certificate not served"
ok "client with a certificate from the configured CA is served"

"$FOXCTL" --url "$url" --timeout 3000 --ca "$dir/ca.pem" --server-name localhost version >/dev/null 2>&1
rc=$?
[ $rc -eq 3 ] || fail "client without a certificate: exit $rc"
ok "client without a certificate is refused (exit 3)"

"$FOXCTL" --url "$url" --timeout 3000 --cert "$dir/stranger.pem" --key "$dir/stranger.key" \
    --ca "$dir/ca.pem" --server-name localhost version >/dev/null 2>&1
rc=$?
[ $rc -eq 3 ] || fail "client with a foreign certificate: exit $rc"
ok "client with a certificate from a foreign CA is refused (exit 3)"

out=$("$FOXCTL" --url "$url" --timeout 3000 --cert "$dir/client.pem" --key "$dir/client.key" \
    --ca "$dir/ca.pem" --server-name wrong.example version 2>&1)
[ $? -eq 3 ] && [[ $out == *"--server-name"* && $out != *"client certificate"* ]] ||
    fail "a wrong --server-name: $out"
out=$("$FOXCTL" --url "$url" --timeout 3000 --ca "$dir/ca.pem" --server-name localhost version 2>&1)
[[ $out == *"client certificate"* ]] || fail "no client certificate: $out"
ok "a wrong --server-name names the server's certificate, a missing client certificate ours"

"$FOXCTL" "${good[@]}" status >/dev/null || fail "daemon stopped serving after refused clients"
ok "still serving after the refusals"

"$FOXCTL" "${good[@]}" shutdown --no-checkpoint >/dev/null || fail "shutdown over TLS"
wait "$pid"
rc=$?
pid=
[ $rc -eq 0 ] || fail "exit status $rc"
ok "shutdown over TLS"
echo "all $checks checks passed"
