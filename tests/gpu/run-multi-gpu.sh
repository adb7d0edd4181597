#!/usr/bin/env bash
# tests/gpu/run-multi-gpu.sh [CARRY]: several GPUs of one host, natively and through
# vmcuda in the same run, on a machine with two GPUs or more:
#   1. the multi_gpu app (tests/apps/multi_gpu.cu), natively and bridged, compared by
#      tests/gpu/run.sh: the shared-runtime build, and the static-runtime one where
#      there is one (NVIDIA's runtime inside the program, over vmcuda's driver);
#   2. bench --peer (cudaMemcpyPeer from device 0 to device 1, 1 to 256 MiB), natively
#      and bridged: GB/s and the ratio for each size;
#   3. DistributedDataParallel, 2 processes with one GPU each (tests/gpu/ddp_check.py),
#      for each backend of VMCUDA_DDP_VARIANTS, natively and bridged: same seeds, 20
#      steps; stdout (every loss as an exact float, the replicas' parameter sum) must
#      be identical; the median step time is given as a ratio.
# Each part runs whatever became of the ones before it; a failure is recorded with the
# last lines of its stderr. Every run is under a timeout, and the whole under
# VMCUDA_MULTI_GPU_DEADLINE seconds (default 450): a run that would start too late is
# skipped and says so.
#
# Inputs: CARRY as tests/gpu/carry.sh makes it (bin/vmcuda-host, guest/lib, apps,
# apps-static, bench/bench, COMMIT), else build/...; each may be set:
#   VMCUDA_HOST_BIN, VMCUDA_GUEST_LIB, VMCUDA_APPS_DIR, VMCUDA_APPS_STATIC_DIR,
#   VMCUDA_BENCH_BIN, VMCUDA_COMMIT_FILE, VMCUDA_REAL_CUDART_DIR (default: what run.sh
#   finds), VMCUDA_TORCH_PYTHON (default /opt/torch/.venv/bin/python, else python3),
#   VMCUDA_DDP_STEPS (20), VMCUDA_DDP_VARIANTS ("nccl gloo"; "nccl-net" is NCCL with
#   its peer-to-peer and shared-memory transports off, over loopback sockets).
# Bridged runs are run-torch.sh's: the guest libraries preloaded and first on
# LD_LIBRARY_PATH, VMCUDA_SERVER naming the host daemon started here (CUDA executor),
# and the GPU hidden from the process (hide-gpu.sh; needs root).
# Results in $OUT (default build/gpu-results): RESULTS-MULTI-GPU.md (printed last too)
# and multi-gpu-raw.tar.gz (every run's output). Exit status non-zero if a part failed.
set -u
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
cmdline="$(printf '%q ' "tests/gpu/run-multi-gpu.sh" "$@")"
cmdline="${cmdline% }"
for v in VMCUDA_DDP_VARIANTS VMCUDA_DDP_STEPS VMCUDA_MULTI_GPU_DEADLINE VMCUDA_TORCH_PYTHON VMCUDA_REAL_CUDART_DIR; do
    if [ -n "${!v:-}" ]; then cmdline="$v=$(printf '%q' "${!v}") $cmdline"; fi
done
start=$(date +%s)

carry="${1:-}"
if [ -n "$carry" ]; then carry="$(cd "$carry" && pwd)" || exit 2; fi
# in_carry PATH DEFAULT: PATH under CARRY when one is given, else DEFAULT.
in_carry() { if [ -n "$carry" ]; then echo "$carry/$1"; else echo "$2"; fi; }
host_bin="${VMCUDA_HOST_BIN:-$(in_carry bin/vmcuda-host build/bin/vmcuda-host)}"
guest_lib="${VMCUDA_GUEST_LIB:-$(in_carry guest/lib build/guest/lib)}"
apps_dir="${VMCUDA_APPS_DIR:-$(in_carry apps build/apps)}"
apps_static="${VMCUDA_APPS_STATIC_DIR:-$(in_carry apps-static build/apps-static)}"
bench_bin="${VMCUDA_BENCH_BIN:-$(in_carry bench/bench build/bench/bench)}"
commit_file="${VMCUDA_COMMIT_FILE:-$(in_carry COMMIT build/COMMIT)}"
steps="${VMCUDA_DDP_STEPS:-20}"
variants="${VMCUDA_DDP_VARIANTS:-nccl gloo}"
deadline="${VMCUDA_MULTI_GPU_DEADLINE:-450}"
py="${VMCUDA_TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
[ -x "$py" ] || py="$(command -v python3 || echo python3)"
out="${OUT:-build/gpu-results}"
mkdir -p "$out" && out="$(cd "$out" && pwd)" || exit 2
raw="$(mktemp -d "${TMPDIR:-/tmp}/vmcuda-multigpu.XXXXXX")"
sock=/tmp/vmcuda-multigpu.sock
host_log="$raw/host.log"
details="$raw/details.md"
: >"$details"

