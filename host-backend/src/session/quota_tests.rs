//! The quota counts what the GPU really spends, on the host-memory executor: module
//! data, context limits, allocation granularity, pools, graph memory and device resets.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use vmcuda_wire::graph::*;
use vmcuda_wire::op::*;
use vmcuda_wire::CudaStatus;

use super::Session;
use crate::executor::host_memory::HostMemoryExecutor;
use crate::ledger::Ledger;
use crate::policy::{GpuSelection, Grant};

const MIB: u64 = 1 << 20;
const CTX: CallContext = CallContext { device: 0 };
const CTX1: CallContext = CallContext { device: 1 };
/// nvcc 13's cubin with `__device__` and `__constant__` variables (wire's test data):
/// 0x54 bytes of globals and constant banks.
const GLOBALS: &[u8] = include_bytes!("../../../wire/testdata/globals.cubin");

fn session_on(exec: HostMemoryExecutor, quota: Option<u64>) -> Session {
    let mut grant = Grant::unlimited("test");
    grant.memory_quota = quota;
    Session::new(Box::new(exec), grant)
}

fn session(quota: Option<u64>) -> Session {
    session_on(HostMemoryExecutor::new(4 << 30, None).unwrap(), quota)
}

/// `elf` with its `.nv.global` section (zero-initialised globals) grown to `size`.
fn with_bss(elf: &[u8], size: u64) -> Vec<u8> {
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap()) as usize;
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let strtab = u64_at(shoff + shstrndx * shentsize + 0x18);
    let mut out = elf.to_vec();
    for i in 0..shnum {
        let header = shoff + i * shentsize;
        let name_at =
            strtab + u32::from_le_bytes(elf[header..header + 4].try_into().unwrap()) as usize;
        if elf[name_at..].starts_with(b".nv.global\0") {
            out[header + 0x20..header + 0x28].copy_from_slice(&size.to_le_bytes());
            return out;
        }
    }
    panic!("no .nv.global section");
}

fn alloc(s: &mut Session, ctx: &CallContext, size: u64) -> Result<DevicePtr, CudaStatus> {
    s.mem_alloc(ctx, MemAlloc { size }, &[]).map(|r| r.0.ptr)
}

fn read(
    s: &mut Session,
    ctx: &CallContext,
    src: DevicePtr,
    size: u64,
) -> Result<Vec<u8>, CudaStatus> {
    let req = MemcpyDtoH {
        src,
        size,
        stream: StreamHandle::LEGACY,
        is_async: false,
    };
    s.memcpy_dtoh(ctx, req, &[]).map(|r| r.1)
}

fn limit(s: &mut Session, which: u32) -> u64 {
    s.device_get_limit(&CTX, DeviceGetLimit { limit: which }, &[])
        .unwrap()
        .0
        .value
}

fn set_limit(s: &mut Session, which: u32, value: u64) -> Result<(), CudaStatus> {
    s.device_set_limit(
        &CTX,
        DeviceSetLimit {
            limit: which,
            value,
        },
        &[],
    )
    .map(|_| ())
}

/// Finding 1: a module's globals and constant banks take device memory at load.
#[test]
fn module_globals_and_constant_banks_are_charged_at_load() {
    let mut s = session(Some(64 * MIB));
    // 1 GiB of zero-initialised globals under a 64 MiB quota: refused.
    let huge = with_bss(GLOBALS, 1 << 30);
    assert_eq!(
        s.module_load(&CTX, ModuleLoad {}, &huge).err(),
        Some(CudaStatus::ErrorMemoryAllocation)
    );
    assert_eq!(s.charged_bytes(), 0);
    // 32 MiB of globals load and are charged (rounded as the GPU allocates).
    let big = with_bss(GLOBALS, 32 * MIB);
    s.module_load(&CTX, ModuleLoad {}, &big).unwrap();
    assert_eq!(
        s.charged_bytes(),
        34 * MIB,
        "32 MiB and 0x48 bytes: 17 large pages"
    );
    // Loading the same image again takes nothing more.
    s.module_load(&CTX, ModuleLoad {}, &big).unwrap();
    assert_eq!(s.charged_bytes(), 34 * MIB);
    // What is left of the quota is all a later allocation gets.
    assert_eq!(
        alloc(&mut s, &CTX, 31 * MIB),
        Err(CudaStatus::ErrorMemoryAllocation)
    );
    alloc(&mut s, &CTX, 30 * MIB).unwrap();
    // A small module: its 0x54 bytes take one small step.
    let mut small = session(Some(64 * MIB));
    small.module_load(&CTX, ModuleLoad {}, GLOBALS).unwrap();
    assert_eq!(small.charged_bytes(), 512);
}

/// wire/testdata/bigglobals.cu (64 MiB of zero-initialised globals, plus 48 bytes of
/// initialised and constant data) as nvcc writes it plainly, and with its only cubin
/// compressed (`-Xfatbin -compress-all`: LZ4 with `--compress-mode=speed`, else zstd).
const BIGGLOBALS: &[u8] = include_bytes!("../../../wire/testdata/bigglobals.fatbin");
const BIGGLOBALS_LZ4: &[u8] = include_bytes!("../../../wire/testdata/bigglobals_lz4.fatbin");
const BIGGLOBALS_ZSTD: &[u8] = include_bytes!("../../../wire/testdata/bigglobals_zstd.fatbin");

/// A module whose only cubin is compressed loads (as the driver takes it) and is
/// charged its globals, measured from the decompressed cubin.
#[test]
fn compressed_cubins_load_and_are_charged_their_globals() {
    let mut plain = session(Some(128 * MIB));
    plain.module_load(&CTX, ModuleLoad {}, BIGGLOBALS).unwrap();
    // 64 MiB and a few bytes: 33 large pages.
    assert_eq!(plain.charged_bytes(), 66 * MIB);
    for image in [BIGGLOBALS_LZ4, BIGGLOBALS_ZSTD] {
        let mut s = session(Some(128 * MIB));
        let (loaded, _) = s.module_load(&CTX, ModuleLoad {}, image).unwrap();
        assert_eq!(s.charged_bytes(), 66 * MIB);
        // Its kernel is found through the decompressed cubin too.
        let req = ModuleGetFunction {
            module: loaded.module,
            name: "_Z5touchPfi".into(),
        };
        let (f, _) = s.module_get_function(&CTX, req, &[]).unwrap();
        assert_eq!(f.params.len(), 2);

        // Under a 64 MiB quota its zero-initialised global does not fit: refused,
        // however small the file is.
        let mut small = session(Some(64 * MIB));
        assert!(image.len() < 4096);
        assert_eq!(
            small.module_load(&CTX, ModuleLoad {}, image).err(),
            Some(CudaStatus::ErrorMemoryAllocation)
        );
        assert_eq!(small.charged_bytes(), 0);
    }
}

