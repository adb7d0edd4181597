#!/usr/bin/env bash
# tests/gpu/samples/run.sh OUTDIR [NAME...]: on a GPU machine, run NVIDIA's public CUDA
# samples built by tests/gpu/samples/build.sh into OUTDIR, natively and through vmcuda,
# and report. The conventions are tests/gpu/run.sh's.
#
# Inputs (relative to the repo root, overridable):
#   build/bin/vmcuda-host   host daemon                                (VMCUDA_HOST_BIN)
#   build/guest/lib         vmcuda's libcuda.so.1 (and libcudart.so.13,
#                           libcublas.so.13, ...)                      (VMCUDA_GUEST_LIB)
#   OUTDIR/list.txt         what each sample needs and how it checks itself (the list
#                           it was built from; else tests/gpu/samples/list.txt)
# Other knobs:
#   VMCUDA_BRIDGED_RUNTIME  vmcuda (default): the bridged run's library path is vmcuda's
#                           guest library directory, then the toolkit's; nvidia: the
#                           toolkit's first (NVIDIA's cuBLAS and the rest), over vmcuda's
#                           libcuda.so.1. The samples carry NVIDIA's static runtime.
#   VMCUDA_SAMPLES_LIB_DIRS colon-separated directories searched first for the
#                           libraries the samples load (libcufft.so.12, libnvrtc.so.13,
#                           ...); then CUDA_HOME/CUDA_PATH, nvcc's toolkit,
#                           /usr/local/cuda*, Python's nvidia/* wheels, ldconfig
#   VMCUDA_SAMPLE_TIMEOUT   seconds per run (default 60; killed 10 s later)
#   VMCUDA_SAMPLES_DEADLINE seconds after which no further sample starts (those left are
#                           reported SKIP; default 0: none), to end inside a caller's limit
#   VMCUDA_CONN_PATTERN     host-log line that marks a guest connection
#                           (default "guest connected"); VMCUDA_SKIP_CONN_CHECK=1 skips
#                           the check that each bridged run connected
#   VMCUDA_COMMIT_FILE      file whose first line is the commit the vmcuda binaries were
#                           built from (carry.sh's COMMIT; default: this checkout's HEAD)
#   OUTDIR                  build.sh's directory, or its OUTDIR.tar.xz (unpacked in /tmp)
#   positional NAMEs        samples to run (default: every sample in OUTDIR/BUILT)
#
# Each sample runs twice under `timeout`, each time in a fresh copy of OUTDIR/<name>
# (the samples find their companion files in the working directory and write there):
#   native:  LD_LIBRARY_PATH=<toolkit lib dirs>, no VMCUDA_* variable set
#   bridged: LD_LIBRARY_PATH=<guest lib>:<toolkit lib dirs> VMCUDA_SERVER=unix:SOCK,
#            as root in its own mount namespace where /dev/nvidia* and the host's
#            libcuda.so* / libnvidia-ml.so* are /dev/null (run.sh's hide_gpu)
# A sample PASSes when both runs exit 0, its self-check (list.txt's check text, or
# its exit status where it has none) passes in both, and the host log shows a new
# guest connection during the bridged run. WAIVED: the sample itself declined the
# device natively (exit 2, EXIT_WAIVED) and bridged alike. SKIP: not built, or a library
# it loads is nowhere to be found. The stdout column says whether both runs printed
# the same once lines with times, rates, bandwidths, FLOP or clock figures are dropped
# and hexadecimal addresses masked; it is reported, not required.
#
# Results go to $OUT if set, else build/gpu-results-samples:
#   RESULTS-SAMPLES.md  date, commits, command, GPU, driver, library path, table
#   host.log            the host daemon's log
#   diffs-samples.txt   for each sample that is not PASS, or whose stdout differs:
#                       exits, the filtered stdout diff, stderr tails
#   samples.tar.gz      raw stdout/stderr/exit of both runs of each sample
# The table is printed last; the exit status is non-zero if any sample FAILs.
set -u

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$repo" || exit 2
cmdline="$(printf '%q ' "$0" "$@")"
cmdline="${cmdline% }"
for v in OUT VMCUDA_COMMIT_FILE VMCUDA_HOST_BIN VMCUDA_GUEST_LIB VMCUDA_BRIDGED_RUNTIME \
         VMCUDA_SAMPLES_LIB_DIRS VMCUDA_SAMPLE_TIMEOUT VMCUDA_SAMPLES_DEADLINE VMCUDA_CONN_PATTERN \
         VMCUDA_SKIP_CONN_CHECK; do
    if [ -n "${!v:-}" ]; then cmdline="$v=$(printf '%q' "${!v}") $cmdline"; fi
