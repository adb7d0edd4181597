//! The pool family's handlers: stream-ordered allocations, pools and their sharing
//! between a VM's processes, graph memory attributes.

use super::*;

impl PoolOps for Session {
    fn mem_pool_export_shareable(
        &mut self,
        ctx: &CallContext,
        req: MemPoolExportShareable,
        _: &[u8],
    ) -> HandlerResult<Exported> {
        let at = self.pool_at(PoolRef::Created(req.pool))?;
        let exec = at.exec.ok_or(CudaStatus::ErrorInvalidValue)?;
        self.room_for_export()?;
        let share = self.on_pool(ctx, at.device, |s| s.exec.pool_export(exec))?;
        Ok((
            self.keep_export(at.device, share, ExportOf::Pool(req.pool)),
            Vec::new(),
        ))
    }

    fn mem_pool_import_shareable(
        &mut self,
        ctx: &CallContext,
        req: MemPoolImportShareable,
        _: &[u8],
    ) -> HandlerResult<PoolMade> {
        let e = self.export_held(req.export)?;
        let ExportOf::Pool(_) = e.of else {
            return Err(CudaStatus::ErrorInvalidValue);
        };
        let made = self.make_pool(ctx, e.device, true, |exec| exec.pool_import(e.share))?;
        Ok((made, Vec::new()))
    }

    fn mem_pool_export_pointer(
        &mut self,
        ctx: &CallContext,
        req: MemPoolExportPointer,
        _: &[u8],
    ) -> HandlerResult<Exported> {
        // The start of a live allocation from a pool the guest made (the driver refuses
        // a default pool's, and says whether the pool is shareable).
        let Some(a) = self.accounts.allocations.get(&req.ptr) else {
            return Err(CudaStatus::ErrorInvalidValue);
        };
        if a.made_pool.is_none() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // Nor is another process's allocation mapped here exported again.
        if self.ipc.pool_pointer_imports.contains(&req.ptr) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let (device, size) = (a.device, a.size);
        self.room_for_export()?;
        let share = self.on_pool(ctx, device, |s| s.exec.pool_export_pointer(req.ptr))?;
        let of = ExportOf::Pointer(req.ptr, size);
        Ok((self.keep_export(device, share, of), Vec::new()))
    }

