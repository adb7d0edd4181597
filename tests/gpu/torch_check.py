#!/usr/bin/env python3
"""torch through vmcuda: the checks tests/gpu/run-torch.sh runs natively and bridged.

stdout carries only what must be identical between a native and a bridged run: one
line per check, PASS/FAIL against the CPU (or against exact expectations), and the
values that come from the GPU (MLP losses as exact float reprs, checksums). Timings,
library paths and anything that legitimately differs go to the JSON file named by
--json. The exit status is 1 when any check FAILs.

  python torch_check.py --json out.json [--steps N] [--opinfo N]
"""

import argparse
import json
import os
import subprocess
import sys
import time
import traceback

import torch

results = {"checks": {}, "timings": {}, "notes": []}
failures = 0


CHECKS = []


def check(name):
    """Register a named check, run in order by `run_checks`."""

    def wrap(fn):
        CHECKS.append((name, fn))
        return fn

    return wrap


def run_checks():
    """Run every check; print PASS/FAIL; an exception is a FAIL with its type."""
    global failures
    for name, fn in CHECKS:
        try:
            detail = fn()
            line = f"PASS {name}" + (f": {detail}" if detail else "")
            results["checks"][name] = "PASS"
        except Exception as e:  # noqa: BLE001 - every failure is reported, none hidden
            failures += 1
            first = str(e).splitlines()[0][:200] if str(e) else ""
            line = f"FAIL {name}: {type(e).__name__}: {first}"
            results["checks"][name] = line
            results["notes"].append(f"{name}:\n{traceback.format_exc()}")
        print(line, flush=True)


def close(a, b, rtol, atol):
    torch.testing.assert_close(a.cpu(), b.cpu(), rtol=rtol, atol=atol, check_dtype=False)


def sync():
    torch.cuda.synchronize()


dev = torch.device("cuda")


@check("device")
def _():
    assert torch.cuda.is_available(), "torch.cuda.is_available() is False"
    n = torch.cuda.device_count()
    p = torch.cuda.get_device_properties(0)
    return f"{n} device(s), {p.name}, cc {p.major}.{p.minor}, {p.multi_processor_count} SMs, {p.total_memory >> 30} GiB"


@check("creation")
def _():
    z = torch.zeros(1000, device=dev)
    o = torch.ones(3, 4, device=dev, dtype=torch.float16)
    a = torch.arange(0, 1000, 3, device=dev)
    f = torch.full((7, 9), 2.5, device=dev, dtype=torch.float64)
    e = torch.eye(33, device=dev)
    lin = torch.linspace(-1, 1, 101, device=dev)
    close(z, torch.zeros(1000), 0, 0)
    close(o, torch.ones(3, 4, dtype=torch.float16), 0, 0)
    close(a, torch.arange(0, 1000, 3), 0, 0)
    close(f, torch.full((7, 9), 2.5, dtype=torch.float64), 0, 0)
    close(e, torch.eye(33), 0, 0)
    close(lin, torch.linspace(-1, 1, 101), 1e-6, 1e-6)
    t = torch.tensor([[1, 2], [3, 4]], device=dev)
    assert t.sum().item() == 10
    g = torch.Generator(device=dev).manual_seed(1234)
    r = torch.rand(4096, device=dev, generator=g)
    n = torch.randn(4096, device=dev, generator=g)
    assert 0 <= r.min().item() and r.max().item() < 1
    # The generator's numbers are the GPU's: printed exactly, compared with the native run.
    return f"rand sum {r.double().sum().item()!r}, randn sum {n.double().sum().item()!r}"


@check("host<->device copies")
def _():
    cpu = torch.randn(1 << 20, generator=torch.Generator().manual_seed(3))
    d = cpu.to(dev)
    back = d.cpu()
    assert torch.equal(cpu, back)
    pinned = cpu.pin_memory()
    d2 = torch.empty_like(d)
    d2.copy_(pinned, non_blocking=True)
    out = torch.empty(cpu.shape, pin_memory=True)
    out.copy_(d2 * 2, non_blocking=True)
    sync()
    assert torch.equal(out, cpu * 2)
    big = torch.arange(64 << 20, dtype=torch.uint8).to(dev)
    assert big.cpu()[-1].item() == ((64 << 20) - 1) % 256


