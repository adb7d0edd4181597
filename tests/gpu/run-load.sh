#!/usr/bin/env bash
# tests/gpu/run-load.sh: the load and fault test on a GPU machine, with the CUDA
# executor. The same scenario as tests/tests/load.rs (one driver for both:
# tests/src/load.rs, built as the `load-driver` binary): 16 self-checking guests at
# once (tests/load/load_guest.cu) for a bounded time, kernels verified on the GPU
# (--verify-kernels), some guests SIGKILLed mid-copy or mid-kernel, some crashing
# themselves, raw clients dropping half-sent frames; guests are replaced as they end.
# The driver checks every surviving guest's results and that the daemon returns to its
# baseline (no workers left, same descriptors and threads, resident memory). This
# script adds the GPU-memory lifecycle check: device memory in use (nvidia-smi) before,
# during (must be higher) and after the load, once the workers are gone (must be back
# at the baseline within a tolerance).
#
# Inputs (relative to the repo root, overridable):
#   build/bin/vmcuda-host      host daemon                        (VMCUDA_HOST_BIN)
#   build/guest/lib            vmcuda's libcuda.so.1              (VMCUDA_GUEST_LIB)
#   build/load/load_guest      the load guest; built with         (VMCUDA_LOAD_GUEST)
#                              tests/apps/build.sh if missing
#   build/bin/load-driver      cargo build --release -p vmcuda-tests --bin load-driver
#                                                                 (VMCUDA_LOAD_DRIVER)
#   build/COMMIT               commit of the artifacts, when not a git checkout
#                                                                 (VMCUDA_COMMIT_FILE)
# Knobs:
#   VMCUDA_LOAD_SECONDS (30)   how long new guests are started
#   VMCUDA_LOAD_GUESTS (16)    guests at once
#   VMCUDA_LOAD_SEED           driver seed (default: the clock; printed, replayable)
#   VMCUDA_LOAD_KILL_RATE (0.3), VMCUDA_LOAD_CRASH_RATE (0.1), VMCUDA_LOAD_RAW_PER_SECOND (4)
#   VMCUDA_LOAD_MAX_MIB (48)   device memory each guest holds at most
#   VMCUDA_GPU_INDEX (0)       the GPU nvidia-smi reports on (the one the workers use)
#   VMCUDA_GPU_MEM_TOLERANCE_MIB (16)  allowed difference from the baseline afterwards
#   VMCUDA_GPU_SETTLE_SECONDS (20)     how long memory may take to come back
#   VMCUDA_LOAD_EXECUTOR (cuda)  host-memory for a dry run without a GPU (the GPU
#                              memory check is then skipped and reported as such)
#   VMCUDA_LOAD_HOSTILE (off)  on: one more guest attacks the host throughout
#                              (tests/src/hostile.rs: silent connections to a TCP
#                              listener of the daemon from 127.0.0.2, unknown ops and
#                              repeated hellos, graphs of many nodes); compare: the
#                              whole run twice with the same seed, without and with it
#                              (results in $OUT/without and $OUT/with), then both
#                              throughputs of the 16 others and their ratio, which
#                              issue 34 wants within 10% (RESULTS-load-hostile.md)
#
# Results go to $OUT if set, else build/gpu-load-results:
#   RESULTS-load.md   a fragment for tests/gpu/results/RESULTS.md (date, commit, command, GPU,
#                     driver, table)
#   driver.log        the driver's output (per-guest lines, failures, summary)
#   host.log          the daemon's log
#   gpu-mem.csv       device memory samples (seconds since start, MiB used)
# The table is printed last; the exit status is non-zero if any check failed.
set -u

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
cmdline="$(printf '%q ' "$0" "$@")"
cmdline="${cmdline% }"
for v in OUT VMCUDA_COMMIT_FILE VMCUDA_HOST_BIN VMCUDA_GUEST_LIB VMCUDA_LOAD_GUEST VMCUDA_LOAD_DRIVER \
         VMCUDA_LOAD_SECONDS VMCUDA_LOAD_GUESTS VMCUDA_LOAD_SEED VMCUDA_LOAD_KILL_RATE VMCUDA_LOAD_CRASH_RATE \
         VMCUDA_LOAD_RAW_PER_SECOND VMCUDA_LOAD_MAX_MIB VMCUDA_GPU_INDEX VMCUDA_GPU_MEM_TOLERANCE_MIB \
         VMCUDA_GPU_SETTLE_SECONDS VMCUDA_LOAD_EXECUTOR VMCUDA_LOAD_HOSTILE; do
    if [ -n "${!v:-}" ]; then cmdline="$v=$(printf '%q' "${!v}") $cmdline"; fi
