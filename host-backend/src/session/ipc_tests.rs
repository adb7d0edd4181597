//! CUDA IPC between two sessions of one VM (and a third of another), each with a
//! host-memory executor of its own, over real sockets to one registry: what one
//! process writes the other reads, and what no process may open is refused.

use std::os::unix::net::UnixStream;
use std::sync::{Arc, OnceLock};

use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};

use super::ipc::{EVENT_INTERPROCESS, IPC_MEM_LAZY_ENABLE_PEER_ACCESS};
use super::*;
use crate::executor::host_memory::HostMemoryExecutor;
use crate::ipc::{IpcLink, Registry};
use crate::policy::Grant;

const CTX: CallContext = CallContext { device: 0 };

/// A session of `vm` whose worker is connection `owner` of `registry`.
fn session(registry: &Arc<Registry>, owner: u64, vm: &str, quota: Option<u64>) -> Session {
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .unwrap();
    let known = Arc::new(OnceLock::new());
    known.set(vm.to_string()).unwrap();
    let r = registry.clone();
    std::thread::spawn(move || r.serve_worker(UnixStream::from(ours), owner, known));
    let exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
    let mut grant = Grant::unlimited(vm);
    grant.memory_quota = quota;
    Session::new(Box::new(exec), grant).with_ipc_link(IpcLink::new(theirs))
}

fn alloc(s: &mut Session, size: u64) -> u64 {
    s.mem_alloc(&CTX, MemAlloc { size }, &[]).unwrap().0.ptr
}

