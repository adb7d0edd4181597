//! Stream-ordered memory and memory pools: each device's default pool and the pools
//! the guest makes (`cudaMemPoolCreate`). Every allocation is charged to the guest's
//! quota before the driver is asked (rounded as the GPU takes it), and zeroed. Memory
//! freed into a pool and still reserved by it stays charged until the pool gives it
//! back; a pool's release threshold is held to what the VM's quota leaves. A pool the
//! guest made is named by a handle of this session's, lives until the guest destroys
//! it or the session ends, and is charged exactly as a default pool is. An allocation
//! made in a stream capture is the graph's: charged for as long as anything holds it
//! (see `graph`), and zeroed by a node captured right after it (a kernel of the
//! executor's own on a GPU, which an executable-graph update can carry).

use crate::executor::StreamOrder;
use std::collections::HashMap;

use tracing::{info, warn};
use vmcuda_wire::graph::*;
use vmcuda_wire::op::{
    Allocated, CallContext, DeviceGetGraphMemAttribute, DeviceResetGraphMemHigh, GraphMemAttribute,
    HandlerResult, PoolOps,
};
use vmcuda_wire::CudaStatus;

use super::accounting::{Allocation, Held};
use super::ipc::{PoolShared, MAX_IMPORTS};
use super::{nothing, Session};
use crate::executor::allocation_footprint;
use crate::executor::graph::{ExecPool, ExecShare};
use crate::ipc::proto::{Export as IpcExport, Kind};
use vmcuda_wire::op::{
    DevicePtr, Exported, IpcToken, MemPoolExportPointer, MemPoolExportShareable,
    MemPoolImportPointer, MemPoolImportShareable, MemPoolImportShared, MemPoolImportSharedPointer,
    MemPoolShareExport, PointerImported, PoolImported,
};

/// A pool the guest made: its device (this host's number) and the executor's pool.
#[derive(Clone, Copy, Debug)]
pub(super) struct MadePool {
    pub(super) device: i32,
    exec: ExecPool,
    /// Imported from an export of another of the guest's pools: its memory is that
    /// pool's, charged there, and it makes no allocations of its own (CUDA's rule).
    imported: bool,
}

/// The guest's pools, by the handle it was given.
pub(super) type MadePools = HashMap<MemPoolHandle, MadePool>;

/// An export of the guest's, for the same program to import: its device, the
/// executor's name for it, and what it exports.
#[derive(Clone, Copy, Debug)]
pub(super) struct Export {
    device: i32,
    share: ExecShare,
    of: ExportOf,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum ExportOf {
    Pool(MemPoolHandle),
    /// An allocation (its start) and its size.
    Pointer(DevicePtr, u64),
}

/// The guest's exports, by the number it was given.
pub(super) type Exports = HashMap<u64, Export>;

/// The most exports a guest holds at once (those of freed allocations and destroyed
/// pools are let go first).
const MAX_EXPORTS: u32 = 4096;

/// A pool a call names, checked: its device, the executor's pool (None: the device's
/// default pool) and the guest's handle for a pool it made.
#[derive(Clone, Copy, Debug)]
pub(super) struct PoolAt {
    device: i32,
    exec: Option<ExecPool>,
    made: Option<MemPoolHandle>,
}

impl PoolAt {
    fn default_of(device: i32) -> PoolAt {
        PoolAt {
            device,
            exec: None,
            made: None,
        }
    }

    /// What the pool keeps reserved is charged as.
    fn held(&self) -> Held {
        match self.made {
            None => Held::PoolReserve,
            Some(h) => Held::MadePoolReserve(h),
        }
    }
}

impl Session {
    /// The pool `pool` names: a device's default pool, or one this guest made and has
    /// not destroyed.
    fn pool_at(&self, pool: PoolRef) -> Result<PoolAt, CudaStatus> {
        match pool {
            PoolRef::Default(device) => Ok(PoolAt::default_of(device)),
            PoolRef::Created(h) => match self.pools.get(&h) {
                Some(p) => Ok(PoolAt {
                    device: p.device,
                    exec: Some(p.exec),
                    made: Some(h),
                }),
                None => {
                    warn!(client = %self.client, pool = h.0,
                        "refused a memory pool the guest does not hold");
                    Err(CudaStatus::ErrorInvalidValue)
                }
            },
        }
    }

    /// The pools of `device`: its default pool and those the guest made on it.
    fn pools_on(&self, device: i32) -> Vec<PoolAt> {
        let made = self
            .pools
            .iter()
            .filter(|(_, p)| p.device == device)
            .map(|(&h, p)| PoolAt {
                device,
                exec: Some(p.exec),
                made: Some(h),
            });
        std::iter::once(PoolAt::default_of(device))
            .chain(made)
            .collect()
    }