done

host_bin="${VMCUDA_HOST_BIN:-build/bin/vmcuda-host}"
guest_lib="${VMCUDA_GUEST_LIB:-build/guest/lib}"
load_guest="${VMCUDA_LOAD_GUEST:-build/load/load_guest}"
driver="${VMCUDA_LOAD_DRIVER:-build/bin/load-driver}"
seconds="${VMCUDA_LOAD_SECONDS:-30}"
guests="${VMCUDA_LOAD_GUESTS:-16}"
seed="${VMCUDA_LOAD_SEED:-$(date +%s)}"
kill_rate="${VMCUDA_LOAD_KILL_RATE:-0.3}"
crash_rate="${VMCUDA_LOAD_CRASH_RATE:-0.1}"
raw_rate="${VMCUDA_LOAD_RAW_PER_SECOND:-4}"
max_mib="${VMCUDA_LOAD_MAX_MIB:-48}"
gpu_index="${VMCUDA_GPU_INDEX:-0}"
tolerance="${VMCUDA_GPU_MEM_TOLERANCE_MIB:-16}"
settle="${VMCUDA_GPU_SETTLE_SECONDS:-20}"
executor="${VMCUDA_LOAD_EXECUTOR:-cuda}"
hostile="${VMCUDA_LOAD_HOSTILE:-off}"
case "$hostile" in off|on|compare) ;; *) echo "run-load.sh: VMCUDA_LOAD_HOSTILE is off, on or compare" >&2; exit 2 ;; esac

results="${OUT:-$repo/build/gpu-load-results}"
mkdir -p "$results"
results="$(cd "$results" && pwd)"
host_log="$results/host.log"
driver_log="$results/driver.log"
mem_csv="$results/gpu-mem.csv"

if [ "$hostile" = compare ]; then
    # The same run twice, one seed: the other guests' choices are the same.
    VMCUDA_LOAD_SEED="$seed" VMCUDA_LOAD_HOSTILE=off OUT="$results/without" bash "$repo/tests/gpu/run-load.sh" "$@"
    rc_without=$?
    VMCUDA_LOAD_SEED="$seed" VMCUDA_LOAD_HOSTILE=on OUT="$results/with" bash "$repo/tests/gpu/run-load.sh" "$@"
    rc_with=$?
    get() { grep '^load seed=' "$results/$1/driver.log" 2>/dev/null | tail -n 1 | tr ' ' '\n' | sed -n "s/^$2=//p"; }
    rate() { awk -v b="$(get "$1" bytes)" -v s="$(get "$1" seconds)" 'BEGIN { if (s > 0) printf "%.1f", b / s / 1048576; else print "n/a" }'; }
    without="$(rate without)"
    with="$(rate with)"
    ratio="$(awk -v a="$with" -v b="$without" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "n/a" }')"
    verdict="$(awk -v r="$ratio" 'BEGIN { print (r != "n/a" && r >= 0.9) ? "within 10%" : "NOT within 10%" }')"
    table="| run | result | guests ok | ops | MiB/s moved by the 16 guests | hostile: connections / bad requests / graph nodes |
| --- | --- | --- | --- | --- | --- |
| without the hostile guest | $([ "$rc_without" = 0 ] && echo PASS || echo FAIL) | $(get without ok) | $(get without ops) | $without | - |
| with the hostile guest | $([ "$rc_with" = 0 ] && echo PASS || echo FAIL) | $(get with ok) | $(get with ops) | $with | $(get with hostile_connections) / $(get with hostile_bad_requests) / $(get with hostile_graph_nodes) |
| ratio with / without | | | | $ratio ($verdict) | |"
    {
        echo "## Load test with and without a hostile guest (VMCUDA_LOAD_HOSTILE=compare)"
        echo
        echo "- date (UTC): $(date -u '+%Y-%m-%d %H:%M:%S')"
        echo "- command: \`$cmdline\`"
        echo "- seed: $seed"
        echo
        echo "$table"
    } >"$results/RESULTS-load-hostile.md"
    echo
    echo "$table"
    [ "$rc_without" = 0 ] && [ "$rc_with" = 0 ] && [ "$verdict" = "within 10%" ]
    exit
