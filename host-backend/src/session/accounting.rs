//! The guest's memory accounts: what it holds, what that counts against its quota, and
//! the VM's ledger it shares with the VM's other connections.
//!
//! Every allocation path charges here before the executor is asked and refunds here
//! when the memory goes, so the quota holds at every moment. With a ledger the quota
//! is the VM's; a ledger that cannot be read or written refuses the allocation (the
//! accounts fail closed: a guest never gets memory the VM's figures cannot show).

use std::collections::{BTreeMap, HashMap};

use tracing::{info, warn};
use vmcuda_wire::op::{DevicePtr, MemPoolHandle};
use vmcuda_wire::CudaStatus;

use crate::ledger::Ledger;
use crate::stats::WorkerStats;

use super::host_memory::{HostMemory, HANDLE_ENTRY_BYTES};
use super::Session;
use crate::executor::{DeviceRange, PitchedRange};

/// One device allocation of the guest's.
#[derive(Clone, Copy, Debug)]
pub(super) struct Allocation {
    /// The bytes the guest asked for: what its copies and launches may reach.
    pub(super) size: u64,
    /// The bytes counted against the quota for it: what the GPU takes for it (see
    /// [`crate::executor::allocation_footprint`]); 0 where a graph holds the charge.
    pub(super) charged: u64,
    /// The device it was made on.
    pub(super) device: i32,
    /// Made from a pool (`cudaMallocAsync`, `cudaMallocFromPoolAsync` outside a
    /// capture).
    pub(super) pooled: bool,
    /// The pool the guest made that it came from; None for a device's default pool.
    pub(super) made_pool: Option<MemPoolHandle>,
}

/// Device memory held for the guest other than its allocations, charged per device so
/// that a device reset gives back exactly that device's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum Held {
    /// A loaded module's globals and constant banks (the image's SHA-256).
    Module([u8; 32]),
    /// What a context limit reserves (`cudaLimit*`).
    Limit(u32),
    /// Memory freed into the default pool that the pool still keeps reserved.
    PoolReserve,
    /// The same for a pool the guest made.
    MadePoolReserve(MemPoolHandle),
}

pub(super) struct Accounts {
    /// The guest's quota (the VM's, with a ledger) and its name for the log.
    quota: Option<u64>,
    guest: String,
    /// The guest's device allocations by their start.
    pub(super) allocations: BTreeMap<DevicePtr, Allocation>,
    /// Other device memory held for the guest, by device: module data, context limits,
    /// pool reserve. Each figure is also in `used`.
    pub(super) held: HashMap<(i32, Held), u64>,
    /// Module variables the guest has asked for: start -> (bytes, device).
    pub(super) globals: BTreeMap<DevicePtr, (u64, i32)>,
    /// Bytes this connection has counted against the quota: allocations, shared host
    /// memory, physical VMM memory, pools and library workspaces.
    pub(super) used: u64,
    /// The parts of `used` that are device allocations and shared host memory, for the
    /// figures.
    pub(super) device_bytes: u64,
    pub(super) shared_bytes: u64,
    /// The figures the host's monitoring reads.
    pub(super) stats: WorkerStats,
    /// The VM's ledger, shared with its other connections' workers: the quota is the
    /// VM's, not one connection's. Without one, the quota holds per connection.
    pub(super) ledger: Option<Ledger>,
    /// The host memory kept for the guest, against the VM's `host_memory`.
    pub(super) host: HostMemory,
}

impl Accounts {
    pub(super) fn new(quota: Option<u64>, host_memory: u64, guest: &str) -> Accounts {
        Accounts {
            host: HostMemory::new(host_memory, guest),
            quota,
            guest: guest.to_owned(),
            allocations: BTreeMap::new(),
            held: HashMap::new(),
            globals: BTreeMap::new(),
            used: 0,
            device_bytes: 0,
            shared_bytes: 0,
            stats: WorkerStats::private(),
            ledger: None,
        }
    }

    pub(super) fn set_device_bytes(&mut self, bytes: u64) {
        self.device_bytes = bytes;
        self.stats.set_device_memory(bytes);
    }

    pub(super) fn set_shared_bytes(&mut self, bytes: u64) {
        self.shared_bytes = bytes;
        self.stats.set_host_memory(bytes);
    }

