#!/usr/bin/env python3
"""DistributedDataParallel on the GPUs of one host, one process per GPU: what
tests/gpu/run-multi-gpu.sh runs natively and bridged, with the nccl and gloo backends.

Each rank takes its own GPU, checks an all_reduce and a broadcast, then trains the same
small MLP (same seed everywhere; each rank its own batches) for --steps Adam steps.

stdout carries only what must be identical between a native and a bridged run: check
lines (PASS/FAIL), every rank's losses as exact float reprs, and the parameter sum the
replicas agree on. Timings, library paths and errors go to the JSON file named by
--json. Exit status 1 when any check fails or a rank dies.

  python ddp_check.py --backend nccl|gloo --json out.json [--steps 20] [--world 2]
  (--cpu: gloo on the CPU, to try the script where there is no GPU)
"""

import argparse
import datetime
import json
import os
import shutil
import socket
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

# NVLink multicast (NVLS, symmetric-memory multicast) stays off: these checks need none
# of it, and a multicast object can take the host's GPUs, shared with others, out of
# service. Set here as well as by the calling script, since the ranks inherit it.
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}

BATCH, WIDTH, WARMUP = 512, 1024, 5


def mapped_driver_files():
    """The libcuda / NVIDIA library files this process has mapped and the /dev/nvidia*
    files it holds open: through vmcuda only the guest's libcuda.so.1 may appear."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and ("libcuda.so" in parts[5] or "libnvidia" in parts[5] or parts[5].startswith("/dev/nvidia")):
                libs.add(parts[5])
    fds = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/dev/nvidia"):
            fds.add(target)
    return sorted(libs), sorted(fds)


def synchronize(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def train(rank, dev, steps):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, WIDTH),
        torch.nn.ReLU(),
        torch.nn.Linear(WIDTH, WIDTH),
        torch.nn.GELU(),
        torch.nn.Linear(WIDTH, 10),
    ).to(dev)
    ddp = DistributedDataParallel(model, device_ids=[rank] if dev.type == "cuda" else None)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    g = torch.Generator(device=dev).manual_seed(1000 + rank)
    xs = torch.randn(4, BATCH, 256, device=dev, generator=g)
    ys = torch.randint(0, 10, (4, BATCH), device=dev, generator=g)
    losses, times = [], []
    for step in range(steps):
        synchronize(dev)
        t0 = time.perf_counter()
        loss = F.cross_entropy(ddp(xs[step % 4]), ys[step % 4])
        opt.zero_grad(set_to_none=True)
        loss.backward()  # the gradients' all-reduce
        opt.step()
        losses.append(loss.item())  # item() waits for the step
        times.append(time.perf_counter() - t0)
    # Summed in one order in float64: equal on every rank when the replicas are.
    param_sum = sum(p.detach().double().sum().item() for p in model.parameters())
    return losses, times, param_sum


def worker(rank, world, backend, steps, port, timeout_s, outdir, cpu):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    r = {"rank": rank}
    try:
        if cpu:
            dev = torch.device("cpu")
        else:
            if torch.cuda.device_count() < world:
                raise RuntimeError(f"{torch.cuda.device_count()} device(s) for {world} ranks")
            torch.cuda.set_device(rank)
            dev = torch.device("cuda", rank)
        t0 = time.perf_counter()
        dist.init_process_group(backend, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout_s))
        t = torch.full((1 << 20,), float(rank + 1), device=dev)
        dist.all_reduce(t)
        r["all_reduce"] = bool((t == world * (world + 1) / 2).all().item())
        b = torch.arange(1000, device=dev, dtype=torch.float32) * (rank + 1)
        dist.broadcast(b, src=world - 1)
        r["broadcast"] = bool(torch.equal(b.cpu(), torch.arange(1000, dtype=torch.float32) * world))
        r["init_and_collectives_s"] = time.perf_counter() - t0
        r["losses"], r["step_s"], r["param_sum"] = train(rank, dev, steps)
        warm = sorted(r["step_s"][WARMUP:] or r["step_s"])
        r["step_s_median"] = warm[len(warm) // 2]
        dist.barrier()
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - the rank's failure is the result
        r["error"] = traceback.format_exc()
    r["driver_libraries"], r["nvidia_device_fds"] = mapped_driver_files()
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as f:
        json.dump(r, f)
    if "error" in r:
        print(f"rank {rank}: {r['error']}", file=sys.stderr, flush=True)
        sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=["nccl", "gloo"], required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=60, help="seconds a collective may wait")
    ap.add_argument("--cpu", action="store_true", help="gloo on the CPU (no GPU needed)")
    args = ap.parse_args()
    if args.cpu and args.backend != "gloo":
        ap.error("--cpu runs the gloo backend only")
    os.environ.update(NO_MULTICAST)
    outdir = tempfile.mkdtemp(prefix="ddp-check-")
    out = {"backend": args.backend, "world": args.world, "steps": args.steps, "torch": torch.__version__}
    t0 = time.perf_counter()
    try:
        mp.spawn(worker, args=(args.world, args.backend, args.steps, free_port(), args.timeout, outdir, args.cpu),
                 nprocs=args.world, join=True)
    except Exception as e:  # noqa: BLE001 - a rank that died is reported below
        out["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
    out["wall_s"] = time.perf_counter() - t0
    ranks = []
    for rank in range(args.world):
        try:
            with open(os.path.join(outdir, f"rank{rank}.json")) as f:
                ranks.append(json.load(f))
        except (OSError, ValueError):
            ranks.append({"rank": rank, "error": "no result: the process died before writing one"})
    out["ranks"] = ranks
    shutil.rmtree(outdir, ignore_errors=True)

    failures = 0

    def line(ok, name, detail=""):
        nonlocal failures
        failures += 0 if ok else 1
        print(f"{'PASS' if ok else 'FAIL'} {name}" + (f": {detail}" if detail else ""), flush=True)

    where = "on the CPU" if args.cpu else "one GPU each"
    print(f"backend {args.backend}, {args.world} processes, {where}, {args.steps} steps", flush=True)
    for r in ranks:
        if "error" in r:
            last = r["error"].strip().splitlines()[-1] if r["error"].strip() else ""
            line(False, f"rank {r['rank']}", last[:300])
    if all("error" not in r for r in ranks):
        line(all(r["all_reduce"] for r in ranks), "all_reduce of 1 Mi floats")
        line(all(r["broadcast"] for r in ranks), f"broadcast from rank {args.world - 1}")
        for r in ranks:
            print(f"rank {r['rank']} losses: " + " ".join(repr(v) for v in r["losses"]), flush=True)
        sums = {repr(r["param_sum"]) for r in ranks}
        line(len(sums) == 1, f"replicas agree after {args.steps} steps", "parameter sum " + " / ".join(sorted(sums)))
        line(all(r["losses"][-1] < r["losses"][0] for r in ranks), "loss went down on every rank")
        medians = [r["step_s_median"] for r in ranks]
        out["step_s_median"] = max(medians)
        out["final_losses"] = [r["losses"][-1] for r in ranks]
    out["failures"] = failures
    with open(args.json, "w") as f:
        json.dump(out, f, indent=1)
    sys.exit(1 if failures or "error" in out else 0)


if __name__ == "__main__":
    main()
