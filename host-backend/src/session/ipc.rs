//! CUDA IPC between this guest process and the other processes of its VM, through
//! the daemon's registry (see [`crate::ipc`], docs/ipc.md).
//!
//! An export is an allocation this guest made (its start, as the driver exports it)
//! or an interprocess event; the guest gets the registry's token for it, and the same
//! token again for the same allocation or event. An import is mapped once per token
//! and counted: each open of a handle this session has open returns the same pointer,
//! and only the last close unmaps it. Imported memory is reachable by this guest's
//! copies and launches like its own, and charged to no one here: it stays charged to
//! the exporter, once.

use std::collections::{BTreeMap, HashMap, HashSet};

use tracing::warn;
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

use super::Session;
use crate::executor::driver::ExecAllocation;
use crate::ipc::proto::{Export, Kind, Token, HANDLE_LEN};
use crate::ipc::{IpcError, IpcLink};
use vmcuda_wire::driver::AllocationHandle;
use vmcuda_wire::graph::MemPoolHandle;

/// `CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS`: the one flag an open takes.
pub const IPC_MEM_LAZY_ENABLE_PEER_ACCESS: u32 = 1;
/// `cudaEventInterprocess`.
pub const EVENT_INTERPROCESS: u32 = 4;
/// Lines about imports of a handle of another kind than the call's: a guest can cause
/// them at will.
pub(super) static KIND_LOG: crate::source_log::RateLimit = crate::source_log::RateLimit::new(20, 1);

/// Handles one connection may have open at once (each is a host table entry).
pub const MAX_IMPORTS: u32 = 4096;

/// One allocation of another process mapped here.
#[derive(Clone, Copy, Debug)]
struct Import {
    size: u64,
    /// The device it was opened on, here.
    device: i32,
    token: Token,
    /// Opens not closed yet.
    opens: u32,
}

#[derive(Default)]
pub(super) struct IpcState {
    /// The socket to the daemon's registry; None where the worker has none.
    link: Option<IpcLink>,
    /// This guest's exported allocations: start -> (token, device).
    exported_memory: HashMap<DevicePtr, (Token, i32)>,
    exported_events: HashMap<EventHandle, Token>,
    /// This guest's exported physical allocations (`cuMemExportToShareableHandle`).
    exported_allocations: HashMap<AllocationHandle, Token>,
    /// This guest's pools and pool allocations offered to the VM's other processes
    /// (`MemPoolShareExport`): token and device.
    exported_pools: HashMap<PoolShared, (Token, i32)>,
    /// Allocations of other processes' pools mapped here (`cuMemPoolImportPointer`).
    pub(super) pool_pointer_imports: HashSet<DevicePtr>,
    /// The events this guest made with `cudaEventInterprocess`.
    pub(super) interprocess_events: HashSet<EventHandle>,
    /// Memory opened from other processes, by its address here.
    imports: BTreeMap<DevicePtr, Import>,
    import_by_token: HashMap<Token, DevicePtr>,
}

impl IpcState {
    /// Whether `[ptr, end)` lies inside memory opened from another process.
    pub(super) fn covers(&self, ptr: u64, end: u64) -> bool {
        self.imports
            .range(..=ptr)
            .next_back()
            .is_some_and(|(s, i)| end <= s.saturating_add(i.size))
    }

    fn own_token(&self, token: &Token) -> bool {
        self.exported_memory.values().any(|(t, _)| t == token)
            || self.exported_events.values().any(|t| t == token)
            || self.exported_allocations.values().any(|t| t == token)
            || self.exported_pools.values().any(|(t, _)| t == token)
    }
}

/// What of the guest's pools a token of the registry names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum PoolShared {
    Pool(MemPoolHandle),
    /// An allocation from a pool, by its start.
    Pointer(DevicePtr),
}

impl Session {
    /// Let this guest's processes share memory and events through the daemon's
    /// registry.
    pub fn with_ipc_link(mut self, link: IpcLink) -> Self {
        self.ipc.link = Some(link);
        self
    }

    fn ipc_link(&mut self) -> Result<&mut IpcLink, CudaStatus> {
        if self.ipc.link.is_none() {
            warn!(client = %self.client, "CUDA IPC refused: this worker has no link to the daemon's registry");
        }
        self.ipc.link.as_mut().ok_or(CudaStatus::ErrorNotSupported)
    }

    /// A refused registry request's status for the guest; a broken socket ends the
    /// link. Refusals the guest can cause at will are logged by the registry, under
    /// its rate limit.
    fn ipc_failed(&mut self, what: &str, e: IpcError) -> CudaStatus {
        if let IpcError::Link(_) = e {
            warn!(client = %self.client, "CUDA IPC {what} failed: {e}");
            self.ipc.link = None;
        }
        e.status()
    }