    /// Run `f` with `device` current, then make the caller's device current again.
    fn on_pool<T>(
        &mut self,
        ctx: &CallContext,
        device: i32,
        f: impl FnOnce(&mut Self) -> Result<T, CudaStatus>,
    ) -> Result<T, CudaStatus> {
        if device == ctx.device {
            return f(self);
        }
        self.exec.set_device(device)?;
        let r = f(self);
        self.exec.set_device(ctx.device)?;
        r
    }

    /// Whether `pool` is one the guest imported (from an export of its own).
    fn imported(&self, pool: PoolAt) -> bool {
        pool.made
            .is_some_and(|h| self.pools.get(&h).is_some_and(|p| p.imported))
    }

    /// Charge what `pool` (its device current) keeps reserved beyond the guest's live
    /// allocations from it: memory freed into the pool stays the guest's until the
    /// pool gives it back (at a synchronization past the release threshold, or a
    /// trim). Refused when it does not fit the quota.
    fn settle_pool_at(&mut self, pool: PoolAt) -> Result<(), CudaStatus> {
        // An imported pool's memory is its exporter's, charged there.
        if self.imported(pool) {
            return Ok(());
        }
        let reserved = self
            .exec
            .pool_get_attribute(pool.exec, pool_attr::RESERVED_MEM_CURRENT)?;
        let live: u64 = self
            .accounts
            .allocations
            .values()
            .filter(|a| a.pooled && a.device == pool.device && a.made_pool == pool.made)
            .map(|a| a.charged)
            .sum();
        self.accounts
            .hold(pool.device, pool.held(), reserved.saturating_sub(live))
    }

    /// Settle every pool of the current device (`device`) that keeps memory charged.
    pub(super) fn settle_pools(&mut self, device: i32) -> Result<(), CudaStatus> {
        for pool in self.pools_on(device) {
            if self.accounts.held(device, pool.held()) > 0 {
                self.settle_pool_at(pool)?;
            }
        }
        Ok(())
    }

    /// [`Session::settle_pool_at`] where the pool's memory cannot be refused any more: the
    /// pool is trimmed to what the quota leaves, and what it still keeps is counted
    /// whatever the quota says.
    fn settle_held(&mut self, pool: PoolAt) {
        if self.settle_pool_at(pool).is_ok() {
            return;
        }
        let _ = self.exec.pool_trim_to(pool.exec, 0);
        if self.settle_pool_at(pool).is_ok() {
            return;
        }
        let reserved = self
            .exec
            .pool_get_attribute(pool.exec, pool_attr::RESERVED_MEM_CURRENT)
            .unwrap_or(0);
        let had = self.accounts.held(pool.device, pool.held());
        if reserved > had {
            self.accounts.charge_held(reserved - had);
            self.accounts
                .held
                .insert((pool.device, pool.held()), reserved);
        }
    }

    /// Charge `bytes` for memory on `device` (current); the device's pools still
    /// keeping memory freed into them are settled first when they do not fit, as the
    /// driver would give that memory back before it failed an allocation.
    pub(super) fn charge_on(&mut self, device: i32, bytes: u64) -> Result<(), CudaStatus> {
        match self.accounts.charge(bytes) {
            Err(e) if self.accounts.pool_reserve_on(device) > 0 => {
                let _ = self.exec.device_synchronize();
                self.settle_pools(device)?;
                self.accounts.charge(bytes).map_err(|_| e)
            }
            r => r,
        }
    }

    /// The threshold the guest may give `pool`: what its VM's quota leaves, with what
    /// the pool already keeps.
    fn threshold_cap(&self, pool: PoolAt) -> Option<u64> {
        let quota = self.grant.memory_quota?;
        let used = self.accounts.quota_used().unwrap_or(quota);
        Some(
            quota
                .saturating_sub(used)
                .saturating_add(self.accounts.held(pool.device, pool.held())),
        )
    }

