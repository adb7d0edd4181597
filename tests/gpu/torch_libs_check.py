"""NVIDIA's libraries under the stock torch wheel (and CuPy), for the guest driver.

Run natively and through vmcuda (tests/gpu/run-torch-libs.sh): torch keeps its own
CUDA runtime, cuDNN, cuFFT, cuSOLVER, cuSPARSE and Triton, and only libcuda.so.1 is
vmcuda's in the bridged run. Each check computes on the GPU, compares with the CPU (or
a reference path) itself, and records numbers the harness compares between the runs:
    python torch_libs_check.py --json OUT.json
"""
import contextlib
import time

import torch

import checklib

results = {"checks": {}, "values": {}, "errors": {}, "timings": {}}
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def record(name, ok, values):
    results["checks"][name] = "PASS" if ok else "FAIL"
    results["values"][name] = values


def close(a, b, rtol, atol):
    return torch.allclose(a.float().cpu(), b.float().cpu(), rtol=rtol, atol=atol)


def seeded(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float32).to(dtype)


torch.backends.cudnn.deterministic = True
torch.backends.cudnn.benchmark = False


@check
def conv2d():
    torch.manual_seed(0)  # the same weights in both runs
    conv = torch.nn.Conv2d(8, 16, 3, padding=1)
    x = seeded(4, 8, 32, 32, seed=1)
    ref = conv(x)
    c = conv.cuda()
    xg = x.cuda().requires_grad_()
    out = c(xg)
    out.sum().backward()
    torch.cuda.synchronize()
    ok = close(out, ref, 1e-3, 1e-3) and torch.isfinite(xg.grad).all().item()
    record("conv2d", ok, [out.sum().item(), xg.grad.abs().sum().item()])


def run_steps(opt, loss_of, steps, set_to_none=True):
    """`steps` optimizer steps on the loss `loss_of(step)` gives; the losses."""
    losses = []
    for step in range(steps):
        opt.zero_grad(set_to_none=set_to_none)
        loss = loss_of(step)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train(model, batches, steps, lr, autocast=None):
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)

    def loss_of(step):
        x, y = batches[step % len(batches)]
        ctx = torch.autocast("cuda", dtype=autocast) if autocast is not None else contextlib.nullcontext()
        with ctx:
            return torch.nn.functional.cross_entropy(model(x), y)

    return run_steps(opt, loss_of, steps)


@check
def cnn_training():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.BatchNorm2d(32), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10),
    ).cuda()
    batches = [(seeded(32, 3, 32, 32, seed=10 + i).cuda(),
                torch.randint(0, 10, (32,), generator=torch.Generator().manual_seed(i)).cuda())
               for i in range(4)]
    t0 = time.perf_counter()
    losses = train(model, batches, 30, 0.05)
    torch.cuda.synchronize()
    results["timings"]["cnn_30_steps_s"] = time.perf_counter() - t0
    record("cnn_training", losses[-1] < losses[0], losses)


@check
def sdpa_cudnn():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, k, v = (seeded(2, 8, 256, 64, dtype=torch.bfloat16, seed=s).cuda() for s in (20, 21, 22))
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    with sdpa_kernel([SDPBackend.MATH]):
        ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    torch.cuda.synchronize()
    record("sdpa_cudnn", close(out, ref, 2e-2, 2e-2), [out.float().sum().item()])


@check
def transformer_training_bf16():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(128, 4, 256, batch_first=True, dropout=0.0)
    model = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, 2), torch.nn.Flatten(), torch.nn.Linear(128 * 16, 10)).cuda()
    batches = [(seeded(16, 16, 128, seed=30 + i).cuda(),
                torch.randint(0, 10, (16,), generator=torch.Generator().manual_seed(40 + i)).cuda())
               for i in range(4)]
    t0 = time.perf_counter()
    losses = train(model, batches, 20, 0.01, autocast=torch.bfloat16)
    torch.cuda.synchronize()
    results["timings"]["transformer_20_steps_s"] = time.perf_counter() - t0
    record("transformer_training_bf16", losses[-1] < losses[0], losses)


@check
def fft():
    x = seeded(8, 1024, seed=50)
    ref = torch.fft.rfft(x)
    out = torch.fft.rfft(x.cuda())
    back = torch.fft.irfft(out, n=1024)
    ok = close(out.real, ref.real, 1e-3, 1e-3) and close(out.imag, ref.imag, 1e-3, 1e-3) and close(back, x, 1e-4, 1e-4)
    c2 = torch.fft.fft2(seeded(4, 64, 64, seed=51).cuda())
    record("fft", ok, [out.abs().sum().item(), c2.abs().sum().item()])