    pub(super) fn ipc_get_mem_handle_now(
        &mut self,
        req: IpcGetMemHandle,
    ) -> Result<Token, CudaStatus> {
        self.ipc_link()?;
        // The allocation holding the pointer, as the driver exports it.
        let (start, a) = self
            .accounts
            .allocations
            .range(..=req.ptr)
            .next_back()
            .filter(|(s, a)| req.ptr < s.saturating_add(a.size.max(1)))
            .map(|(s, a)| (*s, *a))
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        // Stream-ordered memory is not legacy-IPC capable (pools export it their way).
        if a.pooled {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        if let Some((token, _)) = self.ipc.exported_memory.get(&start) {
            return Ok(*token);
        }
        let exported = self.exec.ipc_export_memory(start)?;
        let export = Export {
            kind: Kind::Memory,
            device: a.device,
            size: a.size,
            handle: driver_handle(&exported.handle)?,
        };
        let shared = exported.shared;
        let link = self.ipc.link.as_mut().expect("checked above");
        match link.export(export, shared.as_ref().map(std::os::fd::AsFd::as_fd)) {
            Ok(token) => {
                self.ipc.exported_memory.insert(start, (token, a.device));
                Ok(token)
            }
            Err(e) => Err(self.ipc_failed("export", e)),
        }
    }

    pub(super) fn ipc_open_mem_handle_now(
        &mut self,
        ctx_device: i32,
        req: IpcOpenMemHandle,
    ) -> Result<IpcOpened, CudaStatus> {
        if req.flags & !IPC_MEM_LAZY_ENABLE_PEER_ACCESS != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.ipc_link()?;
        if let Some(ptr) = self.ipc.import_by_token.get(&req.token).copied() {
            let import = self.ipc.imports.get_mut(&ptr).expect("indexed");
            import.opens = import.opens.saturating_add(1);
            return Ok(IpcOpened {
                ptr,
                size: import.size,
            });
        }
        // A process opening its own handle: the driver's answer.
        if self.ipc.own_token(&req.token) {
            return Err(CudaStatus::ErrorDeviceUninitialized);
        }
        self.accounts
            .check_count("IPC import", self.ipc.imports.len(), MAX_IMPORTS)?;
        let link = self.ipc.link.as_mut().expect("checked above");
        let (export, shared) = match link.import(req.token) {
            Ok(got) => got,
            Err(e) => return Err(self.ipc_failed("import", e)),
        };
        if export.kind != Kind::Memory {
            warn!(client = %self.client, "CUDA IPC open refused: the handle is an event's");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let ptr = self
            .exec
            .ipc_open_memory(&export.handle, export.size, req.flags, shared)?;
        self.ipc.imports.insert(
            ptr,
            Import {
                size: export.size,
                device: ctx_device,
                token: req.token,
                opens: 1,
            },
        );
        self.ipc.import_by_token.insert(req.token, ptr);
        Ok(IpcOpened {
            ptr,
            size: export.size,
        })
    }

    pub(super) fn ipc_close_mem_handle_now(
        &mut self,
        req: IpcCloseMemHandle,
    ) -> Result<IpcClosed, CudaStatus> {
        let import = self
            .ipc
            .imports
            .get_mut(&req.ptr)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        import.opens -= 1;
        if import.opens > 0 {
            return Ok(IpcClosed { unmapped: false });
        }
        let token = import.token;
        self.ipc.imports.remove(&req.ptr);
        self.ipc.import_by_token.remove(&token);
        self.exec.ipc_close_memory(req.ptr)?;
        Ok(IpcClosed { unmapped: true })
    }

    pub(super) fn ipc_get_event_handle_now(
        &mut self,
        req: IpcGetEventHandle,
    ) -> Result<Token, CudaStatus> {
        let e = self.handles.event(req.event)?;
        // Only an event made interprocess (and so without timing) has a handle.
        if !self.ipc.interprocess_events.contains(&req.event) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.ipc_link()?;
        if let Some(token) = self.ipc.exported_events.get(&req.event) {
            return Ok(*token);
        }
        let handle = driver_handle(&self.exec.ipc_export_event(e)?)?;
        let device = self
            .handles
            .event_device
            .get(&req.event)
            .copied()
            .unwrap_or(0);
        let export = Export {
            kind: Kind::Event,
            device,
            size: 0,
            handle,
        };
        let link = self.ipc.link.as_mut().expect("checked above");
        match link.export(export, None) {
            Ok(token) => {
                self.ipc.exported_events.insert(req.event, token);
                Ok(token)
            }
            Err(e) => Err(self.ipc_failed("export", e)),
        }
    }

    pub(super) fn ipc_open_event_handle_now(
        &mut self,
        device: i32,
        req: IpcOpenEventHandle,
    ) -> Result<(), CudaStatus> {
        if req.event.0 == 0 || self.handles.events.contains_key(&req.event) {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        self.ipc_link()?;
        if self.ipc.own_token(&req.token) {
            return Err(CudaStatus::ErrorDeviceUninitialized);
        }
        self.accounts
            .check_count("event", self.handles.events.len(), self.grant.max_events)?;
        let link = self.ipc.link.as_mut().expect("checked above");
        let export = match link.import(req.token) {
            Ok((export, _)) => export,
            Err(e) => return Err(self.ipc_failed("import", e)),
        };
        if export.kind != Kind::Event {
            warn!(client = %self.client, "CUDA IPC event open refused: the handle is memory's");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let e = self.exec.ipc_open_event(&export.handle)?;
        self.handles.events.insert(req.event, e);
        self.handles.event_device.insert(req.event, device);
        Ok(())
    }

    /// The token of physical allocation `handle`'s export, if it has one.
    pub(super) fn ipc_allocation_token(&self, handle: AllocationHandle) -> Option<Token> {
        self.ipc.exported_allocations.get(&handle).copied()
    }

    /// The physical allocation this guest exported as `token`, if it did.
    pub(super) fn ipc_own_allocation(&self, token: &Token) -> Option<AllocationHandle> {
        self.ipc
            .exported_allocations
            .iter()
            .find(|(_, t)| *t == token)
            .map(|(h, _)| *h)
    }

    /// Export physical allocation `handle` (the executor's `exec`, `size` bytes on
    /// `device`): the driver's descriptor goes to the registry.
    pub(super) fn ipc_export_allocation(
        &mut self,
        handle: AllocationHandle,
        exec: ExecAllocation,
        size: u64,
        device: i32,
    ) -> Result<Token, CudaStatus> {
        self.ipc_link()?;
        let shared = self.exec.mem_export_shareable(exec)?;
        let export = Export {
            kind: Kind::Allocation,
            device,
            size,
            handle: [0; HANDLE_LEN],
        };
        let token = self.ipc_register(export, Some(&shared))?;
        self.ipc.exported_allocations.insert(handle, token);
        Ok(token)
    }

    /// Enter `export` (and the descriptor that goes with it) in the registry.
    fn ipc_register(
        &mut self,
        export: Export,
        shared: Option<&std::os::fd::OwnedFd>,
    ) -> Result<Token, CudaStatus> {
        let link = self.ipc_link()?;
        match link.export(export, shared.map(std::os::fd::AsFd::as_fd)) {
            Ok(token) => Ok(token),
            Err(e) => Err(self.ipc_failed("export", e)),
        }
    }

    /// Another process's export `token` of `kind` (`what`, for the log), and the
    /// descriptor that came with it; one of another kind is an invalid value.
    fn ipc_import_kind(
        &mut self,
        token: Token,
        kind: Kind,
        what: &str,
    ) -> Result<(Export, Option<std::os::fd::OwnedFd>), CudaStatus> {
        let link = self.ipc_link()?;
        let (export, shared) = match link.import(token) {
            Ok(got) => got,
            Err(e) => return Err(self.ipc_failed("import", e)),
        };
        if export.kind != kind {
            crate::rate_limited!(KIND_LOG, "CUDA IPC handles of the wrong kind", warn,
                client = %self.client, kind = ?export.kind,
                "CUDA IPC import refused: the handle is not {what}");
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok((export, shared))
    }

    /// Another process's exported allocation imported here: the executor's handle,
    /// its size and device.
    pub(super) fn ipc_import_allocation(
        &mut self,
        token: Token,
    ) -> Result<(ExecAllocation, u64, i32), CudaStatus> {
        let (export, shared) =
            self.ipc_import_kind(token, Kind::Allocation, "a physical allocation's")?;
        let shared = shared.ok_or(CudaStatus::ErrorInvalidValue)?;
        let exec = self.exec.mem_import_shareable(shared, export.size)?;
        Ok((exec, export.size, export.device))
    }

    /// The token `of` was offered to the VM's other processes under, if it was.
    pub(super) fn ipc_pool_token(&self, of: PoolShared) -> Option<Token> {
        self.ipc.exported_pools.get(&of).map(|(t, _)| *t)
    }

    /// Offer `of` (on `device`) to the VM's other processes: `export` and its
    /// descriptor go to the registry.
    pub(super) fn ipc_export_pool(
        &mut self,
        of: PoolShared,
        export: Export,
        shared: Option<std::os::fd::OwnedFd>,
    ) -> Result<Token, CudaStatus> {
        let device = export.device;
        let token = self.ipc_register(export, shared.as_ref())?;
        self.ipc.exported_pools.insert(of, (token, device));
        Ok(token)
    }

    /// Another process's pool or pool allocation (`kind`) of this VM.
    pub(super) fn ipc_import_pool(
        &mut self,
        token: Token,
        kind: Kind,
    ) -> Result<(Export, Option<std::os::fd::OwnedFd>), CudaStatus> {
        let what = match kind {
            Kind::Pool => "a memory pool's",
            _ => "a pool allocation's",
        };
        self.ipc_import_kind(token, kind, what)
    }

    /// `of` is gone (the pool destroyed, the allocation freed): its token opens no
    /// more.
    pub(super) fn ipc_withdraw_pool(&mut self, of: PoolShared) {
        if let Some((token, _)) = self.ipc.exported_pools.remove(&of) {
            self.ipc_withdraw(token);
        }
    }

    /// Physical allocation `handle` is gone: its export opens no more.
    pub(super) fn ipc_withdraw_allocation(&mut self, handle: AllocationHandle) {
        if let Some(token) = self.ipc.exported_allocations.remove(&handle) {
            self.ipc_withdraw(token);
        }
    }

    /// The allocation at `ptr` is gone: its export, if any, opens no more.
    pub(super) fn ipc_withdraw_memory(&mut self, ptr: DevicePtr) {
        if let Some((token, _)) = self.ipc.exported_memory.remove(&ptr) {
            self.ipc_withdraw(token);
        }
        self.ipc_withdraw_pool(PoolShared::Pointer(ptr));
        self.ipc.pool_pointer_imports.remove(&ptr);
    }

    /// `device` is being reset: the exports of what this guest made on it open no
    /// more, and what it opened there is unmapped with the context (the executor's
    /// reset does it).
    pub(super) fn ipc_reset(&mut self, device: i32) {
        let gone: Vec<DevicePtr> = self
            .ipc
            .exported_memory
            .iter()
            .filter(|(_, (_, d))| *d == device)
            .map(|(p, _)| *p)
            .collect();
        for ptr in gone {
            self.ipc_withdraw_memory(ptr);
        }
        let events: Vec<EventHandle> = self
            .ipc
            .exported_events
            .keys()
            .filter(|e| self.handles.event_device.get(e) == Some(&device))
            .copied()
            .collect();
        for event in events {
            self.ipc_withdraw_event(event);
        }
        let pools: Vec<PoolShared> = self
            .ipc
            .exported_pools
            .iter()
            .filter(|(_, (_, d))| *d == device)
            .map(|(of, _)| *of)
            .collect();
        for of in pools {
            self.ipc_withdraw_pool(of);
        }
        let imports = &mut self.ipc.imports;
        let by_token = &mut self.ipc.import_by_token;
        imports.retain(|_, i| {
            if i.device == device {
                by_token.remove(&i.token);
            }
            i.device != device
        });
    }

    /// The event is gone: so is its export.
    pub(super) fn ipc_withdraw_event(&mut self, event: EventHandle) {
        self.ipc.interprocess_events.remove(&event);
        if let Some(token) = self.ipc.exported_events.remove(&event) {
            self.ipc_withdraw(token);
        }
    }

    fn ipc_withdraw(&mut self, token: Token) {
        if let Some(link) = self.ipc.link.as_mut() {
            if let Err(e) = link.withdraw(token) {
                let _ = self.ipc_failed("withdrawal", e);
            }
        }
    }

    /// Unmap everything opened from other processes (the session ends); the
    /// registry drops this worker's exports when its socket closes.
    pub(super) fn ipc_close_all(&mut self) {
        for (ptr, _) in std::mem::take(&mut self.ipc.imports) {
            let _ = self.exec.ipc_close_memory(ptr);
        }
        self.ipc.import_by_token.clear();
    }
}

/// The driver's handle as the registry keeps it; an executor handing back another
/// length is an executor bug, refused rather than cut.
fn driver_handle(bytes: &[u8]) -> Result<[u8; HANDLE_LEN], CudaStatus> {
    bytes.try_into().map_err(|_| CudaStatus::ErrorUnknown)
}