    fn mem_pool_import_pointer(
        &mut self,
        ctx: &CallContext,
        req: MemPoolImportPointer,
        _: &[u8],
    ) -> HandlerResult<PointerImported> {
        let e = self.export_held(req.export)?;
        let ExportOf::Pointer(_, size) = e.of else {
            return Err(CudaStatus::ErrorInvalidValue);
        };
        let at = self.pool_at(PoolRef::Created(req.pool))?;
        let pool = at.exec.ok_or(CudaStatus::ErrorInvalidValue)?;
        if at.device != e.device {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // The same memory at a second address, charged as an allocation of its size
        // while it is mapped: freeing the first leaves it alive, and charged.
        let ptr = self.on_pool(ctx, e.device, |s| {
            s.admit(e.device, size, false, |exec| {
                Ok((exec.pool_import_pointer(pool, e.share)?, size))
            })
        })?;
        Ok((PointerImported { ptr, size }, Vec::new()))
    }

    fn mem_pool_share_export(
        &mut self,
        ctx: &CallContext,
        req: MemPoolShareExport,
        _: &[u8],
    ) -> HandlerResult<IpcToken> {
        let e = self.export_held(req.export)?;
        let (of, live) = match e.of {
            ExportOf::Pool(h) => (PoolShared::Pool(h), self.pools.contains_key(&h)),
            ExportOf::Pointer(ptr, _) => (
                PoolShared::Pointer(ptr),
                self.accounts.allocations.contains_key(&ptr),
            ),
        };
        if let Some(token) = self.ipc_pool_token(of) {
            return Ok((IpcToken { token }, Vec::new()));
        }
        // A pool destroyed or an allocation freed since its export is offered to no
        // one.
        if !live {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let device = e.device;
        let (export, shared) = self.on_pool(ctx, device, |s| match e.of {
            ExportOf::Pool(_) => {
                let (fd, handle) = s.exec.pool_share_out(e.share)?;
                let export = IpcExport {
                    kind: Kind::Pool,
                    device,
                    size: 0,
                    handle,
                };
                Ok((export, Some(fd)))
            }
            ExportOf::Pointer(_, size) => {
                let (handle, fd) = s.exec.pointer_share_out(e.share)?;
                let export = IpcExport {
                    kind: Kind::PoolPointer,
                    device,
                    size,
                    handle,
                };
                Ok((export, fd))
            }
        })?;
        let token = self.ipc_export_pool(of, export, shared)?;
        Ok((IpcToken { token }, Vec::new()))
    }

    fn mem_pool_import_shared(
        &mut self,
        ctx: &CallContext,
        req: MemPoolImportShared,
        _: &[u8],
    ) -> HandlerResult<PoolImported> {
        let (export, shared) = self.ipc_import_pool(req.token, Kind::Pool)?;
        let shared = shared.ok_or(CudaStatus::ErrorInvalidValue)?;
        let device = export.device;
        let made = self.make_pool(ctx, device, true, |exec| {
            exec.pool_import_from(shared, &export.handle)
        })?;
        Ok((
            PoolImported {
                pool: made.pool,
                device,
            },
            Vec::new(),
        ))
    }

    fn mem_pool_import_shared_pointer(
        &mut self,
        ctx: &CallContext,
        req: MemPoolImportSharedPointer,
        _: &[u8],
    ) -> HandlerResult<PointerImported> {
        let at = self.pool_at(PoolRef::Created(req.pool))?;
        let pool = at.exec.ok_or(CudaStatus::ErrorInvalidValue)?;
        // Only through a pool imported from another process, as the driver has it.
        if !self.imported(at) {
            crate::rate_limited!(crate::session::ipc::KIND_LOG, "CUDA IPC handles of the wrong kind", warn,
                client = %self.client, "refused a pool pointer import through a pool not imported");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let allocations = &self.accounts.allocations;
        self.ipc
            .pool_pointer_imports
            .retain(|p| allocations.contains_key(p));
        self.accounts.check_count(
            "pool pointer import",
            self.ipc.pool_pointer_imports.len(),
            MAX_IMPORTS,
        )?;
        let (export, shared) = self.ipc_import_pool(req.token, Kind::PoolPointer)?;
        if export.device != at.device {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let size = export.size;
        let ptr = self.on_pool(ctx, at.device, |s| {
            s.exec
                .pool_import_pointer_from(pool, &export.handle, size, shared)
        })?;
        // Charged to its exporter, as memory opened from another process is, and
        // freed by this guest as its own allocations are.
        let allocation = Allocation {
            size,
            charged: 0,
            device: at.device,
            pooled: true,
            made_pool: Some(req.pool),
        };
        self.accounts.add_allocation(ptr, allocation);
        self.ipc.pool_pointer_imports.insert(ptr);
        Ok((PointerImported { ptr, size }, Vec::new()))
    }

    fn device_get_graph_mem_attribute(
        &mut self,
        _: &CallContext,
        req: DeviceGetGraphMemAttribute,
        _: &[u8],
    ) -> HandlerResult<GraphMemAttribute> {
        if req.attr > 3 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let value = self.exec.graph_mem_attribute(req.attr)?;
        Ok((GraphMemAttribute { value }, Vec::new()))
    }

    fn device_reset_graph_mem_high(
        &mut self,
        _: &CallContext,
        req: DeviceResetGraphMemHigh,
        _: &[u8],
    ) -> HandlerResult<()> {
        // Only the high marks may be set, and only back to 0 (CUDA's rule).
        if req.attr != 1 && req.attr != 3 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.exec.graph_mem_reset_high(req.attr)?;
        nothing()
    }

    fn mem_alloc_async(
        &mut self,
        ctx: &CallContext,
        req: MemAllocAsync,
        _: &[u8],
    ) -> HandlerResult<Allocated> {
        self.alloc_from(ctx, req.size, PoolAt::default_of(ctx.device), req.stream)
    }

    fn mem_alloc_from_pool_async(
        &mut self,
        ctx: &CallContext,
        req: MemAllocFromPoolAsync,
        _: &[u8],
    ) -> HandlerResult<Allocated> {
        let pool = self.pool_at(req.pool)?;
        // CUDA: imported pools make no allocations (only imported pointers). Refused
        // here whatever the executor would do: what such a pool kept is charged nowhere.
        if self.imported(pool) {
            warn!(client = %self.client, "refused an allocation from an imported pool");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.alloc_from(ctx, req.size, pool, req.stream)
    }

    fn mem_pool_create(
        &mut self,
        ctx: &CallContext,
        req: MemPoolCreate,
        _: &[u8],
    ) -> HandlerResult<PoolMade> {
        // Nothing is reserved yet: allocations from the pool are charged as they come.
        let made = self.make_pool(ctx, req.device, false, |exec| {
            exec.pool_create(req.max_size, req.shareable)
        })?;
        Ok((made, Vec::new()))
    }

    fn mem_pool_destroy(
        &mut self,
        ctx: &CallContext,
        req: MemPoolDestroy,
        _: &[u8],
    ) -> HandlerResult<()> {
        let at = self.pool_at(PoolRef::Created(req.pool))?;
        let p = self
            .pools
            .remove(&req.pool)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        self.on_pool(ctx, p.device, |s| s.exec.pool_destroy(p.exec))?;
        // Its offer to the VM's other processes goes with it.
        self.ipc_withdraw_pool(PoolShared::Pool(req.pool));
        // What it kept goes back with it; its live allocations stay charged until they
        // are freed (they are plain allocations from now on).
        let _ = self.accounts.hold(at.device, at.held(), 0);
        for a in self.accounts.allocations.values_mut() {
            if a.made_pool == Some(req.pool) {
                a.pooled = false;
                a.made_pool = None;
            }
        }
        nothing()
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
        // In a capture the free is a graph's free node, which only a graph allocation
        // may be given (as CUDA says): anything else would stay held by the device with
        // nothing charged for it. The allocation need not be live now, only when the
        // node runs (a graph that frees another's memory may be built while it is not).
        if self.exec.stream_capturing(s)? {
            if self.graph_allocation(req.ptr).is_none() {
                warn!(client = %self.client, ptr = format_args!("{:#x}", req.ptr),
                    "refused cudaFreeAsync in a capture of memory no graph allocated");
                return Err(CudaStatus::ErrorInvalidValue);
            }
            self.graph_free_node(s, req.ptr)?;
            return nothing();
        }
        // Only what this guest allocated (either way) may be freed by it.
        let Some(a) = self.accounts.allocations.get(&req.ptr).copied() else {
            warn!(client = %self.client, ptr = format_args!("{:#x}", req.ptr),
                "refused cudaFreeAsync of memory the guest does not own");
            return Err(CudaStatus::ErrorInvalidValue);
        };
        if !self.graph_memory_freeable(req.ptr) {
            warn!(client = %self.client, ptr = format_args!("{:#x}", req.ptr),
                "refused cudaFreeAsync of graph memory that is not live");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // Withdrawn first: no other process imports it while it is being freed.
        self.ipc_withdraw_memory(req.ptr);
        self.exec.free_async(req.ptr, s)?;
        self.accounts.remove_allocation(req.ptr);
        self.graph_memory_freed(ctx.device, req.ptr);
        if a.pooled && a.device == ctx.device {
            // What the pool keeps of it stays charged.
            let pool = match a.made_pool {
                None => Some(PoolAt::default_of(a.device)),
                Some(h) => self.pool_at(PoolRef::Created(h)).ok(),
            };
            if let Some(pool) = pool {
                self.settle_held(pool);
            }
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
        let pool = self.pool_at(req.pool)?;
        let value = self.on_pool(ctx, pool.device, |s| {
            s.exec.pool_get_attribute(pool.exec, req.attr)
        })?;
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
        let pool = self.pool_at(req.pool)?;
        let mut value = req.value;
        // Memory the pool keeps below the threshold is charged (see `settle_pool_at`); the
        // threshold is held to what the VM's quota leaves, across all its connections.
        if let Some(cap) = self.threshold_cap(pool) {
            if req.attr == pool_attr::RELEASE_THRESHOLD && value > cap {
                info!(client = %self.client, value, cap,
                    "pool release threshold held to what the VM's memory quota leaves");
                value = cap;
            }
        }
        self.on_pool(ctx, pool.device, |s| {
            s.exec.pool_set_attribute(pool.exec, req.attr, value)?;
            s.settle_held(pool);
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
        let pool = self.pool_at(req.pool)?;
        self.on_pool(ctx, pool.device, |s| {
            s.exec.pool_trim_to(pool.exec, req.min_bytes_to_keep)?;
            s.settle_held(pool);
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
        let pool = self.pool_at(req.pool)?;
        self.on_pool(ctx, pool.device, |s| {
            s.exec.pool_set_access(pool.exec, &req.access)
        })?;
        nothing()
    }

    fn mem_pool_get_access(
        &mut self,
        ctx: &CallContext,
        req: MemPoolGetAccess,
        _: &[u8],
    ) -> HandlerResult<PoolAccess> {
        if req.location_type != LOCATION_DEVICE {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let pool = self.pool_at(req.pool)?;
        let flags = self.on_pool(ctx, pool.device, |s| {
            s.exec.pool_get_access(pool.exec, req.location_id)
        })?;
        Ok((PoolAccess { flags }, Vec::new()))
    }
}
