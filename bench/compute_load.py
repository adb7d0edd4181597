"""Load for the compute-share runs (tests/gpu/run-compute.sh).

compute_load.py saturate START SECONDS: fp16 4096x4096 matmuls from START (Unix time)
for SECONDS; prints "matmuls_per_s X".
compute_load.py decode START SECONDS: single-token steps (12 layers of a 2048-wide
linear, then .item()) from START for SECONDS; prints per-token latency percentiles.
"""
import sys
import time

import torch

mode, start, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
dev = "cuda"
if mode == "saturate":
    a = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
    b = torch.randn(4096, 4096, device=dev, dtype=torch.float16)
    for _ in range(3):
        c = a @ b
    torch.cuda.synchronize()
    while time.time() < start:
        time.sleep(0.005)
    n = 0
    t0 = time.time()
    while time.time() - t0 < seconds:
        for _ in range(8):
            c = a @ b
        torch.cuda.synchronize()
        n += 8
    dt = time.time() - t0
    print(f"matmuls_per_s {n / dt:.1f}", flush=True)
else:
    layers = [torch.nn.Linear(2048, 2048, device=dev, dtype=torch.float16) for _ in range(12)]
    x = torch.randn(1, 2048, device=dev, dtype=torch.float16)

    def token():
        h = x
        for layer in layers:
            h = torch.relu(layer(h))
        return h.sum().item()

    with torch.no_grad():
        for _ in range(20):
            token()
        while time.time() < start:
            time.sleep(0.005)
        lat = []
        t0 = time.time()
        while time.time() - t0 < seconds:
            t = time.perf_counter()
            token()
            lat.append((time.perf_counter() - t) * 1e3)
            time.sleep(0.002)
    lat.sort()
    p = lambda q: lat[min(len(lat) - 1, int(len(lat) * q))]
    print(f"token_ms p50 {p(0.5):.3f} p90 {p(0.9):.3f} p99 {p(0.99):.3f} n {len(lat)}", flush=True)
