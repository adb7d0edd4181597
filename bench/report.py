"""Turns bench/run.sh's raw outputs into RESULTS.md (ratios to native, transport floors,
the issue's targets) and bandwidth.png."""
import datetime
import glob
import os
import subprocess
import sys

raw, out, commit, command, clients = sys.argv[1:6]


def load(name):
    vals = {}
    path = os.path.join(raw, name)
    if not os.path.exists(path):
        return vals
    for line in open(path):
        p = line.split()
        if len(p) == 4 and p[0] == "RESULT":
            vals[p[1]] = (float(p[2]), p[3])
    return vals


native, shm, unix, sync, tcp = (load(f) for f in ("native.txt", "shm.txt", "unix.txt", "unix_sync.txt", "tcp.txt"))
shm1 = load("shm_1thread.txt")
shm_np = load("shm_nopoll.txt")
shm_nr = load("shm_noring.txt")
shm_nw = load("shm_nowords.txt")
isolation_path = os.path.join(raw, "isolation.txt")
isolation = open(isolation_path).read().strip() if os.path.exists(isolation_path) else "not recorded"
floors = {**load("floor_unix.txt"), **load("floor_tcp.txt"), **load("floor_shm.txt")}


def total(prefix):
    return sum(load(os.path.basename(f)).get("client_copy_throughput", (0, ""))[0]
               for f in glob.glob(os.path.join(raw, prefix + ".*.txt")))


conc_native, conc_shm = total("conc_native"), total("conc_shm")
single_native = load("single_native.txt").get("client_copy_throughput", (0, ""))[0]
single_shm = load("single_shm.txt").get("client_copy_throughput", (0, ""))[0]

try:
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip()
except OSError:
    gpu = "unknown"

lower_is_better = lambda unit: unit in ("us", "ms", "us/launch")
lines = []
w = lines.append
w("# vmcuda benchmarks: native vs bridged, same run")
w("")
w(f"- date (UTC): {datetime.datetime.utcnow():%Y-%m-%d %H:%M:%S}")
w(f"- commit: {commit}")
w(f"- command: `{command}`")
w(f"- GPU: {gpu}")
w("- bridged = the program unmodified, on NVIDIA's libcudart.so.13 over vmcuda's libcuda.so.1, to vmcuda-host (CUDA executor) on the same machine")
w(f"- bridged runs' view of the GPU: {isolation}")
w("- shm = the default on one host: requests and replies in the command ring in shared memory (the guest polls 2 ms for each reply and the worker 200 us for each request before sleeping in the socket for a doorbell), pinned memory copied by DMA from the guest's pages, pageable copies staged through shared slots by up to 4 threads; shm, no ring = the same with requests and replies on the Unix socket (`VMCUDA_RING=0`; the guest polls the socket 100 us, the worker 50 us); shm, no words = the same with a synchronous pinned copy waiting for the worker's reply instead of watching a word the GPU writes after the copy (`VMCUDA_DONE_WORDS=0`); shm 1 thread = the same, staging with one thread (`VMCUDA_COPY_THREADS=1`); shm, no polling = the same with both sides sleeping in every read (`VMCUDA_POLL_US=0` for guest and host); unix socket = every byte on the socket (`VMCUDA_SHARED_MEMORY=0`, the path a vsock guest without the vhost-user data path takes); unix, sync calls = shm with every call waiting for its reply (`VMCUDA_SYNC=1`); tcp = TCP loopback with a token")
w("")
w("## Transport floors (loopback, no GPU, measured in this run)")
w("")
w("| transport | 64 B round trip | 64 B round trip, both sides polling 50 us | bulk floor |")
w("| --- | --- | --- | --- |")
fl = lambda k: floors.get(k, (float("nan"), ""))[0]
SIZES_MIB = (1, 4, 16, 64, 256, 1024)
for t in ("unix", "tcp"):
    streams = ", ".join(f"{m} MiB: {fl(f'floor_{t}_stream_{m}MiB'):.2f}" for m in SIZES_MIB)
    w(f"| {t} | {fl(f'floor_{t}_rtt_64B'):.1f} us | {fl(f'floor_{t}_rtt_64B_polling'):.1f} us | one stream of 1 MiB writes cycling through a buffer of the copy's size into another, GB/s: {streams} |")
