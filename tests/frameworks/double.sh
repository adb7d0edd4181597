# tests/frameworks/double.sh, sourced by the frameworks scripts: a venv with a framework
# in it, and a host-memory test double serving the script's programs until it exits.
#   venv_with VENV MODULE SPEC...  make VENV if need be, pip install SPEC... unless MODULE imports
#   start_double                 the daemon (VMCUDA_HOST_BIN, default target/release/vmcuda-host)
#                                on $work/vmcuda.sock; sets work, host_pid, server, start
#   seconds_since_start          wall time since start_double, for the passed line

venv_with() {
  [ -x "$1/bin/python" ] || python3 -m venv "$1"
  "$1/bin/python" -c "import $2" 2>/dev/null || "$1/bin/pip" install -q "${@:3}"
}

start_double() {
  local host_bin=${VMCUDA_HOST_BIN:-target/release/vmcuda-host}
  work=$(mktemp -d)
  trap _double_cleanup EXIT
  "$host_bin" serve --unix "$work/vmcuda.sock" --executor host-memory --state-dir "$work/state" \
    2>"$work/host.log" &
  host_pid=$!
  for _ in $(seq 100); do [ -S "$work/vmcuda.sock" ] && break; sleep 0.1; done
  server="unix:$work/vmcuda.sock"
  start=$(date +%s.%N)
}

# The script's own exit status survives the clean-up.
_double_cleanup() {
  local rc=$?
  kill "$host_pid" 2>/dev/null || true
  wait "$host_pid" 2>/dev/null || true
  rm -rf "$work"
  exit "$rc"
}

seconds_since_start() {
  awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}'
}
