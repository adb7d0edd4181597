#!/usr/bin/env bash
# tests/gpu/run-hosts.sh [CARRY_DIR]: one program, two hosts, on the GPU machine.
#
# Two daemons on one machine stand for two hosts: with two GPUs, daemon A serves GPU 0
# and daemon B GPU 1; with one, both serve GPU 0 (the same GPU appears as two
# devices). The bridged program (GPU hidden, as every GPU script does) names both with
# VMCUDA_SERVER=unix:A,unix:B and sees two devices. Its native twin runs both halves
# on the real GPUs: `device_pair 0 1` with two GPUs, `0 0` with one. Outputs must be
# identical. Then the same for torch (tests/gpu/hosts_torch.py). VMCUDA_HOSTS_GPU_B=0
# gives daemon B GPU 0 on a machine with more (the one-GPU case).
# Writes $OUT/RESULTS-HOSTS.md (default build/gpu-results) and prints its table last.
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
carry="${1:-.carry/gpu}"
host_bin="$carry/bin/vmcuda-host"
guest_lib="$(cd "$carry/guest/lib" && pwd)" || exit 2
apps="$carry/apps"
py="${VMCUDA_TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
out="${OUT:-build/gpu-results}"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
raw="$(mktemp -d)"
commit="$(cat "$carry/COMMIT" 2>/dev/null || git rev-parse HEAD)"
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"

gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || echo 1)
if [ "$gpus" -ge 2 ]; then gpu_b=1; else gpu_b=0; fi
# VMCUDA_HOSTS_GPU_B=0 makes daemon B serve GPU 0 too on a machine with more.
gpu_b="${VMCUDA_HOSTS_GPU_B:-$gpu_b}"
pair="0,$gpu_b"
real_cudart=""
for c in "${VMCUDA_REAL_CUDART_DIR:-}" /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -n "$c" ] && [ -e "$c/libcudart.so.13" ] && { real_cudart="$c"; break; }
done

# The two daemons are peers (mutual TLS on loopback, certificates made here), so copies
# between their devices go daemon to daemon; without openssl they go through the guest.
peer_port_a=17732 peer_port_b=17733
peers=no
if command -v openssl >/dev/null 2>&1; then
    pki="$raw/pki"
    mkdir -p "$pki"
    ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
    if openssl req -x509 "${ec[@]}" -keyout "$pki/ca.key" -out "$pki/ca.pem" -days 2 \
        -subj /CN=vmcuda-run-hosts-ca -addext basicConstraints=critical,CA:TRUE \
        -addext keyUsage=critical,keyCertSign >/dev/null 2>&1; then
        peers=yes
        printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\nbasicConstraints=CA:FALSE\n' >"$pki/ext"
        for h in a b; do
            openssl req "${ec[@]}" -keyout "$pki/$h.key" -out "$pki/$h.csr" -subj "/CN=host-$h" >/dev/null 2>&1 &&
            openssl x509 -req -in "$pki/$h.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca.key" -CAcreateserial \
                -out "$pki/$h.pem" -days 2 -extfile "$pki/ext" >/dev/null 2>&1 || peers=no
        done
    fi
fi
peer_table() { # name own-port other-port
    [ "$peers" = yes ] || return 0
    printf '[peers]\nlisten = "127.0.0.1:%s"\ntls_cert = "%s"\ntls_key = "%s"\nca = "%s"\nallow = ["127.0.0.1:%s"]\n' \
        "$2" "$pki/$1.pem" "$pki/$1.key" "$pki/ca.pem" "$3"
}

pids=()
start() { # name gpu own-peer-port other-peer-port
    local sock="/tmp/vmcuda-$1.sock"
    rm -f "$sock"
    { printf '[local]\ngpus = [%s]\n' "$2"; peer_table "$1" "$3" "$4"; } >"$raw/$1.toml"
    "$host_bin" serve --unix "$sock" --executor "${VMCUDA_EXECUTOR:-cuda}" --config "$raw/$1.toml" --state-dir "$raw/$1-state" \
        --state-dir "$raw/state-$1" >"$raw/$1.log" 2>&1 &
    pids+=($!)
    for _ in $(seq 1 100); do [ -S "$sock" ] && return 0; sleep 0.1; done
    echo "run-hosts.sh: daemon $1 did not start" >&2
}
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
start a 0 "$peer_port_a" "$peer_port_b"
start b "$gpu_b" "$peer_port_b" "$peer_port_a"
server="unix:/tmp/vmcuda-a.sock,unix:/tmp/vmcuda-b.sock"

secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }
rows=()
compare() { # name native-cmd... -- bridged-cmd...
    local name="$1"; shift
    local native=() bridged=()
    while [ "$1" != "--" ]; do native+=("$1"); shift; done; shift
    bridged=("$@")
    local t0 t1 t2 nrc brc same
    t0=$(date +%s.%N)
    env -u VMCUDA_SERVER timeout -k 5 300 "${native[@]}" \
        >"$raw/$name.native.out" 2>"$raw/$name.native.err"; nrc=$?
    t1=$(date +%s.%N)
    ${isolate[@]+"${isolate[@]}"} env VMCUDA_SERVER="$server" timeout -k 5 300 "${bridged[@]}" \
        >"$raw/$name.bridged.out" 2>"$raw/$name.bridged.err"; brc=$?
    t2=$(date +%s.%N)
    same=no
    cmp -s "$raw/$name.native.out" "$raw/$name.bridged.out" && [ "$nrc" = "$brc" ] && same=yes
    [ "$same" = yes ] || diff "$raw/$name.native.out" "$raw/$name.bridged.out" >"$raw/$name.diff"
    rows+=("| $name | $nrc | $brc | $same | $(secs "$t0" "$t1") | $(secs "$t1" "$t2") |")
}

native_lib=(env LD_LIBRARY_PATH="$real_cudart")
compare device_pair "${native_lib[@]}" "$apps/device_pair" ${pair/,/ } -- \
    env LD_LIBRARY_PATH="$guest_lib:$real_cudart" "$apps/device_pair" 0 1
for app in vector_add multithread streams; do
    compare "$app" "${native_lib[@]}" "$apps/$app" -- env LD_LIBRARY_PATH="$guest_lib:$real_cudart" "$apps/$app"
done
preload=""
for l in libcuda.so.1; do
    [ -e "$guest_lib/$l" ] && preload="${preload:+$preload:}$guest_lib/$l"
done
compare torch_two_devices "$py" tests/gpu/hosts_torch.py "$pair" -- \
    env LD_PRELOAD="$preload" LD_LIBRARY_PATH="$guest_lib" "$py" tests/gpu/hosts_torch.py 0,1

conn_a=$(grep -c 'guest connected' "$raw/a.log" || true)
conn_b=$(grep -c 'guest connected' "$raw/b.log" || true)
several=$(grep -c 'guest uses several hosts' "$raw/b.log" || true)
sent=$(cat "$raw/a.log" "$raw/b.log" | grep -c 'peer transfer sent' || true)
received=$(cat "$raw/a.log" "$raw/b.log" | grep -c 'peer transfer received' || true)
through_guest=$(cat "$raw"/*.bridged.err 2>/dev/null | grep -c 'go through the guest' || true)
{
    echo "# One program, two hosts: two daemons on one machine, native and bridged in the same run"
    echo
    echo "- date (UTC): $(date -u '+%Y-%m-%d %H:%M:%S')"
    echo "- commit: $commit"
    echo "- command: \`${VMCUDA_HOSTS_GPU_B:+VMCUDA_HOSTS_GPU_B=$VMCUDA_HOSTS_GPU_B }tests/gpu/run-hosts.sh $carry\`"
    echo "- GPUs: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | paste -sd ';'); driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
    echo "- daemon A serves GPU 0, daemon B GPU $gpu_b; bridged: VMCUDA_SERVER=unix:A,unix:B (the program sees two devices); native: both halves on devices $pair"
    echo "- bridged process isolation: $isolation"
    echo "- guest connections: daemon A $conn_a, daemon B $conn_b (B told it is one of several: $several)"
    echo "- peer link between the daemons (mutual TLS on loopback): $peers; transfers daemon to daemon: $sent sent, $received received; programs told copies go through the guest: $through_guest"
    echo
    echo "| program | native rc | bridged rc | stdout identical | native s | bridged s |"
    echo "| --- | --- | --- | --- | --- | --- |"
    printf '%s\n' "${rows[@]}"
} >"$out/RESULTS-HOSTS.md"
tar -C "$raw" -czf "$out/hosts-raw.tar.gz" . 2>/dev/null
cat "$out/RESULTS-HOSTS.md"
