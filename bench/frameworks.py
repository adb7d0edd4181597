"""Small work and start-up through the frameworks, for bench/run-frameworks.sh: one row
per process (`--only ROW`), so start-up rows start cold. Prints `RESULT <row> <value>
<unit>` lines; the steady rows give the median of many repetitions, each ending in the
synchronize a framework's own benchmarking does. `--list` names the rows.

Start-up rows time from the process's start (VMCUDA_BENCH_T0, nanoseconds since the
epoch, set by the runner just before it starts the interpreter) or from just before
the first use of a library, in a process that already has a CUDA context (so the row
is the library's own start-up: loading its modules and its first calls)."""
import argparse
import os
import statistics
import sys
import time

REPS = int(os.environ.get("VMCUDA_BENCH_REPS", "300"))


def result(name, value, unit):
    print(f"RESULT {name} {value:.4f} {unit}", flush=True)


def median_us(step, sync, reps=REPS, warm=20):
    for _ in range(warm):
        step()
        sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def since_start_ms():
    t0 = int(os.environ.get("VMCUDA_BENCH_T0", "0"))
    return (time.time_ns() - t0) / 1e6 if t0 else float("nan")


def torch_ready():
    import torch

    torch.ones(1, device="cuda").add_(1).item()
    return torch


def launch_sync():
    torch = torch_ready()
    x = torch.zeros(1, device="cuda")
    result("launch_sync", median_us(lambda: x.add_(1), torch.cuda.synchronize), "us")


def cupy_rawkernel():
    import cupy as cp

    k = cp.RawKernel(r'extern "C" __global__ void inc(float* x) { x[threadIdx.x] += 1.0f; }', "inc")
    x = cp.zeros(32, dtype=cp.float32)
    dev = cp.cuda.Device()
    us = median_us(lambda: k((1,), (32,), (x,)), dev.synchronize)
    assert float(x[0]) > 0
    result("cupy_rawkernel_sync", us, "us")


def triton_kernel():
    torch = torch_ready()
    import triton
    import triton.language as tl

    @triton.jit
    def add(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(y_ptr + i, tl.load(x_ptr + i, mask=m) + 1.0, mask=m)

    x = torch.randn(4096, device="cuda")
    y = torch.empty_like(x)
    us = median_us(lambda: add[(4,)](x, y, x.numel(), BLOCK=1024), torch.cuda.synchronize)
    assert torch.allclose(y, x + 1)
    result("triton_kernel_sync", us, "us")


def small_mlp(torch):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)
    ).cuda()


def graph_replay():
    torch = torch_ready()
    model = small_mlp(torch)
    x = torch.randn(32, 64, device="cuda", requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(model, (x,))

    def step():
        graphed(x).sum().backward()

    result("graph_replay_fwd_bwd", median_us(step, torch.cuda.synchronize), "us")


def compiled_call():
    torch = torch_ready()
    model = torch.compile(small_mlp(torch))
    x = torch.randn(32, 64, device="cuda")
    with torch.no_grad():
        result("compiled_call_sync", median_us(lambda: model(x), torch.cuda.synchronize), "us")


def cudnn_benchmark():
    torch = torch_ready()
    torch.backends.cudnn.benchmark = True
    conv = torch.nn.Conv2d(16, 32, 3, padding=1).cuda()
    x = torch.randn(8, 16, 32, 32, device="cuda", requires_grad=True)

    def step():
        conv(x).sum().backward()

    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    result("cudnn_benchmark_first_step", (time.perf_counter() - t0) * 1e3, "ms")
    result("cudnn_benchmark_step", median_us(step, torch.cuda.synchronize, reps=REPS // 3), "us")


def nccl_allreduce():
    torch = torch_ready()
    import tempfile

    import torch.distributed as dist

    store = tempfile.mktemp(prefix="vmcuda-bench-nccl-")
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    try:
        t = torch.ones(16 << 20, device="cuda")
        result("nccl_allreduce_64mib", median_us(lambda: dist.all_reduce(t), torch.cuda.synchronize,
                                                 reps=REPS // 3) / 1e3, "ms")
    finally:
        dist.destroy_process_group()


def import_to_first_result():
    import torch

    torch.ones(1, device="cuda").add_(1).item()
    result("import_torch_to_first_result", since_start_ms(), "ms")


def first_use(name, setup, use):
    torch = torch_ready()
    args = setup(torch)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    use(torch, *args)
    torch.cuda.synchronize()
    result(name, (time.perf_counter() - t0) * 1e3, "ms")


def first_cublas():
    first_use("cublas_first_use",
              lambda t: (t.randn(256, 256, device="cuda"),),
              lambda t, a: (a @ a).sum().item())


def first_cufft():
    first_use("cufft_first_use",
              lambda t: (t.randn(4096, device="cuda"),),
              lambda t, a: t.fft.fft(a).abs().sum().item())


def first_cudnn():
    first_use("cudnn_first_use",
              lambda t: (t.nn.Conv2d(3, 8, 3).cuda(), t.randn(2, 3, 32, 32, device="cuda")),
              lambda t, conv, x: conv(x).sum().item())


def jax_jit():
    import jax
    import jax.numpy as jnp

    jax.device_put(jnp.ones(4)).block_until_ready()
    t0 = time.perf_counter()
    f = jax.jit(lambda a, b: jnp.tanh(a @ b).sum())
    a = jnp.ones((128, 128))
    f(a, a).block_until_ready()
    result("jax_first_jit", (time.perf_counter() - t0) * 1e3, "ms")

    @jax.jit
    def step(w, x):
        return w - 0.01 * jax.grad(lambda w: jnp.mean((jnp.tanh(x @ w)) ** 2))(w)

    w = jnp.ones((128, 128)) * 0.01
    x = jnp.ones((64, 128))
    state = [w]

    def one():
        state[0] = step(state[0], x)

    result("jax_jitted_step", median_us(one, lambda: state[0].block_until_ready()), "us")
    result("jax_process_to_first_result", since_start_ms(), "ms")


ROWS = {
    "launch_sync": launch_sync,
    "cupy_rawkernel": cupy_rawkernel,
    "triton_kernel": triton_kernel,
    "graph_replay": graph_replay,
    "compiled_call": compiled_call,
    "cudnn_benchmark": cudnn_benchmark,
    "nccl_allreduce": nccl_allreduce,
    "import_to_first_result": import_to_first_result,
    "first_cublas": first_cublas,
    "first_cufft": first_cufft,
    "first_cudnn": first_cudnn,
    "jax_jit": jax_jit,
}

# Rows the JAX interpreter runs (the runner's VMCUDA_JAX_PYTHON); the rest need torch.
JAX_ROWS = {"jax_jit"}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--only")
    p.add_argument("--list", action="store_true")
    p.add_argument("--jax", action="store_true", help="with --list: the rows of the JAX interpreter")
    a = p.parse_args()
    if a.list:
        print(" ".join(r for r in ROWS if (r in JAX_ROWS) == a.jax))
        return
    ROWS[a.only]()


if __name__ == "__main__":
    sys.exit(main())