# NVLink multicast stays off (NCCL's NVLS, torch's symmetric memory, NVSHMEM): nothing
# here needs it, and a multicast object can take the host's GPUs, which others share,
# out of service. Every run below inherits these.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

log() { echo "run-multi-gpu.sh: $*" >&2; }
[ -x "$host_bin" ] || { log "host binary $host_bin not found"; exit 2; }
host_bin="$(cd "$(dirname "$host_bin")" && pwd)/$(basename "$host_bin")"
[ -e "$guest_lib/libcuda.so.1" ] || { log "$guest_lib/libcuda.so.1 not found"; exit 2; }
guest_lib="$(cd "$guest_lib" && pwd)"

# limit WANT: the seconds the next run may take: WANT, or less where the deadline is
# nearer (20 s are kept for the report); 0 when too little is left to start it.
limit() {
    local l=$((deadline - ($(date +%s) - start) - 20))
    [ "$l" -gt "$1" ] && l=$1
    [ "$l" -lt 15 ] && l=0
    echo "$l"
}

exit_label() {
    case "$1" in
        "") echo "-" ;;
        124|137) echo "$1 (timeout)" ;;
        *) if [ "$1" -gt 128 ] 2>/dev/null; then echo "$1 (signal $(($1 - 128)))"; else echo "$1"; fi ;;
    esac
}

trim() { local s="$1"; s="${s#"${s%%[! ]*}"}"; printf '%s' "${s%"${s##*[! ]}"}"; }
# joined SEP WORD...: the words with SEP between them.
joined() { local sep="$1" r="" w; shift; for w in "$@"; do r="${r:+$r$sep}$w"; done; printf '%s' "$r"; }

rows=()
parts=0
failed=0
# row PART NATIVE BRIDGED RESULT DETAIL
row() {
    rows+=("| $1 | $2 | $3 | $4 | $5 |")
    parts=$((parts + 1))
    # A part skipped for want of time was not checked: that fails the run.
    case "$4" in PASS|SKIP) ;; *) failed=$((failed + 1)) ;; esac
}
# detail TITLE FILE...: the last 20 lines of each file that has any, for the report.
detail() {
    local f
    { echo; echo "### $1"; } >>"$details"
    for f in "${@:2}"; do
        [ -s "$f" ] || continue
        { echo; echo "$(basename "$f"), last lines:"; echo; echo '```'; tail -n 20 "$f"; echo '```'; } >>"$details"
    done
}

