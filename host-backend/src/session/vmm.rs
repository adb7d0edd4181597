//! The driver's virtual memory management family: reservations, physical
//! allocations, mappings and access.
//!
//! **VMM bookkeeping.** Reservations (start -> bytes), physical allocations (a handle
//! this session names -> the executor's, its size, properties, reference count and
//! how many mappings use it) and mappings (start -> bytes, handle) are per connection.
//! Physical memory is charged to the guest's quota at `MemCreate` and given back when
//! its last reference is released and its last mapping gone (as CUDA frees it); the
//! executor's allocation is released once, when the last reference goes (the driver
//! keeps mapped memory alive until it is unmapped). A release past the last reference
//! is refused with `CUDA_ERROR_INVALID_VALUE`, as the driver refuses it, so the count
//! never wraps and nothing is released twice. Mapped ranges count as the
//! guest's own memory for every copy, memset and launch check (a range may run across
//! adjacent mappings, as tensors in torch's expandable segments do). A handle or range
//! the guest does not hold is refused with the CUDA code the driver gives and logged;
//! the connection's end unmaps, releases and frees everything left.

use std::collections::{BTreeMap, HashMap};

use tracing::warn;
use vmcuda_wire::driver::{
    is_host_location, AllocationHandle, AllocationProp, Granularity, MemAddressFree,
    MemAddressReserve, MemCreate, MemCreated, MemGetAllocationGranularity,
    MemGetAllocationProperties, MemMap, MemRelease, MemRetainAllocationHandle, MemSetAccess,
    MemUnmap, Reserved, MEM_ALLOCATION_TYPE_PINNED, MEM_LOCATION_TYPE_DEVICE,
};
use vmcuda_wire::op::{
    AccessFlags, CallContext, IpcToken, MemExportShareable, MemGetAccess, MemImportShareable,
    VmmOps,
};
use vmcuda_wire::op::{DevicePtr, HandlerResult};
use vmcuda_wire::CudaStatus;

use crate::executor::driver::ExecAllocation;

use super::{nothing, Session};

struct Physical {
    exec: ExecAllocation,
    size: u64,
    prop: AllocationProp,
    /// References the guest holds (`MemCreate`, `MemRetainAllocationHandle`).
    refs: u32,
    /// Mappings using it.
    mapped: u32,
    /// Whether the executor's handle has been released: once, when the guest's
    /// references first run out (a handle retained again through a mapping is the
    /// same allocation, which the driver keeps while mapped).
    exec_released: bool,
    /// Imported from another process of the VM (CUDA IPC): charged to its exporter,
    /// not here.
    imported: bool,
}

struct Mapping {
    size: u64,
    handle: AllocationHandle,
}

#[derive(Default)]
pub(super) struct Vmm {
    reservations: BTreeMap<DevicePtr, u64>,
    allocations: HashMap<AllocationHandle, Physical>,
    mappings: BTreeMap<DevicePtr, Mapping>,
}

impl Vmm {
    /// Whether `[ptr, end)` is covered by mappings laid end to end.
    pub(super) fn covers(&self, ptr: u64, end: u64) -> bool {
        let mut at = ptr;
        let Some((start, m)) = self.mappings.range(..=ptr).next_back() else {
            return false;
        };
        let mut reach = start.saturating_add(m.size);
        if reach <= at {
            return false;
        }
        while reach < end {
            match self.mappings.get(&reach) {
                Some(next) => {
                    at = reach;
                    reach = at.saturating_add(next.size);
                }
                None => return false,
            }
        }
        true
    }

    /// The reservation holding `[ptr, ptr + size)`, if one does.
    fn reservation_holding(&self, ptr: u64, size: u64) -> Option<DevicePtr> {
        let end = ptr.checked_add(size)?;
        let (start, len) = self.reservations.range(..=ptr).next_back()?;
        (end <= start.saturating_add(*len)).then_some(*start)
    }