@check
def linalg():
    a = seeded(64, 64, dtype=torch.float64, seed=60)
    spd = a @ a.T + 64 * torch.eye(64, dtype=torch.float64)
    b = seeded(64, 3, dtype=torch.float64, seed=61)
    chol = torch.linalg.cholesky(spd.cuda())
    sol = torch.linalg.solve(spd.cuda(), b.cuda())
    s = torch.linalg.svdvals(a.cuda())
    ok = (close(chol, torch.linalg.cholesky(spd), 1e-8, 1e-8) and close(sol, torch.linalg.solve(spd, b), 1e-8, 1e-8)
          and close(s, torch.linalg.svdvals(a), 1e-8, 1e-8))
    # Large enough for cuSOLVER's blocked algorithms, which call cuBLAS (syrk, trsm,
    # gemm, their 64-bit-size entry points) for the trailing updates.
    big = seeded(768, 768, dtype=torch.float64, seed=62)
    big_spd = big @ big.T + 768 * torch.eye(768, dtype=torch.float64)
    rhs = seeded(768, 8, dtype=torch.float64, seed=63)
    big_chol = torch.linalg.cholesky(big_spd.cuda())
    big_sol = torch.linalg.solve(big.cuda(), rhs.cuda())
    q, r = torch.linalg.qr(big.cuda())
    w = torch.linalg.eigvalsh(big_spd.cuda())
    ok = (ok and close(big_chol, torch.linalg.cholesky(big_spd), 1e-6, 1e-6)
          and close(big_sol, torch.linalg.solve(big, rhs), 1e-6, 1e-6)
          and close(q @ r, big, 1e-6, 1e-6)
          and close(w, torch.linalg.eigvalsh(big_spd), 1e-6, 1e-6))
    record("linalg", ok, [chol.sum().item(), sol.sum().item(), s.sum().item(), big_chol.sum().item(),
                          big_sol.sum().item(), r.abs().sum().item(), w.sum().item()])


@check
def sparse_matmul():
    dense = seeded(256, 256, seed=70)
    dense[dense.abs() < 1.2] = 0
    sp = dense.to_sparse_csr().cuda()
    m = seeded(256, 32, seed=71).cuda()
    out = sp @ m
    coo = dense.to_sparse().cuda()
    out2 = torch.sparse.mm(coo, m)
    ref = dense @ m.cpu()
    record("sparse_matmul", close(out, ref, 1e-4, 1e-4) and close(out2, ref, 1e-4, 1e-4), [out.sum().item()])


@check
def torch_compile():
    def f(x, y):
        return torch.nn.functional.gelu(x @ y).sin().sum(dim=1) + x.cos().mean()
    x, y = seeded(64, 64, seed=80).cuda(), seeded(64, 64, seed=81).cuda()
    compiled = torch.compile(f)
    out = compiled(x, y)
    record("torch_compile", close(out, f(x, y), 1e-4, 1e-4), [out.sum().item()])


@check
def compile_cudagraphs():
    # torch.compile's "reduce-overhead" mode: Triton kernels replayed as CUDA graphs
    # (cudagraph trees: captures into torch's private pools, capture-info queries of
    # the dependencies, graph replays).
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 64)
    ).cuda()
    with torch.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(seeded(*p.shape, seed=100 + i) * 0.05)
    compiled = torch.compile(model, mode="reduce-overhead")
    x = seeded(32, 128, seed=110).cuda()
    outs = []
    with torch.no_grad():
        for step in range(6):
            out = compiled(x + step)
            outs.append(out.clone())
        ref = [model(x + step) for step in range(6)]
    ok = all(close(o, r, 1e-3, 1e-3) for o, r in zip(outs, ref))
    record("compile_cudagraphs", ok, [o.sum().item() for o in outs[-2:]])