# ---------------------------------------------------------------- 1. the app
real_cudart="${VMCUDA_REAL_CUDART_DIR:-}"
gpu_count=""
# app_part LABEL DIR: multi_gpu of DIR through run.sh.
app_part() {
    local label="$1" dir="$2" t o rc line ne be so se res native_out
    local name="multi_gpu ($label)"
    if [ ! -x "$dir/multi_gpu" ]; then
        row "$name" - - "SKIP" "no $dir/multi_gpu"
        return
    fi
    # Two runs (native, bridged) of t seconds at most each.
    t=$(($(limit 240) / 2))
    if [ "$t" -lt 15 ]; then row "$name" - - "SKIP (time budget)" ""; return; fi
    o="$raw/app-$label"
    log "multi_gpu, $label runtime (run.sh, $t s a run)"
    env OUT="$o" VMCUDA_HOST_BIN="$host_bin" VMCUDA_GUEST_LIB="$guest_lib" VMCUDA_APPS_DIR="$dir" \
        VMCUDA_APP_TIMEOUT="$t" VMCUDA_COMMIT_FILE="$commit_file" \
        ${real_cudart:+"VMCUDA_REAL_CUDART_DIR=$real_cudart"} \
        timeout -k 10 $((2 * t + 30)) bash tests/gpu/run.sh multi_gpu >"$o.out" 2>"$o.err"
    rc=$?
    [ -n "$real_cudart" ] || real_cudart="$(sed -n 's/^- real cudart: //p' "$o/RESULTS.md" 2>/dev/null)"
    line="$(grep '^| multi_gpu |' "$o/RESULTS.md" 2>/dev/null)"
    if [ -z "$line" ]; then
        row "$name" - - "FAIL" "run.sh gave no result (exit $rc)"
        detail "$name: run.sh" "$o.err"
        return
    fi
    IFS='|' read -r _ _ ne be so se res <<<"$line"
    ne="$(trim "$ne")" be="$(trim "$be")" so="$(trim "$so")" se="$(trim "$se")" res="$(trim "$res")"
    mkdir -p "$o/x"
    tar -xzf "$o/apps.tar.gz" -C "$o/x" 2>/dev/null
    native_out="$o/x/multi_gpu.native.stdout"
    [ -n "$gpu_count" ] || gpu_count="$(sed -n 's/^device count: //p' "$native_out" 2>/dev/null)"
    local facts
    facts="$(grep -E '^(device count|cudaDeviceCanAccessPeer|peer checks skipped|kernels execute)' "$native_out" 2>/dev/null | paste -sd ';' | sed 's/;/; /g')"
    if [ "$rc" = 0 ] && [ "$res" = PASS ]; then
        row "$name" "$ne" "$be" PASS "stdout $so, stderr $se; native: $facts"
    else
        row "$name" "$ne" "$be" "FAIL" "$res; native: $facts"
        detail "$name" "$o/diffs.txt" "$o/x/multi_gpu.native.stderr" "$o/x/multi_gpu.bridged.stderr" "$o.err"
    fi
}
app_part shared "$apps_dir"
app_part static "$apps_static"

if [ -z "$real_cudart" ]; then
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
        [ -e "$d/libcudart.so.13" ] && { real_cudart="$d"; break; }
    done
fi
if [ -z "$gpu_count" ] && command -v nvidia-smi >/dev/null 2>&1; then
    gpu_count="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')"
fi
log "real cudart: ${real_cudart:-not found}; GPUs: ${gpu_count:-unknown}"

# ---------------------------------------------------------------- host daemon
# The bridged process sees the machine as a VM guest does (see hide-gpu.sh).
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"
host_pid=""
host_restarts=0
start_host() {
    rm -f "$sock"
    echo "=== run-multi-gpu.sh: $host_bin serve --unix $sock --executor cuda ($(date -u +%T)) ===" >>"$host_log"
    "$host_bin" serve --unix "$sock" --executor cuda --state-dir "$raw/state" >>"$host_log" 2>&1 &
    host_pid=$!
    for _ in $(seq 1 200); do
        [ -S "$sock" ] && return 0
        kill -0 "$host_pid" 2>/dev/null || { log "the host daemon exited during start-up"; return 1; }
        sleep 0.1
    done
    log "host socket $sock did not appear within 20 s"
    return 1
}
stop_host() {
    if [ -n "$host_pid" ] && kill -0 "$host_pid" 2>/dev/null; then
        kill "$host_pid" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$host_pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$host_pid" 2>/dev/null
        wait "$host_pid" 2>/dev/null
    fi
    host_pid=""
    rm -f "$sock"
}
# ensure_host: a live daemon before each bridged run, restarted (and counted) if it died.
ensure_host() {
    if [ -z "$host_pid" ]; then
        start_host
    elif ! kill -0 "$host_pid" 2>/dev/null; then
        host_restarts=$((host_restarts + 1))
        log "the host daemon is gone, restarting it"
        start_host
    fi
}
trap stop_host EXIT
trap 'exit 130' INT TERM
: >"$host_log"
conns() { grep -c 'guest connected' "$host_log" 2>/dev/null || true; }

