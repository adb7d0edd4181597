//! Devices: properties, synchronization, reset, limits, cache configuration, peers.
//!
//! Context limits that reserve device memory are charged to the quota for what they
//! reserve above the value the context started with: the stack size times every thread
//! that can be resident on the device at once (SMs times threads per SM: the driver
//! reserves it for all of them), the `malloc` heap and the `printf` FIFO byte for byte.
//! A value that does not fit is refused with `cudaErrorMemoryAllocation` and the limit
//! left as it was. A device reset gives back exactly what it frees: that device's
//! memory, limits and objects.

use tracing::info;
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

use super::accounting::Held;
use super::{nothing, Session};
use crate::executor::limit;

impl Session {
    /// Device bytes one unit of limit `which` reserves on `device`, or `None` for a
    /// limit that reserves none.
    fn limit_unit(&mut self, device: i32, which: u32) -> Result<Option<u64>, CudaStatus> {
        Ok(match which {
            limit::STACK_SIZE => {
                use cudarc::driver::sys::CUdevice_attribute as A;
                let p = self.exec.device_properties(device)?;
                self.exec.set_device(device)?;
                let attr = |a: A| u64::try_from(p.attribute(a as u32).unwrap_or(0)).unwrap_or(0);
                let threads = attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
                    .saturating_mul(attr(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR));
                Some(threads.max(1))
            }
            limit::PRINTF_FIFO_SIZE | limit::MALLOC_HEAP_SIZE => Some(1),
            _ => None,
        })
    }

    /// Set a limit that reserves `unit` bytes per unit of its value, charging the
    /// difference first; over the quota nothing changes.
    fn set_charged_limit(
        &mut self,
        device: i32,
        which: u32,
        value: u64,
        unit: u64,
    ) -> Result<(), CudaStatus> {
        let before = self.exec.get_limit(which)?;
        let base = *self.limit_base.entry((device, which)).or_insert(before);
        let cost = |v: u64| v.saturating_sub(base).saturating_mul(unit);
        let what = Held::Limit(which);
        let had = self.accounts.held(device, what);
        if let Err(e) = self.accounts.hold(device, what, cost(value)) {
            info!(client = %self.client, limit = which, value,
                "context limit refused: it would take the guest over its memory quota");
            return Err(e);
        }
        if let Err(e) = self.exec.set_limit(which, value) {
            self.accounts.hold_anyway(device, what, had);
            return Err(e);
        }
        // The driver may round the value up: what counts is what it took.
        let taken = self.exec.get_limit(which).unwrap_or(value);
        if self.accounts.hold(device, what, cost(taken)).is_err() {
            let _ = self.exec.set_limit(which, before);
            self.accounts.hold_anyway(device, what, had);
            return Err(CudaStatus::ErrorMemoryAllocation);
        }
        Ok(())
    }
}

impl DeviceOps for Session {
    fn device_get_properties(
        &mut self,
        _: &CallContext,
        req: DeviceGetProperties,
        _: &[u8],
    ) -> HandlerResult<DeviceProperties> {
        Ok((self.exec.device_properties(req.device)?, Vec::new()))
    }

    fn device_write_done(
        &mut self,
        _: &CallContext,
        req: DeviceWriteDone,
        _: &[u8],
    ) -> HandlerResult<()> {
        // The word must be the guest's own memory (a shared page it registered).
        let addr = self.check_range(req.done.addr, 4)?;
        self.exec.device_write_done(addr, req.done.value)?;
        nothing()
    }

    fn device_reset(&mut self, ctx: &CallContext, _: DeviceReset, _: &[u8]) -> HandlerResult<()> {
        // Everything the guest made on this device is gone with its state, and only
        // that: what it holds on its other devices stays, and stays charged.
        let device = ctx.device;
        self.vmm_reset(device);
        self.graphs_reset(device);
        self.arrays_reset(device);
        self.pools_drop(Some(device));
        self.ipc_reset(device);
        self.handles.forget_device(device);
        self.accounts.globals.retain(|_, (_, d)| *d != device);
        self.accounts.release_device(device);
        self.limit_base.retain(|(d, _), _| *d != device);
        self.exec.device_reset()?;
        nothing()
    }