done

sock=/tmp/vmcuda-samples.sock
log() { echo "samples/run.sh: $*" >&2; }
die() { log "error: $*"; exit 2; }
abspath() { (cd "$1" 2>/dev/null && pwd); }

# Scratch space, and the host daemon, go when the script does.
host_pid=""
raw="" runs="" unpacked=""
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
cleanup() { stop_host; rm -rf ${raw:+"$raw"} ${runs:+"$runs"} ${unpacked:+"$unpacked"}; }
trap cleanup EXIT
trap 'exit 130' INT TERM

[ "$#" -ge 1 ] || die "usage: run.sh OUTDIR|OUTDIR.tar.xz [NAME...]"
if [ -f "$1" ]; then
    # build.sh's archive of OUTDIR: unpacked here for the run.
    unpacked="$(mktemp -d "${TMPDIR:-/tmp}/vmcuda-samples.XXXXXX")"
    tar -xf "$1" -C "$unpacked" || die "cannot unpack $1"
    samples_dir="$(find "$unpacked" -mindepth 1 -maxdepth 1 -type d | head -n 1)"
    [ -n "$samples_dir" ] || die "$1 holds no directory"
else
    samples_dir="$(abspath "$1")" || die "no directory $1"
fi
shift
host_bin="${VMCUDA_HOST_BIN:-build/bin/vmcuda-host}"
guest_lib="${VMCUDA_GUEST_LIB:-build/guest/lib}"
timeout_s="${VMCUDA_SAMPLE_TIMEOUT:-60}"
deadline="${VMCUDA_SAMPLES_DEADLINE:-0}"
conn_pattern="${VMCUDA_CONN_PATTERN:-guest connected}"
skip_conn="${VMCUDA_SKIP_CONN_CHECK:-0}"
wrap=()
command -v stdbuf >/dev/null 2>&1 && wrap=(stdbuf -oL -eL)

results="${OUT:-$repo/build/gpu-results-samples}"
mkdir -p "$results" || die "cannot create $results"
results="$(abspath "$results")"
raw="$(mktemp -d "${TMPDIR:-/tmp}/vmcuda-samples-raw.XXXXXX")"
runs="$(mktemp -d "${TMPDIR:-/tmp}/vmcuda-samples-runs.XXXXXX")"
host_log="$results/host.log"
diffs="$results/diffs-samples.txt"
: >"$diffs"

# ---------------------------------------------------------------- inputs
[ -x "$host_bin" ] || die "host binary $host_bin not found (build it first)"
host_bin="$(abspath "$(dirname "$host_bin")")/$(basename "$host_bin")"
[ -e "$guest_lib/libcuda.so.1" ] || die "$guest_lib/libcuda.so.1 not found"
guest_lib="$(abspath "$guest_lib")"
list="$samples_dir/list.txt"
[ -f "$list" ] || list="$repo/tests/gpu/samples/list.txt"

