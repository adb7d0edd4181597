#!/usr/bin/env bash
# tests/gpu/run.sh: run every test app natively and through vmcuda on a GPU
# machine, and compare the two runs.
#
# Run from anywhere (it cd's to the repo root) on a machine with an NVIDIA GPU and
# a CUDA 13.0 toolkit. Inputs (all relative to the repo root, overridable):
#   build/bin/vmcuda-host   host daemon            (VMCUDA_HOST_BIN)
#   build/guest/lib         vmcuda's libcuda.so.1  (VMCUDA_GUEST_LIB)
#   build/apps              test apps; built with tests/apps/build.sh if missing
#                                                  (VMCUDA_APPS_DIR)
# Other knobs:
#   VMCUDA_REAL_CUDART_DIR  directory of the real libcudart.so.13 (default: searched)
#   VMCUDA_BRIDGED_RUNTIME  nvidia (the only value; vmcuda's own runtime is retired,
#                           docs/guest-stack.md): the bridged run loads NVIDIA's real
#                           runtime and libraries (the real-cudart dir) over vmcuda's
#                           libcuda.so.1 (first on the path). Apps built with the static
#                           runtime (nvcc's default) carry NVIDIA's runtime inside.
#   VMCUDA_APP_TIMEOUT      seconds per app run (default 120)
#   VMCUDA_CONN_PATTERN     host-log line that marks a guest connection
#                           (default "guest connected"); set VMCUDA_SKIP_CONN_CHECK=1
#                           to skip the check that each bridged run connected
#   VMCUDA_LINE_BUFFERED    1 (default): run apps under `stdbuf -oL -eL` (both runs alike)
#                           so that a run killed by the timeout still shows how far it got
#   positional arguments    app names to run (default: all apps in the apps dir)
#
# Each app runs twice under `timeout`:
#   native:  LD_LIBRARY_PATH=<real cudart dir>
#   bridged: LD_LIBRARY_PATH=build/guest/lib:<real cudart dir> VMCUDA_SERVER=unix:/tmp/vmcuda-gpu.sock,
#            run as root in its own mount namespace where /dev/nvidia* and the host's
#            libcuda.so* / libnvidia-ml.so* are /dev/null: only the bridge reaches the GPU
# An app PASSes when exit codes are equal, stdout is byte-identical, stderr is
# identical once lines mentioning "vmcuda" are removed, and the host log shows a
# new guest connection during the bridged run.
#
# Results go to $OUT if set, else build/gpu-results:
#   RESULTS.md     summary (date, commit, command, GPU, driver, table)
#   host.log       the host daemon's log
#   diffs.txt      stdout/stderr/exit diffs of every app that differs
#   <app>.diff     the same, one file per differing app (only without $OUT)
#   apps/          raw stdout/stderr/exit of both runs per app (only without $OUT);
#                  with $OUT they are bundled as apps.tar.gz, so that only a few
#                  files land in $OUT
# The Markdown table is printed last on stdout; the exit status is non-zero if
# any app differs.
set -u

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo" || exit 2
cmdline="$(printf '%q ' "$0" "$@")"
cmdline="${cmdline% }"
# Record the environment overrides that shaped this run.
for v in OUT VMCUDA_COMMIT_FILE VMCUDA_HOST_BIN VMCUDA_GUEST_LIB VMCUDA_APPS_DIR VMCUDA_REAL_CUDART_DIR VMCUDA_BRIDGED_RUNTIME VMCUDA_APP_TIMEOUT \
         VMCUDA_CONN_PATTERN VMCUDA_SKIP_CONN_CHECK VMCUDA_LINE_BUFFERED; do
    if [ -n "${!v:-}" ]; then cmdline="$v=$(printf '%q' "${!v}") $cmdline"; fi
done

host_bin="${VMCUDA_HOST_BIN:-build/bin/vmcuda-host}"
guest_lib="${VMCUDA_GUEST_LIB:-build/guest/lib}"
apps_dir="${VMCUDA_APPS_DIR:-build/apps}"
app_timeout="${VMCUDA_APP_TIMEOUT:-120}"
conn_pattern="${VMCUDA_CONN_PATTERN:-guest connected}"
skip_conn="${VMCUDA_SKIP_CONN_CHECK:-0}"
wrap=()
if [ "${VMCUDA_LINE_BUFFERED:-1}" = 1 ] && command -v stdbuf >/dev/null 2>&1; then
    wrap=(stdbuf -oL -eL)
fi
sock=/tmp/vmcuda-gpu.sock

if [ -n "${OUT:-}" ]; then
    results="$OUT"
    raw="$(mktemp -d "${TMPDIR:-/tmp}/vmcuda-gpu-raw.XXXXXX")"
    per_app_diffs=0
