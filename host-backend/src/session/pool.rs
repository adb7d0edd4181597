//! Stream-ordered memory and the devices' default memory pools. Every allocation is
//! charged to the guest's quota before the driver is asked (rounded as the GPU takes
//! it), and zeroed. Memory freed into a pool and still reserved by it stays charged
//! until the pool gives it back; the release threshold is held to what the VM's
//! quota leaves. An allocation made in a stream capture is the graph's: charged for
//! as long as anything holds it (see `graph`), and zeroed by a memset node captured
//! right after it.

use tracing::{info, warn};
use vmcuda_wire::graph::*;
use vmcuda_wire::op::{Allocated, CallContext, HandlerResult, PoolOps};
use vmcuda_wire::CudaStatus;

use super::accounting::{Allocation, Held};
use super::{nothing, Session};
use crate::executor::allocation_footprint;

impl Session {
    /// Run `f` on `device`'s default pool, then make the caller's device current again.
    fn on_pool<T>(
        &mut self,
        ctx: &CallContext,
        device: i32,
        f: impl FnOnce(&mut Self) -> Result<T, CudaStatus>,
    ) -> Result<T, CudaStatus> {
        self.exec.set_device(device)?;
        let r = f(self);
        self.exec.set_device(ctx.device)?;
        r
    }

    /// Charge what the current device's (`device`'s) default pool keeps reserved beyond
    /// the guest's live allocations from it: memory freed into the pool stays the
    /// guest's until the pool gives it back (at a synchronization past the release
    /// threshold, or a trim). Refused when it does not fit the quota.
    pub(super) fn settle_pool(&mut self, device: i32) -> Result<(), CudaStatus> {
        let reserved = self
            .exec
            .pool_get_attribute(pool_attr::RESERVED_MEM_CURRENT)?;
        let live: u64 = self
            .accounts
            .allocations
            .values()
            .filter(|a| a.pooled && a.device == device)
            .map(|a| a.charged)
            .sum();
        self.accounts
            .hold(device, Held::PoolReserve, reserved.saturating_sub(live))
    }

    /// [`Session::settle_pool`] where the pool's memory cannot be refused any more:
    /// the pool is trimmed to what the quota leaves, and what it still keeps is
    /// counted whatever the quota says.
    fn settle_pool_held(&mut self, device: i32) {
        if self.settle_pool(device).is_ok() {
            return;
        }
        let _ = self.exec.pool_trim_to(0);
        if self.settle_pool(device).is_ok() {
            return;
        }
        let reserved = self
            .exec
            .pool_get_attribute(pool_attr::RESERVED_MEM_CURRENT)
            .unwrap_or(0);
        let had = self.accounts.held(device, Held::PoolReserve);
        if reserved > had {
            self.accounts.charge_held(reserved - had);
            self.accounts
                .held
                .insert((device, Held::PoolReserve), reserved);
        }
    }

    /// Charge `bytes` for memory on `device` (current); a pool still keeping memory
    /// freed into it is settled first when they do not fit, as the driver would give
    /// that memory back before it failed an allocation.
    pub(super) fn charge_on(&mut self, device: i32, bytes: u64) -> Result<(), CudaStatus> {
        match self.accounts.charge(bytes) {
            Err(e) if self.accounts.held(device, Held::PoolReserve) > 0 => {
                let _ = self.exec.synchronize();
                self.settle_pool(device)?;
                self.accounts.charge(bytes).map_err(|_| e)
            }
            r => r,
        }
    }

    /// The threshold the guest may give its pool: what its VM's quota leaves, with what
    /// the pool already keeps.
    fn threshold_cap(&self, device: i32) -> Option<u64> {
        let quota = self.grant.memory_quota?;
        let used = self.accounts.quota_used().unwrap_or(quota);
        Some(
            quota
                .saturating_sub(used)
                .saturating_add(self.accounts.held(device, Held::PoolReserve)),
        )
    }
}

impl PoolOps for Session {
    fn mem_alloc_async(
        &mut self,
        ctx: &CallContext,
        req: MemAllocAsync,
        _: &[u8],
    ) -> HandlerResult<Allocated> {
        let s = self.handles.stream(req.stream)?;
        let size = req.size;
        let device = ctx.device;
        self.pool_devices.insert(device);
        let capturing = self.exec.stream_capturing(s)?;
        // In a capture the memory is the graph's (an allocation node): charged for as
        // long as anything holds it (see `graph`).
        let graph = match capturing {
            true => Some(self.exec.capture_graph(s)?.0),
            false => None,
        };
        let charged = allocation_footprint(size);
        self.charge_on(device, charged)?;
        let ptr = match self.exec.alloc_async(size, s) {
            Ok(ptr) => ptr,
            Err(e) => {
                self.accounts.refund(charged);
                return Err(e);
            }
        };
        if ptr == 0 {
            self.accounts.refund(charged);
            return Ok((Allocated { ptr }, Vec::new()));
        }
        // Zeroed in the stream's order; in a capture the memset is captured right
        // after the allocation node, so every launch of the graph zeroes the memory it
        // hands out before any later node of the guest's can see it.
        // The range is the allocation just made for the guest.
        let fresh = super::checked::DeviceRange::new(ptr, size);
        let zeroed = self.exec.memset(fresh, 0, s, true);
        if let Some(graph) = graph {
            let allocation = Allocation {
                size,
                charged: 0,
                device,
                pooled: false,
                graph: true,
            };
            self.accounts.add_allocation(ptr, allocation);
            self.graph_allocation_add(graph, ptr, size, charged, device);
            if let Err(e) = zeroed {
                // The allocation node stays in the capture: the graph frees it at once,
                // and holds its memory as it holds any other.
                let _ = self.graph_free_node(s, ptr);
                return Err(e);
            }
            return Ok((Allocated { ptr }, Vec::new()));
        }
        if let Err(e) = zeroed {
            let _ = self.exec.free_async(ptr, s);
            self.accounts.refund(charged);
            return Err(e);
        }
        let allocation = Allocation {
            size,
            charged,
            device,
            pooled: true,
            graph: false,
        };
        self.accounts.add_allocation(ptr, allocation);
        // The pool may have grown by more than the allocation: that counts too.
        if let Err(e) = self.settle_pool(device) {
            let _ = self.exec.free_async(ptr, s);
            self.accounts.remove_allocation(ptr);
            self.settle_pool_held(device);
            return Err(e);
        }
        Ok((Allocated { ptr }, Vec::new()))
    }