trim() { local s="$1"; s="${s#"${s%%[![:space:]]*}"}"; s="${s%"${s##*[![:space:]]}"}"; printf '%s' "$s"; }
declare -A check_of=() args_of=() listed=()
while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in '#'*|'') continue ;; esac
    IFS='|' read -r name _ _ _ _ check args <<<"$line"
    name="$(trim "$name")"
    listed[$name]=1
    check_of[$name]="$(trim "$check")"
    args_of[$name]="$(trim "$args")"
done <"$list"

samples=()
if [ "$#" -gt 0 ]; then
    for n in "$@"; do [ -n "${listed[$n]:-}" ] || die "$n is not in $list"; samples+=("$n"); done
elif [ -f "$samples_dir/BUILT" ]; then
    while IFS= read -r n; do [ -n "$n" ] && samples+=("$n"); done <"$samples_dir/BUILT"
else
    for d in "$samples_dir"/*/; do
        n="$(basename "$d")"
        [ -n "${listed[$n]:-}" ] && samples+=("$n")
    done
fi
[ "${#samples[@]}" -gt 0 ] || die "no samples to run in $samples_dir"

# Directories that may hold the toolkit's libraries, most specific first.
lib_candidates() {
    local c nvcc_dir py
    IFS=: read -r -a c <<<"${VMCUDA_SAMPLES_LIB_DIRS:-}"
    printf '%s\n' ${c[@]+"${c[@]}"}
    for c in "${CUDA_HOME:-}" "${CUDA_PATH:-}"; do
        [ -n "$c" ] && printf '%s\n' "$c/lib64" "$c/lib" "$c/targets/x86_64-linux/lib"
    done
    if command -v nvcc >/dev/null 2>&1; then
        nvcc_dir="$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")"
        printf '%s\n' "$nvcc_dir/lib64" "$nvcc_dir/targets/x86_64-linux/lib" "$nvcc_dir/lib"
    fi
    printf '%s\n' /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/nvvm/lib64
    for c in /usr/local/cuda-13*/lib64 /usr/local/cuda-13*/targets/x86_64-linux/lib /usr/local/cuda-13*/nvvm/lib64; do
        printf '%s\n' "$c"
    done
    # The CUDA wheels (nvidia-cufft-cu13 and the like): site-packages/nvidia/*/lib.
    for py in python3 /opt/*/.venv/bin/python3; do
        command -v "$py" >/dev/null 2>&1 || continue
        "$py" -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null |
            while IFS= read -r c; do
                for d in "$c"/nvidia/*/lib; do printf '%s\n' "$d"; done
            done
    done
}
mapfile -t cand_dirs < <(lib_candidates | awk 'NF && !seen[$0]++')

# Every library a sample needs (its DT_NEEDED entries, and theirs) must resolve; the
# driver comes from the machine (native) or vmcuda (bridged). A directory joins the
# path when it holds one that ldconfig does not know; system ones stay off the path,
# so that no directory of the host's libcuda.so.1 comes before vmcuda's.
libpath_dirs=()
declare -A lib_dir=() lib_missing=()
find_lib() {
    local so="$1" d
    [ -n "${lib_dir[$so]:-}" ] && return 0
    [ -n "${lib_missing[$so]:-}" ] && return 1
    for d in "${cand_dirs[@]}"; do
        if [ -e "$d/$so" ]; then
            lib_dir[$so]="$d"
            case " ${libpath_dirs[*]} " in *" $d "*) ;; *) libpath_dirs+=("$d") ;; esac
            return 0
        fi
    done
    # The loader's own: its cache, then its default directories.
    if [ -n "$(ldconfig -p 2>/dev/null | awk -v so="$so" '$1 == so {print; exit}')" ]; then
        lib_dir[$so]=system
        return 0
    fi
    for d in /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu /lib64 /usr/lib64 /lib /usr/lib; do
        if [ -e "$d/$so" ]; then lib_dir[$so]=system; return 0; fi
    done
    lib_missing[$so]=1
    return 1
}
needed() { readelf -d "$1" 2>/dev/null | awk '/\(NEEDED\)/ {gsub(/[][]/, "", $NF); print $NF}'; }
declare -A missing_of=()
for s in "${samples[@]}"; do
    bin="$samples_dir/$s/$s"
    [ -x "$bin" ] || continue
    queue=($(needed "$bin"))
    declare -A seen=()
    while [ "${#queue[@]}" -gt 0 ]; do
        so="${queue[0]}"
        queue=("${queue[@]:1}")
        [ -n "${seen[$so]:-}" ] && continue
        seen[$so]=1
        case "$so" in libcuda.so.1) continue ;; esac
        if find_lib "$so"; then
            [ "${lib_dir[$so]}" = system ] || queue+=($(needed "${lib_dir[$so]}/$so"))
        else
            missing_of[$s]="${missing_of[$s]:+${missing_of[$s]} }$so"
        fi
    done
    unset seen
