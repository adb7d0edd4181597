#!/usr/bin/env bash
# bench/run-torch-steps.sh CARRYDIR: torch training steps (bench/torch_steps.py: an MLP,
# a CNN on cuDNN, a bf16 transformer encoder) natively and through vmcuda in the same run,
# alternating, three rounds each; the bridged process preloads vmcuda's libcuda.so.1
# only (NVIDIA's own libraries over the guest driver, as tests/gpu/run-torch-libs.sh),
# or the libraries VMCUDA_TORCH_PRELOAD names ("libcudart.so.13 libcublas.so.13
# libcublasLt.so.13 libcuda.so.1" is vmcuda-run's set), and has the GPU hidden
# (tests/gpu/hide-gpu.sh). CARRYDIR: bin/vmcuda-host,
# guest/lib, COMMIT. Writes $OUT (default build/bench-results)/RESULTS-TORCH-STEPS.md:
# the median step time of each side over the rounds, the ratio against its target
# (1.05x for the MLP, 1.10x for the CNN and the transformer), and the last losses.
# VMCUDA_STEPS_SCRIPT runs another steps script that prints the same lines (ABOUT,
# TARGET, RESULT), as bench/run-jax-steps.sh does with bench/jax_steps.py;
# VMCUDA_STEPS_RESULTS names its results file.
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo" || exit 2
carry=$(cd "${1:?usage: bench/run-torch-steps.sh CARRYDIR}" && pwd)
py="${VMCUDA_TORCH_PYTHON:-/opt/torch/.venv/bin/python}"
script="${VMCUDA_STEPS_SCRIPT:-bench/torch_steps.py}"
results="${VMCUDA_STEPS_RESULTS:-RESULTS-TORCH-STEPS.md}"
out=${OUT:-$repo/build/bench-results}
mkdir -p "$out"
raw=$(mktemp -d)
sock="$raw/vmcuda.sock"
"$carry/bin/vmcuda-host" serve --unix "$sock" --executor cuda --state-dir "$raw/state" >"$raw/host.log" 2>&1 &
host_pid=$!
trap 'kill $host_pid 2>/dev/null; wait $host_pid 2>/dev/null' EXIT
for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.1; done
# shellcheck source=tests/gpu/hide-gpu.sh
. "$repo/tests/gpu/hide-gpu.sh"
rounds=${VMCUDA_BENCH_ROUNDS:-3}
preload_names=${VMCUDA_TORCH_PRELOAD:-libcuda.so.1}
preload=
for name in $preload_names; do preload="${preload:+$preload:}$carry/guest/lib/$name"; done
for round in $(seq 1 "$rounds"); do
    env -u VMCUDA_SERVER "$py" "$script" >"$raw/native.$round.txt" 2>"$raw/native.$round.err"
    # The guest's directory on the library path too: JAX's plugin opens the driver by
    # another name than the preloaded one's.
    ${isolate[@]+"${isolate[@]}"} env LD_PRELOAD="$preload" VMCUDA_SERVER="unix:$sock" \
        LD_LIBRARY_PATH="$carry/guest/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$py" "$script" >"$raw/bridged.$round.txt" 2>"$raw/bridged.$round.err"
done
"$py" - "$raw" "$rounds" "$(cat "$carry/COMMIT" 2>/dev/null || git rev-parse HEAD)" "$isolation" "$preload_names" "$script" \
    >"$out/$results" <<'PY'
import datetime, statistics, sys
raw, rounds, (commit, isolation, preloaded, script) = sys.argv[1], int(sys.argv[2]), sys.argv[3:7]
def results(side):
    runs, about, targets = [], "", {}
    for r in range(1, rounds + 1):
        d = {}
        for line in open(f"{raw}/{side}.{r}.txt"):
            words = line.split()
            if line.startswith("RESULT "):
                d[words[1]] = float(words[2])
            elif line.startswith("ABOUT "):
                about = line[6:].strip()
            elif line.startswith("TARGET "):
                targets[words[1]] = float(words[2])
        runs.append(d)
    return runs, about, targets
(n, about, targets), (b, _, _) = results("native"), results("bridged")
framework = about.split()[0] if about else "framework"
print(f"# {framework} training steps, native and through vmcuda\n")
print(f"- date (UTC): {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M:%S}")
print(f"- commit: {commit}")
print(f"- command: `VMCUDA_STEPS_SCRIPT={script} VMCUDA_TORCH_PRELOAD='{preloaded}' bench/run-torch-steps.sh CARRYDIR`")
print(f"- {about}; bridged: vmcuda's {', '.join(preloaded.split())} "
      "preloaded, the framework's own copies of NVIDIA's libraries for the rest, vmcuda-host with the CUDA executor "
      f"over a Unix socket; {rounds} rounds, native and bridged alternating")
print(f"- bridged process isolation: {isolation}\n")
print("| step | native ms (median of rounds) | bridged ms | ratio | target | met | rounds native / bridged | last loss native / bridged |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for name, target in targets.items():
    k = f"{name}_step"
    nv = [r[k] for r in n if k in r]
    bv = [r[k] for r in b if k in r]
    if not nv or not bv:
        print(f"| {name} | {nv} | {bv} | - | {target:.2f}x | - | - | - |")
        continue
    mn, mb = statistics.median(nv), statistics.median(bv)
    losses = f"{n[-1].get(name + '_last_loss')} / {b[-1].get(name + '_last_loss')}"
    rounds_txt = f"{', '.join(f'{v:.2f}' for v in nv)} / {', '.join(f'{v:.2f}' for v in bv)}"
    met = "yes" if mb <= target * mn else "NO"
    print(f"| {name} | {mn:.3f} | {mb:.3f} | {mb / mn:.2f}x | {target:.2f}x | {met} | {rounds_txt} | {losses} |")
PY
tar -C "$raw" -czf "$out/${results%.md}-raw.tar.gz" . 2>/dev/null
cat "$out/$results"
