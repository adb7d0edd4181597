//! The kernel's cap on a worker's memory, under the VM's `host_memory`: the last line
//! should the accounts of [`crate::session`] miss something.
//!
//! The cap is `RLIMIT_DATA`, set in the worker once its guest is admitted and its
//! executor made, before it serves. `RLIMIT_DATA` counts the private writable memory a
//! process maps (its heap and anonymous mappings), which is where graph nodes, module
//! images and handle tables live, and not the address space the CUDA driver reserves
//! without access (`PROT_NONE`) for unified addressing, nor the device and pinned
//! memory it maps shared from its device files: `RLIMIT_AS`, which counts all of
//! those, would stop the driver at its start. A cgroup v2 `memory.max` per worker
//! would cap resident memory exactly, but needs a cgroup delegated to the daemon and a
//! child cgroup made for every worker; the daemon's own unit (`MemoryMax=`) bounds all
//! workers together instead (docs/security.md, "Host memory").
//!
//! The cap leaves [`DRIVER_HEADROOM`] above `host_memory` for what no account counts:
//! the driver's and the libraries' own heap (a context, cuBLAS's kernels unpacked).

use nix::sys::resource::{getrlimit, setrlimit, Resource};
use tracing::{debug, warn};

/// Room above the VM's `host_memory` for the driver's and the libraries' own heap.
pub const DRIVER_HEADROOM: u64 = 4 << 30;

/// The data limit for a worker whose VM may keep `host_memory` on the host; None
/// where `host_memory` is unbounded.
pub fn data_limit(host_memory: u64) -> Option<u64> {
    host_memory.checked_add(DRIVER_HEADROOM)
}

/// Cap this process's data segment for a guest of `host_memory` (only ever lowered).
/// A failure is logged, not fatal: the accounts still hold.
pub fn cap_worker(host_memory: u64) {
    let Some(limit) = data_limit(host_memory) else {
        return;
    };
    match lower_data_limit(limit) {
        Ok(limit) => debug!(limit, "worker data segment capped"),
        Err(e) => warn!("cannot cap the worker's data segment (RLIMIT_DATA): {e}"),
    }
}

/// Lower `RLIMIT_DATA` to `limit` (never raising it), answering the limit now.
fn lower_data_limit(limit: u64) -> nix::Result<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_DATA)?;
    let limit = limit.min(hard);
    if limit < soft {
        setrlimit(Resource::RLIMIT_DATA, limit, limit)?;
    }
    Ok(limit.min(soft))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    /// A worker's data limit is its VM's host memory and the driver's headroom, and
    /// the kernel holds it: a shell started under it reports it.
    #[test]
    fn the_kernel_caps_a_workers_data_at_its_host_memory_and_headroom() {
        assert_eq!(data_limit(u64::MAX), None);
        let host_memory = 64 << 20;
        let limit = data_limit(host_memory).unwrap();
        assert_eq!(limit, host_memory + DRIVER_HEADROOM);
        let mut shell = std::process::Command::new("sh");
        shell.args(["-c", "ulimit -d"]);
        // SAFETY: between fork and exec only getrlimit and setrlimit run, which are
        // async-signal-safe and touch no memory shared with other threads.
        unsafe {
            shell.pre_exec(move || {
                lower_data_limit(limit)?;
                Ok(())
            });
        }
        let out = shell.output().unwrap();
        let kib: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        assert_eq!(kib * 1024, limit);
    }
}