done
libpath="$(IFS=:; echo "${libpath_dirs[*]}")"
for d in ${libpath_dirs[@]+"${libpath_dirs[@]}"}; do
    [ -e "$d/libcuda.so.1" ] && log "warning: $d holds a libcuda.so.1 (with VMCUDA_BRIDGED_RUNTIME=nvidia it comes before vmcuda's)"
done
log "toolkit library path: ${libpath:-none beyond the system ones}"

bridged_runtime="${VMCUDA_BRIDGED_RUNTIME:-vmcuda}"
case "$bridged_runtime" in
    vmcuda) bridged_path="$guest_lib${libpath:+:$libpath}" ;;
    nvidia) bridged_path="${libpath:+$libpath:}$guest_lib" ;;
    *) die "VMCUDA_BRIDGED_RUNTIME is vmcuda or nvidia, not $bridged_runtime" ;;
esac

# Hide the GPU from the bridged run, as tests/gpu/run.sh does.
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"
log "bridged runtime: $bridged_runtime; GPU hidden from the bridged run: $isolation"

# ---------------------------------------------------------------- host daemon
host_restarts=0
start_host() {
    rm -f "$sock"
    echo "=== samples/run.sh: starting $host_bin serve --unix $sock --executor cuda ($(date -u +%H:%M:%S)) ===" >>"$host_log"
    "$host_bin" serve --unix "$sock" --executor cuda --state-dir "$raw/state" >>"$host_log" 2>&1 &
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
: >"$host_log"
start_host || die "could not start the host daemon"
conn_count() { grep -c -F -- "$conn_pattern" "$host_log" 2>/dev/null || true; }

# ---------------------------------------------------------------- runs
# The native run sees no VMCUDA_* variable at all.
vmcuda_unset=()
while IFS= read -r v; do vmcuda_unset+=(-u "$v"); done < <(compgen -e | grep '^VMCUDA_')

# run_sample MODE NAME: runs NAME in a fresh copy of its directory; writes
# $raw/NAME.MODE.{stdout,stderr,exit,secs}.
run_sample() {
    local mode="$1" s="$2" rc t0 t1 dir
    local o="$raw/$s.$mode"
    local args=()
    read -r -a args <<<"${args_of[$s]}"
    dir="$runs/$s.$mode"
    rm -rf "$dir"
    cp -r "$samples_dir/$s" "$dir"
    t0=$(date +%s.%N)
    if [ "$mode" = native ]; then
        (cd "$dir" && env ${vmcuda_unset[@]+"${vmcuda_unset[@]}"} LD_LIBRARY_PATH="$libpath" \
            timeout -k 10 "$timeout_s" ${wrap[@]+"${wrap[@]}"} "./$s" ${args[@]+"${args[@]}"} \
            >"$o.stdout" 2>"$o.stderr" </dev/null)
        rc=$?
    else
        (cd "$dir" && ${isolate[@]+"${isolate[@]}"} env LD_LIBRARY_PATH="$bridged_path" VMCUDA_SERVER="unix:$sock" \
            timeout -k 10 "$timeout_s" ${wrap[@]+"${wrap[@]}"} "./$s" ${args[@]+"${args[@]}"} \
            >"$o.stdout" 2>"$o.stderr" </dev/null)
        rc=$?
    fi
    t1=$(date +%s.%N)
    echo "$rc" >"$o.exit"
    awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f\n", b - a}' >"$o.secs"
    rm -rf "$dir"
}

# Lines that carry times, rates or clock counts, which differ from run to run.
filter_stdout() {
    grep -v -i -E 'time|elapsed|msec|[0-9] ?(ms|s|us|ns)\b|\b(sec|secs|seconds|usec)\b|[GMKT]i?B/s|bandwidth|throughput|flop|samples/s|options/s|pix/s|/sec|clock|speedup|cycles' "$1" |
        sed -E 's/0x[0-9a-fA-F]{6,}/0xADDR/g'
}

exit_label() {
    case "$1" in
        124|137) echo "$1 (timeout)" ;;
        *) if [ "$1" -gt 128 ] 2>/dev/null; then echo "$1 (signal $(( $1 - 128 )))"; else echo "$1"; fi ;;
    esac
}

