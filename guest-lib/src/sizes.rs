//! The sizes of the areas a process shares with its host, from the environment: the
//! staging area's slots, which a VM guest's RAM broker is asked for room for as well
//! ([`crate::guest_ram::area_len`]) and a same-host guest makes as a memfd
//! ([`crate::staging`]).

/// A positive number from the environment variable `name`, else `default`.
pub(crate) fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|v| *v > 0)
        .unwrap_or(default)
}

/// Bytes of the staging area: slots of `VMCUDA_STAGING_SLOT` bytes (4 MiB), as many as
/// `VMCUDA_STAGING_SLOTS` (4).
pub fn staging_len() -> usize {
    staging_slot() * staging_slots()
}

pub fn staging_slot() -> usize {
    env_count("VMCUDA_STAGING_SLOT", 4 << 20).next_multiple_of(crate::pages::PAGE)
}

pub fn staging_slots() -> usize {
    env_count("VMCUDA_STAGING_SLOTS", 4).clamp(2, 64)
}