    /// The mappings starting inside `[ptr, end)`.
    fn mappings_in(&self, ptr: u64, end: u64) -> Vec<(DevicePtr, u64)> {
        self.mappings
            .range(ptr..end)
            .map(|(s, m)| (*s, m.size))
            .collect()
    }
}

/// Physical memory this executor can make: pinned device memory on a device.
/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`: the one shareable handle type passed
/// between processes.
const MEM_HANDLE_TYPE_POSIX_FD: u32 = 1;

fn check_prop(prop: &AllocationProp) -> Result<(), CudaStatus> {
    if prop.alloc_type != MEM_ALLOCATION_TYPE_PINNED
        || prop.location_type != MEM_LOCATION_TYPE_DEVICE
    {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    Ok(())
}

/// A granularity may be asked for host memory as well (NCCL does before it tries a
/// host allocation, and falls back to shared memory when that fails): the host's
/// driver answers it.
fn check_granularity_prop(prop: &AllocationProp) -> Result<(), CudaStatus> {
    if prop.alloc_type == MEM_ALLOCATION_TYPE_PINNED && is_host_location(prop.location_type) {
        return Ok(());
    }
    check_prop(prop)
}

impl Session {
    fn refuse_vmm(&self, what: &str, ptr: u64, size: u64) -> CudaStatus {
        warn!(client = %self.client, ptr = format_args!("{ptr:#x}"), size,
            "refused {what}: not the guest's own");
        CudaStatus::ErrorInvalidValue
    }

    fn physical(&self, h: AllocationHandle) -> Result<&Physical, CudaStatus> {
        self.vmm.allocations.get(&h).ok_or_else(|| {
            warn!(client = %self.client, handle = h.0, "unknown allocation handle");
            CudaStatus::ErrorInvalidValue
        })
    }

    /// Forget a physical allocation once nothing references or maps it, giving its
    /// quota back.
    fn settle(&mut self, h: AllocationHandle) {
        let gone = self
            .vmm
            .allocations
            .get(&h)
            .is_some_and(|p| p.refs == 0 && p.mapped == 0);
        if gone {
            if let Some(p) = self.vmm.allocations.remove(&h) {
                if !p.imported {
                    self.accounts.refund(p.size);
                    self.accounts
                        .set_device_bytes(self.accounts.device_bytes.saturating_sub(p.size));
                }
                self.ipc_withdraw_allocation(h);
            }
        }
    }

    /// Unmap, release and free everything the guest left (the session ends).
    pub(super) fn vmm_drop_all(&mut self) {
        for (ptr, m) in std::mem::take(&mut self.vmm.mappings) {
            let _ = self.exec.mem_unmap(ptr, m.size);
        }
        for (_, p) in std::mem::take(&mut self.vmm.allocations) {
            if !p.exec_released {
                let _ = self.exec.mem_release(p.exec);
            }
        }
        for (ptr, size) in std::mem::take(&mut self.vmm.reservations) {
            let _ = self.exec.mem_address_free(ptr, size);
        }
    }

    /// Give up `device`'s physical memory and its mappings before the device is
    /// reset, with its quota, and the reservations no other device's mapping is left
    /// in; another device's memory stays mapped and charged.
    pub(super) fn vmm_reset(&mut self, device: i32) {
        let on_device: Vec<AllocationHandle> = self
            .vmm
            .allocations
            .iter()
            .filter(|(_, p)| p.prop.location_id == device)
            .map(|(h, _)| *h)
            .collect();
        let mappings: Vec<(DevicePtr, u64)> = self
            .vmm
            .mappings
            .iter()
            .filter(|(_, m)| on_device.contains(&m.handle))
            .map(|(ptr, m)| (*ptr, m.size))
            .collect();
        for (ptr, size) in mappings {
            let _ = self.exec.mem_unmap(ptr, size);
            self.vmm.mappings.remove(&ptr);
        }
        for h in on_device {
            if let Some(p) = self.vmm.allocations.remove(&h) {
                if !p.exec_released {
                    let _ = self.exec.mem_release(p.exec);
                }
                self.accounts.refund(p.size);
                self.accounts
                    .set_device_bytes(self.accounts.device_bytes.saturating_sub(p.size));
            }
        }
        let unused: Vec<(DevicePtr, u64)> = self
            .vmm
            .reservations
            .iter()
            .filter(|(ptr, size)| {
                self.vmm
                    .mappings_in(**ptr, ptr.saturating_add(**size))
                    .is_empty()
            })
            .map(|(p, s)| (*p, *s))
            .collect();
        for (ptr, size) in unused {
            let _ = self.exec.mem_address_free(ptr, size);
            self.vmm.reservations.remove(&ptr);
        }
    }
}

impl VmmOps for Session {
    fn mem_address_reserve(
        &mut self,
        _: &CallContext,
        req: MemAddressReserve,
        _: &[u8],
    ) -> HandlerResult<Reserved> {
        if req.size == 0 || !(req.alignment == 0 || req.alignment.is_power_of_two()) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.accounts.check_count(
            "address reservation",
            self.vmm.reservations.len(),
            self.grant.max_streams.saturating_mul(16),
        )?;
        let ptr = self
            .exec
            .mem_address_reserve(req.size, req.alignment, req.addr, req.flags)?;
        self.vmm.reservations.insert(ptr, req.size);
        Ok((Reserved { ptr }, Vec::new()))
    }

    fn mem_address_free(
        &mut self,
        _: &CallContext,
        req: MemAddressFree,
        _: &[u8],
    ) -> HandlerResult<()> {
        if self.vmm.reservations.get(&req.ptr) != Some(&req.size) {
            return Err(self.refuse_vmm("an address free", req.ptr, req.size));
        }
        let end = req.ptr.saturating_add(req.size);
        if !self.vmm.mappings_in(req.ptr, end).is_empty() {
            warn!(client = %self.client, "refused to free a reservation that is still mapped");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.exec.mem_address_free(req.ptr, req.size)?;
        self.vmm.reservations.remove(&req.ptr);
        nothing()
    }

    fn mem_create(
        &mut self,
        _: &CallContext,
        req: MemCreate,
        _: &[u8],
    ) -> HandlerResult<MemCreated> {
        if req.size == 0 || req.flags != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        if is_host_location(req.prop.location_type) {
            // Host memory the guest could reach would have to be guest RAM, which the
            // host's driver cannot allocate: refused as unsupported (the guest library
            // says so without asking).
            warn!(client = %self.client, location_type = req.prop.location_type,
                "refused a physical allocation in host memory: not supported");
            return Err(CudaStatus::ErrorNotSupported);
        }
        check_prop(&req.prop)?;
        self.accounts.check_count(
            "physical allocation",
            self.vmm.allocations.len(),
            self.grant.max_streams.saturating_mul(64),
        )?;
        self.accounts.charge(req.size)?;
        let exec = match self.exec.mem_create(req.size, &req.prop) {
            Ok(exec) => exec,
            Err(e) => {
                self.accounts.refund(req.size);
                return Err(e);
            }
        };
        self.accounts
            .set_device_bytes(self.accounts.device_bytes.saturating_add(req.size));
        let handle = AllocationHandle(self.handles.fresh());
        self.vmm.allocations.insert(
            handle,
            Physical {
                exec,
                size: req.size,
                prop: req.prop,
                refs: 1,
                mapped: 0,
                exec_released: false,
                imported: false,
            },
        );
        Ok((MemCreated { handle }, Vec::new()))
    }

    fn mem_export_shareable(
        &mut self,
        _: &CallContext,
        req: MemExportShareable,
        _: &[u8],
    ) -> HandlerResult<IpcToken> {
        let p = self.physical(req.handle)?;
        // A type the allocation was not made exportable as is refused as the driver
        // refuses it; the others (Win32, fabric) do not exist between a VM's processes.
        if p.prop.requested_handle_types & req.handle_type == 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        if req.handle_type != MEM_HANDLE_TYPE_POSIX_FD {
            return Err(CudaStatus::ErrorNotSupported);
        }
        // Only what was made exportable as a descriptor is, as the driver has it.
        if p.refs == 0
            || p.imported
            || p.prop.requested_handle_types & MEM_HANDLE_TYPE_POSIX_FD == 0
        {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let (exec, size, device) = (p.exec, p.size, p.prop.location_id);
        if let Some(token) = self.ipc_allocation_token(req.handle) {
            return Ok((IpcToken { token }, Vec::new()));
        }
        let token = self.ipc_export_allocation(req.handle, exec, size, device)?;
        Ok((IpcToken { token }, Vec::new()))
    }

    fn mem_import_shareable(
        &mut self,
        _: &CallContext,
        req: MemImportShareable,
        _: &[u8],
    ) -> HandlerResult<MemCreated> {
        if req.handle_type != MEM_HANDLE_TYPE_POSIX_FD {
            return Err(CudaStatus::ErrorNotSupported);
        }
        // This process's own export: the same allocation, one reference more.
        if let Some(handle) = self.ipc_own_allocation(&req.token) {
            if let Some(p) = self.vmm.allocations.get_mut(&handle) {
                p.refs = p.refs.checked_add(1).ok_or(CudaStatus::ErrorInvalidValue)?;
                return Ok((MemCreated { handle }, Vec::new()));
            }
        }
        self.accounts.check_count(
            "physical allocation",
            self.vmm.allocations.len(),
            self.grant.max_streams.saturating_mul(64),
        )?;
        let (exec, size, device) = self.ipc_import_allocation(req.token)?;
        let handle = AllocationHandle(self.handles.fresh());
        self.vmm.allocations.insert(
            handle,
            Physical {
                exec,
                size,
                prop: AllocationProp {
                    alloc_type: MEM_ALLOCATION_TYPE_PINNED,
                    requested_handle_types: MEM_HANDLE_TYPE_POSIX_FD,
                    location_type: MEM_LOCATION_TYPE_DEVICE,
                    location_id: device,
                    ..Default::default()
                },
                refs: 1,
                mapped: 0,
                exec_released: false,
                imported: true,
            },
        );
        Ok((MemCreated { handle }, Vec::new()))
    }

    fn mem_release(&mut self, _: &CallContext, req: MemRelease, _: &[u8]) -> HandlerResult<()> {
        let p = self.physical(req.handle)?;
        // A handle released as often as it was created and retained is the driver's
        // no more: it answers CUDA_ERROR_INVALID_VALUE, and so does this.
        if p.refs == 0 {
            warn!(client = %self.client, handle = req.handle.0,
                "refused a release of a handle with no reference left");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let exec = p.exec;
        let release = p.refs == 1 && !p.exec_released;
        if release {
            self.exec.mem_release(exec)?;
        }
        if let Some(p) = self.vmm.allocations.get_mut(&req.handle) {
            p.refs -= 1;
            p.exec_released |= release;
        }
        self.settle(req.handle);
        nothing()
    }

    fn mem_map(&mut self, _: &CallContext, req: MemMap, _: &[u8]) -> HandlerResult<()> {
        let p = self.physical(req.handle)?;
        if p.refs == 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let (exec, phys_size) = (p.exec, p.size);
        let end = req.ptr.checked_add(req.size);
        let fits = req.size > 0
            && req.flags == 0
            && req
                .offset
                .checked_add(req.size)
                .is_some_and(|e| e <= phys_size);
        if !fits || end.is_none() || self.vmm.reservation_holding(req.ptr, req.size).is_none() {
            return Err(self.refuse_vmm("a mapping", req.ptr, req.size));
        }
        let end = end.unwrap_or(u64::MAX);
        let overlaps = self
            .vmm
            .mappings
            .range(..end)
            .next_back()
            .is_some_and(|(s, m)| s.saturating_add(m.size) > req.ptr);
        if overlaps {
            return Err(self.refuse_vmm("a mapping over a mapping", req.ptr, req.size));
        }
        self.exec.mem_map(req.ptr, req.size, req.offset, exec)?;
        self.vmm.mappings.insert(
            req.ptr,
            Mapping {
                size: req.size,
                handle: req.handle,
            },
        );
        if let Some(p) = self.vmm.allocations.get_mut(&req.handle) {
            p.mapped += 1;
        }
        nothing()
    }

    fn mem_unmap(&mut self, _: &CallContext, req: MemUnmap, _: &[u8]) -> HandlerResult<()> {
        let end = req.ptr.checked_add(req.size);
        let inside = end.map(|end| self.vmm.mappings_in(req.ptr, end));
        // CUDA unmaps whole mappings: the range must start at one and end at one.
        let whole = inside.as_ref().is_some_and(|m| {
            m.first().is_some_and(|(s, _)| *s == req.ptr)
                && m.iter().map(|(_, len)| *len).sum::<u64>() == req.size
                && self.vmm.covers(req.ptr, req.ptr + req.size)
        });
        if !whole {
            return Err(self.refuse_vmm("an unmap", req.ptr, req.size));
        }
        self.exec.mem_unmap(req.ptr, req.size)?;
        for (start, _) in inside.unwrap_or_default() {
            if let Some(m) = self.vmm.mappings.remove(&start) {
                if let Some(p) = self.vmm.allocations.get_mut(&m.handle) {
                    p.mapped -= 1;
                }
                self.settle(m.handle);
            }
        }
        nothing()
    }

    fn mem_set_access(
        &mut self,
        _: &CallContext,
        req: MemSetAccess,
        _: &[u8],
    ) -> HandlerResult<()> {
        let end = req.ptr.checked_add(req.size);
        if req.size == 0
            || req.descs.is_empty()
            || !end.is_some_and(|e| self.vmm.covers(req.ptr, e))
        {
            return Err(self.refuse_vmm("an access change", req.ptr, req.size));
        }
        if req
            .descs
            .iter()
            .any(|d| d.location_type != MEM_LOCATION_TYPE_DEVICE)
        {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.exec.mem_set_access(req.ptr, req.size, &req.descs)?;
        nothing()
    }

    fn mem_get_access(
        &mut self,
        _: &CallContext,
        req: MemGetAccess,
        _: &[u8],
    ) -> HandlerResult<AccessFlags> {
        let end = req.ptr.checked_add(1);
        if !end.is_some_and(|e| self.vmm.covers(req.ptr, e)) {
            return Err(self.refuse_vmm("an access query", req.ptr, 1));
        }
        if req.location_type != MEM_LOCATION_TYPE_DEVICE {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let flags = self.exec.mem_get_access(req.ptr, req.location_id)?;
        Ok((AccessFlags { flags }, Vec::new()))
    }

    fn mem_get_allocation_granularity(
        &mut self,
        _: &CallContext,
        req: MemGetAllocationGranularity,
        _: &[u8],
    ) -> HandlerResult<Granularity> {
        check_granularity_prop(&req.prop)?;
        let bytes = self
            .exec
            .mem_allocation_granularity(&req.prop, req.option)?;
        Ok((Granularity { bytes }, Vec::new()))
    }

    fn mem_retain_allocation_handle(
        &mut self,
        _: &CallContext,
        req: MemRetainAllocationHandle,
        _: &[u8],
    ) -> HandlerResult<MemCreated> {
        let handle = self
            .vmm
            .mappings
            .range(..=req.ptr)
            .next_back()
            .filter(|(s, m)| req.ptr < s.saturating_add(m.size))
            .map(|(_, m)| m.handle)
            .ok_or_else(|| self.refuse_vmm("a handle lookup", req.ptr, 0))?;
        let p = self
            .vmm
            .allocations
            .get_mut(&handle)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        p.refs = p.refs.checked_add(1).ok_or(CudaStatus::ErrorInvalidValue)?;
        Ok((MemCreated { handle }, Vec::new()))
    }

    fn mem_get_allocation_properties(
        &mut self,
        _: &CallContext,
        req: MemGetAllocationProperties,
        _: &[u8],
    ) -> HandlerResult<AllocationProp> {
        Ok((self.physical(req.handle)?.prop, Vec::new()))
    }
}

#[cfg(test)]
mod tests;