/// A compressed cubin that does not decode to its declared size cannot be measured:
/// refused as an invalid image, nothing charged.
#[test]
fn undecodable_compressed_cubins_are_refused() {
    for image in [BIGGLOBALS_LZ4, BIGGLOBALS_ZSTD] {
        let fb = vmcuda_wire::fatbin::parse(image).unwrap();
        let at = fb.entries().next().unwrap().offset + 0x38;
        let declared = fb.entries().next().unwrap().uncompressed_size;
        let mut bad = image.to_vec();
        bad[at..at + 8].copy_from_slice(&(declared + 1).to_le_bytes());
        let mut s = session(Some(128 * MIB));
        assert_eq!(
            s.module_load(&CTX, ModuleLoad {}, &bad).err(),
            Some(CudaStatus::ErrorInvalidKernelImage)
        );
        assert_eq!(s.charged_bytes(), 0);
    }
}

/// Finding 2: stack, heap and printf limits reserve device memory.
#[test]
fn context_limits_are_charged_and_refused_over_the_quota() {
    let mut s = session(Some(64 * MIB));
    let stack = limit(&mut s, 0);
    // 256 KiB of stack for each of the device's 4 x 2048 resident threads: 2 GiB.
    assert_eq!(
        set_limit(&mut s, 0, 256 << 10),
        Err(CudaStatus::ErrorMemoryAllocation)
    );
    assert_eq!(limit(&mut s, 0), stack, "a refused limit is left unchanged");
    assert_eq!(s.charged_bytes(), 0);
    // 2 KiB more per thread: 8,192 threads x 1 KiB above the context's own 1 KiB.
    set_limit(&mut s, 0, stack + 1024).unwrap();
    assert_eq!(s.charged_bytes(), 8 * MIB);
    // The heap above its default of 8 MiB, byte for byte.
    let heap = limit(&mut s, 2);
    set_limit(&mut s, 2, heap + 16 * MIB).unwrap();
    assert_eq!(s.charged_bytes(), 24 * MIB);
    assert_eq!(
        set_limit(&mut s, 2, heap + 100 * MIB),
        Err(CudaStatus::ErrorMemoryAllocation)
    );
    assert_eq!(limit(&mut s, 2), heap + 16 * MIB);
    // The printf FIFO too; lowering a limit gives the difference back.
    let fifo = limit(&mut s, 1);
    set_limit(&mut s, 1, fifo + 4 * MIB).unwrap();
    assert_eq!(s.charged_bytes(), 28 * MIB);
    set_limit(&mut s, 2, heap).unwrap();
    assert_eq!(s.charged_bytes(), 12 * MIB);
    assert_eq!(
        alloc(&mut s, &CTX, 53 * MIB),
        Err(CudaStatus::ErrorMemoryAllocation)
    );
    // Other limits pass through, uncharged.
    set_limit(&mut s, 5, 4096).unwrap();
    assert_eq!(limit(&mut s, 5), 4096);
    assert_eq!(s.charged_bytes(), 12 * MIB);
    // A device reset puts the limits back, and their charge with them.
    s.device_reset(&CTX, DeviceReset {}, &[]).unwrap();
    assert_eq!(s.charged_bytes(), 0);
}

/// Finding 3: allocations are charged what the GPU takes for them.
#[test]
fn allocations_are_charged_at_the_granularity_the_gpu_takes() {
    let mut s = session(Some(8 * MIB));
    let mut made = 0u64;
    let refused = loop {
        match alloc(&mut s, &CTX, 1) {
            Ok(_) => made += 1,
            Err(e) => break e,
        }
        assert!(
            made <= 20_000,
            "20,000 one-byte allocations fit an 8 MiB quota"
        );
    };
    assert_eq!(refused, CudaStatus::ErrorMemoryAllocation);
    assert_eq!(made, 8 * MIB / 512, "each takes 512 bytes");
    assert_eq!(s.charged_bytes(), 8 * MIB);
    // Above 1 MiB, whole 2 MiB pages.
    let mut s = session(Some(8 * MIB));
    let p = alloc(&mut s, &CTX, 2 * MIB + 1).unwrap();
    assert_eq!(s.charged_bytes(), 4 * MIB);
    // The guest reaches only what it asked for.
    assert_eq!(read(&mut s, &CTX, p + 2 * MIB, 1).unwrap(), [0]);
    assert_eq!(
        read(&mut s, &CTX, p + 2 * MIB + 1, 1).err(),
        Some(CudaStatus::ErrorInvalidValue)
    );
    s.mem_free(&CTX, MemFree { ptr: p }, &[]).unwrap();
    assert_eq!(s.charged_bytes(), 0);
    // The executor's own figures follow the same rule.
    let before = s.exec.mem_info().unwrap().0;
    alloc(&mut s, &CTX, 1).unwrap();
    let after = s.exec.mem_info().unwrap().0;
    assert_eq!(before - after, 512);
}

fn stream(s: &mut Session, ctx: &CallContext, id: u64) -> StreamHandle {
    let stream = StreamHandle(id);
    let create = StreamCreate {
        stream,
        flags: 0,
        priority: 0,
    };
    s.stream_create(ctx, create, &[]).unwrap();
    stream
}

fn alloc_async(s: &mut Session, size: u64, stream: StreamHandle) -> Result<DevicePtr, CudaStatus> {
    s.mem_alloc_async(&CTX, MemAllocAsync { size, stream }, &[])
        .map(|r| r.0.ptr)
}

fn set_threshold(s: &mut Session, value: u64) {
    let req = MemPoolSetAttribute {
        pool: PoolRef::Default(0),
        attr: pool_attr::RELEASE_THRESHOLD,
        value,
    };
    s.mem_pool_set_attribute(&CTX, req, &[]).unwrap();
}

fn threshold(s: &mut Session) -> u64 {
    let req = MemPoolGetAttribute {
        pool: PoolRef::Default(0),
        attr: pool_attr::RELEASE_THRESHOLD,
    };
    s.mem_pool_get_attribute(&CTX, req, &[]).unwrap().0.value
}

