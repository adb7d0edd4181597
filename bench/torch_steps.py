"""Training steps of the stock torch wheel, for bench/run-torch-steps.sh: an MLP (the
one tests/gpu/torch_check.py trains: cuBLAS, Adam), a CNN (cuDNN convolutions and batch
norm, SGD) and a transformer encoder (bf16 autocast, AdamW),
warmed up, then timed in blocks of steps; each step reads its loss (`loss.item()`), as
a training loop that logs does. Prints `RESULT <name> <value> <unit>` lines: the median
time of a step over the blocks, and the last loss (the same natively and bridged when
the arithmetic is), after `ABOUT <text>` and `TARGET <name> <ratio>` lines for
bench/run-torch-steps.sh's report. VMCUDA_BENCH_STEPS names a subset (e.g. "cnn
transformer")."""
import os
import statistics
import time

import torch

torch.backends.cudnn.benchmark = False
torch.backends.cudnn.deterministic = True


def timed(name, model, batch, opt, autocast, warm=10, blocks=5, per_block=20):
    x, y = batch
    loss = None

    def step():
        nonlocal loss
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(warm):
        step()
    torch.cuda.synchronize()
    per_step = []
    for _ in range(blocks):
        t0 = time.perf_counter()
        for _ in range(per_block):
            last = step()
        per_step.append((time.perf_counter() - t0) / per_block * 1e3)
    print(f"RESULT {name}_step {statistics.median(per_step):.3f} ms", flush=True)
    print(f"RESULT {name}_last_loss {last:.6f} loss", flush=True)


def mlp():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.GELU(),
        torch.nn.Linear(1024, 10),
    ).cuda()
    g = torch.Generator().manual_seed(3)
    batch = (torch.randn(512, 256, generator=g).cuda(), torch.randint(0, 10, (512,), generator=g).cuda())
    timed("mlp", model, batch, torch.optim.Adam(model.parameters(), lr=1e-3), autocast=False)


def cnn():
    torch.manual_seed(0)
    block = lambda i, o: [torch.nn.Conv2d(i, o, 3, padding=1, bias=False), torch.nn.BatchNorm2d(o), torch.nn.ReLU()]
    model = torch.nn.Sequential(
        *block(3, 32), *block(32, 32), torch.nn.MaxPool2d(2),
        *block(32, 64), *block(64, 64), torch.nn.MaxPool2d(2),
        *block(64, 128), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(128, 10),
    ).cuda()
    g = torch.Generator().manual_seed(1)
    batch = (torch.randn(64, 3, 64, 64, generator=g).cuda(), torch.randint(0, 10, (64,), generator=g).cuda())
    timed("cnn", model, batch, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), autocast=False)


def transformer():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True, dropout=0.0)
    model = torch.nn.Sequential(
        torch.nn.TransformerEncoder(layer, 4), torch.nn.Flatten(), torch.nn.Linear(512 * 128, 10)
    ).cuda()
    g = torch.Generator().manual_seed(2)
    batch = (torch.randn(32, 128, 512, generator=g).cuda(), torch.randint(0, 10, (32,), generator=g).cuda())
    timed("transformer_bf16", model, batch, torch.optim.AdamW(model.parameters(), lr=1e-4), autocast=True)


if __name__ == "__main__":
    print(f"ABOUT torch {torch.__version__} on {torch.cuda.get_device_name(0)}", flush=True)
    for name, target in (("mlp", 1.05), ("cnn", 1.10), ("transformer_bf16", 1.10)):
        print(f"TARGET {name} {target}", flush=True)
    chosen = os.environ.get("VMCUDA_BENCH_STEPS", "mlp cnn transformer").replace(",", " ").split()
    for name in chosen:
        {"mlp": mlp, "cnn": cnn, "transformer": transformer}[name]()