    /// `size` bytes from `pool`, on `stream` (see the module documentation).
    fn alloc_from(
        &mut self,
        ctx: &CallContext,
        size: u64,
        pool: PoolAt,
        stream: vmcuda_wire::op::StreamHandle,
    ) -> HandlerResult<Allocated> {
        let s = self.handles.stream(stream)?;
        let device = pool.device;
        if pool.made.is_none() {
            self.pool_devices.insert(device);
        }
        let capturing = self.exec.stream_capturing(s)?;
        // In a capture the memory is the graph's (an allocation node): charged for as
        // long as anything holds it (see `graph`).
        let graph = match capturing {
            true => Some(self.exec.capture_graph(s)?.0),
            false => None,
        };
        let charged = allocation_footprint(size);
        self.on_pool(ctx, device, |this| this.charge_on(device, charged))?;
        let ptr = match self.exec.alloc_async(size, pool.exec, s) {
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
        // Zeroed in the stream's order; in a capture the zeroing is captured right
        // after the allocation node, so every launch of the graph zeroes the memory it
        // hands out before any later node of the guest's can see it.
        // The range is the allocation just made for the guest.
        let fresh = crate::executor::DeviceRange::new(ptr, size);
        let zeroed = match graph {
            Some(_) => self.exec.zero_in_capture(fresh, s),
            None => self.exec.memset(fresh, 0, StreamOrder::Queued(s)),
        };
        if let Some(graph) = graph {
            let allocation = Allocation {
                size,
                charged: 0,
                device,
                pooled: false,
                made_pool: None,
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
            made_pool: pool.made,
        };
        self.accounts.add_allocation(ptr, allocation);
        // The pool may have grown by more than the allocation: that counts too.
        let settled = self.on_pool(ctx, device, |this| {
            if let Err(e) = this.settle_pool_at(pool) {
                let _ = this.exec.free_async(ptr, s);
                this.accounts.remove_allocation(ptr);
                this.settle_held(pool);
                return Err(e);
            }
            Ok(())
        });
        settled?;
        Ok((Allocated { ptr }, Vec::new()))
    }

    /// Destroy the pools the guest made on `device` (it is being reset, and the driver
    /// destroys them with it) or, with None, all of them (the session ends); their
    /// reserve is given back with the device's or the session's.
    pub(super) fn pools_drop(&mut self, device: Option<i32>) {
        let gone: Vec<MemPoolHandle> = self
            .pools
            .iter()
            .filter(|(_, p)| device.is_none_or(|d| p.device == d))
            .map(|(&h, _)| h)
            .collect();
        let dropped: Vec<u64> = self
            .exports
            .iter()
            .filter(|(_, e)| device.is_none_or(|d| e.device == d))
            .map(|(&n, _)| n)
            .collect();
        for n in dropped {
            if let Some(e) = self.exports.remove(&n) {
                self.exec.share_drop(e.share);
            }
        }
        for h in gone {
            let Some(p) = self.pools.remove(&h) else {
                continue;
            };
            if device.is_none() && self.exec.set_device(p.device).is_ok() {
                let _ = self.exec.pool_trim_to(Some(p.exec), 0);
                let _ = self.exec.pool_destroy(p.exec);
            }
        }
    }
}

impl Session {
    /// Room for one more export: those of pools destroyed and allocations freed go
    /// first.
    fn room_for_export(&mut self) -> Result<(), CudaStatus> {
        let gone: Vec<u64> = self
            .exports
            .iter()
            .filter(|(_, e)| match e.of {
                ExportOf::Pool(h) => !self.pools.contains_key(&h),
                ExportOf::Pointer(ptr, _) => !self.accounts.allocations.contains_key(&ptr),
            })
            .map(|(&n, _)| n)
            .collect();
        for n in gone {
            if let Some(e) = self.exports.remove(&n) {
                self.exec.share_drop(e.share);
            }
        }
        self.accounts
            .check_count("memory pool export", self.exports.len(), MAX_EXPORTS)
    }

    /// A pool of the guest's on `device`, made (or `imported`) by `make`, within the
    /// guest's count of pools.
    fn make_pool(
        &mut self,
        ctx: &CallContext,
        device: i32,
        imported: bool,
        make: impl FnOnce(&mut dyn crate::executor::Executor) -> Result<ExecPool, CudaStatus>,
    ) -> Result<PoolMade, CudaStatus> {
        self.accounts
            .check_count("memory pool", self.pools.len(), self.grant.max_streams)?;
        let exec = self.on_pool(ctx, device, |s| make(s.exec.as_mut()))?;
        let pool = MemPoolHandle(self.handles.fresh());
        let made = MadePool {
            device,
            exec,
            imported,
        };
        self.pools.insert(pool, made);
        Ok(PoolMade { pool })
    }

    /// The guest's export numbered `export`; any other number is refused, logged.
    fn export_held(&self, export: u64) -> Result<Export, CudaStatus> {
        self.exports.get(&export).copied().ok_or_else(|| {
            warn!(client = %self.client, export, "refused an export the guest does not hold");
            CudaStatus::ErrorInvalidValue
        })
    }

    fn keep_export(&mut self, device: i32, share: ExecShare, of: ExportOf) -> Exported {
        let export = self.handles.fresh();
        self.exports.insert(export, Export { device, share, of });
        Exported { export }
    }
}

mod ops;