/// Finding 4: memory freed into a pool and still reserved stays charged.
#[test]
fn memory_a_pool_keeps_stays_charged_until_the_pool_gives_it_back() {
    let mut s = session(Some(16 * MIB));
    let st = stream(&mut s, &CTX, 0x100);
    set_threshold(&mut s, u64::MAX);
    assert_eq!(threshold(&mut s), 16 * MIB, "held to what the quota leaves");
    let p = alloc_async(&mut s, 8 * MIB, st).unwrap();
    assert_eq!(s.charged_bytes(), 8 * MIB);
    s.mem_free_async(&CTX, MemFreeAsync { ptr: p, stream: st }, &[])
        .unwrap();
    assert_eq!(s.charged_bytes(), 8 * MIB, "the pool keeps it");
    assert_eq!(
        alloc(&mut s, &CTX, 10 * MIB),
        Err(CudaStatus::ErrorMemoryAllocation)
    );
    // The pool's memory is the guest's to use again.
    let q = alloc_async(&mut s, 8 * MIB, st).unwrap();
    assert_eq!(s.charged_bytes(), 8 * MIB);
    s.mem_free_async(&CTX, MemFreeAsync { ptr: q, stream: st }, &[])
        .unwrap();
    // A trim gives it back.
    let trim = MemPoolTrimTo {
        pool: PoolRef::Default(0),
        min_bytes_to_keep: 0,
    };
    s.mem_pool_trim_to(&CTX, trim, &[]).unwrap();
    assert_eq!(s.charged_bytes(), 0);
    alloc(&mut s, &CTX, 10 * MIB).unwrap();
    // So does a lower threshold.
    let mut s = session(Some(16 * MIB));
    let st = stream(&mut s, &CTX, 0x100);
    set_threshold(&mut s, 4 * MIB);
    let p = alloc_async(&mut s, 8 * MIB, st).unwrap();
    s.mem_free_async(&CTX, MemFreeAsync { ptr: p, stream: st }, &[])
        .unwrap();
    assert_eq!(s.charged_bytes(), 4 * MIB);
    set_threshold(&mut s, 0);
    assert_eq!(s.charged_bytes(), 0);
}

