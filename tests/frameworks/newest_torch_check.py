"""The newest torch from PyPI through vmcuda's driver, on whichever executor serves
(tests/frameworks/newest-torch.sh runs it against the host-memory test double: copies,
allocations and streams are real there, kernels are not run, so only what moves data is
checked). Prints each step's time and exits non-zero on a wrong answer."""
import sys
import time

t0 = time.time()
import torch  # noqa: E402

steps = []


def step(name, ok):
    steps.append((name, ok, time.time() - t0))
    print(f"{name}: {'ok' if ok else 'WRONG'} ({time.time() - t0:.1f} s since start)", flush=True)


step(f"import torch {torch.__version__} (CUDA {torch.version.cuda})", True)
step("torch.cuda.is_available()", torch.cuda.is_available())
step(f"device 0: {torch.cuda.get_device_name(0)}", torch.cuda.device_count() >= 1)
x = torch.arange(1 << 20, dtype=torch.float32)
g = x.cuda()
step("first copy to the GPU", g.device.type == "cuda")
step("copy back, equal", bool(torch.equal(g.cpu(), x)))
a = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
a.copy_(torch.full((64 << 20,), 7, dtype=torch.uint8))
sevens = int(a[-1].item()) == 7
a.zero_()  # cudaMemsetAsync, no kernel (the double runs none)
step("64 MiB allocation, copy and memset", sevens and int(a[-1].item()) == 0)
s = torch.cuda.Stream()
pinned = x.pin_memory()
with torch.cuda.stream(s):
    h = torch.empty(1 << 20, device="cuda")
    h.copy_(pinned, non_blocking=True)
    back = torch.empty_like(pinned).pin_memory()
    back.copy_(h, non_blocking=True)
s.synchronize()
step("pinned copies on a stream", bool(torch.equal(back, x)))
e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
e0.record()
g2 = g.clone()
e1.record()
e1.synchronize()
step("events and a device-to-device copy", bool(torch.equal(g2.cpu(), x)) and e0.elapsed_time(e1) >= 0)
del a
torch.cuda.empty_cache()
step("memory back after empty_cache", torch.cuda.memory_reserved() < (64 << 20))
sys.exit(0 if all(ok for _, ok, _ in steps) else 1)