else
    results="$repo/build/gpu-results"
    raw="$results/apps"
    per_app_diffs=1
    rm -rf "$raw"
fi
mkdir -p "$results" "$raw"
results="$(cd "$results" && pwd)"
host_log="$results/host.log"
diffs="$results/diffs.txt"
: >"$diffs"
rm -f "$results"/*.diff

log() { echo "run.sh: $*" >&2; }
die() { log "error: $*"; exit 2; }

abspath() { (cd "$1" 2>/dev/null && pwd); }

# ---------------------------------------------------------------- inputs
[ -x "$host_bin" ] || die "host binary $host_bin not found (build it first)"
host_bin="$(abspath "$(dirname "$host_bin")")/$(basename "$host_bin")"
[ -e "$guest_lib/libcuda.so.1" ] || die "$guest_lib/libcuda.so.1 not found"
guest_lib="$(abspath "$guest_lib")"

# Real CUDA runtime: an explicit dir, else the toolkit's, else anything ldconfig knows.
find_real_cudart() {
    local c nvcc_dir cands=()
    [ -n "${VMCUDA_REAL_CUDART_DIR:-}" ] && cands+=("$VMCUDA_REAL_CUDART_DIR")
    for c in "${CUDA_HOME:-}" "${CUDA_PATH:-}"; do
        [ -n "$c" ] && cands+=("$c/lib64" "$c/lib" "$c/targets/x86_64-linux/lib")
    done
    if command -v nvcc >/dev/null 2>&1; then
        nvcc_dir="$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")"
        cands+=("$nvcc_dir/lib64" "$nvcc_dir/targets/x86_64-linux/lib" "$nvcc_dir/lib")
    fi
    cands+=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib)
    for c in /usr/local/cuda-13*/lib64 /usr/local/cuda-13*/targets/x86_64-linux/lib; do cands+=("$c"); done
    c="$(ldconfig -p 2>/dev/null | awk '/libcudart\.so\.13 /{print $NF; exit}')"
    [ -n "$c" ] && cands+=("$(dirname "$c")")
    for c in "${cands[@]}"; do
        if [ -e "$c/libcudart.so.13" ]; then
            c="$(abspath "$c")" || continue
            # Never pick our own library.
            [ "$(readlink -f "$c/libcudart.so.13")" = "$(readlink -f "$guest_lib/libcudart.so.13")" ] && continue
            printf '%s\n' "$c"
            return 0
        fi
    done
    return 1
}
real_cudart="$(find_real_cudart)" || die "no real libcudart.so.13 found; set VMCUDA_REAL_CUDART_DIR"
log "real cudart: $real_cudart"
log "guest lib:   $guest_lib"
bridged_runtime="${VMCUDA_BRIDGED_RUNTIME:-nvidia}"
case "$bridged_runtime" in
    # vmcuda's driver first; NVIDIA's runtime and every other library (cuBLAS, cuFFT,
    # ...) from the toolkit, as in a guest that has them installed.
    nvidia) bridged_path="$guest_lib:$real_cudart" ;;
    vmcuda) die "VMCUDA_BRIDGED_RUNTIME=vmcuda: vmcuda's own runtime is retired (docs/guest-stack.md)" ;;
    *) die "VMCUDA_BRIDGED_RUNTIME is nvidia, not $bridged_runtime" ;;
esac

# The bridged run sees this machine as a VM guest does (as run-torch.sh): in its own
# mount namespace the GPU device files and the host's driver libraries are /dev/null.
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"
log "bridged runtime: $bridged_runtime; GPU hidden from the bridged run: $isolation"

# Apps: build them if missing.
if [ ! -d "$apps_dir" ] || [ -z "$(find "$apps_dir" -maxdepth 1 -type f -perm -u+x 2>/dev/null | head -n 1)" ]; then
    log "no apps in $apps_dir, building them"
    if ! command -v nvcc >/dev/null 2>&1; then
        for d in /usr/local/cuda/bin /usr/local/cuda-13*/bin; do
            [ -x "$d/nvcc" ] && { PATH="$d:$PATH"; break; }
        done
    fi
    bash tests/apps/build.sh "$apps_dir" || die "building the apps failed"
fi
apps_dir="$(abspath "$apps_dir")"

apps=()
if [ "$#" -gt 0 ]; then
    for a in "$@"; do
        [ -x "$apps_dir/$a" ] || die "app $a not found in $apps_dir"
        apps+=("$a")
    done