/// Finding 4: the release threshold is held to what the VM's quota leaves, across
/// its connections.
#[test]
fn the_pool_threshold_is_held_to_what_the_vms_quota_leaves() {
    let dir = std::env::temp_dir().join(format!("vmcuda-quota-pool-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let ledger = Ledger::join(&dir, "vm1", 4).unwrap();
    let mut a = session(Some(16 * MIB)).with_ledger(ledger);
    alloc(&mut a, &CTX, 12 * MIB).unwrap();
    // A second connection of the same VM.
    let ledger = Ledger::join(&dir, "vm1", 4).unwrap();
    let mut b = session(Some(16 * MIB)).with_ledger(ledger);
    set_threshold(&mut b, u64::MAX);
    assert_eq!(threshold(&mut b), 4 * MIB);
    drop((a, b));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Finding 4: an allocation made in a capture is charged for as long as the graph or
/// its executable graph holds it, and is zeroed at each launch.
#[test]
fn graph_memory_is_charged_while_held_and_zeroed_at_launch() {
    let mut s = session(Some(16 * MIB));
    let st = stream(&mut s, &CTX, 0x100);
    s.stream_begin_capture(&CTX, StreamBeginCapture { stream: st }, &[])
        .unwrap();
    let p = alloc_async(&mut s, 4 * MIB, st).unwrap();
    let memset = Memset {
        dst: p,
        value: 7,
        size: 16,
        stream: st,
        is_async: true,
    };
    s.memset(&CTX, memset, &[]).unwrap();
    // Freed inside the capture: the graph still holds the memory.
    s.mem_free_async(&CTX, MemFreeAsync { ptr: p, stream: st }, &[])
        .unwrap();
    let q = alloc_async(&mut s, 2 * MIB, st).unwrap();
    let end = StreamEndCapture {
        stream: st,
        invalidated: false,
    };
    let graph = s.stream_end_capture(&CTX, end, &[]).unwrap().0.graph;
    assert_eq!(s.charged_bytes(), 6 * MIB);
    let exec = s
        .graph_instantiate(&CTX, GraphInstantiate { graph, flags: 0 }, &[])
        .unwrap()
        .0
        .exec;
    s.graph_destroy(&CTX, GraphDestroy { graph }, &[]).unwrap();
    assert_eq!(s.charged_bytes(), 6 * MIB, "the executable graph holds it");
    assert_eq!(
        alloc(&mut s, &CTX, 11 * MIB),
        Err(CudaStatus::ErrorMemoryAllocation)
    );
    s.graph_launch(&CTX, GraphLaunch { exec, stream: st }, &[])
        .unwrap();
    // What the graph hands out is zeroed before the guest's own nodes touch it.
    assert_eq!(read(&mut s, &CTX, q, 64).unwrap(), vec![0; 64]);
    // Freeing the graph's allocation after a launch leaves it charged to the graph.
    s.mem_free(&CTX, MemFree { ptr: q }, &[]).unwrap();
    assert_eq!(s.charged_bytes(), 6 * MIB);
    s.graph_exec_destroy(&CTX, GraphExecDestroy { exec }, &[])
        .unwrap();
    assert_eq!(s.charged_bytes(), 0);
    // A capture that fails gives its memory back.
    s.stream_begin_capture(&CTX, StreamBeginCapture { stream: st }, &[])
        .unwrap();
    alloc_async(&mut s, 4 * MIB, st).unwrap();
    let end = StreamEndCapture {
        stream: st,
        invalidated: true,
    };
    assert!(s.stream_end_capture(&CTX, end, &[]).is_err());
    assert_eq!(s.charged_bytes(), 0);
}

/// A capture may free only a graph allocation (its free node): freeing a `cudaMalloc`
/// or pool allocation there was taken, refunded, and left held by the device with
/// nothing charged for it.
#[test]
fn a_capture_frees_only_graph_allocations() {
    let mut s = session(Some(8 * MIB));
    let held = |s: &mut Session| {
        let (free, total) = s.exec.mem_info().unwrap();
        total - free
    };
    let st = stream(&mut s, &CTX, 0x100);
    let plain = alloc(&mut s, &CTX, MIB).unwrap();
    let pooled = alloc_async(&mut s, 4096, st).unwrap();
    s.stream_begin_capture(&CTX, StreamBeginCapture { stream: st }, &[])
        .unwrap();
    let small = alloc(&mut s, &CTX, 1536).unwrap();
    let big = alloc(&mut s, &CTX, 64 * 1024).unwrap();
    let charged = s.charged_bytes();
    assert_eq!(charged, held(&mut s));
    for ptr in [plain, pooled, small, big] {
        assert_eq!(
            s.mem_free_async(&CTX, MemFreeAsync { ptr, stream: st }, &[]),
            Err(CudaStatus::ErrorInvalidValue)
        );
        assert_eq!(s.charged_bytes(), charged, "nothing refunded");
        assert_eq!(held(&mut s), charged);
    }
    let end = StreamEndCapture {
        stream: st,
        invalidated: false,
    };
    let graph = s.stream_end_capture(&CTX, end, &[]).unwrap().0.graph;
    let exec = s
        .graph_instantiate(&CTX, GraphInstantiate { graph, flags: 0 }, &[])
        .unwrap()
        .0
        .exec;
    s.graph_launch(&CTX, GraphLaunch { exec, stream: st }, &[])
        .unwrap();
    s.graph_exec_destroy(&CTX, GraphExecDestroy { exec }, &[])
        .unwrap();
    s.graph_destroy(&CTX, GraphDestroy { graph }, &[]).unwrap();
    assert_eq!(s.charged_bytes(), held(&mut s));
    // Outside a capture the same frees are taken, and everything is given back.
    for ptr in [plain, pooled, small, big] {
        s.mem_free_async(&CTX, MemFreeAsync { ptr, stream: st }, &[])
            .unwrap();
        assert_eq!(s.charged_bytes(), held(&mut s));
    }
    s.mem_pool_trim_to(
        &CTX,
        MemPoolTrimTo {
            pool: PoolRef::Default(0),
            min_bytes_to_keep: 0,
        },
        &[],
    )
    .unwrap();
    assert_eq!(s.charged_bytes(), 0);
    assert_eq!(held(&mut s), 0);
}

/// Finding 6: a device reset refunds the current device's memory and objects only.
#[test]
fn a_device_reset_refunds_exactly_what_it_frees() {
    let exec = HostMemoryExecutor::new(4 << 30, None)
        .unwrap()
        .with_devices(2, &GpuSelection::all())
        .unwrap();
    let mut s = session_on(exec, Some(64 * MIB));
    s.enter(&CTX).unwrap();
    let on0 = alloc(&mut s, &CTX, 4 * MIB).unwrap();
    let st0 = stream(&mut s, &CTX, 0x100);
    s.enter(&CTX1).unwrap();
    let on1 = alloc(&mut s, &CTX1, 8 * MIB).unwrap();
    let st1 = stream(&mut s, &CTX1, 0x200);
    s.device_set_limit(
        &CTX1,
        DeviceSetLimit {
            limit: 2,
            value: 12 * MIB,
        },
        &[],
    )
    .unwrap();
    assert_eq!(s.charged_bytes(), 16 * MIB);
    s.device_reset(&CTX1, DeviceReset {}, &[]).unwrap();
    assert_eq!(
        s.charged_bytes(),
        4 * MIB,
        "device 0's memory is still held"
    );
    assert_eq!(
        read(&mut s, &CTX1, on1, 4).err(),
        Some(CudaStatus::ErrorInvalidValue)
    );
    let sync = |stream| StreamSynchronize { stream };
    assert!(s.stream_synchronize(&CTX1, sync(st1), &[]).is_err());
    s.enter(&CTX).unwrap();
    assert_eq!(read(&mut s, &CTX, on0, 4).unwrap(), [0; 4]);
    s.stream_synchronize(&CTX, sync(st0), &[]).unwrap();
    s.mem_free(&CTX, MemFree { ptr: on0 }, &[]).unwrap();
    assert_eq!(s.charged_bytes(), 0);
}

/// What the executor holds now (`total - free` of its memory).
fn held(s: &mut Session) -> u64 {
    let (free, total) = s.exec.mem_info().unwrap();
    total - free
}

/// The quota invariant the session fuzz target checks: what the session charged is
/// what the executor holds.
#[track_caller]
fn assert_charged_is_held(s: &mut Session, when: &str) {
    let held = held(s);
    assert_eq!(
        s.charged_bytes(),
        held,
        "{when}: the session charged {} bytes, the executor holds {held}",
        s.charged_bytes()
    );
}

/// A session on a host-memory executor that notes, once the session has dropped it,
/// the memory it still held then.
fn watched_session(quota: Option<u64>) -> (Session, Arc<AtomicU64>) {
    let cell = Arc::new(AtomicU64::new(u64::MAX));
    let exec = HostMemoryExecutor::new(4 << 30, None)
        .unwrap()
        .report_held_at_drop(cell.clone());
    (session_on(exec, quota), cell)
}

fn begin_capture(s: &mut Session, stream: StreamHandle) {
    s.stream_begin_capture(&CTX, StreamBeginCapture { stream }, &[])
        .unwrap();
}

fn end_capture(s: &mut Session, stream: StreamHandle) -> GraphHandle {
    let end = StreamEndCapture {
        stream,
        invalidated: false,
    };
    s.stream_end_capture(&CTX, end, &[]).unwrap().0.graph
}

/// A graph captured on `stream` that allocates `size` bytes and frees them itself.
fn graph_freeing_its_memory(s: &mut Session, stream: StreamHandle, size: u64) -> GraphHandle {
    begin_capture(s, stream);
    let ptr = alloc_async(s, size, stream).unwrap();
    s.mem_free_async(&CTX, MemFreeAsync { ptr, stream }, &[])
        .unwrap();
    end_capture(s, stream)
}

fn instantiate(s: &mut Session, graph: GraphHandle) -> GraphExecHandle {
    let req = GraphInstantiate { graph, flags: 0 };
    s.graph_instantiate(&CTX, req, &[]).unwrap().0.exec
}

fn launch(s: &mut Session, exec: GraphExecHandle, stream: StreamHandle) {
    s.graph_launch(&CTX, GraphLaunch { exec, stream }, &[])
        .unwrap();
}

/// Fuzz finding `session-cudafree-in-capture-overcharge`: a `cudaFree` in the capture
/// that allocated the memory. The executor freed it while the graph kept it charged
/// (4 MiB charged, none held). Graph memory no launch made live is not the guest's to
/// free: refused, and the graph keeps it until it goes.
#[test]
fn cuda_free_in_the_allocating_capture_is_refused_and_the_graph_keeps_the_memory() {
    let (mut s, left) = watched_session(Some(8 * MIB));
    let st = stream(&mut s, &CTX, 0x100);
    begin_capture(&mut s, st);
    let p = alloc_async(&mut s, 14649 * 256, st).unwrap();
    assert_eq!(s.charged_bytes(), 4 * MIB);
    assert_charged_is_held(&mut s, "after the allocation node");
    assert_eq!(
        s.mem_free(&CTX, MemFree { ptr: p }, &[]),
        Err(CudaStatus::ErrorInvalidValue)
    );
    assert_charged_is_held(&mut s, "after cudaFree in the capture");
    assert_eq!(s.charged_bytes(), 4 * MIB);
    // Nor outside the capture before a launch made it live.
    let graph = end_capture(&mut s, st);
    assert_eq!(
        s.mem_free_async(&CTX, MemFreeAsync { ptr: p, stream: st }, &[]),
        Err(CudaStatus::ErrorInvalidValue)
    );
    assert_charged_is_held(&mut s, "after cudaFreeAsync before a launch");
    s.graph_destroy(&CTX, GraphDestroy { graph }, &[]).unwrap();
    assert_eq!(s.charged_bytes(), 0);
    assert_charged_is_held(&mut s, "after the graph was destroyed");
    drop(s);
    assert_eq!(left.load(Ordering::Relaxed), 0);
}

/// Fuzz finding `session-graph-memory-after-session-end`: graph memory freed by a free
/// node of a capture still open when the session ended stayed in the executor (2 MiB).
#[test]
fn graph_memory_of_a_capture_still_open_goes_with_the_session() {
    let (mut s, left) = watched_session(Some(8 * MIB));
    let st = stream(&mut s, &CTX, 0x100);
    begin_capture(&mut s, st);
    let p = alloc_async(&mut s, 4281 * 256, st).unwrap();
    assert_eq!(s.charged_bytes(), 2 * MIB);
    s.mem_free_async(&CTX, MemFreeAsync { ptr: p, stream: st }, &[])
        .unwrap();
    assert_eq!(s.charged_bytes(), 2 * MIB, "the capture holds it");
    assert_charged_is_held(&mut s, "after the free node");
    vmcuda_wire::op::PassThrough::pass_through(&mut s, &CTX)
        .and_then(|exec| exec.device_synchronize())
        .unwrap();
    assert_charged_is_held(&mut s, "after a synchronization");
    drop(s);
    assert_eq!(
        left.load(Ordering::Relaxed),
        0,
        "the executor holds nothing once the session ended"
    );
}

/// Graph memory a launch made live outlives its graph and executable graph until the
/// guest frees it, and is charged exactly as long; a relaunch makes it the guest's
/// again after a `cudaFree`.
#[test]
fn live_graph_memory_is_charged_until_freed_after_its_graph_is_gone() {
    let (mut s, left) = watched_session(Some(16 * MIB));
    let st = stream(&mut s, &CTX, 0x100);
    begin_capture(&mut s, st);
    let p = alloc_async(&mut s, 2 * MIB, st).unwrap();
    let graph = end_capture(&mut s, st);
    let exec = instantiate(&mut s, graph);
    launch(&mut s, exec, st);
    assert_eq!(read(&mut s, &CTX, p, 8).unwrap(), vec![0; 8]);
    // Freed, then made live again by the next launch: the guest's again.
    s.mem_free(&CTX, MemFree { ptr: p }, &[]).unwrap();
    assert_eq!(
        s.charged_bytes(),
        2 * MIB,
        "the graph keeps it for its launches"
    );
    assert_eq!(
        read(&mut s, &CTX, p, 8).err(),
        Some(CudaStatus::ErrorInvalidValue)
    );
    launch(&mut s, exec, st);
    assert_eq!(read(&mut s, &CTX, p, 8).unwrap(), vec![0; 8]);
    s.graph_exec_destroy(&CTX, GraphExecDestroy { exec }, &[])
        .unwrap();
    s.graph_destroy(&CTX, GraphDestroy { graph }, &[]).unwrap();
    assert_eq!(s.charged_bytes(), 2 * MIB, "live: still the guest's");
    assert_charged_is_held(&mut s, "with the graph gone and the memory live");
    s.mem_free(&CTX, MemFree { ptr: p }, &[]).unwrap();
    assert_eq!(s.charged_bytes(), 0);
    assert_charged_is_held(&mut s, "after the last holder went");
    // Live memory left behind goes with the session.
    begin_capture(&mut s, st);
    alloc_async(&mut s, MIB, st).unwrap();
    let graph = end_capture(&mut s, st);
    let exec = instantiate(&mut s, graph);
    launch(&mut s, exec, st);
    s.graph_exec_destroy(&CTX, GraphExecDestroy { exec }, &[])
        .unwrap();
    s.graph_destroy(&CTX, GraphDestroy { graph }, &[]).unwrap();
    assert_eq!(s.charged_bytes(), MIB);
    assert_charged_is_held(&mut s, "live memory of a destroyed graph");
    drop(s);
    assert_eq!(left.load(Ordering::Relaxed), 0);
}

/// An executable graph updated with another graph with memory nodes holds that
/// graph's memory from then on (its launches use it, as the driver's do) and lets go of
/// the memory of the graph it was made of: each is charged exactly as long as held.
#[test]
fn an_exec_update_moves_the_graph_memory_held() {
    let (mut s, left) = watched_session(Some(16 * MIB));
    let st = stream(&mut s, &CTX, 0x100);
    let first = graph_freeing_its_memory(&mut s, st, 2 * MIB);
    let exec = instantiate(&mut s, first);
    launch(&mut s, exec, st);
    let second = graph_freeing_its_memory(&mut s, st, 4 * MIB);
    assert_eq!(s.charged_bytes(), 6 * MIB);
    let update = GraphExecUpdate {
        exec,
        graph: second,
    };
    let result = s.graph_exec_update(&CTX, update, &[]).unwrap().0;
    assert_eq!(result.result, update_result::SUCCESS);
    launch(&mut s, exec, st);
    s.graph_destroy(&CTX, GraphDestroy { graph: first }, &[])
        .unwrap();
    assert_eq!(s.charged_bytes(), 4 * MIB, "the first graph's went with it");
    assert_charged_is_held(&mut s, "after the update and the first graph's end");
    s.graph_destroy(&CTX, GraphDestroy { graph: second }, &[])
        .unwrap();
    assert_eq!(
        s.charged_bytes(),
        4 * MIB,
        "the executable graph holds the second's"
    );
    launch(&mut s, exec, st);
    s.graph_exec_destroy(&CTX, GraphExecDestroy { exec }, &[])
        .unwrap();
    assert_eq!(s.charged_bytes(), 0);
    assert_charged_is_held(&mut s, "with every holder gone");
    drop(s);
    assert_eq!(left.load(Ordering::Relaxed), 0);
}

/// A graph with memory nodes moved into a child-graph node (ownership "move") is the
/// node's: its memory is the parent's from then on, held, launched and let go with it;
/// the moved graph is no longer the guest's to destroy, move again or clone with its
/// parent.
#[test]
fn a_moved_child_graph_takes_its_memory_to_the_parent() {
    let (mut s, left) = watched_session(Some(16 * MIB));
    let st = stream(&mut s, &CTX, 0x100);
    let child = graph_freeing_its_memory(&mut s, st, 2 * MIB);
    let parent = s
        .graph_create(&CTX, GraphCreate { flags: 0 }, &[])
        .unwrap()
        .0
        .graph;
    let add = |s: &mut Session, graph, node| {
        let req = GraphAddNode {
            graph,
            dependencies: vec![],
            node,
        };
        s.graph_add_node(&CTX, req, &[])
    };
    let refused = add(&mut s, child, PlainNode::MovedChildGraph(child));
    assert_eq!(
        refused.unwrap_err(),
        CudaStatus::ErrorInvalidValue,
        "into itself"
    );
    let copy = add(&mut s, parent, PlainNode::ChildGraph(child));
    assert_eq!(
        copy.unwrap_err(),
        CudaStatus::ErrorNotSupported,
        "copied: CUDA refuses"
    );
    add(&mut s, parent, PlainNode::MovedChildGraph(child)).unwrap();
    assert_eq!(s.charged_bytes(), 2 * MIB);
    let again = add(&mut s, parent, PlainNode::MovedChildGraph(child));
    assert_eq!(
        again.unwrap_err(),
        CudaStatus::ErrorNotSupported,
        "moved once"
    );
    let alone = GraphInstantiate {
        graph: child,
        flags: 0,
    };
    let alone = s.graph_instantiate(&CTX, alone, &[]);
    assert_eq!(
        alone.unwrap_err(),
        CudaStatus::ErrorNotSupported,
        "the node's"
    );
    // A graph with memory nodes goes into no graph a node owns.
    let other = graph_freeing_its_memory(&mut s, st, MIB);
    let nested = add(&mut s, child, PlainNode::MovedChildGraph(other));
    assert_eq!(nested.unwrap_err(), CudaStatus::ErrorNotSupported);
    s.graph_destroy(&CTX, GraphDestroy { graph: other }, &[])
        .unwrap();
    let destroyed = s.graph_destroy(&CTX, GraphDestroy { graph: child }, &[]);
    assert_eq!(
        destroyed.unwrap_err(),
        CudaStatus::ErrorInvalidValue,
        "the node's"
    );
    let cloned = s.graph_clone(&CTX, GraphClone { original: parent }, &[]);
    assert_eq!(
        cloned.unwrap_err(),
        CudaStatus::ErrorNotSupported,
        "as CUDA"
    );
    let exec = instantiate(&mut s, parent);
    launch(&mut s, exec, st);
    s.graph_destroy(&CTX, GraphDestroy { graph: parent }, &[])
        .unwrap();
    assert_eq!(s.charged_bytes(), 2 * MIB, "the executable graph holds it");
    s.graph_exec_destroy(&CTX, GraphExecDestroy { exec }, &[])
        .unwrap();
    assert_eq!(s.charged_bytes(), 0);
    assert_charged_is_held(&mut s, "with parent and executable graph gone");
    drop(s);
    assert_eq!(left.load(Ordering::Relaxed), 0);
}

/// A free node in another graph ends the life of a live graph allocation when that
/// graph is launched; a graph's own allocation it frees itself is no other's to free.
#[test]
fn a_free_node_of_another_graph_ends_graph_memory_at_its_launch() {
    let (mut s, left) = watched_session(Some(16 * MIB));
    let st = stream(&mut s, &CTX, 0x100);
    begin_capture(&mut s, st);
    let p = alloc_async(&mut s, 2 * MIB, st).unwrap();
    let q = alloc_async(&mut s, MIB, st).unwrap();
    s.mem_free_async(&CTX, MemFreeAsync { ptr: q, stream: st }, &[])
        .unwrap();
    let a = end_capture(&mut s, st);
    let exec_a = instantiate(&mut s, a);
    launch(&mut s, exec_a, st);
    s.graph_exec_destroy(&CTX, GraphExecDestroy { exec: exec_a }, &[])
        .unwrap();
    s.graph_destroy(&CTX, GraphDestroy { graph: a }, &[])
        .unwrap();
    assert_eq!(
        s.charged_bytes(),
        2 * MIB,
        "p is live, q went with its graph"
    );
    assert_charged_is_held(&mut s, "after graph a");
    begin_capture(&mut s, st);
    assert_eq!(
        s.mem_free_async(&CTX, MemFreeAsync { ptr: q, stream: st }, &[]),
        Err(CudaStatus::ErrorInvalidValue),
        "freed by its own graph, and gone"
    );
    s.mem_free_async(&CTX, MemFreeAsync { ptr: p, stream: st }, &[])
        .unwrap();
    assert_eq!(
        s.mem_free_async(&CTX, MemFreeAsync { ptr: p, stream: st }, &[]),
        Err(CudaStatus::ErrorInvalidValue),
        "freed once in a graph"
    );
    let b = end_capture(&mut s, st);
    let exec_b = instantiate(&mut s, b);
    assert_eq!(s.charged_bytes(), 2 * MIB, "p is live until b runs");
    assert_charged_is_held(&mut s, "before b's launch");
    launch(&mut s, exec_b, st);
    assert_eq!(s.charged_bytes(), 0);
    assert_charged_is_held(&mut s, "after b's launch");
    assert_eq!(
        s.mem_free(&CTX, MemFree { ptr: p }, &[]),
        Err(CudaStatus::ErrorInvalidValue)
    );
    drop(s);
    assert_eq!(left.load(Ordering::Relaxed), 0);
}

/// A capture goes with the stream it began on, and its graph memory with it; a device
/// reset ends captures and destroys graphs, and refunds exactly what goes.
#[test]
fn captures_end_with_their_stream_and_with_a_device_reset() {
    let (mut s, left) = watched_session(Some(16 * MIB));
    let st = stream(&mut s, &CTX, 0x100);
    begin_capture(&mut s, st);
    alloc_async(&mut s, 4 * MIB, st).unwrap();
    assert_eq!(s.charged_bytes(), 4 * MIB);
    s.stream_destroy(&CTX, StreamDestroy { stream: st }, &[])
        .unwrap();
    assert_eq!(s.charged_bytes(), 0);
    assert_charged_is_held(&mut s, "after the capturing stream was destroyed");
    let st = stream(&mut s, &CTX, 0x101);
    begin_capture(&mut s, st);
    alloc_async(&mut s, 2 * MIB, st).unwrap();
    let graph = end_capture(&mut s, st);
    let exec = instantiate(&mut s, graph);
    launch(&mut s, exec, st);
    let st2 = stream(&mut s, &CTX, 0x102);
    begin_capture(&mut s, st2);
    alloc_async(&mut s, MIB, st2).unwrap();
    assert_eq!(s.charged_bytes(), 3 * MIB);
    s.device_reset(&CTX, DeviceReset {}, &[]).unwrap();
    assert_eq!(s.charged_bytes(), 0);
    assert_charged_is_held(&mut s, "after a device reset");
    drop(s);
    assert_eq!(left.load(Ordering::Relaxed), 0);
}

/// The graphics-sharing limits read as off: a worker's contexts never share with
/// graphics (cuBLAS asks before every handle, and a failure fails the handle).
#[test]
fn graphics_sharing_limits_read_as_off() {
    let mut s = session(None);
    assert_eq!(limit(&mut s, 8), 0);
    assert_eq!(limit(&mut s, 9), 0);
}

/// A stream, a shareable pool of the guest's (no size limit) and the pool's export.
fn exported_pool(s: &mut Session) -> (StreamHandle, MemPoolHandle, u64) {
    let st = stream(s, &CTX, 0x100);
    let pool = create_pool(s, 0);
    let export = s
        .mem_pool_export_shareable(&CTX, MemPoolExportShareable { pool }, &[])
        .unwrap()
        .0
        .export;
    (st, pool, export)
}

fn create_pool(s: &mut Session, max_size: u64) -> MemPoolHandle {
    let req = MemPoolCreate {
        device: 0,
        max_size,
        shareable: true,
    };
    s.mem_pool_create(&CTX, req, &[]).unwrap().0.pool
}

fn alloc_from(
    s: &mut Session,
    pool: MemPoolHandle,
    size: u64,
    stream: StreamHandle,
) -> Result<DevicePtr, CudaStatus> {
    let req = MemAllocFromPoolAsync {
        size,
        pool: PoolRef::Created(pool),
        stream,
    };
    s.mem_alloc_from_pool_async(&CTX, req, &[]).map(|r| r.0.ptr)
}

/// A pool the guest made is charged exactly as the default pool: its allocations, and
/// what it keeps after they are freed until it gives it back (a trim, a lower
/// threshold, its destruction).
#[test]
fn a_made_pool_is_charged_as_the_default_pool_is() {
    let mut s = session(Some(16 * MIB));
    let st = stream(&mut s, &CTX, 0x100);
    let pool = create_pool(&mut s, 0);
    assert_eq!(s.charged_bytes(), 0, "an empty pool holds nothing");
    let set = MemPoolSetAttribute {
        pool: PoolRef::Created(pool),
        attr: pool_attr::RELEASE_THRESHOLD,
        value: u64::MAX,
    };
    s.mem_pool_set_attribute(&CTX, set, &[]).unwrap();
    let get = MemPoolGetAttribute {
        pool: PoolRef::Created(pool),
        attr: pool_attr::RELEASE_THRESHOLD,
    };
    let value = s.mem_pool_get_attribute(&CTX, get, &[]).unwrap().0.value;
    assert_eq!(value, 16 * MIB, "held to what the quota leaves");
    let p = alloc_from(&mut s, pool, 8 * MIB, st).unwrap();
    assert_eq!(s.charged_bytes(), 8 * MIB);
    assert_charged_is_held(&mut s, "after an allocation from a made pool");
    assert_eq!(
        alloc_from(&mut s, pool, 10 * MIB, st),
        Err(CudaStatus::ErrorMemoryAllocation)
    );
    s.mem_free_async(&CTX, MemFreeAsync { ptr: p, stream: st }, &[])
        .unwrap();
    assert_eq!(s.charged_bytes(), 8 * MIB, "the pool keeps it");
    assert_charged_is_held(&mut s, "after a free into a made pool");
    assert_eq!(
        alloc(&mut s, &CTX, 10 * MIB),
        Err(CudaStatus::ErrorMemoryAllocation)
    );
    // Reused by the pool: nothing more charged.
    let q = alloc_from(&mut s, pool, 8 * MIB, st).unwrap();
    assert_eq!(s.charged_bytes(), 8 * MIB);
    s.mem_free_async(&CTX, MemFreeAsync { ptr: q, stream: st }, &[])
        .unwrap();
    let trim = MemPoolTrimTo {
        pool: PoolRef::Created(pool),
        min_bytes_to_keep: 0,
    };
    s.mem_pool_trim_to(&CTX, trim, &[]).unwrap();
    assert_eq!(s.charged_bytes(), 0);
    assert_charged_is_held(&mut s, "after a trim of a made pool");
    // Destroying it gives back what it keeps; a live allocation stays charged until
    // it is freed.
    let r = alloc_from(&mut s, pool, 2 * MIB, st).unwrap();
    let t = alloc_from(&mut s, pool, 4 * MIB, st).unwrap();
    s.mem_free_async(&CTX, MemFreeAsync { ptr: t, stream: st }, &[])
        .unwrap();
    assert_eq!(s.charged_bytes(), 6 * MIB);
    s.mem_pool_destroy(&CTX, MemPoolDestroy { pool }, &[])
        .unwrap();
    assert_eq!(s.charged_bytes(), 2 * MIB);
    assert_charged_is_held(&mut s, "after a made pool is destroyed");
    s.mem_free_async(&CTX, MemFreeAsync { ptr: r, stream: st }, &[])
        .unwrap();
    assert_eq!(s.charged_bytes(), 0);
    assert_charged_is_held(&mut s, "after its last allocation is freed");
}

/// A destroyed or never-made pool is refused with cudaErrorInvalidValue, and absurd
/// sizes with cudaErrorMemoryAllocation; the session carries on.
#[test]
fn unknown_pools_and_absurd_sizes_are_refused() {
    let mut s = session(Some(16 * MIB));
    let st = stream(&mut s, &CTX, 0x100);
    let pool = create_pool(&mut s, 0);
    let stranger = MemPoolHandle(pool.0 + 1000);
    assert_eq!(
        alloc_from(&mut s, stranger, 4096, st),
        Err(CudaStatus::ErrorInvalidValue)
    );
    assert_eq!(
        alloc_from(&mut s, pool, u64::MAX, st),
        Err(CudaStatus::ErrorMemoryAllocation)
    );
    assert_eq!(
        alloc_from(&mut s, pool, u64::MAX / 2, st),
        Err(CudaStatus::ErrorMemoryAllocation)
    );
    assert_eq!(s.charged_bytes(), 0);
    s.mem_pool_destroy(&CTX, MemPoolDestroy { pool }, &[])
        .unwrap();
    assert_eq!(
        s.mem_pool_destroy(&CTX, MemPoolDestroy { pool }, &[])
            .unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
    assert_eq!(
        alloc_from(&mut s, pool, 4096, st),
        Err(CudaStatus::ErrorInvalidValue)
    );
    let get = MemPoolGetAttribute {
        pool: PoolRef::Created(pool),
        attr: pool_attr::USED_MEM_CURRENT,
    };
    assert_eq!(
        s.mem_pool_get_attribute(&CTX, get, &[]).unwrap_err(),
        CudaStatus::ErrorInvalidValue
    );
    // A pool on a device the guest does not have is refused by the executor.
    let bad = MemPoolCreate {
        device: 7,
        max_size: 0,
        shareable: false,
    };
    assert!(s.mem_pool_create(&CTX, bad, &[]).is_err());
    // Still serving.
    let fresh = create_pool(&mut s, 0);
    alloc_from(&mut s, fresh, 4096, st).unwrap();
}

/// The session's end gives back what the guest's pools keep.
#[test]
fn a_made_pools_reserve_goes_with_the_session() {
    let dir = std::env::temp_dir().join(format!("vmcuda-quota-made-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut s = session(Some(16 * MIB)).with_ledger(Ledger::join(&dir, "vm1", 4).unwrap());
    // Another connection of the VM, to read the VM's total.
    let ledger = Ledger::join(&dir, "vm1", 4).unwrap();
    let st = stream(&mut s, &CTX, 0x100);
    let pool = create_pool(&mut s, 0);
    let set = MemPoolSetAttribute {
        pool: PoolRef::Created(pool),
        attr: pool_attr::RELEASE_THRESHOLD,
        value: u64::MAX,
    };
    s.mem_pool_set_attribute(&CTX, set, &[]).unwrap();
    let p = alloc_from(&mut s, pool, 4 * MIB, st).unwrap();
    s.mem_free_async(&CTX, MemFreeAsync { ptr: p, stream: st }, &[])
        .unwrap();
    alloc_from(&mut s, pool, MIB, st).unwrap();
    assert_eq!(ledger.total().unwrap(), 4 * MIB);
    drop(s);
    assert_eq!(ledger.total().unwrap(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A shareable pool the guest made is exported and imported by the guest itself; an
/// allocation of it exported; imports of what the guest does not hold, of a default
/// pool's allocation or through a pool that is not the export's import are refused.
/// An imported pool charges nothing of its own (its memory is its exporter's), and
/// exports go with the session.
#[test]
fn pools_and_their_allocations_are_exported_for_the_guest_itself_only() {
    let mut s = session(Some(16 * MIB));
    let (st, pool, export) = exported_pool(&mut s);
    let import = |s: &mut Session, export| {
        s.mem_pool_import_shareable(&CTX, MemPoolImportShareable { export }, &[])
            .map(|r| r.0.pool)
    };
    let imported = import(&mut s, export).unwrap();
    assert_ne!(imported, pool, "an import is a pool of its own");
    assert_eq!(
        import(&mut s, export + 999),
        Err(CudaStatus::ErrorInvalidValue)
    );
    // A pool made without a shareable handle type cannot be exported (the driver's
    // answer, which the double gives too).
    let plain = s
        .mem_pool_create(
            &CTX,
            MemPoolCreate {
                device: 0,
                max_size: 0,
                shareable: false,
            },
            &[],
        )
        .unwrap()
        .0
        .pool;
    assert_eq!(
        s.mem_pool_export_shareable(&CTX, MemPoolExportShareable { pool: plain }, &[])
            .map(|r| r.0.export),
        Err(CudaStatus::ErrorInvalidValue)
    );
    let p = alloc_from(&mut s, pool, 4 * MIB, st).unwrap();
    let export_ptr = |s: &mut Session, ptr| {
        s.mem_pool_export_pointer(&CTX, MemPoolExportPointer { ptr }, &[])
            .map(|r| r.0.export)
    };
    let pe = export_ptr(&mut s, p).unwrap();
    assert_eq!(
        export_ptr(&mut s, p + 16),
        Err(CudaStatus::ErrorInvalidValue)
    );
    let d = alloc_async(&mut s, 4096, st).unwrap();
    assert_eq!(
        export_ptr(&mut s, d),
        Err(CudaStatus::ErrorInvalidValue),
        "a default pool's allocation"
    );
    let charged = s.charged_bytes();
    let import_ptr = |s: &mut Session, pool, export| {
        s.mem_pool_import_pointer(&CTX, MemPoolImportPointer { pool, export }, &[])
            .map(|r| r.0.ptr)
    };
    assert_eq!(
        import_ptr(&mut s, imported, export),
        Err(CudaStatus::ErrorInvalidValue),
        "a pool's export is no pointer's"
    );
    assert_eq!(
        import_ptr(&mut s, pool, pe),
        Err(CudaStatus::ErrorInvalidValue),
        "only through the export's import"
    );
    // The double holds one address per allocation: the mapping itself is the GPU's.
    assert_eq!(
        import_ptr(&mut s, imported, pe),
        Err(CudaStatus::ErrorNotSupported)
    );
    assert_eq!(
        s.charged_bytes(),
        charged,
        "a refused import charges nothing"
    );
    assert_charged_is_held(&mut s, "with an imported pool");
    drop(s);
}

/// Imported pools cannot be allocated from (CUDA documents it for
/// `cudaMallocFromPoolAsync`): a guest that imports its own export again and again
/// gets no memory that way, let alone memory its quota does not see. Before, each
/// import kept what was freed into it uncharged: four imports held far more than the
/// quota.
#[test]
fn imported_pools_are_not_allocated_from() {
    let mut s = session(Some(64 * MIB));
    let (st, pool, export) = exported_pool(&mut s);
    for _ in 0..4 {
        let imported = s
            .mem_pool_import_shareable(&CTX, MemPoolImportShareable { export }, &[])
            .unwrap()
            .0
            .pool;
        assert_eq!(
            alloc_from(&mut s, imported, 60 * MIB, st),
            Err(CudaStatus::ErrorInvalidValue),
            "an imported pool makes no allocations"
        );
        assert_charged_is_held(&mut s, "after an import");
        assert!(held(&mut s) <= 64 * MIB, "{} bytes held", held(&mut s));
    }
    // The exporter's own pool still allocates, within the quota.
    let p = alloc_from(&mut s, pool, 60 * MIB, st).unwrap();
    assert_ne!(p, 0);
    assert_charged_is_held(&mut s, "with the exporter's allocation");
}

#[test]
fn an_allocation_the_gpu_has_no_room_for_waits_for_room_but_a_quota_refusal_does_not() {
    use std::time::{Duration, Instant};
    let wait = Duration::from_millis(600);
    let mut s = session_on(
        HostMemoryExecutor::new(64 * MIB, None).unwrap(),
        Some(256 * MIB),
    )
    .with_room_wait(wait);
    // The GPU (64 MiB) cannot hold it, the quota (256 MiB) could: waited for, then
    // refused as the GPU refuses it.
    let t = Instant::now();
    let r = s.mem_alloc(&CTX, MemAlloc { size: 128 * MIB }, &[]);
    assert_eq!(r.err(), Some(CudaStatus::ErrorMemoryAllocation));
    assert!(t.elapsed() >= wait, "waited {:?}", t.elapsed());
    // Over the quota: refused without waiting for room that would not help.
    let t = Instant::now();
    let r = s.mem_alloc(&CTX, MemAlloc { size: 512 * MIB }, &[]);
    assert_eq!(r.err(), Some(CudaStatus::ErrorMemoryAllocation));
    assert!(
        t.elapsed() < wait,
        "a quota refusal waited {:?}",
        t.elapsed()
    );
    // What fits is made at once.
    assert!(s.mem_alloc(&CTX, MemAlloc { size: 8 * MIB }, &[]).is_ok());
}

/// The same on an executor that lets imported pools allocate (a driver might: not
/// verified on the GPU): the session refuses them itself, so what an imported pool
/// would keep never escapes the quota. The executor's own refusal alone is not the fix.
#[test]
fn imported_pools_are_refused_by_the_session_whatever_its_executor_allows() {
    let exec = HostMemoryExecutor::new(4 << 30, None)
        .unwrap()
        .letting_imported_pools_allocate();
    let mut s = session_on(exec, Some(64 * MIB));
    let (st, _pool, export) = exported_pool(&mut s);
    for _ in 0..4 {
        let imported = s
            .mem_pool_import_shareable(&CTX, MemPoolImportShareable { export }, &[])
            .unwrap()
            .0
            .pool;
        assert_eq!(
            alloc_from(&mut s, imported, 60 * MIB, st),
            Err(CudaStatus::ErrorInvalidValue),
            "the session let an imported pool allocate"
        );
        assert_charged_is_held(&mut s, "after an import");
        assert!(held(&mut s) <= 64 * MIB, "{} bytes held", held(&mut s));
    }
}