fi

log() { echo "run-load.sh: $*" >&2; }
die() { log "error: $*"; exit 2; }
abspath() { (cd "$(dirname "$1")" 2>/dev/null && echo "$(pwd)/$(basename "$1")"); }

# ---------------------------------------------------------------- inputs
[ -x "$host_bin" ] || die "host binary $host_bin not found (build it first)"
host_bin="$(abspath "$host_bin")"
[ -e "$guest_lib/libcuda.so.1" ] || die "$guest_lib/libcuda.so.1 not found"
guest_lib="$(cd "$guest_lib" && pwd)"
if [ ! -x "$driver" ]; then
    command -v cargo >/dev/null 2>&1 || die "load driver $driver not found and no cargo to build it"
    log "building the load driver"
    cargo build --release -q -p vmcuda-tests --bin load-driver || die "building load-driver failed"
    driver="$repo/target/release/load-driver"
fi
driver="$(abspath "$driver")"
if [ ! -x "$load_guest" ]; then
    log "no load guest at $load_guest, building it"
    if ! command -v nvcc >/dev/null 2>&1; then
        for d in /usr/local/cuda/bin /usr/local/cuda-13*/bin; do
            [ -x "$d/nvcc" ] && { PATH="$d:$PATH"; break; }
        done
    fi
    bash tests/apps/build.sh "$(dirname "$load_guest")" tests/load || die "building the load guest failed"
fi
load_guest="$(abspath "$load_guest")"

gpu_check=1
if [ "$executor" != cuda ]; then
    gpu_check=0
    log "executor $executor: a dry run, the GPU memory check is skipped"
elif ! command -v nvidia-smi >/dev/null 2>&1; then
    die "nvidia-smi not found (needed for the GPU memory check)"
fi
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
gpu_mem_used() {
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "$gpu_index" 2>/dev/null |
        head -n 1 | tr -dc '0-9'
}

