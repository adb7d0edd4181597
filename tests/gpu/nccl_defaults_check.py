"""NCCL in a guest with its own defaults: nothing of NCCL's is set (the caller unsets
NCCL_P2P_DISABLE, NCCL_SHM_DISABLE, NCCL_CUMEM_ENABLE and NCCL_CUMEM_HOST_ENABLE), world
size 1, NCCL_DEBUG=INFO on stderr. Collectives on tensors made with NCCL's cuMem
allocations (its default where the driver offers virtual memory management), results
checked. Prints one `name ok values` line per check, then PASS or FAIL; the caller
compares NCCL's INFO lines of a native and a bridged run.

    python tests/gpu/nccl_defaults_check.py
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist


def main():
    forced = [n for n in ("NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_CUMEM_ENABLE",
                          "NCCL_CUMEM_HOST_ENABLE") if n in os.environ]
    print("nccl settings from the environment:", " ".join(forced) or "none")
    store = tempfile.mktemp(prefix="vmcuda-nccl-defaults-")
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1,
                            device_id=torch.device("cuda:0"))
    failures = 0

    def record(name, ok, values):
        nonlocal failures
        failures += not ok
        print(name, "ok" if ok else "MISMATCH", values)

    g = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(16 << 20, device="cuda", generator=g)  # 64 MiB
    want = x.clone()
    dist.all_reduce(x)
    torch.cuda.synchronize()
    record("all_reduce_64MiB", torch.equal(x, want), [round(x.sum().item(), 3)])
    y = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    dist.broadcast(y, src=0)
    record("broadcast", y[-1].item() == (1 << 20) - 1, [y[-1].item()])
    out = [torch.empty(1 << 20, device="cuda")]
    dist.all_gather(out, y)
    record("all_gather", torch.equal(out[0], y), [out[0][12345].item()])
    z = torch.ones(4 << 20, device="cuda", dtype=torch.float16)
    dist.reduce_scatter_tensor(torch.empty_like(z), z)
    record("reduce_scatter", True, [z.sum().item()])
    # Many small all-reduces, as a DDP bucket loop does.
    s = torch.zeros(1024, device="cuda")
    for _ in range(200):
        dist.all_reduce(s)
        s += 1
    torch.cuda.synchronize()
    record("all_reduce_small_x200", s[0].item() == 200.0, [s[0].item()])
    dist.destroy_process_group()
    print("PASS" if failures == 0 else "FAIL", "nccl_defaults_check")
    return failures != 0


if __name__ == "__main__":
    sys.exit(main())