else
    for f in "$apps_dir"/*; do
        [ -f "$f" ] && [ -x "$f" ] && apps+=("$(basename "$f")")
    done
fi
[ "${#apps[@]}" -gt 0 ] || die "no apps to run"

# ---------------------------------------------------------------- host daemon
host_pid=""
host_restarts=0
start_host() {
    rm -f "$sock"
    echo "=== run.sh: starting $host_bin serve --unix $sock --executor cuda ($(date -u +%H:%M:%S)) ===" >>"$host_log"
    "$host_bin" serve --unix "$sock" --executor cuda --state-dir /tmp/vmcuda-gpu-state >>"$host_log" 2>&1 &
    host_pid=$!
    local i
    for i in $(seq 1 200); do
        [ -S "$sock" ] && return 0
        kill -0 "$host_pid" 2>/dev/null || { log "host daemon exited during start-up (see $host_log)"; return 1; }
        sleep 0.1
    done
    log "host socket $sock did not appear within 20 s"
    return 1
}
stop_host() {
    if [ -n "$host_pid" ] && kill -0 "$host_pid" 2>/dev/null; then
        kill "$host_pid" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$host_pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$host_pid" 2>/dev/null && kill -9 "$host_pid" 2>/dev/null
        wait "$host_pid" 2>/dev/null
    fi
    host_pid=""
    rm -f "$sock"
}
trap stop_host EXIT
trap 'exit 130' INT TERM

: >"$host_log"
start_host || die "could not start the host daemon"

conn_count() { grep -c -F -- "$conn_pattern" "$host_log" 2>/dev/null || true; }

# ---------------------------------------------------------------- runs
# run_app MODE APP: writes $raw/APP.MODE.{stdout,stderr,exit}
run_app() {
    local mode="$1" app="$2" rc
    local o="$raw/$app.$mode"
    if [ "$mode" = native ]; then
        env -u VMCUDA_SERVER LD_LIBRARY_PATH="$real_cudart${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
            timeout -k 10 "$app_timeout" ${wrap[@]+"${wrap[@]}"} "$apps_dir/$app" >"$o.stdout" 2>"$o.stderr" </dev/null
        rc=$?
    else
        ${isolate[@]+"${isolate[@]}"} env LD_LIBRARY_PATH="$bridged_path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" VMCUDA_SERVER="unix:$sock" \
            timeout -k 10 "$app_timeout" ${wrap[@]+"${wrap[@]}"} "$apps_dir/$app" >"$o.stdout" 2>"$o.stderr" </dev/null
        rc=$?
    fi
    echo "$rc" >"$o.exit"
    return 0
}

exit_label() {
    case "$1" in
        124|137) echo "$1 (timeout)" ;;
        *) if [ "$1" -gt 128 ] 2>/dev/null; then echo "$1 (signal $(( $1 - 128 )))"; else echo "$1"; fi ;;
    esac
}

# Apps whose bridged run differs from the native one by design. Instead of the
# comparison: the native run must pass, and the bridged run's stderr must hold the
# given text, its stdout the given line (its own CUDA error handling).
declare -A expected_bridged_stderr=()
declare -A expected_bridged_stdout=()

rows=()
failed=()
native_nonzero=()
for app in "${apps[@]}"; do
    log "== $app"
    if ! kill -0 "$host_pid" 2>/dev/null; then
        log "host daemon is gone, restarting it"
        host_restarts=$((host_restarts + 1))
        start_host || log "host restart failed"
    fi
    run_app native "$app"
    before="$(conn_count)"
    run_app bridged "$app"
    after="$(conn_count)"

    n_rc="$(cat "$raw/$app.native.exit")"
    b_rc="$(cat "$raw/$app.bridged.exit")"
    reasons=()
    err_res=""

    if [ -n "${expected_bridged_stderr[$app]:-}" ]; then
        # Expected to differ (see expected_bridged_stderr above).
        out_res="expected"
        err_res="expected"
        [ "$n_rc" = 0 ] || reasons+=("native run failed")
        grep -qF -- "${expected_bridged_stderr[$app]}" "$raw/$app.bridged.stderr" ||
            reasons+=("bridged stderr lacks the expected message")
        grep -qxF -- "${expected_bridged_stdout[$app]}" "$raw/$app.bridged.stdout" ||
            reasons+=("bridged stdout lacks the expected line")
    elif cmp -s "$raw/$app.native.stdout" "$raw/$app.bridged.stdout"; then
        out_res=same
    else
        out_res=DIFF
        reasons+=("stdout")
    fi
    grep -vi vmcuda "$raw/$app.native.stderr" >"$raw/$app.native.stderr.filtered"
    grep -vi vmcuda "$raw/$app.bridged.stderr" >"$raw/$app.bridged.stderr.filtered"
    if [ "$err_res" = expected ]; then
        :
    elif cmp -s "$raw/$app.native.stderr.filtered" "$raw/$app.bridged.stderr.filtered"; then
        err_res=same
    else
        err_res=DIFF
        reasons+=("stderr")
    fi
    [ "$n_rc" = "$b_rc" ] || [ "$err_res" = expected ] || reasons+=("exit code")
    if [ "$skip_conn" != 1 ] && [ "${after:-0}" -le "${before:-0}" ]; then
        reasons+=("no guest connection in host log")
    fi
    [ "$n_rc" = 0 ] || native_nonzero+=("$app")

    if [ "${#reasons[@]}" -eq 0 ]; then
        result=PASS
    else
        result="FAIL ($(IFS=,; echo "${reasons[*]}" | sed 's/,/, /g'))"
        failed+=("$app")
        {
            echo "=================== $app: ${reasons[*]}"
            echo "--- exit: native $n_rc, bridged $b_rc"
            if [ "$out_res" = DIFF ]; then
                echo "--- stdout diff (native -> bridged)"
                diff -u --label "$app.native.stdout" --label "$app.bridged.stdout" \
                    "$raw/$app.native.stdout" "$raw/$app.bridged.stdout" | head -n 400
            fi
            if [ "$err_res" = DIFF ]; then
                echo "--- stderr diff, vmcuda lines removed (native -> bridged)"
                diff -u --label "$app.native.stderr" --label "$app.bridged.stderr" \
                    "$raw/$app.native.stderr.filtered" "$raw/$app.bridged.stderr.filtered" | head -n 200
            fi
            if grep -qi vmcuda "$raw/$app.bridged.stderr"; then
                echo "--- vmcuda lines in bridged stderr"
                grep -i vmcuda "$raw/$app.bridged.stderr" | head -n 50
            fi
            echo
        } >"$raw/$app.diff"
        cat "$raw/$app.diff" >>"$diffs"
        [ "$per_app_diffs" = 1 ] && cp "$raw/$app.diff" "$results/$app.diff"
    fi
    log "   native=$n_rc bridged=$b_rc stdout=$out_res stderr=$err_res -> $result"
    rows+=("| $app | $(exit_label "$n_rc") | $(exit_label "$b_rc") | $out_res | $err_res | $result |")
done

stop_host
trap - EXIT

# ---------------------------------------------------------------- report
# The commit the binaries were built from (their COMMIT file) wins: the checkout this
# runs in may be a copy whose HEAD is not the build's.
commit_file="${VMCUDA_COMMIT_FILE:-build/COMMIT}"
commit=""
if [ -f "$commit_file" ]; then commit="$(head -n 1 "$commit_file")"; fi
if [ -z "$commit" ]; then
    commit="$(git rev-parse --verify -q HEAD 2>/dev/null || true)"
    case "$commit" in
        *[!0-9a-f]*|"") commit="" ;;
    esac
fi
[ -n "$commit" ] || commit=unknown
gpu="unknown"
driver="unknown"
if command -v nvidia-smi >/dev/null 2>&1; then
    q="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
    if [ -n "$q" ]; then
        gpu="$(echo "${q%,*}" | sed 's/^ *//;s/ *$//')"
        driver="$(echo "${q##*,}" | sed 's/^ *//;s/ *$//')"
    fi
fi
pass=$(( ${#apps[@]} - ${#failed[@]} ))

table="| app | native exit | bridged exit | stdout | stderr | result |
| --- | --- | --- | --- | --- | --- |"
for r in "${rows[@]}"; do table="$table
$r"; done

{
    echo "# vmcuda GPU comparison: native vs bridged"
    echo
    echo "- date (UTC): $(date -u '+%Y-%m-%d %H:%M:%S')"
    echo "- commit: $commit"
    echo "- command: \`$cmdline\`"
    echo "- GPU: $gpu"
    echo "- driver: $driver"
    echo "- real cudart: $real_cudart"
    echo "- apps: $apps_dir"
    echo "- bridged runtime: $bridged_runtime (LD_LIBRARY_PATH=$bridged_path)"
    echo "- GPU hidden from the bridged run: $isolation"
    echo "- host daemon restarts: $host_restarts"
    echo "- result: $pass/${#apps[@]} apps pass"
    if [ "${#native_nonzero[@]}" -gt 0 ]; then
        echo "- note: native run exited non-zero for: ${native_nonzero[*]}"
    fi
    echo
    echo "$table"
    if [ "${#failed[@]}" -gt 0 ]; then
        echo
        echo "Differences: see diffs.txt."
    fi
} >"$results/RESULTS.md"

if [ "$per_app_diffs" = 0 ]; then
    tar -C "$raw" -czf "$results/apps.tar.gz" . 2>/dev/null || log "could not write apps.tar.gz"
    rm -rf "$raw"
fi
[ -s "$diffs" ] || rm -f "$diffs"

log "results in $results"
echo
echo "GPU: $gpu, driver $driver, commit $commit: $pass/${#apps[@]} apps pass"
echo
echo "$table"
[ "${#failed[@]}" -eq 0 ]
