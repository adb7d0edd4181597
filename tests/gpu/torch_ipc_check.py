#!/usr/bin/env python3
"""torch's CUDA IPC (docs/ipc.md), natively and through vmcuda: run it both ways on
the GPU machine and compare stdout, which carries only what must be identical.

  python torch_ipc_check.py                      # natively
  vmcuda-run python torch_ipc_check.py           # through vmcuda (or LD_PRELOAD the
                                                 # guest libcuda.so.1, as run-torch.sh)

Checks (each one line, PASS or FAIL):
- torch.multiprocessing (spawn): a CUDA tensor passed through a queue; the consumer
  changes it in place and the producer sees the change;
- torch.cuda.Event(interprocess=True) recorded in one process after a kernel, waited on
  in another, which then reads the kernel's result;
- a DataLoader whose workers return CUDA tensors (each worker its own process).
The exit status is 1 when any check fails.
"""

import sys

import torch
import torch.multiprocessing as mp

failures = 0


def report(name, ok, detail=""):
    global failures
    failures += not ok
    print(f"{name}: {'PASS' if ok else 'FAIL'}{(' ' + detail) if detail else ''}", flush=True)


def consumer(queue, done):
    t = queue.get()
    seen = float(t.sum().item())
    t.mul_(2).add_(1)
    torch.cuda.synchronize()
    done.put(seen)
    done.get()  # hold the tensor until the producer has read it


def event_waiter(queue, done):
    handle, t = queue.get()
    ev = torch.cuda.Event.from_ipc_handle(torch.cuda.current_device(), handle)
    s = torch.cuda.Stream()
    s.wait_event(ev)
    with torch.cuda.stream(s):
        total = float(t.sum().item())
    done.put(total)
    done.get()


class CudaItems(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.full((1024,), float(i), device="cuda") * 3


def main():
    ctx = mp.get_context("spawn")

    # A tensor through a queue, changed by the consumer.
    q, done = ctx.Queue(), ctx.Queue()
    t = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    p = ctx.Process(target=consumer, args=(q, done))
    p.start()
    q.put(t)
    seen = done.get(timeout=120)
    expect = float(torch.arange(1 << 20, dtype=torch.float64).sum())
    report("consumer reads the producer's tensor", seen == expect, repr(seen))
    want = torch.arange(1 << 20, dtype=torch.float32) * 2 + 1
    report("producer sees the consumer's change", torch.equal(t.cpu(), want))
    done.put(None)
    p.join(60)
    report("consumer exited cleanly", p.exitcode == 0, str(p.exitcode))

    # An interprocess event after a kernel.
    q, done = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=event_waiter, args=(q, done))
    p.start()
    x = torch.ones(1 << 22, device="cuda")
    ev = torch.cuda.Event(interprocess=True)
    for _ in range(20):
        x.mul_(1.5)
    ev.record()
    q.put((ev.ipc_handle(), x))
    total = done.get(timeout=120)
    expect = float((torch.ones(1 << 22, dtype=torch.float64) * 1.5**20).float().sum())
    report("the other process waits on the event and reads the kernel's result",
           abs(total - expect) <= 1e-3 * expect, repr(total))
    done.put(None)
    p.join(60)
    report("event waiter exited cleanly", p.exitcode == 0, str(p.exitcode))

    # DataLoader workers returning CUDA tensors.
    loader = torch.utils.data.DataLoader(
        CudaItems(), batch_size=2, num_workers=2, multiprocessing_context=ctx)
    sums = [float(b.sum().item()) for b in loader]
    report("DataLoader workers' CUDA tensors", sums == [3072.0 * (2 * k + 2 * k + 1) for k in range(4)],
           repr(sums))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