    fn device_get_limit(
        &mut self,
        _: &CallContext,
        req: DeviceGetLimit,
        _: &[u8],
    ) -> HandlerResult<LimitValue> {
        let value = match vmcuda_wire::device::fixed_limit(req.limit) {
            Some(value) => value,
            None => self.exec.get_limit(req.limit)?,
        };
        Ok((LimitValue { value }, Vec::new()))
    }

    fn device_set_limit(
        &mut self,
        ctx: &CallContext,
        req: DeviceSetLimit,
        _: &[u8],
    ) -> HandlerResult<()> {
        let Some(unit) = self.limit_unit(ctx.device, req.limit)? else {
            // Limits that reserve no device memory pass through.
            self.exec.set_limit(req.limit, req.value)?;
            return nothing();
        };
        self.set_charged_limit(ctx.device, req.limit, req.value, unit)?;
        nothing()
    }
    fn device_can_access_peer(
        &mut self,
        ctx: &CallContext,
        req: DeviceCanAccessPeer,
        _: &[u8],
    ) -> HandlerResult<CanAccessPeer> {
        let can_access = self.exec.can_access_peer(req.device, req.peer)?;
        self.exec.set_device(ctx.device)?;
        Ok((CanAccessPeer { can_access }, Vec::new()))
    }

    fn device_get_status(
        &mut self,
        _ctx: &CallContext,
        req: DeviceGetStatus,
        _data: &[u8],
    ) -> HandlerResult<GpuStatus> {
        let mut status = self.exec.gpu_status(req.device)?;
        status.processes = self.guest_programs();
        status.guest_memory_used = status.processes.iter().map(|p| p.used_memory).sum();
        status.memory_quota = self.grant.memory_quota;
        Ok((status, Vec::new()))
    }