# ---------------------------------------------------------------- host daemon
sockdir="$(mktemp -d "${TMPDIR:-/tmp}/vmcuda-load.XXXXXX")"
sock="$sockdir/host.sock"
host_pid=""
sampler_pid=""
cleanup() {
    [ -n "$sampler_pid" ] && kill "$sampler_pid" 2>/dev/null
    if [ -n "$host_pid" ] && kill -0 "$host_pid" 2>/dev/null; then
        kill "$host_pid" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$host_pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$host_pid" 2>/dev/null
        wait "$host_pid" 2>/dev/null
    fi
    rm -rf "$sockdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

: >"$host_log"
host_args=(serve --unix "$sock" --executor "$executor" --state-dir "$sockdir/state")
flood_args=()
if [ "$hostile" = on ]; then
    # A TCP listener for the hostile guest's connection flood: a source of its own. Its
    # admitted connections (log lines, graphs) come as a VM of its own, by its token over
    # TCP, so that what it exhausts is its VM's, not the 16 guests' (programs on the host,
    # VM "local"); the same built-in limits apply to both.
    flood_at="127.0.0.1:$((20000 + RANDOM % 20000))"
    token="hostile-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ')"
    printf '[[vm]]\nname = "hostile"\ntcp = true\ntoken = "%s"\n' "$token" >"$results/host.toml"
    host_args+=(--tcp "$flood_at" --config "$results/host.toml")
    flood_args=(--hostile --flood-tcp "$flood_at" --hostile-vm "tcp:$flood_at" "$token")
fi
"$host_bin" "${host_args[@]}" >>"$host_log" 2>&1 &
host_pid=$!
for _ in $(seq 1 200); do
    [ -S "$sock" ] && break
    kill -0 "$host_pid" 2>/dev/null || die "host daemon exited during start-up (see $host_log)"
    sleep 0.1
done
[ -S "$sock" ] || die "host socket $sock did not appear within 20 s"

# ---------------------------------------------------------------- baseline
mem_before="n/a"
if [ "$gpu_check" = 1 ]; then
    sleep 1
    mem_before="$(gpu_mem_used)"
    [ -n "$mem_before" ] || die "nvidia-smi reports no memory.used for GPU $gpu_index"
    log "GPU $gpu_index memory used before the load: $mem_before MiB"
fi

# ---------------------------------------------------------------- the load
start_ms=$(now_ms)
echo "seconds,mib_used" >"$mem_csv"
if [ "$gpu_check" = 1 ]; then
    (
        while :; do
            m="$(gpu_mem_used)"
            ms=$(( $(now_ms) - start_ms ))
            [ -n "$m" ] && printf '%d.%d,%s\n' $((ms / 1000)) $((ms % 1000 / 100)) "$m" >>"$mem_csv"
            sleep 0.5
        done
    ) &
    sampler_pid=$!
fi
driver_args=(--server "unix:$sock" --guest "$load_guest" --guest-lib "$guest_lib" --daemon-pid "$host_pid"
    --seconds "$seconds" --guests "$guests" --seed "$seed" --kill-rate "$kill_rate"
    --crash-rate "$crash_rate" --raw-per-second "$raw_rate" --max-mib "$max_mib"
    --settle-seconds 30 --verbose ${flood_args[@]+"${flood_args[@]}"})
[ "$executor" = cuda ] && driver_args+=(--verify-kernels)
# The guests run on NVIDIA's runtime over vmcuda's driver (the one guest stack).
cudart_dir="${VMCUDA_REAL_CUDART_DIR:-/usr/local/cuda/lib64}"
[ -e "$cudart_dir/libcudart.so.13" ] && driver_args+=(--cudart-dir "$cudart_dir")
log "load: $driver ${driver_args[*]}"
"$driver" "${driver_args[@]}" >"$driver_log" 2>&1
driver_rc=$?
summary="$(grep '^load seed=' "$driver_log" | tail -n 1)"
field() { printf '%s\n' "$summary" | tr ' ' '\n' | sed -n "s/^$1=//p"; }
log "driver exited $driver_rc: $summary"

# ---------------------------------------------------------------- GPU memory after
mem_peak="n/a"
mem_after="n/a"
back_after="n/a"
gpu_ok=1
gpu_note=""
if [ "$gpu_check" = 1 ]; then
    kill "$sampler_pid" 2>/dev/null
    wait "$sampler_pid" 2>/dev/null
    sampler_pid=""
    mem_peak="$(tail -n +2 "$mem_csv" | cut -d, -f2 | sort -n | tail -n 1)"
    [ -n "$mem_peak" ] || mem_peak=0
    # load-driver has already waited for every worker process to exit; the NVIDIA
    # driver may take a moment longer to release their memory, so poll.
    t0=$(now_ms)
    while :; do
        mem_after="$(gpu_mem_used)"
        waited=$(( $(now_ms) - t0 ))
        if [ -n "$mem_after" ] && [ "$mem_after" -le $((mem_before + tolerance)) ]; then
            back_after="$((waited / 1000)).$((waited % 1000 / 100)) s"
            break
        fi
        if [ "$waited" -gt $((settle * 1000)) ]; then
            back_after="not within ${settle} s"
            break
        fi
        sleep 0.5
    done
    if [ "$mem_peak" -le "$mem_before" ]; then
        gpu_ok=0
        gpu_note="device memory never rose above the baseline during the load (${mem_peak} MiB)"
    fi
    if [ -z "$mem_after" ] || [ "$mem_after" -gt $((mem_before + tolerance)) ]; then
        gpu_ok=0
        gpu_note="${gpu_note:+$gpu_note; }device memory did not return to the baseline: ${mem_before} -> ${mem_after} MiB (tolerance ${tolerance} MiB)"
    fi
fi

# Only the daemon's own socket is left in its directory (beside the state directory
# this script gave it).
left=""
for f in "$sockdir"/* "$sockdir"/.[!.]*; do
    [ -e "$f" ] && [ "$f" != "$sock" ] && [ "$f" != "$sockdir/state" ] && left="$left$(basename "$f") "
done
files_ok=1
[ -z "$left" ] || files_ok=0
daemon_ok=1
kill -0 "$host_pid" 2>/dev/null || daemon_ok=0
cleanup
trap - EXIT

# ---------------------------------------------------------------- report
# The artifacts' own commit first: a copied checkout's git HEAD may be stale.
commit=""
if [ -n "${VMCUDA_COMMIT_FILE:-}" ] && [ -f "$VMCUDA_COMMIT_FILE" ]; then
  commit="$(head -n 1 "$VMCUDA_COMMIT_FILE" | cut -d' ' -f1 | tr -d '[:space:]')"
fi
[ -n "$commit" ] || commit="$(git rev-parse --verify -q HEAD 2>/dev/null || true)"
case "$commit" in *[!0-9a-f]*|"") commit="" ;; esac
commit_file="build/COMMIT"
if [ -z "$commit" ] && [ -f "$commit_file" ]; then commit="$(head -n 1 "$commit_file" | tr -d '[:space:]')"; fi
[ -n "$commit" ] || commit=unknown
gpu="none"
nvdriver="n/a"
if command -v nvidia-smi >/dev/null 2>&1; then
    q="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader -i "$gpu_index" 2>/dev/null | head -n 1)"
    if [ -n "$q" ]; then
        gpu="$(echo "${q%,*}" | sed 's/^ *//;s/ *$//')"
        nvdriver="$(echo "${q##*,}" | sed 's/^ *//;s/ *$//')"
    fi
fi

failures=()
[ "$driver_rc" = 0 ] || failures+=("driver: $(grep -c '^FAILURE:' "$driver_log") failed checks (exit $driver_rc), see driver.log")
[ -n "$summary" ] || failures+=("driver printed no summary")
[ "$gpu_ok" = 1 ] || failures+=("$gpu_note")
[ "$files_ok" = 1 ] || failures+=("left in the daemon's directory: $left")
[ "$daemon_ok" = 1 ] || failures+=("the daemon was not running at the end")
if [ "${#failures[@]}" -eq 0 ]; then result=PASS; else result=FAIL; fi

bytes="$(field bytes)"
gib="n/a"
[ -n "$bytes" ] && gib="$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1073741824 }')"
table="| check | value |
| --- | --- |
| executor | $executor$([ "$executor" = cuda ] && echo ", kernels verified") |
| hostile guest: connections / bad requests / graph nodes | $([ "$hostile" = on ] && echo "$(field hostile_connections) / $(field hostile_bad_requests) / $(field hostile_graph_nodes)" || echo none) |
| time (s) | $(field seconds) |
| guests run / at once (max workers seen) | $(field guests) / $guests ($(field max_workers)) |
| ran to the end, all bytes right | $(field ok) |
| SIGKILLed mid-work / crashed themselves | $(field killed) / $(field crashed) |
| raw clients dropped mid-frame | $(field raw_clients) |
| ops / bytes moved by surviving guests | $(field ops) / $gib GiB |
| worker processes left | $(field workers_left) |
| daemon fds before -> after | $(field fds_before) -> $(field fds_after) |
| daemon threads before -> after | $(field threads_before) -> $(field threads_after) |
| daemon RSS KiB before -> after (peak) | $(field rss_kib_before) -> $(field rss_kib_after) ($(field rss_kib_peak)) |
| GPU memory MiB before / peak / after | $mem_before / $mem_peak / $mem_after |
| GPU memory back at baseline after | $back_after |
| result | $result |"

{
    echo "## Load and fault test (tests/gpu/run-load.sh)"
    echo
    echo "- date (UTC): $(date -u '+%Y-%m-%d %H:%M:%S')"
    echo "- commit: $commit"
    echo "- command: \`$cmdline\`"
    echo "- GPU: $gpu (index $gpu_index)"
    echo "- driver: $nvdriver"
    echo "- seed: $seed (replay: VMCUDA_LOAD_SEED=$seed)"
    echo "- result: $result"
    for f in ${failures[@]+"${failures[@]}"}; do echo "- failure: $f"; done
    echo
    echo "$table"
} >"$results/RESULTS-load.md"

log "results in $results"
echo
echo "GPU: $gpu, driver $nvdriver, commit $commit, seed $seed: $result"
for f in ${failures[@]+"${failures[@]}"}; do echo "  failure: $f"; done
grep '^FAILURE:' "$driver_log" | head -n 20
echo
echo "$table"
[ "$result" = PASS ]