    /// What counts against the quota now: the whole VM's when there is a ledger. A
    /// ledger that cannot be read answers `None`.
    pub(super) fn quota_used(&self) -> Option<u64> {
        match &self.ledger {
            Some(ledger) => match ledger.total() {
                Ok(total) => Some(total),
                Err(e) => {
                    warn!(guest = %self.guest, "{e}; refusing allocations until the ledger reads again");
                    None
                }
            },
            None => Some(self.used),
        }
    }

    /// Refuse `bytes` more when they would take the guest over its memory quota.
    pub(super) fn within_quota(&self, bytes: u64) -> Result<(), CudaStatus> {
        let Some(quota) = self.quota else {
            return Ok(());
        };
        let used = self.quota_used().ok_or(CudaStatus::ErrorMemoryAllocation)?;
        if used.checked_add(bytes).is_none_or(|u| u > quota) {
            self.over_quota(bytes, used, quota);
            return Err(CudaStatus::ErrorMemoryAllocation);
        }
        Ok(())
    }

    fn over_quota(&self, bytes: u64, used: u64, quota: u64) {
        info!(guest = %self.guest, bytes, used, quota,
            "allocation refused: over the guest's memory quota");
    }

    /// Count `bytes` against the guest's memory quota, or refuse them.
    pub(super) fn charge(&mut self, bytes: u64) -> Result<(), CudaStatus> {
        match (&self.ledger, self.quota) {
            (Some(ledger), Some(quota)) => match ledger.charge(bytes, quota) {
                Ok(true) => {}
                Ok(false) => {
                    self.over_quota(bytes, self.quota_used().unwrap_or(quota), quota);
                    return Err(CudaStatus::ErrorMemoryAllocation);
                }
                Err(e) => {
                    // Failing open here would let every connection of the VM take a
                    // whole quota of its own.
                    warn!(guest = %self.guest, bytes, "{e}; allocation refused");
                    return Err(CudaStatus::ErrorMemoryAllocation);
                }
            },
            _ => self.within_quota(bytes)?,
        }
        self.used = self.used.saturating_add(bytes);
        Ok(())
    }

    /// Count `bytes` the GPU already holds for the guest, whatever the quota says:
    /// for memory that cannot be refused any more (a pool that keeps what was freed
    /// into it), so that the figures stay true until it is given back.
    pub(super) fn charge_held(&mut self, bytes: u64) {
        if let Some(ledger) = &self.ledger {
            if let Err(e) = ledger.charge(bytes, u64::MAX) {
                warn!(guest = %self.guest, bytes, "{e}");
            }
        }
        self.used = self.used.saturating_add(bytes);
    }

    pub(super) fn refund(&mut self, bytes: u64) {
        self.used = self.used.saturating_sub(bytes);
        if let Some(ledger) = &self.ledger {
            if let Err(e) = ledger.refund(bytes) {
                warn!(guest = %self.guest, "{e}");
            }
        }
    }

    /// Hold `bytes` for `what` on `device` from now on, charging or refunding the
    /// difference from what it held; refused (and nothing changed) over the quota.
    pub(super) fn hold(&mut self, device: i32, what: Held, bytes: u64) -> Result<(), CudaStatus> {
        let had = self.held.get(&(device, what)).copied().unwrap_or(0);
        if bytes > had {
            self.charge(bytes - had)?;
        } else {
            self.refund(had - bytes);
        }
        if bytes == 0 {
            self.held.remove(&(device, what));
        } else {
            self.held.insert((device, what), bytes);
        }
        Ok(())
    }

    /// [`Accounts::hold`] for memory the GPU holds already, whatever the quota says.
    pub(super) fn hold_anyway(&mut self, device: i32, what: Held, bytes: u64) {
        if self.hold(device, what, bytes).is_err() {
            let had = self.held(device, what);
            self.charge_held(bytes.saturating_sub(had));
            self.held.insert((device, what), bytes);
        }
    }

    /// What the pools of `device` keep reserved for the guest, all together.
    pub(super) fn pool_reserve_on(&self, device: i32) -> u64 {
        self.held
            .iter()
            .filter(|((d, what), _)| {
                *d == device && matches!(what, Held::PoolReserve | Held::MadePoolReserve(_))
            })
            .map(|(_, &bytes)| bytes)
            .sum()
    }

    /// What `what` holds on `device`.
    pub(super) fn held(&self, device: i32, what: Held) -> u64 {
        self.held.get(&(device, what)).copied().unwrap_or(0)
    }

    /// Record a new device allocation and count it in the figures (its charge is
    /// already taken).
    pub(super) fn add_allocation(&mut self, ptr: DevicePtr, a: Allocation) {
        self.allocations.insert(ptr, a);
        self.set_device_bytes(self.device_bytes.saturating_add(a.size));
    }

