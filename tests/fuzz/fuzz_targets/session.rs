//! A whole host session on the host-memory executor, fed a sequence of allocations,
//! frees, copies, memsets, stream-ordered allocations and pool settings, captures and
//! graphs (of hundreds of launches with 5 KB of parameters), pool exports and imports,
//! virtual memory operations, device resets, and CUDA IPC and pool sharing with a
//! second process of the VM and a process of another VM, and copies to and from other
//! hosts through a peer link to a broker answering from memory (the step format of
//! `vmcuda_fuzz::session`), under a small quota and host-memory limit. After every step
//! what the session charged must stay within the quota and equal what the executor
//! holds, and the host memory it keeps must stay within its limit; what a peer send
//! sent and a peer receive wrote must be the guest's bytes; after the session is
//! dropped the executor must hold nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    vmcuda_fuzz::session::run(input);
});