@check("elementwise float32 vs CPU")
def _():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(10_000, generator=g) * 4 - 2
    y = torch.rand(10_000, generator=g) + 0.5
    xd, yd = x.to(dev), y.to(dev)
    ops = {
        "add": lambda a, b: a + b,
        "mul": lambda a, b: a * b,
        "div": lambda a, b: a / b,
        "exp": lambda a, b: torch.exp(a),
        "log": lambda a, b: torch.log(b),
        "sin": lambda a, b: torch.sin(a),
        "tanh": lambda a, b: torch.tanh(a),
        "sigmoid": lambda a, b: torch.sigmoid(a),
        "relu": lambda a, b: torch.relu(a),
        "gelu": lambda a, b: torch.nn.functional.gelu(a),
        "pow": lambda a, b: torch.pow(b, a),
        "where": lambda a, b: torch.where(a > 0, a, b),
        "clamp": lambda a, b: a.clamp(-0.5, 0.7),
        "sqrt": lambda a, b: torch.sqrt(b),
        "erf": lambda a, b: torch.erf(a),
    }
    for name, op in ops.items():
        try:
            close(op(xd, yd), op(x, y), 1e-5, 1e-5)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None
    h = xd.half()
    close(torch.exp(h), torch.exp(x.half().float()), 2e-3, 2e-3)
    b = xd.bfloat16() * 3
    close(b, (x.bfloat16() * 3).float(), 1e-2, 1e-2)
    return f"{len(ops)} ops + fp16/bf16"


@check("special functions (jiterator, NVRTC + driver API)")
def _():
    x = torch.linspace(0.1, 10, 1000, dtype=torch.float32)
    for name in ["bessel_j0", "bessel_j1", "chebyshev_polynomial_t"]:
        fn = getattr(torch.special, name)
        if name == "chebyshev_polynomial_t":
            close(fn(x.to(dev) / 10, 5), fn(x / 10, 5), 1e-4, 1e-4)
        else:
            close(fn(x.to(dev)), fn(x), 1e-4, 1e-5)


@check("reductions vs CPU")
def _():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(257, 1031, generator=g, dtype=torch.float64)
    xd = x.to(dev)
    close(xd.sum(), x.sum(), 1e-10, 1e-10)
    close(xd.mean(dim=1), x.mean(dim=1), 1e-10, 1e-10)
    close(xd.max(dim=0).values, x.max(dim=0).values, 0, 0)
    close(xd.min(), x.min(), 0, 0)
    close(xd.argmax(dim=1), x.argmax(dim=1), 0, 0)
    close(xd.std(dim=0), x.std(dim=0), 1e-10, 1e-10)
    close(xd.var(), x.var(), 1e-10, 1e-10)
    close(xd.norm(), x.norm(), 1e-10, 1e-10)
    close(xd.cumsum(dim=1), x.cumsum(dim=1), 1e-9, 1e-9)
    close(torch.softmax(xd, dim=1), torch.softmax(x, dim=1), 1e-10, 1e-12)
    close(torch.logsumexp(xd, dim=0), torch.logsumexp(x, dim=0), 1e-10, 1e-10)
    v, i = xd.topk(5, dim=1)
    cv, ci = x.topk(5, dim=1)
    close(v, cv, 0, 0)
    s, _ = xd.flatten().sort()
    close(s, x.flatten().sort().values, 0, 0)
    f = x.float().to(dev)
    close(f.sum(dim=1), x.float().sum(dim=1), 1e-4, 1e-3)
    nz = (xd > 2).nonzero()
    close(nz, (x > 2).nonzero(), 0, 0)
    return f"sum {xd.sum().item():.6f}"