    fn mem_free_async(
        &mut self,
        ctx: &CallContext,
        req: MemFreeAsync,
        _: &[u8],
    ) -> HandlerResult<()> {
        let s = self.handles.stream(req.stream)?;
        if req.ptr == 0 {
            return nothing();
        }
        // Only what this guest allocated (either way) may be freed by it.
        let Some(a) = self.accounts.allocations.get(&req.ptr).copied() else {
            warn!(client = %self.client, ptr = format_args!("{:#x}", req.ptr),
                "refused cudaFreeAsync of memory the guest does not own");
            return Err(CudaStatus::ErrorInvalidValue);
        };
        // In a capture the free is a graph's free node, which only a graph allocation
        // may be given (as CUDA says): anything else would stay held by the device with
        // nothing charged for it.
        if self.exec.stream_capturing(s)? {
            if !a.graph {
                warn!(client = %self.client, ptr = format_args!("{:#x}", req.ptr),
                    "refused cudaFreeAsync in a capture of memory no graph allocated");
                return Err(CudaStatus::ErrorInvalidValue);
            }
            self.graph_free_node(s, req.ptr)?;
            return nothing();
        }
        if !self.graph_memory_freeable(req.ptr) {
            warn!(client = %self.client, ptr = format_args!("{:#x}", req.ptr),
                "refused cudaFreeAsync of graph memory that is not live");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.exec.free_async(req.ptr, s)?;
        self.accounts.remove_allocation(req.ptr);
        self.graph_memory_freed(ctx.device, req.ptr);
        if a.pooled && a.device == ctx.device {
            // What the pool keeps of it stays charged.
            self.settle_pool_held(ctx.device);
        }
        nothing()
    }

    fn mem_pool_get_attribute(
        &mut self,
        ctx: &CallContext,
        req: MemPoolGetAttribute,
        _: &[u8],
    ) -> HandlerResult<PoolAttributeValue> {
        if !pool_attr::is_known(req.attr) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let value = self.on_pool(ctx, req.device, |s| s.exec.pool_get_attribute(req.attr))?;
        Ok((PoolAttributeValue { value }, Vec::new()))
    }

    fn mem_pool_set_attribute(
        &mut self,
        ctx: &CallContext,
        req: MemPoolSetAttribute,
        _: &[u8],
    ) -> HandlerResult<()> {
        if !pool_attr::settable(req.attr, req.value) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let mut value = req.value;
        // Memory the pool keeps below the threshold is charged (see `settle_pool`); the
        // threshold is held to what the VM's quota leaves, across all its connections.
        if let Some(cap) = self.threshold_cap(req.device) {
            if req.attr == pool_attr::RELEASE_THRESHOLD && value > cap {
                info!(client = %self.client, value, cap,
                    "pool release threshold held to what the VM's memory quota leaves");
                value = cap;
            }
        }
        self.on_pool(ctx, req.device, |s| {
            s.exec.pool_set_attribute(req.attr, value)?;
            s.settle_pool_held(req.device);
            Ok(())
        })?;
        nothing()
    }

    fn mem_pool_trim_to(
        &mut self,
        ctx: &CallContext,
        req: MemPoolTrimTo,
        _: &[u8],
    ) -> HandlerResult<()> {
        self.on_pool(ctx, req.device, |s| {
            s.exec.pool_trim_to(req.min_bytes_to_keep)?;
            s.settle_pool_held(req.device);
            Ok(())
        })?;
        nothing()
    }

    fn mem_pool_set_access(
        &mut self,
        ctx: &CallContext,
        req: MemPoolSetAccess,
        _: &[u8],
    ) -> HandlerResult<()> {
        let bad = req
            .access
            .iter()
            .any(|a| a.location_type != LOCATION_DEVICE || !access_flags_valid(a.flags));
        if bad || req.access.len() > 64 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.on_pool(ctx, req.device, |s| s.exec.pool_set_access(&req.access))?;
        nothing()
    }
}