    /// Forget a device allocation the executor has freed, refunding its charge.
    pub(super) fn remove_allocation(&mut self, ptr: DevicePtr) -> Option<Allocation> {
        let a = self.allocations.remove(&ptr)?;
        self.refund(a.charged);
        self.set_device_bytes(self.device_bytes.saturating_sub(a.size));
        Some(a)
    }

    /// Give back everything charged for `device` (it was reset): its allocations,
    /// limits and pool reserve; what other devices hold stays charged, and so does
    /// module data (see `module`).
    pub(super) fn release_device(&mut self, device: i32) {
        let gone: Vec<DevicePtr> = self
            .allocations
            .iter()
            .filter(|(_, a)| a.device == device)
            .map(|(p, _)| *p)
            .collect();
        for ptr in gone {
            self.remove_allocation(ptr);
        }
        let held: Vec<(i32, Held)> = self
            .held
            .keys()
            .filter(|(d, what)| *d == device && !matches!(what, Held::Module(_)))
            .copied()
            .collect();
        for key in held {
            if let Some(bytes) = self.held.remove(&key) {
                self.refund(bytes);
            }
        }
    }

    /// Refuse a new object once the guest holds `limit` of its kind, or when its
    /// handle-table entry would take the guest over its host memory.
    pub(super) fn check_count(
        &mut self,
        what: &str,
        have: usize,
        limit: u32,
    ) -> Result<(), CudaStatus> {
        if have < limit as usize {
            return self.host.fits(HANDLE_ENTRY_BYTES, what);
        }
        warn!(guest = %self.guest, limit, "refused another {what}: the guest's limit is reached");
        Err(CudaStatus::ErrorMemoryAllocation)
    }

    /// Whether `[ptr, end)` lies inside one of the guest's allocations or module
    /// variables.
    fn holds(&self, ptr: u64, end: u64) -> bool {
        let inside = |start: &u64, len: u64| ptr >= *start && end <= start.saturating_add(len);
        let in_allocation = self
            .allocations
            .range(..=ptr)
            .next_back()
            .is_some_and(|(s, a)| inside(s, a.size));
        let in_global = self
            .globals
            .range(..=ptr)
            .next_back()
            .is_some_and(|(s, (l, _))| inside(s, *l));
        in_allocation || in_global
    }
}

impl Session {
    /// The bytes this connection has counted against the quota now (the VM's ledger
    /// adds its other connections').
    pub fn charged_bytes(&self) -> u64 {
        self.accounts.used
    }

    /// Whether `[ptr, ptr + len)` lies wholly inside memory this guest owns: one of its
    /// device allocations, a module variable it looked up, its mapped virtual memory,
    /// or its shared host memory.
    pub(super) fn owns(&self, ptr: u64, len: u64) -> bool {
        if len == 0 {
            return true;
        }
        let Some(end) = ptr.checked_add(len) else {
            return false;
        };
        self.accounts.holds(ptr, end)
            || self.vmm.covers(ptr, end)
            || self.shared.covers(ptr, end)
            || self.ipc.covers(ptr, end)
    }

    /// How much of `[ptr, ptr + len)` is this guest's own memory from `ptr` on: `len`
    /// when all of it is, 0 when `ptr` is not.
    pub(super) fn owned_prefix(&self, ptr: u64, len: u64) -> u64 {
        if self.owns(ptr, len) {
            return len;
        }
        // Ownership of a prefix shrinks as it grows: the longest owned one by halves.
        let (mut owned, mut not_owned) = (0, len);
        while not_owned - owned > 1 {
            let mid = owned + (not_owned - owned) / 2;
            if self.owns(ptr, mid) {
                owned = mid;
            } else {
                not_owned = mid;
            }
        }
        owned
    }

    /// Refuse, as the driver would for a pointer it does not know, a copy or memset
    /// reaching outside this guest's own memory; it is never executed.
    pub(super) fn check_range(&self, ptr: u64, len: u64) -> Result<DeviceRange, CudaStatus> {
        if self.owns(ptr, len) {
            return Ok(DeviceRange::new(ptr, len));
        }
        warn!(client = %self.client, op = ?self.op, ptr = format_args!("{ptr:#x}"), len,
            "refused an access outside the guest's own memory");
        Err(CudaStatus::ErrorInvalidValue)
    }

