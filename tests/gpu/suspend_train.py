"""A torch training loop that a VM suspend may pause: fixed seed, fixed data, one loss
line per step (flushed), a sleep between steps so that an operator's suspend lands
mid-run, and a kept GPU tensor checked at the end. Its stdout is compared with a
native run's: the losses must be identical.

Usage: suspend_train.py [STEPS=60] [INTERVAL_S=0.05] [KEEP_MIB=1024]"""
import sys
import time

import torch
import torch.nn.functional as F

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
interval = float(sys.argv[2]) if len(sys.argv) > 2 else 0.05
keep_mib = int(sys.argv[3]) if len(sys.argv) > 3 else 1024

torch.manual_seed(0)
torch.backends.cudnn.deterministic = True
torch.backends.cuda.matmul.allow_tf32 = False
dev = "cuda"
model = torch.nn.Sequential(
    torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)
).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
x = torch.randn(4096, 512, device=dev)
y = torch.randint(0, 10, (4096,), device=dev)
keep = torch.arange(keep_mib << 18, device=dev, dtype=torch.int32)
want = int(keep.sum(dtype=torch.int64).item())
print("ready", flush=True)
for step in range(steps):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.10f}", flush=True)
    time.sleep(interval)
got = int(keep.sum(dtype=torch.int64).item())
print(f"kept tensor intact: {'yes' if got == want else 'NO'}", flush=True)
