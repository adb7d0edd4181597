//! This process as the host knows it.

use std::sync::OnceLock;

/// This process's pid as the host's `/proc`, the daemon and the other workers know it;
/// in a pid namespace of its own a worker is 1 to itself. Read once and kept, so that
/// it is known before the jail and the same after it.
pub fn host_pid() -> u32 {
    static PID: OnceLock<u32> = OnceLock::new();
    *PID.get_or_init(|| {
        // `/proc/self` names this process as that `/proc`'s namespace does: the host's,
        // or the daemon's where the daemon itself runs in a namespace.
        std::fs::read_link("/proc/self")
            .ok()
            .and_then(|p| p.to_str()?.parse().ok())
            .unwrap_or_else(std::process::id)
    })
}