# ---------------------------------------------------------------- 2. peer copies
peer_table=""
bench_part() {
    local name="peer copies (bench --peer)" t nrc brc before after
    if [ ! -x "$bench_bin" ]; then row "$name" - - "SKIP" "no $bench_bin"; return; fi
    t=$(limit 120)
    if [ "$t" = 0 ]; then row "$name" - - "SKIP (time budget)" ""; return; fi
    log "bench --peer natively and bridged ($t s each)"
    env -u VMCUDA_SERVER LD_LIBRARY_PATH="$real_cudart${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        timeout -k 10 "$t" "$bench_bin" --peer >"$raw/peer_native.txt" 2>"$raw/peer_native.err" </dev/null
    nrc=$?
    t=$(limit 120)
    if [ "$t" = 0 ]; then row "$name" "$(exit_label "$nrc")" - "SKIP (time budget)" ""; return; fi
    ensure_host
    before=$(conns)
    ${isolate[@]+"${isolate[@]}"} env LD_LIBRARY_PATH="$guest_lib:$real_cudart${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        VMCUDA_SERVER="unix:$sock" timeout -k 10 "$t" "$bench_bin" --peer \
        >"$raw/peer_bridged.txt" 2>"$raw/peer_bridged.err" </dev/null
    brc=$?
    after=$(conns)
    # One line for each measurement of the native run: name, native, bridged, ratio.
    peer_table="$(awk '$1 == "RESULT" { if (side == "n") { n[$2] = $3; order[++k] = $2 } else b[$2] = $3 }
        END { for (i = 1; i <= k; i++) { m = order[i]
                  if (m in b) printf "| %s | %.2f | %.2f | %.2fx |\n", m, n[m], b[m], (n[m] > 0 ? b[m] / n[m] : 0)
                  else printf "| %s | %.2f | - | - |\n", m, n[m] } }' \
        side=n "$raw/peer_native.txt" side=b "$raw/peer_bridged.txt" 2>/dev/null)"
    local missing notes worst
    missing="$(awk '$1 == "RESULT" { if (side == "n") n[$2] = 1; else b[$2] = 1 }
        END { for (m in n) if (!(m in b)) c++; print c + 0 }' \
        side=n "$raw/peer_native.txt" side=b "$raw/peer_bridged.txt" 2>/dev/null)"
    notes="$(sed -n 's/^NOTE //p' "$raw/peer_native.txt" | paste -sd ';' | sed 's/;/; /g')"
    worst="$(printf '%s\n' "$peer_table" | awk -F'|' 'NF > 4 && $5 ~ /x/ { r = $5 + 0; if (w == "" || r < w) { w = r; at = $2 } }
        END { gsub(/ /, "", at); if (w != "") printf "lowest bridged/native %.2fx (%s)", w, at }')"
    if [ "$nrc" = 0 ] && [ "$brc" = 0 ] && ! grep -q '^RESULT' "$raw/peer_native.txt"; then
        row "$name" 0 0 SKIP "$notes"
    elif [ "$nrc" = 0 ] && [ "$brc" = 0 ] && [ "${missing:-1}" = 0 ] && [ "$after" -gt "$before" ]; then
        row "$name" 0 0 PASS "${notes}${worst:+; $worst}"
    else
        local why=()
        [ "$nrc" = 0 ] || why+=("native failed")
        [ "$brc" = 0 ] || why+=("bridged failed")
        [ "${missing:-1}" = 0 ] || why+=("bridged lacks measurements")
        [ "$after" -gt "$before" ] || why+=("no guest connection in the host log")
        row "$name" "$(exit_label "$nrc")" "$(exit_label "$brc")" "FAIL ($(joined ', ' "${why[@]}"))" "$notes"
        detail "$name" "$raw/peer_native.err" "$raw/peer_bridged.err"
    fi
}
bench_part

# ---------------------------------------------------------------- 3. DDP
preload=""
for l in libcuda.so.1; do
    [ -e "$guest_lib/$l" ] && preload="${preload:+$preload:}$guest_lib/$l"
