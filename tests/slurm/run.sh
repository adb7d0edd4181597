#!/usr/bin/env bash
# A real Slurm on this machine (munged, slurmctld and slurmd, Debian's slurm-wlm),
# with vmcuda's prolog, task prolog and epilog (images/slurm) granting each job its
# share of a host-memory vmcuda-host daemon through the admin API. The jobs' programs
# are tests/src/bin/raw-guest, which speaks the wire protocol itself.
#
#   tests/slurm/run.sh
#
# Checks: two concurrent jobs each get their own quota (N units of the vmcuda GRES);
# a job without the GRES gets no vmcuda environment; a cancelled job's grant, token
# and worker are gone at once; a program that escaped its job loses its share when the
# job ends. Prints one `ok:` line per check and `N passed, N
# failed` at the end; exit 0 when all passed, 1 when one failed, 77 when this machine
# cannot run it (not root, or no slurm-wlm and munge: .ci/run installs them).
#
# Environment: VMCUDA_HOST_BIN, RAW_GUEST_BIN (default: target/debug), VMCUDA_SLURM_TCP
# (the daemon's TCP address; default a free loopback port), VMCUDA_SLURM_KEEP=1 keeps
# the scratch directory.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
host_bin=${VMCUDA_HOST_BIN:-$root/target/debug/vmcuda-host}
raw_guest=${RAW_GUEST_BIN:-$root/target/debug/raw-guest}

