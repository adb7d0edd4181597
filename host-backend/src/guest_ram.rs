//! A VM's RAM, for workers of the vhost-user device (`vmcuda-host worker
//! --guest-memory FD:GPA:LEN:OFFSET`, one per RAM region).
//!
//! The device passes a worker its guest's RAM regions (the memfds QEMU handed it in
//! `SET_MEM_TABLE`) only for connections from a privileged guest source port, as
//! inherited descriptors named on the command line; see docs/security.md. With them a
//! worker can map guest pages the guest names by guest-physical address
//! ([`GuestRam::map_pages`]) and let the GPU copy straight to and from them.

use std::num::NonZeroUsize;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

use nix::sys::mman::{mmap, mmap_anonymous, munmap, MapFlags, ProtFlags};
use tracing::warn;
use vmcuda_wire::CudaStatus;

/// The most pages one registration may name: 256 MiB of 4 KiB pages.
pub const MAX_PAGES: usize = 65536;

/// Bounds on a connection's host memory registrations other than the guest library's
/// staging area (shared guest memory, guest pages): they hold down pages of the host
/// and entries of the driver's tables whether or not a quota counts their bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegistrationLimits {
    pub max_count: u32,
    pub max_bytes: u64,
}

impl RegistrationLimits {
    pub const UNLIMITED: RegistrationLimits = RegistrationLimits {
        max_count: u32::MAX,
        max_bytes: u64::MAX,
    };

    /// Whether one more registration of `len` bytes fits beside `count` of `bytes`
    /// together; cudaErrorMemoryAllocation when it does not.
    pub fn check(&self, count: usize, bytes: u64, len: u64) -> Result<(), CudaStatus> {
        if count >= self.max_count as usize
            || bytes.checked_add(len).is_none_or(|b| b > self.max_bytes)
        {
            warn!(
                count,
                bytes,
                len,
                max_count = self.max_count,
                max_bytes = self.max_bytes,
                "host memory registration refused: over the connection's max_registrations or registered_memory"
            );
            return Err(CudaStatus::ErrorMemoryAllocation);
        }
        Ok(())
    }
}

/// One guest RAM region: `len` bytes of guest-physical space from `gpa`, backed by
/// `fd` from `offset`.
#[derive(Debug)]
struct Region {
    gpa: u64,
    len: u64,
    offset: u64,
    fd: OwnedFd,
}

/// The guest's RAM regions this worker was given.
#[derive(Debug, Default)]
pub struct GuestRam {
    regions: Vec<Region>,
    /// The only pages this connection may name, when the guest's RAM broker made it
    /// for an unprivileged process ([`GuestRam::restrict`]): their size and
    /// guest-physical addresses.
    granted: Option<Granted>,
}

/// What the guest's RAM broker granted a connection.
#[derive(Debug)]
struct Granted {
    /// The grant's own page size (huge pages); later grants may add ordinary pages
    /// (memory the process registered in place).
    page_size: u64,
    /// (page size, guest-physical address) of every granted page.
    pages: std::collections::BTreeSet<(u64, u64)>,
    /// Seals the broker's later grants ([`GuestRam::extend`]).
    key: [u8; 32],
}

/// The most guest pages one connection may be granted in all: 1 TiB of 2 MiB pages.
pub const MAX_GRANTED_PAGES: usize = 1 << 19;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GuestRamError {
    #[error("guest memory `{0}` is not FD:GPA:LEN:OFFSET")]
    Syntax(String),
    #[error("guest memory descriptor {0} is not open or not a file long enough for its region")]
    BadFile(RawFd),
    #[error("guest memory regions overlap or wrap")]
    Overlap,
}