    fn mem_get_info(
        &mut self,
        ctx: &CallContext,
        _: MemGetInfo,
        _: &[u8],
    ) -> HandlerResult<MemInfo> {
        if self.accounts.pool_reserve_on(ctx.device) > 0 {
            // What the pools gave back since is the guest's to use again.
            let _ = self.settle_pools(ctx.device);
        }
        let (free, total) = self.exec.mem_info()?;
        // A guest with a quota sees the quota as its device's memory.
        let (free, total) = match self.grant.memory_quota {
            Some(quota) => (
                free.min(quota.saturating_sub(self.accounts.quota_used().unwrap_or(quota))),
                total.min(quota),
            ),
            None => (free, total),
        };
        Ok((MemInfo { free, total }, Vec::new()))
    }
    fn device_get_p2p_attribute(
        &mut self,
        ctx: &CallContext,
        req: DeviceGetP2PAttribute,
        _: &[u8],
    ) -> HandlerResult<P2PAttribute> {
        let value = self
            .exec
            .p2p_attribute(req.attr, req.src_device, req.dst_device);
        self.exec.set_device(ctx.device)?;
        Ok((P2PAttribute { value: value? }, Vec::new()))
    }
    fn device_get_texture_1d_linear_max_width(
        &mut self,
        _: &CallContext,
        req: DeviceGetTexture1DLinearMaxWidth,
        _: &[u8],
    ) -> HandlerResult<Texture1DLinearMaxWidth> {
        use vmcuda_wire::array::format;
        if format::channel_bytes(req.format).is_none() || ![1, 2, 4].contains(&req.channels) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let width = self
            .exec
            .texture_1d_linear_max_width(req.format, req.channels)?;
        Ok((Texture1DLinearMaxWidth { width }, Vec::new()))
    }
    fn device_get_atomic_capabilities(
        &mut self,
        ctx: &CallContext,
        req: DeviceGetAtomicCapabilities,
        _: &[u8],
    ) -> HandlerResult<AtomicCapabilities> {
        use vmcuda_wire::device::{ATOMIC_OPERATIONS, MAX_ATOMIC_QUERY};
        if req.operations.len() > MAX_ATOMIC_QUERY as usize
            || req.operations.iter().any(|&o| o >= ATOMIC_OPERATIONS)
        {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let peer = match req.to_host {
            true => None,
            false if req.dst_device == ctx.device => return Err(CudaStatus::ErrorInvalidDevice),
            false => Some(req.dst_device),
        };
        let capabilities = self.exec.atomic_capabilities(&req.operations, peer);
        self.exec.set_device(ctx.device)?;
        Ok((
            AtomicCapabilities {
                capabilities: capabilities?,
            },
            Vec::new(),
        ))
    }
    fn ctx_get_exec_affinity(
        &mut self,
        _: &CallContext,
        req: CtxGetExecAffinity,
        _: &[u8],
    ) -> HandlerResult<ExecAffinity> {
        // CU_EXEC_AFFINITY_TYPE_SM_COUNT is the only type.
        if req.kind != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let sm_count = self.exec.exec_affinity_sm_count()?;
        Ok((ExecAffinity { sm_count }, Vec::new()))
    }

    fn flush_gpu_direct_rdma_writes(
        &mut self,
        _: &CallContext,
        req: FlushGpuDirectRdmaWrites,
        _: &[u8],
    ) -> HandlerResult<()> {
        // Target: the current context (0), the only one there is. Scope: its owner
        // (100) or every device (200).
        let to_all_devices = match (req.target, req.scope) {
            (0, 100) => false,
            (0, 200) => true,
            _ => return Err(CudaStatus::ErrorInvalidValue),
        };
        self.exec.flush_gpu_direct_rdma_writes(to_all_devices)?;
        nothing()
    }
}

impl Session {
    /// The guest's programs on this host and the device memory each holds: every live
    /// connection of its VM, from the workers' published figures (this one's alone
    /// where there are none). Memory is per program, over all of its devices here.
    fn guest_programs(&self) -> Vec<GuestProcess> {
        let own = GuestProcess {
            pid: self.program_pid,
            used_memory: self.accounts.device_bytes,
        };
        // The figures live in <state dir>/workers/<pid>.stats.
        let Some(state_dir) = self
            .accounts
            .stats
            .path()
            .and_then(|p| p.parent()?.parent())
        else {
            return vec![own];
        };
        match crate::stats::census(state_dir, false) {
            Ok(census) => {
                let mut programs: Vec<GuestProcess> = census
                    .guests
                    .iter()
                    .filter(|g| g.identity.vm == self.grant.name)
                    .map(|g| GuestProcess {
                        pid: g.identity.program_pid,
                        used_memory: g.device_memory_bytes,
                    })
                    .collect();
                if programs.is_empty() {
                    programs.push(own);
                }
                programs.sort_by_key(|p| p.pid);
                programs
            }
            Err(_) => vec![own],
        }
    }
}

#[cfg(test)]
mod tests {
    use vmcuda_wire::array::format;
    use vmcuda_wire::op::*;
    use vmcuda_wire::CudaStatus;

    use crate::executor::host_memory::HostMemoryExecutor;
    use crate::policy::Grant;
    use crate::session::Session;

    const CTX: CallContext = CallContext { device: 0 };
    const REFUSED: CudaStatus = CudaStatus::ErrorInvalidValue;

    fn session() -> Session {
        let exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
        Session::new(Box::new(exec), Grant::unlimited("test"))
    }

