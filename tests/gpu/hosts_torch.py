"""torch over several hosts: work on two devices and copies between them.

`hosts_torch.py 0,1` uses cuda:0 and cuda:1; `0,0` puts both halves on one GPU. Nothing
printed depends on which devices are used, so the bridged run over two daemons (two
devices) is compared line for line with the native run of both halves.
"""
import json
import sys

import torch


def main():
    devs = [int(d) for d in sys.argv[1].split(",")]
    out = {}
    torch.manual_seed(0)
    a = torch.randn(512, 512)
    for i, d in enumerate(devs):
        x = a.to(f"cuda:{d}") * (i + 1)
        out[f"matmul side {i}"] = float((x @ x).sum().item())
    # Tensors moved between the two devices, both ways.
    z = (a.to(f"cuda:{devs[0]}") + 1).to(f"cuda:{devs[1]}")
    out["moved 0 to 1"] = float(z.sum().item())
    w = (z * 2).to(f"cuda:{devs[0]}")
    out["moved 1 to 0"] = float(w.sum().item())
    # A small model trained on each side, same seed: the same losses.
    for i, d in enumerate(devs):
        torch.manual_seed(1)
        dev = torch.device(f"cuda:{d}")
        model = torch.nn.Sequential(
            torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
        ).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        xs = torch.randn(256, 64, device=dev)
        ys = torch.randint(0, 10, (256,), device=dev)
        for _ in range(20):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(xs), ys)
            loss.backward()
            opt.step()
        out[f"loss side {i}"] = round(float(loss.item()), 6)
    for k, v in out.items():
        print(f"{k}: {v!r}")
    print(json.dumps({"ok": True}))


if __name__ == "__main__":
    main()