/// A number in decimal or `0x` hexadecimal.
fn number(s: &str) -> Option<u64> {
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

impl GuestRam {
    /// Take ownership of the inherited descriptors the specs name; checks each is a
    /// file covering its region. Descriptors of specs that fail are left alone.
    pub fn from_inherited(specs: &[String]) -> Result<GuestRam, GuestRamError> {
        let mut parsed = Vec::new();
        for spec in specs {
            let fields: Vec<u64> = spec.split(':').filter_map(number).collect();
            let [fd, gpa, len, offset] = fields[..] else {
                return Err(GuestRamError::Syntax(spec.clone()));
            };
            let fd = RawFd::try_from(fd).map_err(|_| GuestRamError::Syntax(spec.clone()))?;
            if fd <= 2 {
                return Err(GuestRamError::Syntax(spec.clone()));
            }
            parsed.push((fd, gpa, len, offset));
        }
        let mut ram = GuestRam::default();
        for (fd, gpa, len, offset) in parsed {
            // SAFETY: F_GETFD only reads the flags of an integer descriptor; one that is
            // not open answers EBADF.
            if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
                return Err(GuestRamError::BadFile(fd));
            }
            // SAFETY: the device started this worker with `fd` open for exactly this
            // purpose and nothing else in the worker uses it; it is owned from here on.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            let _ = nix::fcntl::fcntl(
                &owned,
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
            );
            ram.add(owned, gpa, len, offset).map_err(|e| match e {
                GuestRamError::BadFile(_) => GuestRamError::BadFile(fd),
                e => e,
            })?;
        }
        Ok(ram)
    }

    /// Add a region; checked against its file and the regions already known.
    pub fn add(
        &mut self,
        fd: OwnedFd,
        gpa: u64,
        len: u64,
        offset: u64,
    ) -> Result<(), GuestRamError> {
        let file_len = nix::sys::stat::fstat(&fd)
            .map_err(|_| GuestRamError::BadFile(-1))?
            .st_size as u64;
        let page = 4096;
        let end = gpa.checked_add(len).ok_or(GuestRamError::Overlap)?;
        if len == 0
            || !gpa.is_multiple_of(page)
            || !len.is_multiple_of(page)
            || !offset.is_multiple_of(page)
            || offset.checked_add(len).is_none_or(|e| e > file_len)
        {
            return Err(GuestRamError::BadFile(-1));
        }
        if self
            .regions
            .iter()
            .any(|r| gpa < r.gpa + r.len && r.gpa < end)
        {
            return Err(GuestRamError::Overlap);
        }
        self.regions.push(Region {
            gpa,
            len,
            offset,
            fd,
        });
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// From now on, let this connection name only these pages (`page_size` bytes each,
    /// whole, aligned and inside the guest's RAM): the guest's RAM broker made the
    /// connection for one unprivileged process and granted it the pages it owns for it
    /// (see docs/security.md). Once only: a second grant is refused, so the process it
    /// was handed to cannot widen it.
    pub fn restrict(
        &mut self,
        page_size: u64,
        pages: &[u64],
        key: [u8; 32],
    ) -> Result<(), CudaStatus> {
        let refuse = |why: &str| {
            warn!("refused a guest page grant: {why}");
            CudaStatus::ErrorInvalidValue
        };
        if self.granted.is_some() {
            return Err(refuse("the connection has its grant already"));
        }
        self.check_granted_pages(page_size, pages, 0)
            .map_err(refuse)?;
        self.granted = Some(Granted {
            page_size,
            pages: pages.iter().map(|&p| (page_size, p)).collect(),
            key,
        });
        Ok(())
    }

    /// A returning connection's grant (the guest's RAM broker made the connection again
    /// for the same process, after its first dropped): on a connection without a grant
    /// yet, as [`GuestRam::restrict`]; on one with, the same grant again (its key, its
    /// page size, none but its pages), which leaves what was granted as it was, pages
    /// added later included. Any other grant is refused: the key, which only the broker
    /// and the host know, says the broker sent it for this grant's process.
    pub fn regrant(
        &mut self,
        page_size: u64,
        pages: &[u64],
        key: [u8; 32],
    ) -> Result<(), CudaStatus> {
        let Some(granted) = &self.granted else {
            return self.restrict(page_size, pages, key);
        };
        // In constant time: nothing tells how much of a key was right.
        let same_key = bool::from(subtle::ConstantTimeEq::ct_eq(&granted.key[..], &key[..]));
        let same_pages = !pages.is_empty()
            && pages
                .iter()
                .all(|&p| granted.pages.contains(&(page_size, p)));
        if same_key && page_size == granted.page_size && same_pages {
            Ok(())
        } else {
            warn!("refused a returning connection's guest page grant: not the session's");
            Err(CudaStatus::ErrorInvalidValue)
        }
    }

    /// Add pages the broker gave the process later (its pinned memory) to this
    /// connection's grant: only with the broker's seal under the grant's key, which the
    /// process never saw, so the process passes on what it was given and nothing else.
    /// Passing the same pages again changes nothing.
    pub fn extend(
        &mut self,
        page_size: u64,
        pages: &[u64],
        seal: &[u8; 32],
    ) -> Result<(), CudaStatus> {
        let refuse = |why: &str| {
            warn!("refused more guest pages: {why}");
            CudaStatus::ErrorInvalidValue
        };
        let Some(granted) = &self.granted else {
            return Err(refuse("the connection has no grant to extend"));
        };
        if page_size != granted.page_size && page_size != 4096 {
            return Err(refuse("neither the grant's page size nor ordinary pages"));
        }
        if !vmcuda_wire::memory::grant_seal_holds(&granted.key, page_size, pages, seal) {
            return Err(refuse("the broker's seal does not hold"));
        }
        let have = granted.pages.len();
        self.check_granted_pages(page_size, pages, have)
            .map_err(refuse)?;
        if let Some(granted) = &mut self.granted {
            granted.pages.extend(pages.iter().map(|&p| (page_size, p)));
        }
        Ok(())
    }

    /// Whether `pages` of `page_size` bytes can be granted beside `have` granted ones.
    fn check_granted_pages(
        &self,
        page_size: u64,
        pages: &[u64],
        have: usize,
    ) -> Result<(), &'static str> {
        if !page_size.is_power_of_two() || !(4096..=1 << 30).contains(&page_size) {
            return Err("page size is not a power of two between 4 KiB and 1 GiB");
        }
        if pages.is_empty() || pages.len() > MAX_PAGES || have + pages.len() > MAX_GRANTED_PAGES {
            return Err("no pages, or too many");
        }
        for &gpa in pages {
            if gpa % page_size != 0 || self.backing(gpa, page_size).is_none() {
                return Err("a page is not aligned or outside the guest's RAM");
            }
        }
        Ok(())
    }

    /// The file and offset backing `[gpa, gpa + len)`, which must lie in one region.
    fn backing(&self, gpa: u64, len: u64) -> Option<(BorrowedFd<'_>, u64)> {
        let end = gpa.checked_add(len)?;
        self.regions
            .iter()
            .find(|r| gpa >= r.gpa && end <= r.gpa + r.len)
            .map(|r| (r.fd.as_fd(), r.offset + (gpa - r.gpa)))
    }

    /// Map the guest pages at guest-physical `pages` (each `page_size` bytes) side by
    /// side into fresh address space of this process, at `want` when that is free here
    /// (so that the guest's pointer is also the device's), else where the kernel
    /// chooses: the start of the mapping, `pages.len() * page_size` bytes long, owned by
    /// the caller (one `munmap` of the whole range undoes it). Refused unless every page
    /// is whole, aligned and inside the guest's RAM.
    pub fn map_pages(
        &self,
        page_size: u64,
        pages: &[u64],
        want: Option<u64>,
    ) -> Result<NonNull<libc::c_void>, CudaStatus> {
        let refuse = |why: &str| {
            warn!("refused guest pages: {why}");
            CudaStatus::ErrorInvalidValue
        };
        if !page_size.is_power_of_two() || !(4096..=1 << 30).contains(&page_size) {
            return Err(refuse(
                "page size is not a power of two between 4 KiB and 1 GiB",
            ));
        }
        if pages.is_empty() || pages.len() > MAX_PAGES {
            return Err(refuse("no pages, or too many"));
        }
        let total = page_size
            .checked_mul(pages.len() as u64)
            .filter(|t| *t <= usize::MAX as u64 / 2)
            .ok_or_else(|| refuse("too large"))?;
        // Runs of pages contiguous in one file become one mapping.
        let mut runs: Vec<(BorrowedFd<'_>, u64, u64)> = Vec::new();
        if let Some(granted) = &self.granted {
            if pages
                .iter()
                .any(|&p| !granted.pages.contains(&(page_size, p)))
            {
                return Err(refuse("a page this connection was not granted"));
            }
        }
        for &gpa in pages {
            if gpa % page_size != 0 {
                return Err(refuse("a page is not aligned to the page size"));
            }
            let (fd, offset) = self
                .backing(gpa, page_size)
                .ok_or_else(|| refuse("a page is outside the guest's RAM"))?;
            match runs.last_mut() {
                Some((f, o, l)) if f.as_raw_fd_eq(&fd) && *o + *l == offset => *l += page_size,
                _ => runs.push((fd, offset, page_size)),
            }
        }
        let length = NonZeroUsize::new(total as usize).ok_or_else(|| refuse("empty"))?;
        let reserve = |at: Option<NonZeroUsize>, fixed: MapFlags| {
            // SAFETY: a fresh anonymous reservation, at `at` only where nothing of this
            // process is (NOREPLACE), else where the kernel chooses; owned by the caller
            // from here (unmapped below on failure).
            unsafe {
                mmap_anonymous(
                    at,
                    length,
                    ProtFlags::PROT_NONE,
                    MapFlags::MAP_PRIVATE | MapFlags::MAP_NORESERVE | fixed,
                )
            }
        };
        let wanted = want
            .filter(|w| w % 4096 == 0 && w.checked_add(total).is_some())
            .and_then(|w| NonZeroUsize::new(w as usize))
            .and_then(|w| match reserve(Some(w), MapFlags::MAP_FIXED_NOREPLACE) {
                Ok(got) if got.as_ptr() as usize == w.get() => Some(got),
                Ok(elsewhere) => {
                    // Old kernels take NOREPLACE as a hint.
                    // SAFETY: unmapping the reservation just made, used by no one.
                    let _ = unsafe { munmap(elsewhere, total as usize) };
                    None
                }
                Err(_) => None,
            });
        let base = match wanted {
            Some(base) => Ok(base),
            None => reserve(None, MapFlags::empty()),
        }
        .map_err(|e| {
            warn!("cannot reserve {total} bytes for guest pages: {e}");
            CudaStatus::ErrorMemoryAllocation
        })?;
        let mut at = base.as_ptr() as usize;
        for (fd, offset, len) in runs {
            let (Some(addr), Some(run_len)) =
                (NonZeroUsize::new(at), NonZeroUsize::new(len as usize))
            else {
                break;
            };
            // SAFETY: MAP_FIXED over part of the reservation made above, which this
            // function owns; nothing else lives there.
            let mapped = unsafe {
                mmap(
                    Some(addr),
                    run_len,
                    ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                    MapFlags::MAP_SHARED | MapFlags::MAP_FIXED,
                    fd,
                    offset as libc::off_t,
                )
            };
            if let Err(e) = mapped {
                warn!("cannot map guest pages: {e}");
                // SAFETY: unmapping the whole reservation made above, used by no one.
                let _ = unsafe { munmap(base, total as usize) };
                return Err(CudaStatus::ErrorNotSupported);
            }
            at += len as usize;
        }
        Ok(base)
    }
}

