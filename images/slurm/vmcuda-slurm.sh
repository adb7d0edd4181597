# What the vmcuda Slurm prolog, task prolog and epilog share (sourced by them; see
# docs/slurm.md). Not run by itself.
#
# The settings come from $VMCUDA_SLURM_ENV, default /etc/vmcuda/slurm.env, a shell
# file of NAME=value lines (slurm.env.example beside this file).

# slurmd runs its prologs with almost no environment: not even a PATH.
PATH=${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}
export PATH

VMCUDA_SLURM_ENV=${VMCUDA_SLURM_ENV:-/etc/vmcuda/slurm.env}
if [ -r "$VMCUDA_SLURM_ENV" ]; then
  # shellcheck disable=SC1090 # the operator's file
  . "$VMCUDA_SLURM_ENV"
fi
VMCUDA_ADMIN=${VMCUDA_ADMIN:-vmcuda-host admin}
VMCUDA_GRES_UNIT_MIB=${VMCUDA_GRES_UNIT_MIB:-1024}
VMCUDA_GRANT_ARGS=${VMCUDA_GRANT_ARGS:-}
VMCUDA_TOKEN_DIR=${VMCUDA_TOKEN_DIR:-/run/vmcuda-slurm}
SCONTROL=${SCONTROL:-scontrol}

say() { echo "vmcuda slurm: $*" >&2; }

job=${SLURM_JOB_ID:?SLURM_JOB_ID is not set: run by slurmd}
node=${SLURMD_NODENAME:-$(hostname -s)}
# One grant per job and node: the GRES counts per node, and so does the quota.
grant_name="slurm-$job-$node"
token_file="$VMCUDA_TOKEN_DIR/$job"

# The job's units of the vmcuda GRES on each node (0: it asked for none), from its
# record: --gres=vmcuda:N shows as TresPerNode=gres:vmcuda:N (gres/vmcuda:N on newer
# Slurm).
vmcuda_units() {
  "$SCONTROL" show job -o "$job" 2>/dev/null | tr ' ,' '\n\n' |
    sed -n 's/^\(TresPerNode=\)\{0,1\}gres[:/]vmcuda\(:[A-Za-z_][A-Za-z0-9_]*\)\{0,1\}[:=]\([0-9][0-9]*\)$/\3/p' |
    head -n 1
}