    #[test]
    fn texture_widths_are_asked_only_for_real_formats() {
        let mut s = session();
        let ask = |s: &mut Session, format: u32, channels: u32| {
            let req = DeviceGetTexture1DLinearMaxWidth { format, channels };
            s.device_get_texture_1d_linear_max_width(&CTX, req, &[])
                .map(|r| r.0.width)
        };
        assert!(ask(&mut s, format::FLOAT, 4).unwrap() > 0);
        assert!(ask(&mut s, format::UNSIGNED_INT8, 1).unwrap() > 0);
        assert_eq!(ask(&mut s, format::FLOAT, 3).unwrap_err(), REFUSED);
        assert_eq!(ask(&mut s, format::FLOAT, 0).unwrap_err(), REFUSED);
        assert_eq!(ask(&mut s, 0x77, 1).unwrap_err(), REFUSED);
    }

    #[test]
    fn rdma_flushes_name_the_current_context_and_a_scope() {
        let mut s = session();
        let mut flush = |target: u32, scope: u32| {
            let req = FlushGpuDirectRdmaWrites { target, scope };
            s.flush_gpu_direct_rdma_writes(&CTX, req, &[]).map(|_| ())
        };
        assert!(flush(0, 100).is_ok());
        assert!(flush(0, 200).is_ok());
        assert_eq!(flush(1, 100).unwrap_err(), REFUSED);
        assert_eq!(flush(0, 0).unwrap_err(), REFUSED);
    }

    /// A pass-through op goes from the table's dispatch to the executor's method of
    /// its name, with the request's fields, and answers its reply.
    #[test]
    fn pass_through_ops_reach_the_executor_through_dispatch() {
        let mut s = session();
        let mut run =
            |op: Op, meta: Vec<u8>| dispatch(&mut s, &CTX, op, &meta, &[]).map(|r| r.meta);
        let reset = run(
            Op::CtxResetPersistingL2Cache,
            postcard::to_stdvec(&CtxResetPersistingL2Cache {}).unwrap(),
        );
        assert!(reset.is_ok());
        let set = run(
            Op::DeviceSetCacheConfig,
            postcard::to_stdvec(&CacheConfig { config: 2 }).unwrap(),
        );
        assert!(set.is_ok());
        let got = run(
            Op::DeviceGetCacheConfig,
            postcard::to_stdvec(&DeviceGetCacheConfig {}).unwrap(),
        )
        .unwrap();
        assert_eq!(postcard::from_bytes::<CacheConfig>(&got).unwrap().config, 2);
        // The double's answer for a value the driver refuses.
        let bad = run(
            Op::DeviceSetCacheConfig,
            postcard::to_stdvec(&CacheConfig { config: 9 }).unwrap(),
        );
        assert!(matches!(
            bad,
            Err(DispatchError::Cuda(CudaStatus::ErrorInvalidValue))
        ));
        let range = run(
            Op::DeviceGetStreamPriorityRange,
            postcard::to_stdvec(&DeviceGetStreamPriorityRange {}).unwrap(),
        )
        .unwrap();
        let range: PriorityRange = postcard::from_bytes(&range).unwrap();
        assert_eq!((range.least, range.greatest), (0, -5));
    }

    #[test]
    fn atomic_capabilities_take_real_operations_and_another_device() {
        let mut s = session();
        let mut ask = |operations: Vec<u32>, to_host: bool, dst_device: i32| {
            let req = DeviceGetAtomicCapabilities {
                operations,
                to_host,
                dst_device,
            };
            s.device_get_atomic_capabilities(&CTX, req, &[])
                .map(|r| r.0.capabilities)
        };
        assert_eq!(ask(vec![0, 9, 10], true, 0).unwrap().len(), 3);
        assert_eq!(ask(vec![13], true, 0).unwrap_err(), REFUSED);
        assert_eq!(ask(vec![0; 1000], true, 0).unwrap_err(), REFUSED);
        assert_eq!(
            ask(vec![0], false, 0).unwrap_err(),
            CudaStatus::ErrorInvalidDevice
        );
    }
}
