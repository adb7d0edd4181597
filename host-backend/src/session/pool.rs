//! Stream-ordered memory and the devices' default memory pools. Every allocation is
//! charged to the guest's quota before the driver is asked, and zeroed.

use tracing::{info, warn};
use vmcuda_wire::graph::*;
use vmcuda_wire::op::{Allocated, CallContext, HandlerResult, PoolOps};
use vmcuda_wire::CudaStatus;

use super::{nothing, Session};

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
}

impl PoolOps for Session {
    fn mem_alloc_async(
        &mut self,
        _: &CallContext,
        req: MemAllocAsync,
        _: &[u8],
    ) -> HandlerResult<Allocated> {
        let s = self.handles.stream(req.stream)?;
        let size = req.size;
        self.accounts.charge(size)?;
        let ptr = match self.exec.alloc_async(size, s) {
            Ok(ptr) => ptr,
            Err(e) => {
                self.accounts.refund(size);
                return Err(e);
            }
        };
        if ptr == 0 {
            self.accounts.refund(size);
            return Ok((Allocated { ptr }, Vec::new()));
        }
        let zeroed = match self.exec.stream_capturing(s) {
            Ok(true) => Ok(()),
            Ok(false) => self.exec.memset(ptr, 0, size, s, true),
            Err(e) => Err(e),
        };
        if let Err(e) = zeroed {
            let _ = self.exec.free_async(ptr, s);
            self.accounts.refund(size);
            return Err(e);
        }
        self.accounts.allocations.insert(ptr, size);
        self.accounts
            .set_device_bytes(self.accounts.device_bytes.saturating_add(size));
        Ok((Allocated { ptr }, Vec::new()))
    }

    fn mem_free_async(
        &mut self,
        _: &CallContext,
        req: MemFreeAsync,
        _: &[u8],
    ) -> HandlerResult<()> {
        let s = self.handles.stream(req.stream)?;
        if req.ptr == 0 {
            return nothing();
        }
        // Only what this guest allocated (either way) may be freed by it.
        let Some(&bytes) = self.accounts.allocations.get(&req.ptr) else {
            warn!(client = %self.client, ptr = format_args!("{:#x}", req.ptr),
                "refused cudaFreeAsync of memory the guest does not own");
            return Err(CudaStatus::ErrorInvalidValue);
        };
        self.exec.free_async(req.ptr, s)?;
        self.accounts.allocations.remove(&req.ptr);
        self.accounts.refund(bytes);
        self.accounts
            .set_device_bytes(self.accounts.device_bytes.saturating_sub(bytes));
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
        // Memory the pool keeps past the threshold is held but no longer allocated, so
        // it is not charged: a guest with a quota may keep at most its quota that way.
        if let Some(quota) = self.grant.memory_quota {
            if req.attr == pool_attr::RELEASE_THRESHOLD && value > quota {
                info!(client = %self.client, value, quota,
                    "pool release threshold held to the guest's memory quota");
                value = quota;
            }
        }
        self.on_pool(ctx, req.device, |s| {
            s.exec.pool_set_attribute(req.attr, value)
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
            s.exec.pool_trim_to(req.min_bytes_to_keep)
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
