//! The host pages under managed memory: rounding to pages, protections, fixed and
//! shared mappings, residency, and runs of pages alike.

use super::*;

pub(super) fn page_floor(addr: usize) -> usize {
    addr & !(PAGE - 1)
}

pub(super) fn page_ceil(addr: usize) -> usize {
    addr.saturating_add(PAGE - 1) & !(PAGE - 1)
}

/// Change the protection of guest pages this module mapped.
pub(super) fn protect(addr: usize, len: usize, prot: i32) -> Result<()> {
    // SAFETY: `[addr, addr + len)` lies in a region this module mapped; changing its
    // protection touches no other memory.
    if unsafe { libc::mprotect(addr as *mut c_void, len, prot) } != 0 {
        eprintln!(
            "vmcuda: managed memory: mprotect at {addr:#x}: {}",
            std::io::Error::last_os_error()
        );
        return Err(CudaStatus::ErrorUnknown);
    }
    Ok(())
}

/// Map fresh anonymous pages at `[addr, addr + len)`, replacing what is there: the
/// addresses are this process's reservation for device memory (see
/// [`crate::device_addresses::reserve`]) or a region of this module.
pub(super) fn map_fixed(addr: usize, len: usize, prot: i32, reserve_only: bool) -> Result<()> {
    let flags = libc::MAP_PRIVATE
        | libc::MAP_ANONYMOUS
        | libc::MAP_FIXED
        | if reserve_only { libc::MAP_NORESERVE } else { 0 };
    // SAFETY: MAP_FIXED replaces only `[addr, addr + len)`, which the caller holds
    // (reserved device addresses, or its own region's pages).
    let p = unsafe { libc::mmap(addr as *mut c_void, len, prot, flags, -1, 0) };
    if p == libc::MAP_FAILED || p as usize != addr {
        eprintln!(
            "vmcuda: managed memory: cannot map {len} bytes at {addr:#x}: {}",
            std::io::Error::last_os_error()
        );
        return Err(CudaStatus::ErrorMemoryAllocation);
    }
    Ok(())
}

/// The runs of `[addr, addr + len)` whose pages are resident: in an anonymous mapping,
/// the others were never touched and read as zeros. Unknown (mincore failed): all.
pub(super) fn resident(addr: usize, len: usize) -> Vec<(usize, usize)> {
    let mut present = vec![0u8; len / PAGE];
    // SAFETY: `present` has one byte per page of `[addr, addr + len)`, a mapping of
    // this module.
    if unsafe { libc::mincore(addr as *mut c_void, len, present.as_mut_ptr()) } != 0 {
        return vec![(addr, len)];
    }
    let mut out: Vec<(usize, usize)> = Vec::new();
    for (i, p) in present.iter().enumerate() {
        if p & 1 == 0 {
            continue;
        }
        let at = addr + i * PAGE;
        match out.last_mut() {
            Some((s, n)) if *s + *n == at => *n += PAGE,
            _ => out.push((at, PAGE)),
        }
    }
    out
}

/// Map `len` bytes of `fd` at `at` (replacing what is there: a region's reserved
/// addresses) or where the kernel chooses; the address.
pub(super) fn map_shared(
    fd: &std::os::fd::OwnedFd,
    at: Option<usize>,
    len: usize,
    prot: i32,
) -> Result<usize> {
    use std::os::fd::AsRawFd;
    let flags = libc::MAP_SHARED | if at.is_some() { libc::MAP_FIXED } else { 0 };
    let want = at.unwrap_or(0);
    // SAFETY: maps our own memfd; with MAP_FIXED only `[at, at + len)`, addresses the
    // caller holds (reserved for device memory), are replaced.
    let p = unsafe { libc::mmap(want as *mut c_void, len, prot, flags, fd.as_raw_fd(), 0) };
    if p == libc::MAP_FAILED || (at.is_some() && p as usize != want) {
        eprintln!(
            "vmcuda: managed memory: cannot map {len} bytes: {}",
            std::io::Error::last_os_error()
        );
        return Err(CudaStatus::ErrorMemoryAllocation);
    }
    Ok(p as usize)
}

/// Runs of consecutive pages of `pages[range]` for which `pick` holds, as page index
/// ranges.
pub(super) fn runs(
    pages: &[Page],
    range: std::ops::Range<usize>,
    pick: impl Fn(&Page) -> bool,
) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = None;
    for i in range.clone() {
        match (pick(&pages[i]), start) {
            (true, None) => start = Some(i),
            (false, Some(s)) => {
                out.push(s..i);
                start = None;
            }
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push(s..range.end);
    }
    out
}