done
torch_version=""
# ddp_run VARIANT MODE T: one run of ddp_check.py; its files are $raw/ddp-VARIANT-MODE.*
ddp_run() {
    local v="$1" mode="$2" t="$3" backend=nccl o="$raw/ddp-$1-$2"
    local extra=(NCCL_DEBUG=WARN)
    case "$v" in
        gloo) backend=gloo ;;
        nccl-net) extra+=(NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo) ;;
    esac
    if [ "$mode" = native ]; then
        env -u VMCUDA_SERVER -u LD_PRELOAD "${extra[@]}" timeout -k 10 "$t" \
            "$py" tests/gpu/ddp_check.py --backend "$backend" --steps "$steps" --json "$o.json" \
            >"$o.stdout" 2>"$o.stderr" </dev/null
    else
        # Through vmcuda-run, as a guest runs it: its libraries and its NCCL settings.
        ${isolate[@]+"${isolate[@]}"} env VMCUDA_LIB_DIR="$guest_lib" \
            VMCUDA_SERVER="unix:$sock" "${extra[@]}" timeout -k 10 "$t" \
            guest-lib/vmcuda-run "$py" tests/gpu/ddp_check.py --backend "$backend" --steps "$steps" --json "$o.json" \
            >"$o.stdout" 2>"$o.stderr" </dev/null
    fi
    echo $? >"$o.rc"
}
ddp_part() {
    local v="$1" name="DDP, $1 backend" t nrc brc before after summary bypass
    case "$v" in
        nccl|gloo|nccl-net) ;;
        *) row "$name" - - "FAIL" "unknown variant (nccl, gloo or nccl-net)"; return ;;
    esac
    if [ -n "$gpu_count" ] && [ "$gpu_count" -lt 2 ] 2>/dev/null; then
        row "$name" - - "SKIP" "$gpu_count GPU: DDP needs 2"
        return
    fi
    t=$(limit 150)
    if [ "$t" = 0 ]; then row "$name" - - "SKIP (time budget)" ""; return; fi
    log "DDP, $v: native ($t s at most)"
    ddp_run "$v" native "$t"
    nrc=$(cat "$raw/ddp-$v-native.rc")
    t=$(limit 150)
    if [ "$t" = 0 ]; then row "$name" "$(exit_label "$nrc")" - "SKIP (time budget)" ""; return; fi
    log "DDP, $v: bridged ($t s at most)"
    ensure_host
    before=$(conns)
    ddp_run "$v" bridged "$t"
    after=$(conns)
    brc=$(cat "$raw/ddp-$v-bridged.rc")
    # line 1: losses and step times; line 2: what the bridged ranks reached around the
    # bridge (another libcuda, /dev/nvidia* files); line 3: torch's version.
    summary="$(python3 - "$raw/ddp-$v-native.json" "$raw/ddp-$v-bridged.json" "$guest_lib" <<'EOF'
import json, sys
def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}
n, b, guest = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
parts = []
ln, lb = n.get("final_losses"), b.get("final_losses")
if ln:
    parts.append("final losses native " + ", ".join(f"{x:.6f}" for x in ln))
if lb:
    parts.append("bridged " + ", ".join(f"{x:.6f}" for x in lb))
if ln and lb:
    rel = max(abs(x - y) / max(abs(x), 1e-30) for x, y in zip(ln, lb))
    parts.append("identical" if ln == lb else f"max relative difference {rel:.1e}")
sn, sb = n.get("step_s_median"), b.get("step_s_median")
if sn:
    parts.append(f"median step native {sn * 1e3:.2f} ms")
if sb:
    parts.append(f"bridged {sb * 1e3:.2f} ms")
if sn and sb:
    parts.append(f"ratio **{sb / sn:.2f}x**")
for mode, r in (("native", n), ("bridged", b)):
    if r.get("wall_s"):
        parts.append(f"{mode} wall {r['wall_s']:.0f} s")
print("; ".join(parts) or "no result")
around = set()
for r in b.get("ranks", []):
    around.update(l for l in r.get("driver_libraries", []) if not l.startswith(guest))
    around.update(r.get("nvidia_device_fds", []))
