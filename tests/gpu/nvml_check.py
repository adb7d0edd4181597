"""What monitoring tools and torch read from NVML, as JSON: natively (NVIDIA's NVML)
and bridged (the guest's), compared by tests/gpu/run-nvml.sh.

pynvml (nvidia-ml-py) is what nvitop and gpustat use; torch's NVML-based calls
(torch.cuda.utilization, memory_usage, list_gpu_processes) go through it too. With
`--hold MiB` this process holds that much device memory through torch first, so its
own process and memory show.
"""
import argparse
import json
import time

import pynvml


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hold", type=int, default=0)
    ap.add_argument("--samples", type=int, default=5)
    args = ap.parse_args()
    held = None
    if args.hold:
        import torch

        held = torch.empty(args.hold << 20, dtype=torch.uint8, device="cuda:0")
        torch.cuda.synchronize()
    pynvml.nvmlInit()
    out = {"driver": pynvml.nvmlSystemGetDriverVersion(), "devices": []}
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        util = []
        for _ in range(args.samples):
            util.append(pynvml.nvmlDeviceGetUtilizationRates(h).gpu)
            time.sleep(0.2)
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
        import os

        mine = [p.usedGpuMemory for p in procs if p.pid == os.getpid()]
        d = {
            "name": pynvml.nvmlDeviceGetName(h),
            "uuid": pynvml.nvmlDeviceGetUUID(h),
            "bus": pynvml.nvmlDeviceGetPciInfo(h).busId,
            "cc": list(pynvml.nvmlDeviceGetCudaComputeCapability(h)),
            "total_mib": mem.total >> 20,
            "used_mib": mem.used >> 20,
            "utilization_max": max(util),
            "own_process_listed": bool(mine),
            "own_process_mib": (mine[0] or 0) >> 20 if mine else None,
        }
        try:
            pynvml.nvmlDeviceSetPowerManagementLimit(h, 100000)
            d["set_power_limit"] = "allowed"
        except pynvml.NVMLError as e:
            d["set_power_limit"] = str(e)
        out["devices"].append(d)
    if held is not None:
        import torch

        out["torch_utilization"] = torch.cuda.utilization(0)
        out["torch_memory_usage"] = torch.cuda.memory_usage(0)
        out["torch_gpu_processes"] = "process" in torch.cuda.list_gpu_processes(0).lower()
    pynvml.nvmlShutdown()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