@check("indexing, cat, scatter/gather")
def _():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(100, 50, generator=g)
    idx = torch.randint(0, 100, (300,), generator=g)
    xd, idxd = x.to(dev), idx.to(dev)
    close(xd[idxd], x[idx], 0, 0)
    close(torch.cat([xd, xd * 2], dim=1), torch.cat([x, x * 2], dim=1), 0, 0)
    src = torch.randn(100, 50, generator=g)
    ind = torch.randint(0, 100, (100, 50), generator=g)
    close(torch.gather(xd, 0, ind.to(dev)), torch.gather(x, 0, ind), 0, 0)
    close(
        torch.zeros(100, 50, device=dev).scatter_add_(0, ind.to(dev), src.to(dev)),
        torch.zeros(100, 50).scatter_add_(0, ind, src),
        1e-5,
        1e-5,
    )
    m = xd > 0
    close(xd[m], x[x > 0], 0, 0)
    close(xd.t().contiguous(), x.t().contiguous(), 0, 0)


MATMUL_TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (1e-2, 1e-2), torch.bfloat16: (4e-2, 4e-2)}


def matmul_check(dtype):
    g = torch.Generator().manual_seed(4)
    worst = 0.0
    for m, k, n in [(64, 64, 64), (128, 300, 77), (1024, 1024, 1024), (5, 4096, 3)]:
        a = torch.randn(m, k, generator=g) / k**0.5
        b = torch.randn(k, n, generator=g)
        ref = a.to(dtype).double() @ b.to(dtype).double()
        out = (a.to(dev, dtype) @ b.to(dev, dtype)).double()
        rtol, atol = MATMUL_TOL[dtype]
        close(out, ref, rtol, atol)
        worst = max(worst, (out.cpu() - ref).abs().max().item())
    # Batched, transposed and with bias (addmm: the cuBLASLt epilogue path).
    a = torch.randn(8, 33, 65, generator=g)
    b = torch.randn(8, 65, 17, generator=g)
    ref = a.to(dtype).double() @ b.to(dtype).double()
    close((a.to(dev, dtype) @ b.to(dev, dtype)).double(), ref, *MATMUL_TOL[dtype])
    at = torch.randn(200, 100, generator=g)
    close((at.to(dev, dtype).t() @ at.to(dev, dtype)).double(), at.to(dtype).double().t() @ at.to(dtype).double(), MATMUL_TOL[dtype][0], MATMUL_TOL[dtype][1] * 20)
    x = torch.randn(64, 256, generator=g)
    w = torch.randn(128, 256, generator=g) / 16
    bias = torch.randn(128, generator=g)
    ref = torch.nn.functional.linear(x.to(dtype).double(), w.to(dtype).double(), bias.to(dtype).double())
    out = torch.nn.functional.linear(x.to(dev, dtype), w.to(dev, dtype), bias.to(dev, dtype))
    close(out.double(), ref, *MATMUL_TOL[dtype])
    out = torch.addmm(bias.to(dev, dtype), x.to(dev, dtype), w.to(dev, dtype).t())
    close(out.double(), ref, *MATMUL_TOL[dtype])
    return f"max abs error {worst:.3g}"


for _dt in (torch.float32, torch.float16, torch.bfloat16):
    check(f"matmul {str(_dt).removeprefix('torch.')} vs CPU")(lambda _dt=_dt: matmul_check(_dt))


@check("float64 matmul and linalg")
def _():
    g = torch.Generator().manual_seed(5)
    a = torch.randn(50, 50, generator=g, dtype=torch.float64)
    close(a.to(dev) @ a.to(dev), a @ a, 1e-10, 1e-10)
    v = torch.randn(50, generator=g, dtype=torch.float64)
    close(torch.mv(a.to(dev), v.to(dev)), torch.mv(a, v), 1e-10, 1e-10)
    close(torch.dot(v.to(dev), v.to(dev)), torch.dot(v, v), 1e-10, 1e-10)