/// Whether two borrowed descriptors are the same descriptor.
trait SameFd {
    fn as_raw_fd_eq(&self, other: &Self) -> bool;
}

impl SameFd for BorrowedFd<'_> {
    fn as_raw_fd_eq(&self, other: &Self) -> bool {
        use std::os::fd::AsRawFd;
        self.as_raw_fd() == other.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memfd(len: u64) -> OwnedFd {
        let fd = nix::sys::memfd::memfd_create(c"ram", nix::sys::memfd::MFdFlags::empty()).unwrap();
        nix::unistd::ftruncate(&fd, len as i64).unwrap();
        fd
    }

    /// Two regions as QEMU lays out a q35 guest: low RAM at 0, high RAM at 4 GiB, both
    /// in one file.
    fn ram() -> (GuestRam, OwnedFd) {
        let fd = memfd(8 << 20);
        let mut ram = GuestRam::default();
        ram.add(fd.try_clone().unwrap(), 0, 4 << 20, 0).unwrap();
        ram.add(fd.try_clone().unwrap(), 4 << 30, 4 << 20, 4 << 20)
            .unwrap();
        (ram, fd)
    }

    /// A granted connection maps its own pages and no other, of no other size, and
    /// cannot be granted twice.
    #[test]
    fn a_grant_confines_the_connection_to_its_pages() {
        let (mut ram, _fd) = ram();
        let page = 2 << 20;
        assert!(ram.restrict(page, &[4 << 30, 7], [7; 32]).is_err());
        assert!(ram.restrict(page, &[8 << 30], [7; 32]).is_err());
        ram.restrict(page, &[2 << 20, 4 << 30], [7; 32]).unwrap();
        assert!(ram.restrict(page, &[0], [7; 32]).is_err());
        let mine = ram.map_pages(page, &[4 << 30, 2 << 20], None).unwrap();
        // SAFETY: unmapping the test's own mapping of two pages.
        unsafe { munmap(mine, 2 * page as usize) }.unwrap();
        assert!(ram.map_pages(page, &[0], None).is_err());
        assert!(ram.map_pages(page, &[2 << 20, 0], None).is_err());
        assert!(ram.map_pages(4096, &[2 << 20], None).is_err());
    }

    /// The broker's later pages join a grant only under its seal, of the grant's page
    /// size; a connection without a grant has nothing to extend.
    #[test]
    fn a_grant_grows_only_by_pages_the_broker_sealed() {
        use vmcuda_wire::memory::{grant_key, grant_seal};
        let (mut ram, _fd) = ram();
        let page = 2 << 20;
        let key = grant_key().unwrap();
        let more = [4 << 30];
        assert!(ram
            .extend(page, &more, &grant_seal(&key, page, &more))
            .is_err());
        ram.restrict(page, &[2 << 20], key).unwrap();
        assert!(ram.map_pages(page, &more, None).is_err());
        // Sealed under another key, for other pages, or of another size: refused.
        let stranger = grant_key().unwrap();
        assert!(ram
            .extend(page, &more, &grant_seal(&stranger, page, &more))
            .is_err());
        assert!(ram
            .extend(page, &more, &grant_seal(&key, page, &[0]))
            .is_err());
        assert!(ram
            .extend(1 << 30, &more, &grant_seal(&key, 1 << 30, &more))
            .is_err());
        // Sealed, but outside the guest's RAM: refused all the same.
        let outside = [8 << 30];
        assert!(ram
            .extend(page, &outside, &grant_seal(&key, page, &outside))
            .is_err());
        ram.extend(page, &more, &grant_seal(&key, page, &more))
            .unwrap();
        ram.extend(page, &more, &grant_seal(&key, page, &more))
            .unwrap();
        let both = ram.map_pages(page, &[2 << 20, 4 << 30], None).unwrap();
        // SAFETY: unmapping the test's own mapping of two pages.
        unsafe { munmap(both, 2 * page as usize) }.unwrap();
        assert!(ram.map_pages(page, &[0], None).is_err());
        // Ordinary pages (memory registered in place) join under their own size, and
        // are granted as such only.
        let small = [8192, 12288];
        ram.extend(4096, &small, &grant_seal(&key, 4096, &small))
            .unwrap();
        let both = ram.map_pages(4096, &small, None).unwrap();
        // SAFETY: unmapping the test's own mapping of two pages.
        unsafe { munmap(both, 8192) }.unwrap();
        assert!(ram.map_pages(4096, &[16384], None).is_err());
        assert!(ram.map_pages(page, &[8192], None).is_err());
    }

    /// A returning connection's grant: taken on a connection without one, as a first
    /// grant; on one with, only the same grant again (its key, page size and pages),
    /// which keeps the pages added since; never one that widens or differs.
    #[test]
    fn a_returning_grant_must_be_the_sessions_own() {
        use vmcuda_wire::memory::{grant_key, grant_seal};
        let (mut ram, _fd) = ram();
        let page = 2 << 20;
        let key = grant_key().unwrap();
        ram.regrant(page, &[2 << 20], key).unwrap();
        let more = [4 << 30];
        ram.extend(page, &more, &grant_seal(&key, page, &more))
            .unwrap();
        // The same grant again: accepted, and the later pages are still granted.
        ram.regrant(page, &[2 << 20], key).unwrap();
        let both = ram.map_pages(page, &[2 << 20, 4 << 30], None).unwrap();
        // SAFETY: unmapping the test's own mapping of two pages.
        unsafe { munmap(both, 2 * page as usize) }.unwrap();
        // Another key, other pages, another size, nothing: refused, and nothing
        // changes.
        assert!(ram.regrant(page, &[2 << 20], grant_key().unwrap()).is_err());
        assert!(ram.regrant(page, &[0], key).is_err());
        assert!(ram.regrant(4096, &[2 << 20], key).is_err());
        assert!(ram.regrant(page, &[], key).is_err());
        assert!(ram.map_pages(page, &[0], None).is_err());
        assert!(ram.map_pages(page, &[2 << 20], None).is_ok_and(|m| {
            // SAFETY: unmapping the test's own mapping of one page.
            unsafe { munmap(m, page as usize) }.is_ok()
        }));
    }

    /// Pages map at the address asked for when it is free here, else elsewhere.
    #[test]
    fn pages_map_at_the_wanted_address_when_free() {
        let (ram, _fd) = ram();
        let first = ram.map_pages(4096, &[8192], None).unwrap();
        let free = first.as_ptr() as u64;
        // SAFETY: unmapping the test's own page, to reuse its (now free) address.
        unsafe { munmap(first, 4096) }.unwrap();
        let at = ram.map_pages(4096, &[8192], Some(free)).unwrap();
        assert_eq!(at.as_ptr() as u64, free);
        // That address is taken now: the next mapping goes elsewhere.
        let other = ram.map_pages(4096, &[8192], Some(free)).unwrap();
        assert_ne!(other.as_ptr() as u64, free);
        // SAFETY: unmapping the test's own pages.
        unsafe {
            munmap(at, 4096).unwrap();
            munmap(other, 4096).unwrap();
        }
    }

    #[test]
    fn pages_map_in_order_onto_the_guest_ram_file() {
        let (ram, fd) = ram();
        let file = std::fs::File::from(fd);
        use std::os::unix::fs::FileExt;
        file.write_all_at(b"low", 8192).unwrap();
        file.write_all_at(b"high", (4 << 20) + 4096).unwrap();
        let base = ram
            .map_pages(4096, &[(4 << 30) + 4096, 8192], None)
            .unwrap();
        // SAFETY: the mapping just made is two pages long and ours.
        let view = unsafe { std::slice::from_raw_parts_mut(base.as_ptr() as *mut u8, 8192) };
        assert_eq!(&view[..4], b"high");
        assert_eq!(&view[4096..4099], b"low");
        view[4096] = b'L';
        let mut back = [0u8; 3];
        file.read_exact_at(&mut back, 8192).unwrap();
        assert_eq!(&back, b"Low", "writes reach the guest's page");
        // SAFETY: unmapping what map_pages made.
        unsafe { munmap(base, 8192) }.unwrap();
    }

    #[test]
    fn pages_outside_guest_ram_or_misaligned_are_refused() {
        let (ram, _fd) = ram();
        let bad = CudaStatus::ErrorInvalidValue;
        for (page, pages) in [
            (4096, vec![4 << 20]),                           // the hole between the regions
            (4096, vec![(4 << 30) + (4 << 20)]),             // just past the end
            (2 << 20, vec![(4 << 20) - (2 << 20), 3 << 20]), // misaligned huge page
            (4096, vec![100]),                               // not page aligned
            (3000, vec![0]),                                 // not a power of two
            (4096, vec![]),                                  // nothing
            (4096, vec![!4095]),                             // wraps
        ] {
            assert_eq!(
                ram.map_pages(page, &pages, None).unwrap_err(),
                bad,
                "{pages:?}"
            );
        }
        assert_eq!(
            ram.map_pages(4096, &vec![0; MAX_PAGES + 1], None)
                .unwrap_err(),
            bad
        );
        // A huge page straddling the end of a region is refused too.
        assert_eq!(ram.map_pages(8 << 20, &[0], None).unwrap_err(), bad);
    }

    #[test]
    fn regions_are_checked_against_their_files_and_each_other() {
        let fd = memfd(1 << 20);
        let mut ram = GuestRam::default();
        assert!(
            ram.add(fd.try_clone().unwrap(), 0, 2 << 20, 0).is_err(),
            "longer than its file"
        );
        ram.add(fd.try_clone().unwrap(), 0, 1 << 20, 0).unwrap();
        assert_eq!(
            ram.add(fd.try_clone().unwrap(), 4096, 4096, 0),
            Err(GuestRamError::Overlap)
        );
        assert!(matches!(
            GuestRam::from_inherited(&["12:x".into()]),
            Err(GuestRamError::Syntax(_))
        ));
        assert!(matches!(
            GuestRam::from_inherited(&["1:0:4096:0".into()]),
            Err(GuestRamError::Syntax(_))
        ));
    }
}