fn write(s: &mut Session, dst: u64, bytes: &[u8]) {
    let req = MemcpyHtoD {
        dst,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    s.memcpy_htod(&CTX, req, bytes).unwrap();
}

fn read(s: &mut Session, src: u64, size: u64) -> Result<Vec<u8>, CudaStatus> {
    let req = MemcpyDtoH {
        src,
        size,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    s.memcpy_dtoh(&CTX, req, &[]).map(|r| r.1)
}

fn export(s: &mut Session, ptr: u64) -> Result<[u8; 16], CudaStatus> {
    s.ipc_get_mem_handle(&CTX, IpcGetMemHandle { ptr }, &[])
        .map(|r| r.0.token)
}

fn open(s: &mut Session, token: [u8; 16], flags: u32) -> Result<IpcOpened, CudaStatus> {
    s.ipc_open_mem_handle(&CTX, IpcOpenMemHandle { token, flags }, &[])
        .map(|r| r.0)
}

fn close(s: &mut Session, ptr: u64) -> Result<bool, CudaStatus> {
    s.ipc_close_mem_handle(&CTX, IpcCloseMemHandle { ptr }, &[])
        .map(|r| r.0.unmapped)
}

#[test]
fn the_importer_sees_the_exporters_bytes_and_the_exporter_the_importers() {
    let registry = Arc::new(Registry::new(16));
    let mut a = session(&registry, 1, "vm1", Some(16 << 20));
    let mut b = session(&registry, 2, "vm1", Some(16 << 20));
    let ptr = alloc(&mut a, 8192);
    write(&mut a, ptr, &[0xab; 8192]);
    let token = export(&mut a, ptr).unwrap();
    // The same allocation, asked again (or by an inner pointer): the same handle.
    assert_eq!(export(&mut a, ptr).unwrap(), token);
    assert_eq!(export(&mut a, ptr + 100).unwrap(), token);
    let used_by_b = b.accounts.quota_used();
    let opened = open(&mut b, token, IPC_MEM_LAZY_ENABLE_PEER_ACCESS).unwrap();
    assert_eq!(opened.size, 8192);
    // Charged to the exporter only.
    assert_eq!(b.accounts.quota_used(), used_by_b);
    assert_eq!(read(&mut b, opened.ptr, 8192).unwrap(), vec![0xab; 8192]);
    write(&mut b, opened.ptr + 4096, &[0x11; 16]);
    let back = read(&mut a, ptr + 4096, 16).unwrap();
    assert_eq!(back, vec![0x11; 16]);
    // Past the end of the import is not B's memory.
    assert_eq!(
        read(&mut b, opened.ptr, 8193),
        Err(CudaStatus::ErrorInvalidValue)
    );
    // Opened twice, closed twice: the second close unmaps.
    assert_eq!(open(&mut b, token, 0).unwrap().ptr, opened.ptr);
    assert_eq!(close(&mut b, opened.ptr), Ok(false));
    assert_eq!(close(&mut b, opened.ptr), Ok(true));
    assert_eq!(
        close(&mut b, opened.ptr),
        Err(CudaStatus::ErrorInvalidValue)
    );
    assert_eq!(
        read(&mut b, opened.ptr, 1),
        Err(CudaStatus::ErrorInvalidValue)
    );
}

#[test]
fn handles_no_process_may_open_are_refused_as_the_driver_refuses_them() {
    let registry = Arc::new(Registry::new(16));
    let mut a = session(&registry, 1, "vm1", None);
    let mut b = session(&registry, 2, "vm1", None);
    let mut other_vm = session(&registry, 3, "vm2", None);
    let ptr = alloc(&mut a, 4096);
    let token = export(&mut a, ptr).unwrap();
    // The exporter itself: CUDA_ERROR_INVALID_CONTEXT.
    assert_eq!(
        open(&mut a, token, 0),
        Err(CudaStatus::ErrorDeviceUninitialized)
    );
    // Another VM, and forged bytes: invalid value, alike.
    assert_eq!(
        open(&mut other_vm, token, 0),
        Err(CudaStatus::ErrorInvalidValue)
    );
    assert_eq!(
        open(&mut b, [0x42; 16], 0),
        Err(CudaStatus::ErrorInvalidValue)
    );
    // Flags CUDA does not have.
    assert_eq!(open(&mut b, token, 2), Err(CudaStatus::ErrorInvalidValue));
    // Memory that is not an allocation of the exporter's.
    assert_eq!(export(&mut a, 0x1234), Err(CudaStatus::ErrorInvalidValue));
    assert_eq!(export(&mut b, ptr), Err(CudaStatus::ErrorInvalidValue));
    // An import is not exported again, nor freed in place of a close.
    let opened = open(&mut b, token, 0).unwrap();
    assert_eq!(
        export(&mut b, opened.ptr),
        Err(CudaStatus::ErrorInvalidValue)
    );
    assert_eq!(
        b.mem_free(&CTX, MemFree { ptr: opened.ptr }, &[])
            .map(|_| ()),
        Err(CudaStatus::ErrorInvalidValue)
    );
    // Freed by its exporter: the handle is replayed in vain.
    a.mem_free(&CTX, MemFree { ptr }, &[]).unwrap();
    let mut c = session(&registry, 4, "vm1", None);
    assert_eq!(open(&mut c, token, 0), Err(CudaStatus::ErrorInvalidValue));
    // The exporter's process ends: its other exports go with it.
    let ptr = alloc(&mut a, 4096);
    let token = export(&mut a, ptr).unwrap();
    drop(a);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while registry.exports_of("vm1") > 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(open(&mut c, token, 0), Err(CudaStatus::ErrorInvalidValue));
}

#[test]
fn a_flood_of_exports_is_bounded_per_vm() {
    let registry = Arc::new(Registry::new(4));
    let mut a = session(&registry, 1, "vm1", None);
    for _ in 0..4 {
        let p = alloc(&mut a, 512);
        export(&mut a, p).unwrap();
    }
    let p = alloc(&mut a, 512);
    assert_eq!(export(&mut a, p), Err(CudaStatus::ErrorMemoryAllocation));
    // Another VM has its own allowance.
    let mut other = session(&registry, 2, "vm2", None);
    let q = alloc(&mut other, 512);
    assert!(export(&mut other, q).is_ok());
}

#[test]
fn interprocess_events_open_in_another_process_and_others_are_refused() {
    let registry = Arc::new(Registry::new(16));
    let mut a = session(&registry, 1, "vm1", None);
    let mut b = session(&registry, 2, "vm1", None);
    let create = |s: &mut Session, id: u64, flags: u32| {
        s.event_create(
            &CTX,
            EventCreate {
                event: EventHandle(id),
                flags,
            },
            &[],
        )
        .map(|_| ())
    };
    let get = |s: &mut Session, id: u64| {
        s.ipc_get_event_handle(
            &CTX,
            IpcGetEventHandle {
                event: EventHandle(id),
            },
            &[],
        )
        .map(|r| r.0.token)
    };
    create(&mut a, 10, 0).unwrap();
    // Not interprocess: invalid value; not an event at all: invalid handle.
    assert_eq!(get(&mut a, 10), Err(CudaStatus::ErrorInvalidValue));
    assert_eq!(get(&mut a, 99), Err(CudaStatus::ErrorInvalidResourceHandle));
    create(&mut a, 11, 2 | EVENT_INTERPROCESS).unwrap();
    let token = get(&mut a, 11).unwrap();
    assert_eq!(get(&mut a, 11).unwrap(), token);
    let rec = EventRecord {
        event: EventHandle(11),
        stream: StreamHandle::LEGACY,
        flags: 0,
    };
    a.event_record(&CTX, rec, &[]).unwrap();
    let open_event = |s: &mut Session, id: u64, token: [u8; 16]| {
        let req = IpcOpenEventHandle {
            event: EventHandle(id),
            token,
        };
        s.ipc_open_event_handle(&CTX, req, &[]).map(|_| ())
    };
    open_event(&mut b, 20, token).unwrap();
    let query = EventQuery {
        event: EventHandle(20),
    };
    b.event_query(&CTX, query, &[]).unwrap();
    let wait = StreamWaitEvent {
        stream: StreamHandle::LEGACY,
        event: EventHandle(20),
        flags: 0,
    };
    b.stream_wait_event(&CTX, wait, &[]).unwrap();
    // A handle already in use, the exporter itself, a memory handle.
    assert_eq!(
        open_event(&mut b, 20, token),
        Err(CudaStatus::ErrorInvalidResourceHandle)
    );
    assert_eq!(
        open_event(&mut a, 21, token),
        Err(CudaStatus::ErrorDeviceUninitialized)
    );
    let ptr = alloc(&mut a, 512);
    let memory = export(&mut a, ptr).unwrap();
    assert_eq!(
        open_event(&mut b, 21, memory),
        Err(CudaStatus::ErrorInvalidValue)
    );
    assert_eq!(open(&mut b, token, 0), Err(CudaStatus::ErrorInvalidValue));
    // Destroyed by its exporter: gone for later openers.
    a.event_destroy(
        &CTX,
        EventDestroy {
            event: EventHandle(11),
        },
        &[],
    )
    .unwrap();
    assert_eq!(
        open_event(&mut b, 22, token),
        Err(CudaStatus::ErrorInvalidValue)
    );
}

#[test]
fn without_a_registry_ipc_is_not_supported() {
    let exec = HostMemoryExecutor::new(1 << 20, None).unwrap();
    let mut s = Session::new(Box::new(exec), Grant::unlimited("vm1"));
    let p = alloc(&mut s, 512);
    assert_eq!(export(&mut s, p), Err(CudaStatus::ErrorNotSupported));
    assert_eq!(open(&mut s, [1; 16], 0), Err(CudaStatus::ErrorNotSupported));
}

/// A physical allocation of `size` bytes mapped at a fresh reservation: (handle, ptr).
fn vmm_mapped(
    s: &mut Session,
    size: u64,
    handle: Option<AllocationHandle>,
) -> (AllocationHandle, u64) {
    use vmcuda_wire::driver::*;
    let handle = handle.unwrap_or_else(|| {
        let req = MemCreate {
            size,
            prop: AllocationProp {
                alloc_type: MEM_ALLOCATION_TYPE_PINNED,
                location_type: MEM_LOCATION_TYPE_DEVICE,
                requested_handle_types: 1,
                ..Default::default()
            },
            flags: 0,
        };
        s.mem_create(&CTX, req, &[]).unwrap().0.handle
    });
    let reserve = MemAddressReserve {
        size,
        alignment: 0,
        addr: 0,
        flags: 0,
    };
    let ptr = s.mem_address_reserve(&CTX, reserve, &[]).unwrap().0.ptr;
    let map = MemMap {
        ptr,
        size,
        offset: 0,
        handle,
        flags: 0,
    };
    s.mem_map(&CTX, map, &[]).unwrap();
    let access = MemSetAccess {
        ptr,
        size,
        descs: vec![AccessDesc {
            location_type: MEM_LOCATION_TYPE_DEVICE,
            location_id: 0,
            flags: 3,
        }],
    };
    s.mem_set_access(&CTX, access, &[]).unwrap();
    (handle, ptr)
}

#[test]
fn physical_allocations_pass_between_processes_as_descriptors() {
    use vmcuda_wire::driver::*;
    const SIZE: u64 = 2 << 20;
    let registry = Arc::new(Registry::new(16));
    let mut a = session(&registry, 1, "vm1", Some(16 << 20));
    let mut b = session(&registry, 2, "vm1", Some(16 << 20));
    let mut other_vm = session(&registry, 3, "vm2", None);
    let (handle, ptr) = vmm_mapped(&mut a, SIZE, None);
    write(&mut a, ptr, &[0x3c; 4096]);
    let export = |s: &mut Session, handle: AllocationHandle, handle_type: u32| {
        let req = MemExportShareable {
            handle,
            handle_type,
        };
        s.mem_export_shareable(&CTX, req, &[]).map(|r| r.0.token)
    };
    let import = |s: &mut Session, token: [u8; 16]| {
        let req = MemImportShareable {
            token,
            handle_type: 1,
        };
        s.mem_import_shareable(&CTX, req, &[]).map(|r| r.0.handle)
    };
    // A fabric handle of an allocation not made exportable as one is invalid, as the
    // driver answers (measured on the H200); Win32 and fabric handles are not there.
    assert_eq!(
        export(&mut a, handle, 8),
        Err(CudaStatus::ErrorInvalidValue)
    );
    let fabric = MemCreate {
        size: SIZE,
        prop: AllocationProp {
            alloc_type: MEM_ALLOCATION_TYPE_PINNED,
            location_type: MEM_LOCATION_TYPE_DEVICE,
            requested_handle_types: 1 | 8,
            ..Default::default()
        },
        flags: 0,
    };
    let fabric = a.mem_create(&CTX, fabric, &[]).unwrap().0.handle;
    assert_eq!(
        export(&mut a, fabric, 8),
        Err(CudaStatus::ErrorNotSupported)
    );
    a.mem_release(&CTX, MemRelease { handle: fabric }, &[])
        .unwrap();
    let token = export(&mut a, handle, 1).unwrap();
    assert_eq!(export(&mut a, handle, 1).unwrap(), token);
    // Importing its own export is the same allocation, one reference more.
    assert_eq!(import(&mut a, token).unwrap(), handle);
    a.mem_release(&CTX, MemRelease { handle }, &[]).unwrap();
    let used_by_b = b.accounts.quota_used();
    let imported = import(&mut b, token).unwrap();
    assert_eq!(
        b.accounts.quota_used(),
        used_by_b,
        "charged to the exporter"
    );
    let (_, at) = vmm_mapped(&mut b, SIZE, Some(imported));
    assert_eq!(read(&mut b, at, 4096).unwrap(), vec![0x3c; 4096]);
    write(&mut b, at + 8192, &[0x77; 16]);
    assert_eq!(read(&mut a, ptr + 8192, 16).unwrap(), vec![0x77; 16]);
    // Another VM, a forged token, an allocation not made exportable.
    assert_eq!(
        import(&mut other_vm, token),
        Err(CudaStatus::ErrorInvalidValue)
    );
    assert_eq!(import(&mut b, [9; 16]), Err(CudaStatus::ErrorInvalidValue));
    let plain = MemCreate {
        size: SIZE,
        prop: AllocationProp {
            alloc_type: MEM_ALLOCATION_TYPE_PINNED,
            location_type: MEM_LOCATION_TYPE_DEVICE,
            ..Default::default()
        },
        flags: 0,
    };
    let plain = a.mem_create(&CTX, plain, &[]).unwrap().0.handle;
    assert_eq!(export(&mut a, plain, 1), Err(CudaStatus::ErrorInvalidValue));
    // A legacy memory handle is not an allocation's.
    let p = alloc(&mut a, 512);
    let legacy = super::ipc_tests::export(&mut a, p).unwrap();
    assert_eq!(import(&mut b, legacy), Err(CudaStatus::ErrorInvalidValue));
    // Released and unmapped by its exporter: gone for later importers.
    a.mem_unmap(&CTX, MemUnmap { ptr, size: SIZE }, &[])
        .unwrap();
    a.mem_release(&CTX, MemRelease { handle }, &[]).unwrap();
    let mut c = session(&registry, 4, "vm1", None);
    assert_eq!(import(&mut c, token), Err(CudaStatus::ErrorInvalidValue));
    // The importer's mapping still reads what was shared.
    assert_eq!(read(&mut b, at + 8192, 16).unwrap(), vec![0x77; 16]);
}

/// Offer export `export` (a pool's or a pool allocation's) to the VM's other processes.
fn share(s: &mut Session, export: u64) -> Result<[u8; 16], CudaStatus> {
    s.mem_pool_share_export(&CTX, MemPoolShareExport { export }, &[])
        .map(|r| r.0.token)
}

fn import_pool(s: &mut Session, token: [u8; 16]) -> Result<PoolImported, CudaStatus> {
    s.mem_pool_import_shared(&CTX, MemPoolImportShared { token }, &[])
        .map(|r| r.0)
}

fn import_pointer(
    s: &mut Session,
    pool: MemPoolHandle,
    token: [u8; 16],
) -> Result<PointerImported, CudaStatus> {
    let req = MemPoolImportSharedPointer { pool, token };
    s.mem_pool_import_shared_pointer(&CTX, req, &[])
        .map(|r| r.0)
}

/// A shareable pool of `s`'s and an allocation of `size` bytes from it, both exported
/// (the host's numbers for the exports).
fn pool_with_allocation(s: &mut Session, size: u64) -> (MemPoolHandle, u64, u64, u64) {
    use vmcuda_wire::graph::{MemAllocFromPoolAsync, MemPoolCreate, PoolRef};
    let create = MemPoolCreate {
        device: 0,
        max_size: 0,
        shareable: true,
    };
    let pool = s.mem_pool_create(&CTX, create, &[]).unwrap().0.pool;
    let alloc = MemAllocFromPoolAsync {
        size,
        pool: PoolRef::Created(pool),
        stream: StreamHandle::LEGACY,
    };
    let ptr = s.mem_alloc_from_pool_async(&CTX, alloc, &[]).unwrap().0.ptr;
    let pool_export = s
        .mem_pool_export_shareable(&CTX, MemPoolExportShareable { pool }, &[])
        .unwrap()
        .0
        .export;
    let ptr_export = s
        .mem_pool_export_pointer(&CTX, MemPoolExportPointer { ptr }, &[])
        .unwrap()
        .0
        .export;
    (pool, ptr, pool_export, ptr_export)
}

#[test]
fn pools_and_their_allocations_pass_between_processes_of_one_vm() {
    use vmcuda_wire::graph::{MemAllocFromPoolAsync, MemFreeAsync, MemPoolDestroy, PoolRef};
    let registry = Arc::new(Registry::new(16));
    let mut a = session(&registry, 1, "vm1", Some(16 << 20));
    let mut b = session(&registry, 2, "vm1", Some(16 << 20));
    let mut other_vm = session(&registry, 3, "vm2", None);
    let (pool, ptr, pool_export, ptr_export) = pool_with_allocation(&mut a, 8192);
    write(&mut a, ptr, &[0x5e; 8192]);
    let pool_token = share(&mut a, pool_export).unwrap();
    // Offered again: the same token, one registry entry.
    assert_eq!(share(&mut a, pool_export).unwrap(), pool_token);
    let ptr_token = share(&mut a, ptr_export).unwrap();
    assert_eq!(registry.exports_of("vm1"), 2);

    let used_by_b = b.accounts.quota_used();
    let imported = import_pool(&mut b, pool_token).unwrap();
    assert_eq!(imported.device, 0);
    // A pointer's token is not a pool's, nor a pool's a pointer's.
    assert_eq!(
        import_pool(&mut b, ptr_token).unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
    assert_eq!(
        import_pointer(&mut b, imported.pool, pool_token).unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
    // Only through a pool imported from another process: not the exporter's own pool.
    assert_eq!(
        import_pointer(&mut a, pool, ptr_token).unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
    // Within the exporting process its exports still import by the host's number.
    let again = MemPoolImportShareable {
        export: pool_export,
    };
    assert!(a.mem_pool_import_shareable(&CTX, again, &[]).is_ok());
    let got = import_pointer(&mut b, imported.pool, ptr_token).unwrap();
    assert_eq!(got.size, 8192);
    assert_eq!(
        b.accounts.quota_used(),
        used_by_b,
        "charged to the exporter"
    );
    // The two processes share the bytes.
    assert_eq!(read(&mut b, got.ptr, 8192).unwrap(), vec![0x5e; 8192]);
    write(&mut b, got.ptr + 100, &[0x11; 4]);
    assert_eq!(read(&mut a, ptr + 100, 4).unwrap(), vec![0x11; 4]);
    // Another VM's worker and forged tokens are refused alike.
    assert_eq!(
        import_pool(&mut other_vm, pool_token).unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
    assert_eq!(
        import_pointer(&mut b, imported.pool, [9; 16]).unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
    // The imported pool makes no allocations, and the import is not exported again.
    let alloc = MemAllocFromPoolAsync {
        size: 64,
        pool: PoolRef::Created(imported.pool),
        stream: StreamHandle::LEGACY,
    };
    assert_eq!(
        b.mem_alloc_from_pool_async(&CTX, alloc, &[]).unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
    assert_eq!(
        b.mem_pool_export_pointer(&CTX, MemPoolExportPointer { ptr: got.ptr }, &[])
            .unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
    // The importer frees first, as CUDA requires; then the exporter.
    let free = |s: &mut Session, ptr| {
        let req = MemFreeAsync {
            ptr,
            stream: StreamHandle::LEGACY,
        };
        s.mem_free_async(&CTX, req, &[]).map(|_| ())
    };
    free(&mut b, got.ptr).unwrap();
    assert_eq!(read(&mut b, got.ptr, 1), Err(CudaStatus::ErrorInvalidValue));
    assert_eq!(b.accounts.quota_used(), used_by_b);
    free(&mut a, ptr).unwrap();
    // Replayed after the exporter freed it: refused.
    assert_eq!(
        import_pointer(&mut b, imported.pool, ptr_token).unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
    // An export of a freed allocation is offered to no one.
    assert_eq!(
        share(&mut a, ptr_export).unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
    a.mem_pool_destroy(&CTX, MemPoolDestroy { pool }, &[])
        .unwrap();
    let mut c = session(&registry, 4, "vm1", None);
    assert_eq!(
        import_pool(&mut c, pool_token).unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
    assert_eq!(registry.exports_of("vm1"), 0);
}

#[test]
fn pool_exports_count_against_the_vms_limit() {
    let registry = Arc::new(Registry::new(3));
    let mut a = session(&registry, 1, "vm1", None);
    let (_, _, pool_export, ptr_export) = pool_with_allocation(&mut a, 4096);
    share(&mut a, pool_export).unwrap();
    share(&mut a, ptr_export).unwrap();
    let p = alloc(&mut a, 512);
    export(&mut a, p).unwrap();
    let (_, _, _, another) = pool_with_allocation(&mut a, 4096);
    assert_eq!(
        share(&mut a, another).unwrap_err(),
        CudaStatus::ErrorMemoryAllocation
    );
}

/// Without a registry a pool is shared within its own process only: the offer is
/// not supported (the guest then keeps its export to itself).
#[test]
fn without_a_registry_pools_are_not_offered() {
    let exec = HostMemoryExecutor::new(64 << 20, None).unwrap();
    let mut s = Session::new(Box::new(exec), Grant::unlimited("vm1"));
    let (_, _, pool_export, _) = pool_with_allocation(&mut s, 4096);
    assert_eq!(
        share(&mut s, pool_export).unwrap_err(),
        CudaStatus::ErrorNotSupported
    );
}