    /// [`Session::check_range`] for `height` rows of `width` bytes, `pitch` apart.
    pub(super) fn check_pitched(
        &self,
        ptr: u64,
        pitch: u64,
        width: u64,
        height: u64,
    ) -> Result<PitchedRange, CudaStatus> {
        if let Some(extent) = pitched_extent(pitch, width, height)? {
            self.check_range(ptr, extent)?;
        }
        Ok(PitchedRange::new(ptr, pitch, width, height))
    }
}

/// The bytes `height` rows of `width`, `pitch` apart, reach from the first: none when
/// there are no rows or no bytes in them, refused when they overflow.
pub(super) fn pitched_extent(
    pitch: u64,
    width: u64,
    height: u64,
) -> Result<Option<u64>, CudaStatus> {
    width
        .checked_mul(height)
        .ok_or(CudaStatus::ErrorInvalidValue)?;
    if width == 0 || height == 0 {
        return Ok(None);
    }
    pitch
        .checked_mul(height - 1)
        .and_then(|rows| rows.checked_add(width))
        .map(Some)
        .ok_or(CudaStatus::ErrorInvalidValue)
}

#[cfg(test)]
mod tests {
    use vmcuda_wire::op::*;

    use crate::executor::host_memory::HostMemoryExecutor;
    use crate::ledger::Ledger;
    use crate::policy::Grant;
    use crate::session::Session;

    const CTX: CallContext = CallContext { device: 0 };

    /// The ranges handed to the executor are checked here, once: a range whose end
    /// overflows, or a pitched region whose rows packed overflow, never reaches it.
    #[test]
    fn overflowing_ranges_never_reach_the_executor() {
        let exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
        let mut s = Session::new(Box::new(exec), Grant::unlimited("vm1"));
        let p = s
            .mem_alloc(&CTX, MemAlloc { size: 4096 }, &[])
            .unwrap()
            .0
            .ptr;
        let range = s.check_range(p, 4096).unwrap();
        assert_eq!((range.ptr(), range.len()), (p, 4096));
        // The owned part of a range from its start: all of it, up to the allocation's
        // end, or nothing for memory that is not the guest's.
        assert_eq!(s.owned_prefix(p + 96, 64), 64);
        assert_eq!(s.owned_prefix(p + 96, 1 << 20), 4096 - 96);
        assert_eq!(s.owned_prefix(p, u64::MAX), 4096);
        assert_eq!(s.owned_prefix(0xdead_0000, 64), 0);
        assert!(s.check_range(u64::MAX - 1, 2).is_err());
        assert!(s.check_range(p, 4097).is_err());
        let pitched = s.check_pitched(p, 1024, 1000, 4).unwrap();
        assert_eq!(pitched.packed_len(), 4000);
        assert!(
            s.check_pitched(p, 1024, 1025, 4).is_err(),
            "past the allocation"
        );
        assert!(
            s.check_pitched(p, 0, u64::MAX, 2).is_err(),
            "rows packed overflow"
        );
        assert!(
            s.check_pitched(p, u64::MAX, 1, 3).is_err(),
            "extent overflows"
        );
        // Empty regions touch nothing and need no memory.
        assert_eq!(s.check_pitched(0, 0, 0, 0).unwrap().packed_len(), 0);
    }

    /// A ledger that can no longer be written refuses allocations: falling back to
    /// per-connection accounting would let every connection of the VM take a whole
    /// quota of its own.
    #[test]
    fn an_unwritable_ledger_refuses_allocations() {
        let dir = std::env::temp_dir().join(format!("vmcuda-ledger-closed-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut ledger = Ledger::join(&dir, "vm1", 4).unwrap();
        // Every change of the ledger now fails as an I/O error would.
        ledger.break_for_tests();
        let exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
        let mut grant = Grant::unlimited("vm1");
        grant.memory_quota = Some(8 << 20);
        let mut s = Session::new(Box::new(exec), grant).with_ledger(ledger);
        assert_eq!(
            s.mem_alloc(&CTX, MemAlloc { size: 1 << 20 }, &[]).err(),
            Some(vmcuda_wire::CudaStatus::ErrorMemoryAllocation)
        );
        assert_eq!(
            s.charged_bytes(),
            0,
            "nothing counted for a refused allocation"
        );
        let info = s.mem_get_info(&CTX, MemGetInfo, &[]).unwrap().0;
        assert_eq!(
            info.free, 0,
            "an unreadable ledger leaves nothing to allocate"
        );
        drop(s);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