print(" ".join(sorted(around)))
print(n.get("torch") or b.get("torch") or "")
EOF
)"
    bypass="$(sed -n 2p <<<"$summary")"
    [ -n "$torch_version" ] || torch_version="$(sed -n 3p <<<"$summary")"
    summary="$(sed -n 1p <<<"$summary")"
    local same=no why=()
    cmp -s "$raw/ddp-$v-native.stdout" "$raw/ddp-$v-bridged.stdout" && same=yes
    [ "$nrc" = 0 ] || why+=("native failed")
    [ "$brc" = 0 ] || why+=("bridged failed")
    [ "$same" = yes ] || why+=("stdout differs")
    [ -z "$bypass" ] || why+=("bridged ranks reached the GPU around the bridge: $bypass")
    [ "$after" -gt "$before" ] || why+=("no guest connection in the host log")
    if [ "${#why[@]}" = 0 ]; then
        row "$name" 0 0 PASS "stdout identical; $summary"
    else
        row "$name" "$(exit_label "$nrc")" "$(exit_label "$brc")" "FAIL ($(joined '; ' "${why[@]}"))" "$summary"
        diff "$raw/ddp-$v-native.stdout" "$raw/ddp-$v-bridged.stdout" >"$raw/ddp-$v.stdout.diff" 2>&1
        detail "$name" "$raw/ddp-$v.stdout.diff" "$raw/ddp-$v-native.stderr" "$raw/ddp-$v-bridged.stderr"
    fi
}
for v in $variants; do ddp_part "$v"; done

stop_host
trap - EXIT

# ---------------------------------------------------------------- report
commit="$(head -n 1 "$commit_file" 2>/dev/null)"
[ -n "$commit" ] || commit="$(git rev-parse --verify -q HEAD 2>/dev/null || echo unknown)"
gpus="unknown"
driver="unknown"
if command -v nvidia-smi >/dev/null 2>&1; then
    gpus="$(nvidia-smi --query-gpu=index,name --format=csv,noheader 2>/dev/null | paste -sd ';' | sed 's/;/; /g')"
    driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
fi
passed=$((parts - failed))
{
    echo "# vmcuda on several GPUs of one host: native vs bridged, same run"
    echo
    echo "- date (UTC): $(date -u '+%Y-%m-%d %H:%M:%S')"
    echo "- commit: $commit"
    echo "- command: \`$cmdline\`"
    echo "- GPUs: ${gpus:-unknown} (device count seen by multi_gpu natively: ${gpu_count:-unknown})"
    echo "- driver: ${driver:-unknown}"
    echo "- real cudart: ${real_cudart:-not found}; torch: ${torch_version:-not run} ($py)"
    echo "- bridged: vmcuda-host (CUDA executor) on $sock; the app through run.sh, bench with vmcuda's libcudart first on LD_LIBRARY_PATH, DDP with the guest libraries preloaded (as run-torch.sh)"
    echo "- GPU hidden from the bridged runs: $isolation"
    echo "- NVLink multicast off in every run: NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1"
    echo "- host daemon restarts: $host_restarts; wall time: $(($(date +%s) - start)) s (deadline $deadline s)"
    echo "- result: $passed/$parts parts pass (or were skipped as not applicable)"
    echo
    echo "| part | native exit | bridged exit | result | detail |"
    echo "| --- | --- | --- | --- | --- |"
    printf '%s\n' "${rows[@]}"
    if [ -n "$peer_table" ]; then
        echo
        echo "## Peer copies: cudaMemcpyPeer, device 0 -> device 1, GB/s"
        echo
        echo "Median of 7 rounds, each enough back-to-back copies to move 256 MiB, then both devices synchronized; \`_no_access\` before cudaDeviceEnablePeerAccess, the rest with peer access on both ways. Ratio = bridged / native."
        echo
        echo "| measurement | native | bridged | ratio |"
        echo "| --- | --- | --- | --- |"
        echo "$peer_table"
    fi
    if [ -s "$details" ]; then
        echo
        echo "## Failures"
        cat "$details"
    fi
} >"$out/RESULTS-MULTI-GPU.md"
tar -C "$raw" -czf "$out/multi-gpu-raw.tar.gz" --exclude=./state . 2>/dev/null || log "could not write multi-gpu-raw.tar.gz"
rm -rf "$raw"
cat "$out/RESULTS-MULTI-GPU.md"
[ "$failed" = 0 ]