rows=()
n_pass=0 n_fail=0 n_waived=0 n_skip=0 n_same=0
failed=()
for s in "${samples[@]}"; do
    if [ ! -x "$samples_dir/$s/$s" ]; then
        rows+=("| $s | - | - | - | - | - | SKIP (not built) |")
        n_skip=$((n_skip + 1))
        log "== $s: SKIP (not built)"
        continue
    fi
    if [ "$deadline" -gt 0 ] && [ "$SECONDS" -ge "$deadline" ]; then
        rows+=("| $s | - | - | - | - | - | SKIP (deadline of ${deadline} s reached) |")
        n_skip=$((n_skip + 1))
        log "== $s: SKIP (deadline reached)"
        continue
    fi
    if [ -n "${missing_of[$s]:-}" ]; then
        rows+=("| $s | - | - | - | - | - | SKIP (missing ${missing_of[$s]}) |")
        n_skip=$((n_skip + 1))
        log "== $s: SKIP (missing ${missing_of[$s]})"
        continue
    fi
    if ! kill -0 "$host_pid" 2>/dev/null; then
        log "host daemon is gone, restarting it"
        host_restarts=$((host_restarts + 1))
        start_host || log "host restart failed"
    fi
    run_sample native "$s"
    before="$(conn_count)"
    run_sample bridged "$s"
    after="$(conn_count)"

    n_rc="$(cat "$raw/$s.native.exit")"
    b_rc="$(cat "$raw/$s.bridged.exit")"
    check="${check_of[$s]}"
    reasons=()
    if [ "$check" = exit ]; then
        self="exit status"
    else
        n_ok=0 b_ok=0
        grep -q -F -- "$check" "$raw/$s.native.stdout" && n_ok=1
        grep -q -F -- "$check" "$raw/$s.bridged.stdout" && b_ok=1
        if [ "$b_ok" = 1 ] && [ "$n_ok" = 1 ]; then self=pass
        elif [ "$b_ok" = 1 ]; then self="native lacks it"
        elif [ "$n_ok" = 1 ]; then self="bridged lacks it"
        else self="neither has it"; fi
    fi
    filter_stdout "$raw/$s.native.stdout" >"$raw/$s.native.filtered"
    filter_stdout "$raw/$s.bridged.stdout" >"$raw/$s.bridged.filtered"
    if cmp -s "$raw/$s.native.filtered" "$raw/$s.bridged.filtered"; then
        same=same
        n_same=$((n_same + 1))
    else
        same="DIFF ($(diff "$raw/$s.native.filtered" "$raw/$s.bridged.filtered" | grep -c '^[<>]') lines)"
    fi
    if [ "$n_rc" = 2 ] && [ "$b_rc" = 2 ]; then
        result=WAIVED
        n_waived=$((n_waived + 1))
    else
        [ "$n_rc" = 0 ] || reasons+=("native exit")
        [ "$b_rc" = 0 ] || reasons+=("bridged exit")
        case "$self" in pass|"exit status") ;; *) reasons+=("self-check: $self") ;; esac
        if [ "$skip_conn" != 1 ] && [ "${after:-0}" -le "${before:-0}" ]; then
            reasons+=("no guest connection")
        fi
        if [ "${#reasons[@]}" -eq 0 ]; then
            result=PASS
            n_pass=$((n_pass + 1))
        else
            result="FAIL ($(IFS=,; echo "${reasons[*]}" | sed 's/,/, /g'))"
            n_fail=$((n_fail + 1))
            failed+=("$s")
        fi
    fi
    if [ "$result" != PASS ] || [ "$same" != same ]; then
        {
            echo "=================== $s: $result; stdout $same"
            echo "--- exit: native $n_rc, bridged $b_rc"
            if [ "$same" != same ]; then
                echo "--- stdout diff, timing lines dropped (native -> bridged)"
                diff -u --label "$s.native" --label "$s.bridged" \
                    "$raw/$s.native.filtered" "$raw/$s.bridged.filtered" | head -n 60
            fi
            if [ "$result" != PASS ]; then
                echo "--- native stderr (tail)"; tail -n 15 "$raw/$s.native.stderr"
                echo "--- bridged stderr (tail)"; tail -n 25 "$raw/$s.bridged.stderr"
                echo "--- bridged stdout (tail)"; tail -n 15 "$raw/$s.bridged.stdout"
            fi
            echo
        } >>"$diffs"
    fi
    secs="$(cat "$raw/$s.native.secs") / $(cat "$raw/$s.bridged.secs")"
    log "== $s: native=$n_rc bridged=$b_rc check=$self stdout=$same ($secs s) -> $result"
    rows+=("| $s | $(exit_label "$n_rc") | $(exit_label "$b_rc") | $self | $same | $secs | $result |")
