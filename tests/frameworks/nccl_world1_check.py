"""NCCL with world size 1 through vmcuda's driver (torch's NCCL, the way
tests/gpu/torch_libs_check.py's nccl_world1 runs it): the communicator's
initialisation, all_reduce, broadcast and a barrier, then the process group torn down.
On the host-memory test double (tests/frameworks/nccl-world1.sh) kernels do not run,
so the values are printed but not checked; what is checked is that every step returns.
With VMCUDA_CHECK_VALUES=1 (a GPU behind the driver) the values are checked too."""
import os
import sys
import tempfile
import time

t0 = time.time()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def step(name):
    print(f"{name}: ok ({time.time() - t0:.1f} s since start)", flush=True)


step(f"import torch {torch.__version__}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
step(f"device 0: {torch.cuda.get_device_name(0)}")
store = tempfile.mktemp(prefix="vmcuda-nccl-")
dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1,
                        device_id=torch.device("cuda:0"))
step("init_process_group (the NCCL communicator)")
t = torch.arange(16 << 20, dtype=torch.float32, device="cuda")  # 64 MiB
dist.all_reduce(t)
step("all_reduce of 64 MiB")
b = torch.zeros(4, device="cuda") + 7
dist.broadcast(b, 0)
step("broadcast")
dist.barrier()
torch.cuda.synchronize()
step("barrier and synchronize")
head, total = t[:4].cpu().tolist(), b.sum().item()
print(f"values: all_reduce head {head}, broadcast sum {total}")
dist.destroy_process_group()
step("destroy_process_group")
if os.environ.get("VMCUDA_CHECK_VALUES") == "1" and (head != [0.0, 1.0, 2.0, 3.0] or total != 28):
    print("WRONG values", file=sys.stderr)
    sys.exit(1)