@check("streams, events, CUDA graph")
def _():
    s = torch.cuda.Stream()
    x = torch.ones(1 << 20, device=dev)
    e0 = torch.cuda.Event(enable_timing=True)
    e1 = torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(s):
        e0.record()
        y = x * 3
        e1.record()
    e1.synchronize()
    assert e0.elapsed_time(e1) >= 0
    torch.cuda.current_stream().wait_stream(s)
    assert y.sum().item() == 3 * (1 << 20)
    # Capture: a static input, two kernels, replayed.
    static_in = torch.zeros(1024, device=dev)
    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        static_out = static_in * 2 + 1
    torch.cuda.current_stream().wait_stream(warm)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = static_in * 2 + 1
    for i in range(5):
        static_in.fill_(float(i))
        graph.replay()
        assert static_out[0].item() == 2 * i + 1
    return "graph replayed 5 times"


def mlp(steps, batch, width):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, width),
        torch.nn.ReLU(),
        torch.nn.Linear(width, width),
        torch.nn.GELU(),
        torch.nn.Linear(width, 10),
    ).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator(device=dev).manual_seed(7)
    xs = torch.randn(8, batch, 256, device=dev, generator=g)
    ys = torch.randint(0, 10, (8, batch), device=dev, generator=g)
    losses = []
    times = []
    for step in range(steps):
        sync()
        t0 = time.perf_counter()
        x, y = xs[step % 8], ys[step % 8]
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # the item() synchronizes: the step is complete
        times.append(time.perf_counter() - t0)
    return losses, times


@check("MLP training (Adam, fp32)")
def _():
    steps = ARGS.steps
    losses, times = mlp(steps, 512, 1024)
    assert losses[-1] < losses[0], "loss did not go down"
    # The losses as exact reprs: compared with the native run's line by line.
    print("mlp losses: " + " ".join(repr(l) for l in losses), flush=True)
    warm = times[5:] or times
    results["timings"]["mlp_step_s_median"] = sorted(warm)[len(warm) // 2]
    results["timings"]["mlp_step_s_mean"] = sum(warm) / len(warm)
    return f"{steps} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}"


@check("MLP training (autocast bf16)")
def _():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator(device=dev).manual_seed(9)
    x = torch.randn(256, 128, device=dev, generator=g)
    y = torch.randint(0, 4, (256,), device=dev, generator=g)
    losses = []
    for _ in range(20):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    print("bf16 losses: " + " ".join(repr(l) for l in losses), flush=True)


@check("conv2d without cuDNN vs CPU")
def _():
    g = torch.Generator().manual_seed(6)
    x = torch.randn(2, 3, 16, 16, generator=g)
    w = torch.randn(4, 3, 3, 3, generator=g)
    with torch.backends.cudnn.flags(enabled=False):
        out = torch.nn.functional.conv2d(x.to(dev), w.to(dev), padding=1)
    close(out, torch.nn.functional.conv2d(x, w, padding=1), 1e-4, 1e-4)


@check("memory stats and empty_cache")
def _():
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    t = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    assert torch.cuda.memory_allocated() - base == 256 << 20
    del t
    torch.cuda.empty_cache()
    assert torch.cuda.memory_allocated() == base
    free, total = torch.cuda.mem_get_info()
    assert 0 < free <= total


EXPANDABLE = r"""
import torch
ts = [torch.full((1 << 20,), float(i), device="cuda") for i in range(40)]
total = sum(t.sum().item() for t in ts)
del ts[::2]
torch.cuda.empty_cache()
g = torch.Generator().manual_seed(1)
a = torch.randn(700, 500, generator=g)
ok = torch.allclose((a.cuda() @ a.cuda().T).cpu(), a @ a.T, rtol=1e-4, atol=1e-3)
segments = torch.cuda.memory._snapshot()["segments"]
expandable = sum(1 for s in segments if s.get("is_expandable"))
print(f"sum {total!r}, matmul matches the CPU: {ok}, expandable segments: {expandable > 0}")
"""


@check("expandable segments (the driver's virtual-memory calls, through cudaGetDriverEntryPointByVersion)")
def _():
    # The allocator setting is read at CUDA start-up: a child process of its own, with
    # this process's environment (through vmcuda when this run is).
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    r = subprocess.run([sys.executable, "-c", EXPANDABLE], env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError((r.stderr.strip().splitlines() or ["no output"])[-1])
    out = r.stdout.strip()
    assert out.endswith("matmul matches the CPU: True, expandable segments: True"), out
    return out


def cudnn_probe():
    """cuDNN: NVIDIA's own, natively and on vmcuda's driver (vmcuda-run preloads no
    cuDNN of its own); a failure must be a clear Python error, never a crash. Reported
    in the JSON, not on stdout."""
    g = torch.Generator().manual_seed(6)
    x = torch.randn(2, 3, 16, 16, generator=g).to(dev)
    w = torch.randn(4, 3, 3, 3, generator=g).to(dev)
    try:
        with torch.backends.cudnn.flags(enabled=True):
            torch.nn.functional.conv2d(x, w, padding=1)
            sync()
        results["cudnn"] = "works"
    except Exception as e:  # noqa: BLE001
        results["cudnn"] = f"{type(e).__name__}: {str(e)[:300]}"


def opinfo_sweep(limit):
    """torch's own OpInfo database (torch.testing._internal.common_methods_invocations):
    for each op, its float32 sample inputs run on CUDA and on the CPU, compared with the
    op's own tolerances. Counts are compared between the native and the bridged run."""
    from torch.testing._internal.common_methods_invocations import op_db

    # Ops whose output is uninitialized memory: comparing it with the CPU's says only
    # what the allocator happened to hand out (they matched natively by luck once).
    uninitialized = {"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided"}
    passed, failed, errors, skipped = [], [], [], []
    for op in op_db[:limit]:
        name = op.name + (("." + op.variant_test_name) if op.variant_test_name else "")
        if torch.float32 not in op.supported_dtypes("cuda") or op.name in uninitialized:
            skipped.append(name)
            continue
        try:
            samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=False))[:3]
        except Exception:  # noqa: BLE001
            skipped.append(name)
            continue
        ok = True
        try:
            for s in samples:
                cpu_out = op(s.input, *s.args, **s.kwargs)
                ds = s.transform(lambda t: t.to(dev) if isinstance(t, torch.Tensor) else t)
                dev_out = op(ds.input, *ds.args, **ds.kwargs)
                torch.testing.assert_close(dev_out, cpu_out, rtol=1e-3, atol=1e-3, check_device=False, equal_nan=True)
        except AssertionError:
            ok = False
            failed.append(name)
        except Exception as e:  # noqa: BLE001
            ok = False
            errors.append(f"{name}: {type(e).__name__}")
        if ok:
            passed.append(name)
    sync()
    print(f"opinfo: {len(passed)} passed, {len(failed)} mismatched, {len(errors)} raised, {len(skipped)} skipped of {min(limit, len(op_db))} ops", flush=True)
    results["opinfo"] = {"passed": passed, "failed": failed, "errors": errors, "skipped": skipped}


