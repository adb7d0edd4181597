//! Device allocations, pointer attributes, and guest memory shared with this process
//! (same-host memfds and a VM's guest pages), each counted against the quota.

use tracing::{info, warn};
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

use crate::executor::{allocation_footprint, Executor};
use crate::shared_memory::SharedMapping;

use super::accounting::Allocation;
use super::{nothing, Session};

impl MemoryOps for Session {
    fn mem_alloc(
        &mut self,
        ctx: &CallContext,
        req: MemAlloc,
        _: &[u8],
    ) -> HandlerResult<Allocated> {
        let size = req.size;
        // On a host that suspends idle VMs to keep GPU memory free ([suspend]
        // keep_free), a GPU out of memory may have room again soon: waited for, up to
        // `room_wait`. (The quota is checked before: its refusals come at once.)
        let until = std::time::Instant::now() + self.room_wait;
        let ptr = self.allocate(ctx.device, size, |exec| loop {
            match exec.alloc(size) {
                Err(CudaStatus::ErrorMemoryAllocation) if std::time::Instant::now() < until => {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                made => return Ok((made?, size)),
            }
        })?;
        Ok((Allocated { ptr }, Vec::new()))
    }

    fn mem_free(&mut self, ctx: &CallContext, req: MemFree, _: &[u8]) -> HandlerResult<()> {
        if req.ptr == 0 {
            return nothing();
        }
        // Only what this guest allocated may be freed by it, graph memory only once a
        // launch made it live (see `graph`).
        if !self.accounts.allocations.contains_key(&req.ptr) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        if !self.graph_memory_freeable(req.ptr) {
            warn!(client = %self.client, ptr = format_args!("{:#x}", req.ptr),
                "refused cudaFree of graph memory that is not live");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // Withdrawn first: no other process opens it while it is being freed.
        self.ipc_withdraw_memory(req.ptr);
        self.exec.free(req.ptr)?;
        self.accounts.remove_allocation(req.ptr);
        self.graph_memory_freed(ctx.device, req.ptr);
        nothing()
    }

    fn mem_alloc_pitch(
        &mut self,
        ctx: &CallContext,
        req: MemAllocPitch,
        _: &[u8],
    ) -> HandlerResult<AllocatedPitch> {
        let (width, height) = (req.width, req.height);
        let mut pitch = 0;
        let ptr = self.allocate(ctx.device, width.saturating_mul(height), |exec| {
            let (ptr, p) = exec.alloc_pitch(width, height)?;
            pitch = p;
            match p.checked_mul(height) {
                Some(bytes) => Ok((ptr, bytes)),
                None => {
                    let _ = exec.free(ptr);
                    Err(CudaStatus::ErrorMemoryAllocation)
                }
            }
        })?;
        Ok((AllocatedPitch { ptr, pitch }, Vec::new()))
    }

    fn ipc_get_mem_handle(
        &mut self,
        _: &CallContext,
        req: IpcGetMemHandle,
        _: &[u8],
    ) -> HandlerResult<IpcToken> {
        let token = self.ipc_get_mem_handle_now(req)?;
        Ok((IpcToken { token }, Vec::new()))
    }

    fn ipc_open_mem_handle(
        &mut self,
        ctx: &CallContext,
        req: IpcOpenMemHandle,
        _: &[u8],
    ) -> HandlerResult<IpcOpened> {
        Ok((self.ipc_open_mem_handle_now(ctx.device, req)?, Vec::new()))
    }

    fn ipc_close_mem_handle(
        &mut self,
        _: &CallContext,
        req: IpcCloseMemHandle,
        _: &[u8],
    ) -> HandlerResult<IpcClosed> {
        Ok((self.ipc_close_mem_handle_now(req)?, Vec::new()))
    }

    fn pointer_get_attributes(
        &mut self,
        _: &CallContext,
        req: PointerGetAttributes,
        _: &[u8],
    ) -> HandlerResult<PointerAttributes> {
        // Memory the guest does not own is, to it, memory CUDA knows nothing of: the
        // driver is not asked, so nothing of the worker's own address space shows.
        if !self.owns(req.ptr, 1) {
            let unregistered = PointerAttributes {
                memory_type: 0,
                device: -2,
                device_pointer: 0,
            };
            return Ok((unregistered, Vec::new()));
        }
        Ok((self.exec.pointer_attributes(req.ptr)?, Vec::new()))
    }

    fn host_register_shared(
        &mut self,
        _: &CallContext,
        req: HostRegisterShared,
        _: &[u8],
    ) -> HandlerResult<SharedHostMemory> {
        let fd = self.incoming_fds.pop_front().ok_or_else(|| {
            warn!(client = %self.client, "shared-memory request without a descriptor");
            CudaStatus::ErrorNotSupported
        })?;
        if self.shared.by_guest_addr.contains_key(&req.addr) {
            return Err(CudaStatus::ErrorHostMemoryAlreadyRegistered);
        }
        let staging = req.flags & SHARED_STAGING != 0;
        self.check_staging(staging, req.size)?;
        let mapping = SharedMapping::map(&fd, req.addr, req.size)?;
        let device_ptr = self.register_mapping(req.addr, mapping, staging)?;
        Ok((SharedHostMemory { device_ptr }, Vec::new()))
    }

    fn host_register_guest_pages(
        &mut self,
        _: &CallContext,
        req: HostRegisterGuestPages,
        _: &[u8],
    ) -> HandlerResult<SharedHostMemory> {
        let Some(ram) = &self.guest_ram else {
            // Not a vhost-user device worker, an unprivileged guest source port, or the
            // VM's configuration says no: the guest copies over the socket.
            info!(client = %self.client,
                "guest-physical registration refused: this connection has no access to the guest's RAM (not from a privileged guest port through the vhost-user device, or guest_memory_copies = false); copies go over the socket");
            return Err(CudaStatus::ErrorNotSupported);
        };
        let staging = req.flags & SHARED_STAGING != 0;
        let size = req.page_size.checked_mul(req.pages.len() as u64);
        if size != Some(req.size)
            || req.addr == 0
            || !req.addr.is_multiple_of(4096)
            || req.addr.checked_add(req.size).is_none()
            || (staging && req.size > MAX_STAGING_LEN)
            || self.check_staging(staging, req.size).is_err()
        {
            warn!(client = %self.client, size = req.size, pages = req.pages.len(),
                "refused guest pages: sizes disagree, bad address, or a second or oversized staging area");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        if self.shared.by_guest_addr.contains_key(&req.addr) {
            return Err(CudaStatus::ErrorHostMemoryAlreadyRegistered);
        }
        // The program's pinned memory is mapped at the guest's own address where that
        // is free here, so that the guest's pointer is also the device's, as under
        // unified addressing; the staging area is the library's, reached by copies only.
        let want = (!staging).then_some(req.addr);
        let addr = ram.map_pages(req.page_size, &req.pages, want)?;
        let mapping = SharedMapping {
            addr,
            len: req.size as usize,
            device_ptr: (!staging).then_some(0),
            staging: false,
        };
        let device_ptr = self.register_mapping(req.addr, mapping, staging)?;
        if !staging {
            // Away from the guest's address (taken here), kernels reach the pages only
            // by cudaHostGetDevicePointer's pointer.
            info!(client = %self.client, bytes = req.size, page_size = req.page_size,
                at_guest_address = device_ptr == req.addr,
                "pinned memory in guest pages, mapped for the GPU");
        }
        Ok((
            SharedHostMemory {
                device_ptr: if staging { 0 } else { device_ptr },
            },
            Vec::new(),
        ))
    }

    fn guest_pages_extend(
        &mut self,
        _: &CallContext,
        req: GuestPagesExtend,
        _: &[u8],
    ) -> HandlerResult<()> {
        let Some(ram) = &mut self.guest_ram else {
            info!(client = %self.client, "more guest pages refused: this connection has no access to the guest's RAM");
            return Err(CudaStatus::ErrorNotSupported);
        };
        ram.extend(req.page_size, &req.pages, &req.seal)?;
        nothing()
    }

    fn ring_attach(&mut self, _: &CallContext, req: RingAttach, _: &[u8]) -> HandlerResult<()> {
        use vmcuda_wire::ring::{self, RingMemory};
        if self.ring_attached {
            warn!(client = %self.client, "refused a second command ring");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        if !ring::valid_capacity(req.capacity) {
            warn!(client = %self.client, capacity = req.capacity, "refused a command ring of that capacity");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let memory = match req.place {
            RingPlace::Descriptor => {
                let fd = self.incoming_fds.pop_front().ok_or_else(|| {
                    warn!(client = %self.client, "command ring without a descriptor");
                    CudaStatus::ErrorNotSupported
                })?;
                RingMemory::map_fd(std::os::fd::AsFd::as_fd(&fd), req.capacity)
            }
            RingPlace::GuestPages { page_size, pages } => {
                let Some(ram) = &self.guest_ram else {
                    info!(client = %self.client, "command ring in guest pages refused: this connection has no access to the guest's RAM");
                    return Err(CudaStatus::ErrorNotSupported);
                };
                let len = page_size.saturating_mul(pages.len() as u64);
                if len < ring::area_len(req.capacity) as u64 {
                    warn!(client = %self.client, len, "command ring pages too few for its capacity");
                    return Err(CudaStatus::ErrorInvalidValue);
                }
                let base = ram.map_pages(page_size, &pages, None)?;
                // SAFETY: `map_pages` made this mapping of `len` bytes for us alone.
                unsafe { RingMemory::from_mapping(base.cast(), len as usize, req.capacity) }
            }
        }
        .map_err(|e| {
            warn!(client = %self.client, "command ring refused: {e}");
            CudaStatus::ErrorInvalidValue
        })?;
        // Whatever the guest left there, both rings start empty.
        memory.reset();
        self.ring_attached = true;
        self.pending_ring = Some(memory);
        nothing()
    }

    fn guest_pages_grant(
        &mut self,
        _: &CallContext,
        _: GuestPagesGrant,
        _: &[u8],
    ) -> HandlerResult<()> {
        // A grant comes first on its connection, before the hello (the worker applies
        // it there); after the hello it could only widen what was granted.
        warn!(client = %self.client, "refused a guest page grant after the hello");
        Err(CudaStatus::ErrorInvalidValue)
    }

    fn host_unregister_shared(
        &mut self,
        _: &CallContext,
        req: HostUnregisterShared,
        _: &[u8],
    ) -> HandlerResult<()> {
        if !self.shared.by_guest_addr.contains_key(&req.addr) {
            return Err(CudaStatus::ErrorHostMemoryNotRegistered);
        }
        // Copies may still be running on these pages (cudaFreeHost waits for the device
        // natively): they finish before the pages go. Their errors stay the device's.
        let _ = self.exec.device_synchronize();
        let mapping = self
            .shared
            .by_guest_addr
            .remove(&req.addr)
            .expect("checked above");
        let r = self.exec.host_unregister(mapping.host_addr());
        let charged = if mapping.staging {
            0
        } else {
            mapping.len as u64
        };
        self.accounts.refund(charged);
        self.accounts
            .set_shared_bytes(self.accounts.shared_bytes.saturating_sub(charged));
        drop(mapping);
        r?;
        nothing()
    }
}

impl Session {
    /// Make a device allocation of at least `size` bytes on `device` with `alloc`,
    /// which returns the pointer and the bytes it really gave. The quota is charged
    /// what the GPU takes for it ([`allocation_footprint`]: 20,000 one-byte
    /// allocations are charged about 10 MiB, as they use), before the driver is asked,
    /// so a guest over it never holds the memory even for a moment, and given back if
    /// anything fails. The memory is zeroed, so nothing another guest left in it can be
    /// read, then counted as the guest's.
    fn allocate(
        &mut self,
        device: i32,
        size: u64,
        alloc: impl FnOnce(&mut dyn Executor) -> Result<(DevicePtr, u64), CudaStatus>,
    ) -> Result<DevicePtr, CudaStatus> {
        self.admit(device, size, true, alloc)
    }

    /// Charge `size` bytes on `device`, make them with `alloc` (its pointer and the
    /// bytes it holds), zeroed where `zero` says (not memory that already holds the
    /// guest's data), and enter them among the guest's allocations.
    pub(super) fn admit(
        &mut self,
        device: i32,
        size: u64,
        zero: bool,
        alloc: impl FnOnce(&mut dyn Executor) -> Result<(DevicePtr, u64), CudaStatus>,
    ) -> Result<DevicePtr, CudaStatus> {
        let reserved = allocation_footprint(size);
        self.charge_on(device, reserved)?;
        let (ptr, bytes) = match alloc(self.exec.as_mut()) {
            Ok(made) => made,
            Err(e) => {
                self.accounts.refund(reserved);
                return Err(e);
            }
        };
        if ptr == 0 {
            self.accounts.refund(reserved);
            return Ok(0);
        }
        let charged = allocation_footprint(bytes).max(reserved);
        if let Err(e) = self.accounts.charge(charged - reserved) {
            let _ = self.exec.free(ptr);
            self.accounts.refund(reserved);
            return Err(e);
        }
        let zeroed = if zero {
            self.exec.zero_fill(ptr, bytes)
        } else {
            Ok(())
        };
        if let Err(e) = zeroed {
            let _ = self.exec.free(ptr);
            self.accounts.refund(charged);
            return Err(e);
        }
        let allocation = Allocation {
            size: bytes,
            charged,
            device,
            pooled: false,
            made_pool: None,
        };
        self.accounts.add_allocation(ptr, allocation);
        Ok(ptr)
    }

    /// One staging area per connection, of at most [`MAX_STAGING_LEN`] bytes.
    fn check_staging(&self, staging: bool, size: u64) -> Result<(), CudaStatus> {
        if staging && (size > MAX_STAGING_LEN || self.shared.has_staging()) {
            warn!(client = %self.client, size, "refused a second or oversized staging area");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(())
    }

    /// Register guest memory mapped here with the executor and remember it under the
    /// guest's address `guest_addr`; its device pointer. Page-locked host memory is
    /// counted against the quota like device memory; the library's bounded staging
    /// area is the connection's, like the worker's buffers.
    fn register_mapping(
        &mut self,
        guest_addr: u64,
        mut mapping: SharedMapping,
        staging: bool,
    ) -> Result<DevicePtr, CudaStatus> {
        let len = mapping.len as u64;
        let charged = if staging { 0 } else { len };
        if !staging {
            let others = self.shared.by_guest_addr.values().filter(|m| !m.staging);
            let bytes = others.clone().map(|m| m.len as u64).sum();
            self.grant.registrations.check(others.count(), bytes, len)?;
        }
        self.accounts.charge(charged)?;
        let device_ptr = match self.exec.host_register(mapping.host_addr(), len) {
            Ok(p) => p,
            Err(e) => {
                self.accounts.refund(charged);
                return Err(e);
            }
        };
        if mapping.device_ptr.is_some() {
            mapping.device_ptr = Some(device_ptr);
        }
        mapping.staging = staging;
        if staging {
            info!(client = %self.client, bytes = len,
                guest_pages = mapping.device_ptr.is_none(),
                "copies use the shared-memory data path");
        }
        self.shared.by_guest_addr.insert(guest_addr, mapping);
        self.accounts
            .set_shared_bytes(self.accounts.shared_bytes.saturating_add(charged));
        Ok(device_ptr)
    }
}

impl Session {
    /// Where the guest's shared memory `[host, host + size)` is mapped in this process;
    /// anything outside one shared mapping is refused (and logged).
    pub(super) fn shared_here(&self, host: u64, size: u64) -> Result<u64, CudaStatus> {
        let end = host.checked_add(size);
        let here = self
            .shared
            .by_guest_addr
            .range(..=host)
            .next_back()
            .filter(|(start, m)| end.is_some_and(|end| end <= *start + m.len as u64))
            .map(|(start, m)| m.host_addr() + (host - start));
        here.ok_or_else(|| {
            warn!(client = %self.client, host = format_args!("{host:#x}"), size,
                "refused shared memory outside the guest's shared memory");
            CudaStatus::ErrorInvalidValue
        })
    }
}