skip() {
  echo "skipped: $*"
  exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (slurmd runs jobs as their users)"
for c in munged slurmctld slurmd sbatch srun scontrol scancel squeue sinfo; do
  command -v "$c" >/dev/null || skip "no $c (apt-get install slurmd slurmctld slurm-client munge)"
done
for b in "$host_bin" "$raw_guest"; do
  [ -x "$b" ] || {
    echo "not built: $b (cargo build -p vmcuda-host -p vmcuda-tests --bins)" >&2
    exit 1
  }
done

t=$(mktemp -d /tmp/vmcuda-slurm.XXXXXX)
chmod 0755 "$t"
mkdir -p "$t/state" "$t/spool" "$t/ctld" "$t/log" "$t/bin" "$t/out"
pids=()
cleanup() {
  local status=$? daemons=() p
  for f in "$t"/slurmd.pid "$t"/slurmctld.pid "$t"/munged.pid; do
    [ -s "$f" ] && daemons+=("$(cat "$f")")
  done
  for p in "${daemons[@]}" "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # The daemons are not this shell's children: gone once /proc says so (they write
  # their state as they stop).
  for _ in $(seq 100); do
    local alive=0
    for p in "${daemons[@]}"; do [ -d "/proc/$p" ] && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.05
  done
  if [ "$status" != 0 ] && [ "$status" != 77 ]; then
    for f in "$t"/log/*; do
      echo "--- $f" >&2
      tail -n 40 "$f" >&2 || true
    done
  fi
  [ "${VMCUDA_SLURM_KEEP:-}" = 1 ] || rm -rf "$t" || true
  exit "$status"
}
trap cleanup EXIT

passed=0
failed=0
check() { # check WHAT COMMAND...
  local what=$1
  shift
  if "$@"; then
    echo "ok: $what"
    passed=$((passed + 1))
  else
    echo "FAILED: $what"
    failed=$((failed + 1))
  fi
}

# A free loopback port below the kernel's ephemeral range: a port the kernel handed out
# for bind(0) may be taken again by any outbound connection (slurmctld's own, to
# slurmd) before the daemon that was told to listen there binds it. The ports this run
# has chosen are not chosen again.
chosen_ports=" "
free_port() { # free_port VAR: sets VAR (not in a subshell, so chosen_ports keeps it)
  local low port
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  [ "$low" -gt 12000 ] || low=32768
  for _ in $(seq 100); do
    port=$((10000 + RANDOM % (low - 10000)))
    case $chosen_ports in *" $port "*) continue ;; esac
    if python3 -c 'import socket,sys; s=socket.socket(); s.bind(("0.0.0.0",int(sys.argv[1])))' \
      "$port" 2>/dev/null; then
      chosen_ports+="$port "
      printf -v "$1" %s "$port"
      return
    fi
  done
  echo "no free port below $low" >&2
  exit 1
}

# The GPU host: a host-memory daemon with a TCP listener for the jobs.
free_port tcp_port
tcp=${VMCUDA_SLURM_TCP:-127.0.0.1:$tcp_port}
: >"$t/host.toml"
"$host_bin" serve --executor host-memory --config "$t/host.toml" --state-dir "$t/state" \
  --unix "$t/host.sock" --tcp "$tcp" 2>"$t/log/vmcuda-host.log" &
pids+=($!)
admin=("$host_bin" admin --state-dir "$t/state" --config "$t/host.toml")
for _ in $(seq 200); do [ -S "$t/state/admin.sock" ] && break; sleep 0.05; done
[ -S "$t/state/admin.sock" ] || { echo "the daemon did not start" >&2; exit 1; }

# vmcuda's Slurm scripts, as slurmd runs them, with this run's settings.
cat >"$t/slurm.env" <<EOF
VMCUDA_SERVER=tcp:$tcp
VMCUDA_ADMIN="${admin[*]}"
VMCUDA_GRES_UNIT_MIB=16
VMCUDA_TOKEN_DIR=$t/tokens
EOF
for s in prolog task-prolog epilog; do
  printf '#!/bin/sh\nVMCUDA_SLURM_ENV=%s/slurm.env exec %s/images/slurm/%s "$@"\n' \
    "$t" "$root" "$s" >"$t/bin/$s"
  chmod 0755 "$t/bin/$s"
done

# munge, on a socket of this run's own, with a key of its own.
head -c 1024 /dev/urandom >"$t/munge.key"
chmod 0400 "$t/munge.key"
munged --force --key-file="$t/munge.key" --socket="$t/munge.sock" \
  --pid-file="$t/munged.pid" --log-file="$t/log/munged.log" --seed-file="$t/munge.seed"

node=$(hostname -s)
free_port ctld_port
free_port slurmd_port
cat >"$t/slurm.conf" <<EOF
ClusterName=vmcudatest
SlurmctldHost=$node
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$t/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$t/ctld
SlurmdSpoolDir=$t/spool
SlurmctldPidFile=$t/slurmctld.pid
SlurmdPidFile=$t/slurmd.pid
SlurmctldLogFile=$t/log/slurmctld.log
SlurmdLogFile=$t/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
KillWait=2
GresTypes=vmcuda
PrologFlags=Alloc
Prolog=$t/bin/prolog
TaskProlog=$t/bin/task-prolog
Epilog=$t/bin/epilog
NodeName=$node CPUs=$(nproc) Gres=vmcuda:64 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=10 State=UP
EOF
cat >"$t/gres.conf" <<EOF
NodeName=$node Name=vmcuda Count=64 Flags=CountOnly
EOF
export SLURM_CONF=$t/slurm.conf
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 300); do
  sinfo -h -o '%t' 2>/dev/null | grep -qx idle && break
  sleep 0.1
done
sinfo -h -o '%t' | grep -qx idle || { echo "the node did not come up" >&2; exit 1; }

# The grants as the admin API lists them: NAME QUOTA WORKERS per line.
grants() {
  "${admin[@]}" list --json | python3 -c '
import json, sys
for g in json.load(sys.stdin)["grants"]:
    print(g["name"], g["limits"].get("memory_quota"), g["workers"])'
}
wait_for() { # wait_for SECONDS COMMAND...: until COMMAND succeeds
  local n=$(($1 * 10))
  shift
  for _ in $(seq "$n"); do "$@" && return 0; sleep 0.1; done
  return 1
}
job_done() { [ -z "$(squeue -h -j "$1" 2>/dev/null)" ]; }

# Two jobs at once, 2 and 4 units (32 and 64 MiB): each fills its own quota, and one
# MiB more is refused to each.
a=$(sbatch --parsable --gres=vmcuda:2 -o "$t/out/a" --wrap "$raw_guest 32 1 --hold 3")
b=$(sbatch --parsable --gres=vmcuda:4 -o "$t/out/b" --wrap "$raw_guest 64 1 --hold 3")
both_running() {
  local g
  g=$(grants)
  grep -qx "slurm-$a-$node $((32 << 20)) 1" <<<"$g" && grep -qx "slurm-$b-$node $((64 << 20)) 1" <<<"$g"
}
check "two concurrent jobs each hold a grant of their own GRES's size" wait_for 30 both_running
wait_for 60 job_done "$a" && wait_for 60 job_done "$b"
check "job a filled its 32 MiB and was refused more" \
  grep -qzP 'alloc 32: cudaSuccess\nalloc 1: cudaErrorMemoryAllocation\nheld' "$t/out/a"
check "job b filled its 64 MiB and was refused more" \
  grep -qzP 'alloc 64: cudaSuccess\nalloc 1: cudaErrorMemoryAllocation\nheld' "$t/out/b"
no_grants() { [ -z "$(grants)" ]; }
check "the ended jobs' grants are revoked" wait_for 10 no_grants
check "the ended jobs' tokens are removed" test ! -e "$t/tokens/$a" -a ! -e "$t/tokens/$b"

# A job without the GRES: no grant, no vmcuda environment.
out=$(srun sh -c 'echo "server=${VMCUDA_SERVER:-none} token=${VMCUDA_TOKEN_FILE:-none}"')
check "a job without the GRES gets no vmcuda environment" test "$out" = "server=none token=none"
check "and no grant" no_grants

# srun in a job with the GRES: the environment is set for its tasks.
out=$(srun --gres=vmcuda:1 sh -c 'echo "server=$VMCUDA_SERVER"; head -c 64 "$VMCUDA_TOKEN_FILE" | wc -c')
check "srun --gres=vmcuda:1 sets VMCUDA_SERVER and a token file" \
  test "$out" = "server=tcp:$tcp"$'\n'"64"

# A cancelled job: its grant, token and worker are gone at once.
c=$(sbatch --parsable --gres=vmcuda:1 -o "$t/out/c" --wrap "$raw_guest 8 --hold 120")
c_holds() { grants | grep -qx "slurm-$c-$node $((16 << 20)) 1"; }
check "job c runs with its grant" wait_for 30 c_holds
token=$(cat "$t/tokens/$c")
scancel "$c"
check "the cancelled job's grant is revoked" wait_for 10 no_grants
check "the cancelled job's token is removed" test ! -e "$t/tokens/$c"
check "the cancelled job's ledger holds nothing" \
  test -z "$(cat "$t/state/ledger/slurm-$c-$node.ledger" 2>/dev/null)"
refused=$(VMCUDA_SERVER=tcp:$tcp VMCUDA_TOKEN=$token "$raw_guest" 1 || true)
check "the cancelled job's token is refused" test "$refused" = "refused: cudaErrorNotPermitted"
check "the daemon logged each grant's end" grep -q "grant revoked" "$t/log/vmcuda-host.log"

# A program that escaped its job (a daemon started with setsid, which proctrack/linuxproc
# does not follow) keeps no GPU share: the epilog's revoke ends its worker on the GPU
# host, and its next call finds the connection closed.
e=$(sbatch --parsable --gres=vmcuda:1 -o "$t/out/e" --wrap \
  "setsid $raw_guest 8 --hold 6 --then 1 >$t/out/escaped 2>&1 </dev/null & sleep 2")
wait_for 60 job_done "$e"
escaped_done() { grep -q '^then 1:' "$t/out/escaped" 2>/dev/null; }
wait_for 20 escaped_done || true
check "the escaped program had its share while the job ran" grep -q '^alloc 8: cudaSuccess' "$t/out/escaped"
check "and lost it when the job ended" grep -q '^then 1: connection closed' "$t/out/escaped"
check "the revoke ended its worker and gave back its 8 MiB" \
  grep -q "vm=slurm-$e-$node workers=1 refunded_bytes=$((8 << 20))" "$t/log/vmcuda-host.log"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