@check
def triton_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def axpy(x_ptr, y_ptr, out_ptr, a, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = i < n
        tl.store(out_ptr + i, a * tl.load(x_ptr + i, mask=m) + tl.load(y_ptr + i, mask=m), mask=m)

    n = 100_003
    x, y = seeded(n, seed=90).cuda(), seeded(n, seed=91).cuda()
    out = torch.empty_like(x)
    axpy[(triton.cdiv(n, 1024),)](x, y, out, 2.5, n, BLOCK=1024)
    record("triton_kernel", close(out, 2.5 * x + y, 1e-6, 1e-6), [out.sum().item()])


@check
def cupy():
    import cupy as cp
    a = cp.arange(1_000_000, dtype=cp.float32) * 0.001
    b = cp.sin(a) * 2 + 1
    red = float(b.sum())
    k = cp.RawKernel(r'''
    extern "C" __global__ void scale(const float* x, float* y, float s, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = s * x[i];
    }''', "scale")
    y = cp.empty_like(a)
    k(((a.size + 255) // 256,), (256,), (a, y, cp.float32(3.0), cp.int32(a.size)))
    f = cp.fft.fft(cp.asarray(seeded(4096, seed=95).numpy()))
    import numpy as np
    fref = np.fft.fft(seeded(4096, seed=95).numpy())
    ok = (abs(red - float(np.sum(np.sin(np.arange(1_000_000, dtype=np.float32) * np.float32(0.001)) * 2 + 1))) < 1.0
          and bool(cp.allclose(y, 3 * a)) and np.allclose(cp.asnumpy(f), fref, rtol=1e-3, atol=1e-2))
    record("cupy", ok, [red, float(y.sum()), float(cp.abs(f).sum())])


@check
def rnn_cudnn():
    # cuDNN's RNNs look up cuBLASLt internals (cublasLtMatmulDescInit_internal).
    torch.manual_seed(0)
    out_sums = []
    ok = True
    for kind in (torch.nn.LSTM, torch.nn.GRU):
        rnn = kind(32, 64, num_layers=2, batch_first=True)
        x = seeded(4, 20, 32, seed=200)
        ref, _ = rnn(x)
        g = rnn.cuda()
        xg = x.cuda().requires_grad_()
        out, _ = g(xg)
        out.sum().backward()
        torch.cuda.synchronize()
        ok = ok and close(out, ref, 1e-3, 1e-3) and bool(torch.isfinite(xg.grad).all())
        out_sums += [out.sum().item(), xg.grad.abs().sum().item()]
    record("rnn_cudnn", ok, out_sums)


@check
def cudnn_benchmark_conv():
    # Benchmark mode times several algorithms (cuBLASLt among them) and keeps the fastest.
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = False
    try:
        torch.manual_seed(0)
        conv = torch.nn.Conv2d(16, 32, 3, padding=1)
        x = seeded(8, 16, 64, 64, seed=210)
        ref = conv(x)
        c = conv.cuda()
        xg = x.cuda().requires_grad_()
        t0 = time.perf_counter()
        out = c(xg)
        out.sum().backward()
        torch.cuda.synchronize()
        results["timings"]["cudnn_benchmark_first_step_s"] = time.perf_counter() - t0
        ok = close(out, ref, 1e-2, 1e-2) and bool(torch.isfinite(xg.grad).all())
        record("cudnn_benchmark_conv", ok, [round(out.sum().item(), 1)])
    finally:
        torch.backends.cudnn.benchmark = False
        torch.backends.cudnn.deterministic = True


@check
def amp_gradscaler():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cuda")
    x = seeded(64, 64, seed=220).cuda()
    y = torch.randint(0, 10, (64,), generator=torch.Generator().manual_seed(221)).cuda()
    losses = []
    for _ in range(15):
        opt.zero_grad()
        with torch.autocast("cuda", dtype=torch.float16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    record("amp_gradscaler", losses[-1] < losses[0], losses[::3] + [scaler.get_scale()])


@check
def graphed_callables():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 10)).cuda()
    x = seeded(32, 64, seed=230).cuda()
    y = torch.randint(0, 10, (32,), generator=torch.Generator().manual_seed(231)).cuda()
    graphed = torch.cuda.make_graphed_callables(model, (x.clone().requires_grad_(),))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    # Gradients stay allocated: the graphed backward writes into the same tensors.
    losses = run_steps(opt, lambda _: torch.nn.functional.cross_entropy(graphed(x), y), 10,
                       set_to_none=False)
    record("graphed_callables", losses[-1] < losses[0], losses)


@check
def compile_max_autotune():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 64)).cuda()
    x = seeded(128, 256, seed=240).cuda()
    compiled = torch.compile(model, mode="max-autotune-no-cudagraphs")
    with torch.no_grad():
        out = compiled(x)
        ref = model(x)
    record("compile_max_autotune", close(out, ref, 1e-2, 1e-2), [round(out.sum().item(), 2)])


@check
def nccl_world1():
    import tempfile
    import torch.distributed as dist
    store = tempfile.mktemp(prefix="vmcuda-nccl-")
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1,
                            device_id=torch.device("cuda:0"))
    try:
        t = torch.arange(16 << 20, dtype=torch.float32, device="cuda")  # 64 MiB
        dist.all_reduce(t)
        b = torch.zeros(4, device="cuda") + 7
        dist.broadcast(b, 0)
        torch.cuda.synchronize()
        ok = bool((t[:4].cpu() == torch.arange(4, dtype=torch.float32)).all()) and b.sum().item() == 28
        record("nccl_world1", ok, [t.sum().item()])
    finally:
        dist.destroy_process_group()