f1 = floors.get("floor_shm_fill_1_threads", (float("nan"), ""))[0]
f4 = floors.get("floor_shm_fill_4_threads", (float("nan"), ""))[0]
w(f"| shm (requests on a Unix socket pair) | {fl('floor_shm_rtt_64B'):.1f} us | {fl('floor_shm_rtt_64B_polling'):.1f} us | filling shared 4 MiB slots from pageable memory: {f1:.2f} GB/s (1 thread), {f4:.2f} GB/s (4 threads); pinned copies have no floor but the DMA engine (native pinned) |")
w("| vsock (vhost-user device) | not measured: the GPU machine has no vsock loopback, and a TCG guest's timing says nothing about KVM | | |")
w("")
w("## Measurements")
w("")
w("Times: ratio = bridged time / native time (1.0 = native, lower is better). Bandwidths: ratio = bridged / native (higher is better).")
w("")
w("| measurement | unit | native | shm | shm / native | shm, no ring | shm, no ring / native | shm, no words | shm, no words / native | shm, 1 thread | shm, no polling | unix socket | unix socket / native | shm, sync calls | tcp | tcp / native |")
w("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for name, (nv, unit) in native.items():
    m = shm.get(name, (float("nan"), unit))[0]
    nr = shm_nr.get(name, (float("nan"), unit))[0]
    nw = shm_nw.get(name, (float("nan"), unit))[0]
    m1 = shm1.get(name, (float("nan"), unit))[0]
    mp = shm_np.get(name, (float("nan"), unit))[0]
    u = unix.get(name, (float("nan"), unit))[0]
    s = sync.get(name, (float("nan"), unit))[0]
    t = tcp.get(name, (float("nan"), unit))[0]
    w(f"| {name} | {unit} | {nv:.2f} | {m:.2f} | {m / nv:.2f}x | {nr:.2f} | {nr / nv:.2f}x | {nw:.2f} | {nw / nv:.2f}x | {m1:.2f} | {mp:.2f} | {u:.2f} | {u / nv:.2f}x | {s:.2f} | {t:.2f} | {t / nv:.2f}x |")
ratio = lambda a, b: f"{a / b:.2f}x" if b else "n/a"
w(f"| {clients} concurrent clients, 64 MiB pinned copies, aggregate | GB/s | {conc_native:.2f} | {conc_shm:.2f} | {ratio(conc_shm, conc_native)} | | | | | | | | | | | |")
w(f"| 1 client, same copies | GB/s | {single_native:.2f} | {single_shm:.2f} | {ratio(single_shm, single_native)} | | | | | | | | | | | |")
w("")

# Peer copies (bench --peer): their own table, since they need two devices.
peer_native, peer_shm = load("peer_native.txt"), load("peer_shm.txt")
if os.path.exists(os.path.join(raw, "peer_native.txt")):
    w("## Peer copies (cudaMemcpyPeer, device 0 -> device 1)")
    w("")
    notes = [line[5:].strip() for line in open(os.path.join(raw, "peer_native.txt")) if line.startswith("NOTE ")]
    if notes:
        w("Native run: " + "; ".join(notes) + ".")
        w("")
    if peer_native:
        w("Median of 7 rounds, each enough back-to-back copies to move 256 MiB, then both devices synchronized. "
          "`_no_access`: before cudaDeviceEnablePeerAccess; the others with peer access on both ways. "
          "Ratio = bridged / native (higher is better).")
        w("")
        w("| measurement | unit | native | shm | shm / native |")
        w("| --- | --- | --- | --- | --- |")
        for name, (nv, unit) in peer_native.items():
            m = peer_shm.get(name, (float("nan"), unit))[0]
            w(f"| {name} | {unit} | {nv:.2f} | {m:.2f} | {m / nv:.2f}x |")
        w("")

# Managed memory (bench --managed): its own table, native and the default bridged path.
if os.path.exists(os.path.join(raw, "managed_native.txt")):
    managed_native, managed_shm = load("managed_native.txt"), load("managed_shm.txt")
    w("## Managed memory (bench --managed)")
    w("")
    w("A round: the CPU writes the whole buffer (cudaMallocManaged), a kernel computes y = 2y + 1 over it, "
      "the device is synchronized, the CPU reads and sums all of it. `prefetch`: cudaMemPrefetchAsync to the "
      "device before the kernel and to the host after it; `fault`: no prefetch, the pages move on first touch; "
      "`cpu_only`: the CPU's writes and reads alone on malloc'd memory (no GPU), the ceiling. "
      "GB/s = 2 x size / round time, the median of the timed rounds after a warm-up. "
      "Ratio = bridged / native (higher is better).")
    w("")
    for label, run in (("Native", "managed_native"), ("Bridged (shm)", "managed_shm")):
        path = os.path.join(raw, run + ".txt")
        notes = [line[5:].strip() for line in open(path) if line.startswith("NOTE ")] if os.path.exists(path) else []
        err = os.path.join(raw, run + ".err")
        fails = [line.strip() for line in open(err) if "FAIL" in line] if os.path.exists(err) else []
        if notes or fails:
            w(f"{label} run: " + "; ".join(notes + fails[-1:]) + ".")
            w("")
    w("| measurement | unit | native | shm | shm / native |")
    w("| --- | --- | --- | --- | --- |")
    for name, (nv, unit) in managed_native.items():
        m = managed_shm.get(name, (float("nan"), unit))[0]
        w(f"| {name} | {unit} | {nv:.2f} | {m:.2f} | {m / nv:.2f}x |")
    w("")

# The targets, evaluated on the default path on one host (shm), except the
# socket-path target (unix socket).
rtt = floors.get("floor_unix_rtt_64B", (float("nan"), ""))[0]
floor_bw = floors.get("floor_unix_stream_1MiB", (float("nan"), ""))[0]
size_of = lambda k: int(k.split("_")[-1][:-3])
floor_at = lambda k: floors.get(f"floor_unix_stream_{size_of(k)}MiB", (float("nan"), ""))[0]


def get(d, k):
    return d.get(k, (float("nan"), ""))[0]


targets = []
b2b_n, b2b_u = get(native, "launch_back_to_back"), get(shm, "launch_back_to_back")
targets.append(("back-to-back launch <= 1.0x native", f"{b2b_u / b2b_n:.2f}x", b2b_u <= b2b_n))
dl_n, dl_u = get(native, "driver_launch_back_to_back"), get(shm, "driver_launch_back_to_back")
targets.append(("back-to-back launch through the driver API (cuLaunchKernel) <= 1.0x native", f"{dl_u / dl_n:.2f}x", dl_u <= dl_n))
ls_n, ls_u = get(native, "launch_and_sync"), get(shm, "launch_and_sync")
targets.append(("launch + synchronize <= 1.3x native", f"{ls_u:.1f} us vs {ls_n:.1f} us ({ls_u / ls_n:.2f}x)", ls_u <= 1.3 * ls_n))
for k in ("copy_64B_h2d_pageable", "copy_64B_d2h_pageable", "copy_64B_h2d_pinned", "copy_64B_d2h_pinned"):
    n, u = get(native, k), get(shm, k)
    targets.append((f"{k} <= 1.3x native", f"{u:.1f} us vs {n:.1f} us ({u / n:.2f}x)", u <= 1.3 * n))


def worst(kind, d):
    rs = sorted((get(d, k) / get(native, k), k) for k in native if k.startswith("bw_") and kind in k)
    return rs[0] if rs else (float("nan"), "none")


for kind, goal in (("pinned", 0.95), ("pageable", 1.0)):
    r, k = worst(kind, shm)
    targets.append((f"{kind} copies >= {goal}x native (every size from 1 MiB, both directions)", f"worst {r:.2f}x ({k})", r >= goal))
big = [k for k in unix if k.startswith("bw_") and size_of(k) >= 4]
worst_socket = min(big, key=lambda k: get(unix, k) / floor_at(k), default=None)
if worst_socket:
    ws, wf = get(unix, worst_socket), floor_at(worst_socket)
    best_socket = max(big, key=lambda k: get(unix, k) / floor_at(k))
    targets.append(("socket-path bulk copies >= 0.8x the socket floor at the same size (every size from 4 MiB)", f"worst {ws:.2f} GB/s ({worst_socket}) against {wf:.2f} GB/s ({ws / wf:.2f}x), best {get(unix, best_socket) / floor_at(best_socket):.2f}x ({best_socket}); against the 1 MiB floor ({floor_bw:.2f} GB/s): {min(get(unix, k) for k in big) / floor_bw:.2f}x at worst", ws >= 0.8 * wf))
mm_n, mm_u = get(native, "matmul_4096_with_transfers"), get(shm, "matmul_4096_with_transfers")
targets.append(("sgemm n=4096 with transfers <= 1.1x native", f"{mm_u / mm_n:.2f}x", mm_u <= 1.1 * mm_n))
targets.append((f"{clients} concurrent clients >= 0.9x native aggregate", ratio(conc_shm, conc_native), conc_native and conc_shm >= 0.9 * conc_native))
w("## Targets")
w("")
w("| target | measured | met |")
w("| --- | --- | --- |")
for name, meas, ok in targets:
    w(f"| {name} | {meas} | {'yes' if ok else ('not measured' if ok is None else 'NO')} |")
w("")
open(os.path.join(out, "RESULTS.md"), "w").write("\n".join(lines) + "\n")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, kind in zip(axes, ("pinned", "pageable")):
        for label, d, style in (("native", native, "-o"), ("shm", shm, "-D"), ("unix socket", unix, "-s"), ("tcp", tcp, "-^")):
            for direction in ("h2d", "d2h"):
                pts = sorted((int(k.split("_")[-1][:-3]), v[0]) for k, v in d.items()
                             if k.startswith(f"bw_{direction}_{kind}_"))
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], style, label=f"{label} {direction}")
        ax.plot(SIZES_MIB, [fl(f"floor_unix_stream_{m}MiB") for m in SIZES_MIB], ":", color="gray",
                label="unix socket floor (same size)")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("copy size (MiB)")
        ax.set_title(f"cudaMemcpy, {kind} host memory")
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel("GB/s")
    axes[1].legend(fontsize=7)
    fig.suptitle(f"vmcuda bandwidth vs size, native and bridged ({commit[:7]})")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "bandwidth.png"), dpi=110)
except Exception as e:  # the table is the result; the plot is a convenience
    print(f"report.py: no plot: {e}", file=sys.stderr)