def loaded_driver_libraries():
    """Which libcuda / NVIDIA device files this process has mapped: through vmcuda only
    the guest's own libcuda.so.1 may appear and no /dev/nvidia* at all."""
    seen = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and ("libcuda.so" in parts[5] or parts[5].startswith("/dev/nvidia") or "libnvidia" in parts[5]):
                seen.add(parts[5])
    fds = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("/dev/nvidia"):
            fds.add(target)
    return sorted(seen), sorted(fds)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--opinfo", type=int, default=0, help="run the OpInfo sweep over the first N ops")
    ARGS = ap.parse_args()
    START = time.perf_counter()
    run_checks()
    if ARGS.opinfo:
        try:
            opinfo_sweep(ARGS.opinfo)
        except Exception as e:  # noqa: BLE001
            failures += 1
            print(f"FAIL opinfo sweep: {type(e).__name__}: {e}", flush=True)
            results["notes"].append(traceback.format_exc())
    cudnn_probe()
    results["timings"]["total_s"] = time.perf_counter() - START
    results["driver_libraries"], results["nvidia_device_fds"] = loaded_driver_libraries()
    results["torch"] = torch.__version__
    results["failures"] = failures
    with open(ARGS.json, "w") as f:
        json.dump(results, f, indent=1)
    sys.exit(1 if failures else 0)