@check
def sdpa_backends():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q, k, v = (seeded(2, 8, 128, 64, dtype=torch.float16, seed=s).cuda() for s in (250, 251, 252))
    with sdpa_kernel([SDPBackend.MATH]):
        ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    sums, ok = [], True
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION):
        with sdpa_kernel([backend]):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        ok = ok and close(out, ref, 2e-2, 2e-2)
        sums.append(round(out.float().sum().item(), 2))
    record("sdpa_backends", ok, sums)


@check
def hf_gpt2_training():
    # A model built from its configuration (no weights are fetched).
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_head=4, n_embd=128, vocab_size=1000, n_positions=64,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 1000, (8, 64), generator=torch.Generator().manual_seed(260)).cuda()
    losses = run_steps(opt, lambda _: model(ids, labels=ids).loss, 10)
    record("hf_gpt2_training", losses[-1] < losses[0], losses)


@check
def timm_training():
    import timm
    torch.manual_seed(0)
    model = timm.create_model("resnet18", pretrained=False, num_classes=10).cuda()
    batches = [(seeded(8, 3, 64, 64, seed=270 + i).cuda(),
                torch.randint(0, 10, (8,), generator=torch.Generator().manual_seed(280 + i)).cuda())
               for i in range(2)]
    losses = train(model, batches, 8, 0.01)
    record("timm_training", losses[-1] < losses[0], losses)


@check
def cuda_python():
    # NVIDIA's cuda-python: the driver API through cuda.bindings, and NVRTC.
    import numpy as np
    from cuda.bindings import driver as cu, nvrtc
    def ok_(r):
        err = r[0]
        assert int(err) == 0, f"CUDA error {err}"
        return r[1:] if len(r) > 2 else (r[1] if len(r) == 2 else None)
    ok_(cu.cuInit(0))
    dev = ok_(cu.cuDeviceGet(0))
    ctx = ok_(cu.cuDevicePrimaryCtxRetain(dev))
    ok_(cu.cuCtxSetCurrent(ctx))
    src = b'extern "C" __global__ void twice(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }'
    prog = ok_(nvrtc.nvrtcCreateProgram(src, b"twice.cu", 0, [], []))
    attr = cu.CUdevice_attribute
    major = ok_(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
    minor = ok_(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
    ok_(nvrtc.nvrtcCompileProgram(prog, 1, [f"--gpu-architecture=sm_{major}{minor}".encode()]))
    size = ok_(nvrtc.nvrtcGetCUBINSize(prog))
    cubin = b" " * size
    ok_(nvrtc.nvrtcGetCUBIN(prog, cubin))
    module = ok_(cu.cuModuleLoadData(cubin))
    fn = ok_(cu.cuModuleGetFunction(module, b"twice"))
    n = 1 << 16
    host = np.arange(n, dtype=np.float32)
    dptr = ok_(cu.cuMemAlloc(host.nbytes))
    ok_(cu.cuMemcpyHtoD(dptr, host.ctypes.data, host.nbytes))
    arg_ptr = np.array([int(dptr)], dtype=np.uint64)
    arg_n = np.array([n], dtype=np.int32)
    args = np.array([arg_ptr.ctypes.data, arg_n.ctypes.data], dtype=np.uint64)
    ok_(cu.cuLaunchKernel(fn, n // 256, 1, 1, 256, 1, 1, 0, 0, args.ctypes.data, 0))
    out = np.empty_like(host)
    ok_(cu.cuMemcpyDtoH(out.ctypes.data, dptr, host.nbytes))
    ok_(cu.cuMemFree(dptr))
    ok_(cu.cuModuleUnload(module))
    record("cuda_python", bool((out == 2 * host).all()), [float(out.sum())])


@check
def numba_cuda():
    import numpy as np
    from numba import cuda

    @cuda.jit
    def add(x, y, out):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = x[i] + y[i]

    n = 1 << 16
    x, y = np.arange(n, dtype=np.float32), np.ones(n, dtype=np.float32)
    out = cuda.device_array(n, dtype=np.float32)
    add[(n + 255) // 256, 256](cuda.to_device(x), cuda.to_device(y), out)
    res = out.copy_to_host()
    record("numba_cuda", bool((res == x + y).all()), [float(res.sum())])


def describe():
    results["framework"] = f"torch {torch.__version__}"
    results["device"] = torch.cuda.get_device_name(0)


if __name__ == "__main__":
    checklib.main(CHECKS, results, describe)