done

stop_host

# ---------------------------------------------------------------- report
# vmcuda's commit: that of the binaries (VMCUDA_COMMIT_FILE, as run-all.sh sets it to
# carry.sh's COMMIT), else this checkout's. The samples' build has its own.
commit=""
[ -n "${VMCUDA_COMMIT_FILE:-}" ] && [ -f "$VMCUDA_COMMIT_FILE" ] && commit="$(head -n 1 "$VMCUDA_COMMIT_FILE")"
[ -n "$commit" ] || commit="$(git rev-parse --verify -q HEAD 2>/dev/null || echo unknown)"
build_commit="$(head -n 1 "$samples_dir/COMMIT" 2>/dev/null || echo unknown)"
samples_commit="$(head -n 1 "$samples_dir/SAMPLES_COMMIT" 2>/dev/null || echo unknown)"
gpu=unknown
driver=unknown
if command -v nvidia-smi >/dev/null 2>&1; then
    q="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
    if [ -n "$q" ]; then
        gpu="$(echo "${q%,*}" | sed 's/^ *//;s/ *$//')"
        driver="$(echo "${q##*,}" | sed 's/^ *//;s/ *$//')"
    fi
fi
ran=$(( ${#samples[@]} - n_skip ))
table="| sample | native exit | bridged exit | self-check | stdout (timing lines dropped) | seconds native / bridged | result |
| --- | --- | --- | --- | --- | --- | --- |"
for r in "${rows[@]}"; do table="$table
$r"; done
summary="$n_pass pass, $n_fail fail, $n_waived waived, $n_skip skipped of ${#samples[@]}; stdout the same for $n_same/$ran"
{
    echo "# vmcuda: NVIDIA's CUDA samples, native vs bridged"
    echo
    echo "- date (UTC): $(date -u '+%Y-%m-%d %H:%M:%S')"
    echo "- commit: $commit"
    echo "- NVIDIA/cuda-samples commit: $samples_commit"
    echo "- command: \`$cmdline\`"
    echo "- GPU: $gpu"
    echo "- driver: $driver"
    echo "- samples: $samples_dir (built by tests/gpu/samples/build.sh at commit $build_commit)"
    echo "- toolkit library path: ${libpath:-(system only)}"
    echo "- bridged runtime: $bridged_runtime (LD_LIBRARY_PATH=$bridged_path)"
    echo "- GPU hidden from the bridged run: $isolation"
    echo "- timeout per run: ${timeout_s} s; host daemon restarts: $host_restarts"
    echo "- result: $summary"
    echo
    echo "$table"
    [ -s "$diffs" ] && { echo; echo "Failures and stdout differences: see diffs-samples.txt."; }
} >"$results/RESULTS-SAMPLES.md"
tar -C "$raw" -czf "$results/samples.tar.gz" . 2>/dev/null || log "could not write samples.tar.gz"
[ -s "$diffs" ] || rm -f "$diffs"

log "results in $results"
echo
echo "GPU: $gpu, driver $driver, commit $commit, cuda-samples $samples_commit: $summary"
echo
echo "$table"
[ "$n_fail" -eq 0 ]
