//! The `session` target: one host session on the host-memory executor, fed a sequence of
//! memory operations (allocations, frees, copies, memsets, stream-ordered allocation and
//! its pool, stream capture and graphs, virtual memory management, device reset) under
//! a small quota, with the quota invariant checked after every step. Captured graphs and
//! graphs built by hand (captured into, given child-graph nodes, cloned) may hold
//! thousands of launches of a kernel with 5 KB of parameters, and pools and their
//! allocations may be exported and imported, under a small host-memory limit that is
//! checked after every step too. Two processes stand beside the session on one CUDA IPC
//! registry (with a small [`MAX_EXPORTS`]): another of its VM and one of another VM,
//! each a session of its own whose invariant is checked as the session's is. Memory,
//! events, physical allocations, pools and pool allocations pass between them (or are
//! refused), with tokens handed out, garbled, stale or forged, freed and destroyed in
//! any order, and floods of exports reach the registry's limit. The session has a
//! peer link to a broker answering from memory ([`crate::fake_broker`]): copies to and
//! from other hosts (`PeerExpect`, `PeerSend`, `PeerReceive`) are asked for with
//! pointers, offsets and sizes in and out of the guest's memory, tickets handed out,
//! forged or spent, endpoints allowed or not, deliveries whole, cut short or of another
//! size, and the link cut; what a send sent and a receive received must be the guest's
//! bytes, whole.
//!
//! The invariant: what the session has charged never exceeds the quota and equals what
//! the executor really holds, and dropping the session returns the executor's memory to
//! zero. What the session charged is read the way a guest reads it, through
//! `MemGetInfo`: with a quota the session reports `quota - charged` as free (the
//! executor's own free memory is far larger here, so it never decides the answer). What
//! the executor holds comes from [`Tracked`], which wraps the executor and notes its
//! `mem_info` after every call, and once more when the session drops it.
//!
//! Input format: a run of steps, each an op byte (modulo the number of steps) followed
//! by that step's fixed-size arguments, little-endian; missing bytes read as zero.
//! Objects the session hands out (pointers, graphs, reservations, allocation handles)
//! are kept in lists, and arguments pick from them by index, so the fuzzer reaches deep
//! sequences without guessing addresses. Freed or released objects stay in the lists:
//! using them again is what a hostile guest would try.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use std::os::unix::net::UnixStream;
use vmcuda_host::executor::host_memory::HostMemoryExecutor;

use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use vmcuda_host::executor::MemoryExec;
use vmcuda_host::ipc::{IpcLink, Registry};
use vmcuda_host::policy::{Caller, Policy};
use vmcuda_host::session::Session;
use vmcuda_wire::driver::{
    AccessDesc, AllocationHandle, AllocationProp, MemAddressFree, MemAddressReserve, MemCreate,
    MemMap, MemRelease, MemSetAccess, MemUnmap,
};
use vmcuda_wire::graph::{
    GraphAddNode, GraphDestroy, GraphExecDestroy, GraphExecHandle, GraphHandle, GraphInstantiate,
    GraphLaunch, MemAllocAsync, MemAllocFromPoolAsync, MemFreeAsync, MemPoolCreate, MemPoolDestroy,
    MemPoolGetAttribute, MemPoolSetAttribute, MemPoolTrimTo, PlainNode, PoolRef,
    StreamBeginCapture, StreamBeginCaptureToGraph, StreamEndCapture,
};
use vmcuda_wire::op::{
    dispatch, CallContext, DevicePtr, DeviceReset, DeviceSynchronize, EventCreate, EventHandle,
    FunctionHandle, GraphClone, GraphCreate, GraphExecUpdate, IpcCloseMemHandle, IpcGetEventHandle,
    IpcGetMemHandle, IpcOpenEventHandle, IpcOpenMemHandle, LaunchKernel, MemAlloc,
    MemExportShareable, MemFree, MemGetInfo, MemImportShareable, MemPoolExportPointer,
    MemPoolExportShareable, MemPoolHandle, MemPoolImportPointer, MemPoolImportShareable,
    MemPoolImportShared, MemPoolImportSharedPointer, MemPoolShareExport, MemcpyDtoD, MemcpyHtoD,
    Memset, ModuleGetFunction, ModuleLoad, Request, StreamCreate, StreamHandle, StreamSynchronize,
};
use vmcuda_wire::CudaStatus;

use crate::fake_broker::{self, FakeBroker};
use crate::{take_uint, valid_hello, FUZZ_DEVICE_MEMORY};
use vmcuda_host::peer::proto::{Ticket, MAX_ENDPOINT};
use vmcuda_wire::op::{DispatchError, MemcpyDtoH, PeerExpect, PeerReceive, PeerSend};

/// The guest's memory quota: small, so sequences reach it in a few steps, and four
/// times the host-memory executor's VMM granularity (2 MiB), so virtual memory fits.
pub const QUOTA: u64 = 8 << 20;

/// The host memory the session may keep for its guest: about 3,000 graph nodes of
/// [`BIG_KERNEL`]'s launches (each is charged 12 KiB and two copies of its 5 KB of
/// parameters), so a graph of 1,024 of them fits with its executable graph, and one of
/// thousands (a capture of 2,048, or child-graph nodes and clones of smaller ones) is
/// refused on its way, or at its instantiation.
pub const HOST_MEMORY: u64 = 64 << 20;

/// The most launches one [`Step::LaunchMany`] makes.
pub const MAX_LAUNCHES: u16 = 2048;

/// A kernel with 5016 bytes of parameters (wire's test data, `bigparam.cu`).
const BIG_KERNEL: &[u8] = include_bytes!("../../../wire/testdata/bigparam.cubin");

/// The streams the session starts with besides the two default ones.
const STREAMS: [StreamHandle; 2] = [StreamHandle(16), StreamHandle(17)];

/// Objects kept per kind; older ones are forgotten beyond this.
const KEEP: usize = 32;

/// `[ipc] max_exports` of the registry the processes share: small, so that a
/// [`Step::Flood`] or two reach it.
pub const MAX_EXPORTS: u32 = 24;

/// The host-memory executor, forwarding every call and noting after each one what it
/// holds (`total - free` of its `mem_info`) where the harness can read it.
pub struct Tracked {
    inner: HostMemoryExecutor,
    held: Arc<AtomicU64>,
}

impl Tracked {
    /// The executor and the cell its holdings are published in.
    pub fn new(total_memory: u64) -> (Tracked, Arc<AtomicU64>) {
        let inner = HostMemoryExecutor::new(total_memory, None).expect("no launch log to open");
        let held = Arc::new(AtomicU64::new(0));
        let mut t = Tracked {
            inner,
            held: held.clone(),
        };
        t.note();
        (t, held)
    }

    fn note(&mut self) {
        if let Ok((free, total)) = self.inner.mem_info() {
            self.held.store(total.saturating_sub(free), Relaxed);
        }
    }
}

// The pass-through ops' methods come from the op table (they have no declaration in
// the executor's sources for build.rs to read).
impl vmcuda_wire::op::PassThroughExec for Tracked {
    vmcuda_wire::forward_pass_through!(inner, note);
}

impl Drop for Tracked {
    fn drop(&mut self) {
        // The session drops its executor last, after freeing what the guest left.
        self.note();
    }
}

include!(concat!(env!("OUT_DIR"), "/tracked_executor.rs"));

/// One step of a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// `cudaMalloc` of `size * 256` bytes.
    Alloc {
        size: u16,
    },
    Free {
        pick: u8,
    },
    Memset {
        pick: u8,
        offset: u16,
        len: u16,
        stream: u8,
    },
    /// Host to device, `len % 4097` bytes.
    CopyHtoD {
        pick: u8,
        offset: u16,
        len: u16,
    },
    CopyDtoD {
        dst: u8,
        src: u8,
        len: u16,
        stream: u8,
    },
    /// `cudaMallocAsync` of `size * 256` bytes.
    AllocAsync {
        size: u16,
        stream: u8,
    },
    FreeAsync {
        pick: u8,
        stream: u8,
    },
    /// A default-pool attribute (`attr % 9`), `value * 4096`.
    PoolSetAttr {
        attr: u8,
        value: u16,
    },
    PoolGetAttr {
        attr: u8,
    },
    /// Trim the default pool to `keep * 4096` bytes.
    PoolTrim {
        keep: u16,
    },
    BeginCapture {
        stream: u8,
    },
    EndCapture {
        stream: u8,
    },
    Instantiate {
        graph: u8,
    },
    Launch {
        exec: u8,
        stream: u8,
    },
    GraphDestroy {
        graph: u8,
    },
    ExecDestroy {
        exec: u8,
    },
    /// Reserve `chunks % 6` granules (2 MiB each) of address space.
    Reserve {
        chunks: u8,
    },
    /// A physical allocation of `chunks % 6` granules.
    Create {
        chunks: u8,
    },
    /// Map a handle at a reservation, `offset % 4` granules in.
    Map {
        reservation: u8,
        handle: u8,
        offset: u8,
    },
    Unmap {
        mapping: u8,
    },
    Release {
        handle: u8,
    },
    SetAccess {
        mapping: u8,
    },
    AddressFree {
        reservation: u8,
    },
    Sync {
        stream: u8,
    },
    DeviceSync,
    DeviceReset,
    /// `count % MAX_LAUNCHES + 1` launches of the big kernel: nodes of a graph where
    /// the stream captures.
    LaunchMany {
        count: u16,
        stream: u8,
    },
    /// A shareable pool made, exported and imported by the session itself: both kept.
    PoolImport,
    /// `cudaMallocFromPoolAsync` of `size * 256` bytes from a made or imported pool.
    AllocFromPool {
        pool: u8,
        size: u16,
        stream: u8,
    },
    /// `cudaIpcGetMemHandle` of one of the session's pointers, `offset` bytes in.
    IpcExport {
        pick: u8,
        offset: u16,
    },
    /// Another process of the VM allocates `size * 256` bytes and exports them.
    IpcPeerExport {
        size: u16,
    },
    /// `cudaIpcOpenMemHandle` of a token handed out (the session's own or the other
    /// process's), or of a forged one when there are none, with `flags`.
    IpcOpen {
        token: u8,
        flags: u8,
    },
    IpcClose {
        pick: u8,
    },
    /// The other process exports an interprocess event; the session opens it (or
    /// opens the memory tokens as events).
    IpcEvent {
        token: u8,
    },
    /// A physical allocation passed as a descriptor: the other process's (even
    /// `pick`, one granule made exportable) or one of the session's own, imported here.
    IpcPhysical {
        pick: u8,
    },
    /// An empty graph, to be built by hand (`cudaGraphCreate`).
    GraphCreate,
    /// Capture the stream into a graph (`cudaStreamBeginCaptureToGraph`): launches then
    /// add kernel nodes to it, until [`Step::EndCapture`].
    CaptureToGraph {
        graph: u8,
        stream: u8,
    },
    /// A child-graph node of `child` (a copy of all its nodes) added to `graph`.
    AddChild {
        graph: u8,
        child: u8,
    },
    /// `cudaGraphClone`: another copy of every node.
    Clone {
        graph: u8,
    },
    /// `cudaGraphExecUpdate` of an executable graph with a graph.
    ExecUpdate {
        exec: u8,
        graph: u8,
    },
    /// `cudaMemPoolExportPointer` of one of the session's pointers.
    PoolExportPointer {
        pick: u8,
    },
    /// `cudaMemPoolImportPointer` of an export (of a pointer or, refused, of a pool)
    /// through a made or imported pool.
    PoolImportPointer {
        pool: u8,
        export: u8,
    },
    /// `MemPoolShareExport` (`cudaMemPoolExportToShareableHandle` or
    /// `cudaMemPoolExportPointer` to another process) of one of the session's exports,
    /// or of the number `export` itself when it has none: the token is kept.
    PoolShare {
        export: u8,
    },
    /// Process `from % 2` (0: the other process of the session's VM, 1: a process of
    /// another VM) makes a shareable pool, allocates `size * 256` bytes from it, and
    /// offers both: the tokens are kept.
    ProcessPoolExport {
        from: u8,
        size: u16,
    },
    /// Process `who % 3` (0: the session, 1: the other process of its VM, 2: a process
    /// of another VM) imports a pool token (see [`Run::token`] for `token`, `garble`).
    PoolImportShared {
        who: u8,
        token: u8,
        garble: u8,
    },
    /// Process `who % 3` imports a pool pointer token through one of its pools.
    PointerImportShared {
        who: u8,
        pool: u8,
        token: u8,
        garble: u8,
    },
    /// Process `who % 3` frees one of its pointers: `cudaFree` (even `how`) or
    /// `cudaFreeAsync` on the legacy stream, then a synchronization when `how & 2`.
    ProcessFree {
        who: u8,
        pick: u8,
        how: u8,
    },
    /// Process `who % 3` destroys one of its pools (made or imported).
    ProcessPoolDestroy {
        who: u8,
        pool: u8,
    },
    /// Process `who % 3` exports `count % 32 + 1` small allocations to the VM's other
    /// processes, up to the registry's limit ([`MAX_EXPORTS`]): legacy IPC handles when
    /// `count & 0x20`, else allocations from a shareable pool of its own offered with
    /// `MemPoolShareExport`. Stops at the first refusal; tokens and pointers are kept.
    Flood {
        who: u8,
        count: u8,
    },
    /// `PeerExpect` (the receiving side of a copy from another host) of
    /// [`peer_size`]`(size)` bytes into one of the session's pointers, `offset` bytes
    /// in (an address made of `offset` when it has none): the ticket is kept.
    PeerExpect {
        pick: u8,
        offset: u16,
        size: u16,
    },
    /// `PeerSend` of [`peer_size`]`(size)` bytes of one of the session's pointers for
    /// ticket `ticket` (see [`Run::peer_ticket`]) to the endpoint `to % 4` names (0: the
    /// broker's own, where its tickets are received; 1: one not allowed; 2: an empty
    /// one; 3: one longer than the protocol takes).
    PeerSend {
        pick: u8,
        offset: u16,
        size: u16,
        ticket: u8,
        to: u8,
    },
    /// Another host's daemon delivers `(sent & 0x7fff) * 64` bytes for a ticket kept,
    /// announcing the ticket's size (or, with `sent`'s top bit, one byte more: the
    /// ticket is spent).
    PeerDeliver {
        ticket: u8,
        sent: u16,
    },
    /// `PeerReceive` of a ticket's bytes into one of the session's pointers.
    PeerReceive {
        pick: u8,
        offset: u16,
        size: u16,
        ticket: u8,
    },
    /// The daemon's end of the peer link closes.
    PeerCut,
}

/// Each step's op byte is its index here; arguments follow in field order.
const STEP_COUNT: u8 = 54;

impl Step {
    /// Decode steps until the input ends.
    pub fn decode(mut input: &[u8]) -> Vec<Step> {
        let mut steps = Vec::new();
        while let Some((&op, rest)) = input.split_first() {
            input = rest;
            let i = &mut input;
            let b = |i: &mut &[u8]| take_uint(i, 1) as u8;
            let w = |i: &mut &[u8]| take_uint(i, 2) as u16;
            steps.push(match op % STEP_COUNT {
                0 => Step::Alloc { size: w(i) },
                1 => Step::Free { pick: b(i) },
                2 => Step::Memset {
                    pick: b(i),
                    offset: w(i),
                    len: w(i),
                    stream: b(i),
                },
                3 => Step::CopyHtoD {
                    pick: b(i),
                    offset: w(i),
                    len: w(i),
                },
                4 => Step::CopyDtoD {
                    dst: b(i),
                    src: b(i),
                    len: w(i),
                    stream: b(i),
                },
                5 => Step::AllocAsync {
                    size: w(i),
                    stream: b(i),
                },
                6 => Step::FreeAsync {
                    pick: b(i),
                    stream: b(i),
                },
                7 => Step::PoolSetAttr {
                    attr: b(i),
                    value: w(i),
                },
                8 => Step::PoolGetAttr { attr: b(i) },
                9 => Step::PoolTrim { keep: w(i) },
                10 => Step::BeginCapture { stream: b(i) },
                11 => Step::EndCapture { stream: b(i) },
                12 => Step::Instantiate { graph: b(i) },
                13 => Step::Launch {
                    exec: b(i),
                    stream: b(i),
                },
                14 => Step::GraphDestroy { graph: b(i) },
                15 => Step::ExecDestroy { exec: b(i) },
                16 => Step::Reserve { chunks: b(i) },
                17 => Step::Create { chunks: b(i) },
                18 => Step::Map {
                    reservation: b(i),
                    handle: b(i),
                    offset: b(i),
                },
                19 => Step::Unmap { mapping: b(i) },
                20 => Step::Release { handle: b(i) },
                21 => Step::SetAccess { mapping: b(i) },
                22 => Step::AddressFree { reservation: b(i) },
                23 => Step::Sync { stream: b(i) },
                24 => Step::DeviceSync,
                25 => Step::DeviceReset,
                26 => Step::LaunchMany {
                    count: w(i),
                    stream: b(i),
                },
                27 => Step::PoolImport,
                28 => Step::AllocFromPool {
                    pool: b(i),
                    size: w(i),
                    stream: b(i),
                },
                29 => Step::IpcExport {
                    pick: b(i),
                    offset: w(i),
                },
                30 => Step::IpcPeerExport { size: w(i) },
                31 => Step::IpcOpen {
                    token: b(i),
                    flags: b(i),
                },
                32 => Step::IpcClose { pick: b(i) },
                33 => Step::IpcEvent { token: b(i) },
                34 => Step::IpcPhysical { pick: b(i) },
                35 => Step::GraphCreate,
                36 => Step::CaptureToGraph {
                    graph: b(i),
                    stream: b(i),
                },
                37 => Step::AddChild {
                    graph: b(i),
                    child: b(i),
                },
                38 => Step::Clone { graph: b(i) },
                39 => Step::ExecUpdate {
                    exec: b(i),
                    graph: b(i),
                },
                40 => Step::PoolExportPointer { pick: b(i) },
                41 => Step::PoolImportPointer {
                    pool: b(i),
                    export: b(i),
                },
                42 => Step::PoolShare { export: b(i) },
                43 => Step::ProcessPoolExport {
                    from: b(i),
                    size: w(i),
                },
                44 => Step::PoolImportShared {
                    who: b(i),
                    token: b(i),
                    garble: b(i),
                },
                45 => Step::PointerImportShared {
                    who: b(i),
                    pool: b(i),
                    token: b(i),
                    garble: b(i),
                },
                46 => Step::ProcessFree {
                    who: b(i),
                    pick: b(i),
                    how: b(i),
                },
                47 => Step::ProcessPoolDestroy {
                    who: b(i),
                    pool: b(i),
                },
                48 => Step::Flood {
                    who: b(i),
                    count: b(i),
                },
                49 => Step::PeerExpect {
                    pick: b(i),
                    offset: w(i),
                    size: w(i),
                },
                50 => Step::PeerSend {
                    pick: b(i),
                    offset: w(i),
                    size: w(i),
                    ticket: b(i),
                    to: b(i),
                },
                51 => Step::PeerDeliver {
                    ticket: b(i),
                    sent: w(i),
                },
                52 => Step::PeerReceive {
                    pick: b(i),
                    offset: w(i),
                    size: w(i),
                    ticket: b(i),
                },
                _ => Step::PeerCut,
            });
        }
        steps
    }

    /// Encode steps in the format [`Step::decode`] reads.
    pub fn encode(steps: &[Step]) -> Vec<u8> {
        let mut out = Vec::new();
        for s in steps {
            let (op, bytes, words): (u8, Vec<u8>, Vec<u16>) = match *s {
                Step::Alloc { size } => (0, vec![], vec![size]),
                Step::Free { pick } => (1, vec![pick], vec![]),
                Step::Memset {
                    pick,
                    offset,
                    len,
                    stream,
                } => {
                    out.extend([2, pick]);
                    put_words(&mut out, &[offset, len]);
                    out.push(stream);
                    continue;
                }
                Step::CopyHtoD { pick, offset, len } => (3, vec![pick], vec![offset, len]),
                Step::CopyDtoD {
                    dst,
                    src,
                    len,
                    stream,
                } => {
                    out.extend([4, dst, src]);
                    put_words(&mut out, &[len]);
                    out.push(stream);
                    continue;
                }
                Step::AllocAsync { size, stream } => {
                    out.push(5);
                    put_words(&mut out, &[size]);
                    out.push(stream);
                    continue;
                }
                Step::FreeAsync { pick, stream } => (6, vec![pick, stream], vec![]),
                Step::PoolSetAttr { attr, value } => (7, vec![attr], vec![value]),
                Step::PoolGetAttr { attr } => (8, vec![attr], vec![]),
                Step::PoolTrim { keep } => (9, vec![], vec![keep]),
                Step::BeginCapture { stream } => (10, vec![stream], vec![]),
                Step::EndCapture { stream } => (11, vec![stream], vec![]),
                Step::Instantiate { graph } => (12, vec![graph], vec![]),
                Step::Launch { exec, stream } => (13, vec![exec, stream], vec![]),
                Step::GraphDestroy { graph } => (14, vec![graph], vec![]),
                Step::ExecDestroy { exec } => (15, vec![exec], vec![]),
                Step::Reserve { chunks } => (16, vec![chunks], vec![]),
                Step::Create { chunks } => (17, vec![chunks], vec![]),
                Step::Map {
                    reservation,
                    handle,
                    offset,
                } => (18, vec![reservation, handle, offset], vec![]),
                Step::Unmap { mapping } => (19, vec![mapping], vec![]),
                Step::Release { handle } => (20, vec![handle], vec![]),
                Step::SetAccess { mapping } => (21, vec![mapping], vec![]),
                Step::AddressFree { reservation } => (22, vec![reservation], vec![]),
                Step::Sync { stream } => (23, vec![stream], vec![]),
                Step::DeviceSync => (24, vec![], vec![]),
                Step::DeviceReset => (25, vec![], vec![]),
                Step::LaunchMany { count, stream } => {
                    out.push(26);
                    put_words(&mut out, &[count]);
                    out.push(stream);
                    continue;
                }
                Step::PoolImport => (27, vec![], vec![]),
                Step::AllocFromPool { pool, size, stream } => {
                    out.extend([28, pool]);
                    put_words(&mut out, &[size]);
                    out.push(stream);
                    continue;
                }
                Step::IpcExport { pick, offset } => (29, vec![pick], vec![offset]),
                Step::IpcPeerExport { size } => (30, vec![], vec![size]),
                Step::IpcOpen { token, flags } => (31, vec![token, flags], vec![]),
                Step::IpcClose { pick } => (32, vec![pick], vec![]),
                Step::IpcEvent { token } => (33, vec![token], vec![]),
                Step::IpcPhysical { pick } => (34, vec![pick], vec![]),
                Step::GraphCreate => (35, vec![], vec![]),
                Step::CaptureToGraph { graph, stream } => (36, vec![graph, stream], vec![]),
                Step::AddChild { graph, child } => (37, vec![graph, child], vec![]),
                Step::Clone { graph } => (38, vec![graph], vec![]),
                Step::ExecUpdate { exec, graph } => (39, vec![exec, graph], vec![]),
                Step::PoolExportPointer { pick } => (40, vec![pick], vec![]),
                Step::PoolImportPointer { pool, export } => (41, vec![pool, export], vec![]),
                Step::PoolShare { export } => (42, vec![export], vec![]),
                Step::ProcessPoolExport { from, size } => (43, vec![from], vec![size]),
                Step::PoolImportShared { who, token, garble } => {
                    (44, vec![who, token, garble], vec![])
                }
                Step::PointerImportShared {
                    who,
                    pool,
                    token,
                    garble,
                } => (45, vec![who, pool, token, garble], vec![]),
                Step::ProcessFree { who, pick, how } => (46, vec![who, pick, how], vec![]),
                Step::ProcessPoolDestroy { who, pool } => (47, vec![who, pool], vec![]),
                Step::Flood { who, count } => (48, vec![who, count], vec![]),
                Step::PeerExpect { pick, offset, size } => (49, vec![pick], vec![offset, size]),
                Step::PeerSend {
                    pick,
                    offset,
                    size,
                    ticket,
                    to,
                } => {
                    out.extend([50, pick]);
                    put_words(&mut out, &[offset, size]);
                    out.extend([ticket, to]);
                    continue;
                }
                Step::PeerDeliver { ticket, sent } => (51, vec![ticket], vec![sent]),
                Step::PeerReceive {
                    pick,
                    offset,
                    size,
                    ticket,
                } => {
                    out.extend([52, pick]);
                    put_words(&mut out, &[offset, size]);
                    out.push(ticket);
                    continue;
                }
                Step::PeerCut => (53, vec![], vec![]),
            };
            out.push(op);
            out.extend(bytes);
            put_words(&mut out, &words);
        }
        out
    }
}

fn put_words(out: &mut Vec<u8>, words: &[u16]) {
    for w in words {
        out.extend_from_slice(&w.to_le_bytes());
    }
}

/// Pick from `list` by `i`; `None` when empty.
fn pick<T: Copy>(list: &[T], i: u8) -> Option<T> {
    (!list.is_empty()).then(|| list[i as usize % list.len()])
}

fn keep<T>(list: &mut Vec<T>, item: T) {
    if list.len() == KEEP {
        list.remove(0);
    }
    list.push(item);
}

fn stream(i: u8) -> StreamHandle {
    match i % 4 {
        0 => StreamHandle::LEGACY,
        1 => StreamHandle::PER_THREAD,
        n => STREAMS[n as usize - 2],
    }
}

/// A pool whose memory may be passed to other processes (a POSIX descriptor handle
/// type).
const SHAREABLE_POOL: MemPoolCreate = MemPoolCreate {
    device: 0,
    max_size: 0,
    shareable: true,
};

/// The bytes a peer step's `size` names: `size * 64` (up to 2 MiB, past the link's
/// 1 MiB chunks), or with the top bit set a size near `u64::MAX`.
pub fn peer_size(size: u16) -> u64 {
    if size & 0x8000 != 0 {
        u64::MAX - u64::from(size & 0x7fff)
    } else {
        u64::from(size) * 64
    }
}

/// The bytes another host sends: not all alike, so a shifted or mixed-up copy shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// Granule of the host-memory executor's virtual memory management.
const GRANULE: u64 = 2 << 20;

/// A process beside the session: its own session (under [`QUOTA`] too, its invariant
/// checked as the session's is), tracked executor, and the pools and allocations it
/// made or imported.
struct Process {
    session: Session,
    held: Arc<AtomicU64>,
    pools: Vec<MemPoolHandle>,
    pointers: Vec<(DevicePtr, u64)>,
}

/// A session under [`QUOTA`] and the objects it handed out.
pub struct Run {
    session: Session,
    held: Arc<AtomicU64>,
    ctx: CallContext,
    /// (pointer, bytes) of allocations, plain and stream-ordered.
    pointers: Vec<(DevicePtr, u64)>,
    graphs: Vec<GraphHandle>,
    execs: Vec<GraphExecHandle>,
    reservations: Vec<(DevicePtr, u64)>,
    handles: Vec<(AllocationHandle, u64)>,
    mappings: Vec<(DevicePtr, u64)>,
    /// Pools made and imported.
    pools: Vec<MemPoolHandle>,
    /// Exports of pools and of their allocations.
    exports: Vec<u64>,
    /// The big kernel and its parameter bytes.
    big: (FunctionHandle, usize),
    /// Another process of the same VM (its own worker and executor), for CUDA IPC
    /// through one registry.
    peer: Process,
    /// A process of another VM, on the same registry.
    other: Process,
    /// IPC tokens handed out, and the memory opened from them.
    tokens: Vec<[u8; 16]>,
    imports: Vec<DevicePtr>,
    /// Events the session opened (handles it names).
    next_event: u64,
    /// The broker at the other end of the session's peer link, and the tickets it
    /// handed out (with the size each was asked for).
    broker: FakeBroker,
    peer_tickets: Vec<(Ticket, u64)>,
    /// The registry's threads serving the three processes' links: they end once the
    /// sessions are gone, and are waited for then, so that nothing of theirs is still
    /// allocated when the input is over (LeakSanitizer would count it as leaked).
    registry_threads: Vec<std::thread::JoinHandle<()>>,
    /// Steps run so far, for the messages.
    steps: usize,
}

impl Run {
    /// A greeted session with two streams of its own, admitted as a local program is,
    /// under [`QUOTA`], on an executor with far more memory than that.
    pub fn new() -> Run {
        let hello = valid_hello();
        let mut grant = Policy::builtin()
            .admit(&Caller::Local { pid: None }, &hello.token)
            .expect("local programs are admitted");
        grant.memory_quota = Some(QUOTA);
        grant.max_streams = 16;
        grant.max_events = 16;
        grant.max_modules = 4;
        grant.host_memory = HOST_MEMORY;
        let (exec, held) = Tracked::new(FUZZ_DEVICE_MEMORY);
        // One registry for the VM's two processes and another VM's, as the daemon
        // keeps it.
        let registry = Arc::new(Registry::new(MAX_EXPORTS));
        let threads = std::cell::RefCell::new(Vec::new());
        let link = |owner: u64, vm_name: &str| {
            let (ours, theirs) = socketpair(
                AddressFamily::Unix,
                SockType::SeqPacket,
                None,
                SockFlag::SOCK_CLOEXEC,
            )
            .expect("a socket pair");
            let vm = Arc::new(std::sync::OnceLock::new());
            let _ = vm.set(vm_name.to_string());
            let r = registry.clone();
            threads.borrow_mut().push(std::thread::spawn(move || {
                r.serve_worker(UnixStream::from(ours), owner, vm)
            }));
            IpcLink::new(theirs)
        };
        let process = |owner: u64, vm_name: &str| {
            let (exec, held) = Tracked::new(FUZZ_DEVICE_MEMORY);
            let mut session =
                Session::new(Box::new(exec), grant.clone()).with_ipc_link(link(owner, vm_name));
            call_on(&mut session, &CallContext::default(), &hello, &[])
                .expect("a valid hello is accepted");
            Process {
                session,
                held,
                pools: Vec::new(),
                pointers: Vec::new(),
            }
        };
        let peer = process(2, "local");
        let other = process(3, "other");
        let (broker, peer_link) = FakeBroker::start();
        let ipc_link = link(1, "local");
        let registry_threads = threads.into_inner();
        let mut run = Run {
            session: Session::new(Box::new(exec), grant)
                .with_ipc_link(ipc_link)
                .with_peer_link(peer_link),
            held,
            ctx: CallContext::default(),
            pointers: Vec::new(),
            graphs: Vec::new(),
            execs: Vec::new(),
            reservations: Vec::new(),
            handles: Vec::new(),
            mappings: Vec::new(),
            pools: Vec::new(),
            exports: Vec::new(),
            big: (FunctionHandle(0), 0),
            peer,
            other,
            tokens: Vec::new(),
            imports: Vec::new(),
            next_event: 1000,
            broker,
            peer_tickets: Vec::new(),
            registry_threads,
            steps: 0,
        };
        run.call(&hello, &[]).expect("a valid hello is accepted");
        let module = run
            .call(&ModuleLoad {}, BIG_KERNEL)
            .expect("the big kernel's module loads")
            .module;
        let get = ModuleGetFunction {
            module,
            name: "_Z3bigi3BigPi".into(),
        };
        let info = run.call(&get, &[]).expect("the big kernel is there");
        let last = info.params.last().expect("it has parameters");
        run.big = (info.function, (last.offset + last.size) as usize);
        for s in STREAMS {
            let create = StreamCreate {
                stream: s,
                flags: 0,
                priority: 0,
            };
            run.call(&create, &[]).expect("streams within the limit");
        }
        run.check();
        run
    }

    /// Run `req` as the worker does (current device first, then the handler), and
    /// decode its reply.
    fn call<R: Request>(&mut self, req: &R, data: &[u8]) -> Result<R::Reply, CudaStatus> {
        call_on(&mut self.session, &self.ctx, req, data)
    }

    /// [`Run::call`] on the other process's session.
    fn call_peer<R: Request>(&mut self, req: &R) -> Result<R::Reply, CudaStatus> {
        call_on(&mut self.peer.session, &self.ctx, req, &[])
    }

    /// Process `who % 3`: the session (0), the other process of its VM (1), another
    /// VM's (2); its session, pools and pointers.
    #[allow(clippy::type_complexity)]
    fn process(
        &mut self,
        who: u8,
    ) -> (
        &mut Session,
        &mut Vec<MemPoolHandle>,
        &mut Vec<(DevicePtr, u64)>,
    ) {
        match who % 3 {
            0 => (&mut self.session, &mut self.pools, &mut self.pointers),
            1 => {
                let p = &mut self.peer;
                (&mut p.session, &mut p.pools, &mut p.pointers)
            }
            _ => {
                let p = &mut self.other;
                (&mut p.session, &mut p.pools, &mut p.pointers)
            }
        }
    }

    /// The token an import names: token `i` of those handed out as it is (`garble %
    /// 4` 0), with one bit flipped (1) or its halves swapped (2), or forged bytes (3,
    /// and whenever none was handed out). Tokens stay listed after what they name is
    /// freed, destroyed or withdrawn: those are the stale ones.
    fn token(&self, i: u8, garble: u8) -> [u8; 16] {
        let Some(mut token) = pick(&self.tokens, i) else {
            return [i; 16];
        };
        match garble % 4 {
            0 => {}
            1 => token[usize::from(garble >> 2) % 16] ^= 1 << (garble >> 5),
            2 => token.rotate_left(8),
            _ => token = [i; 16],
        }
        token
    }

    /// The address a peer step names: one of the session's pointers `offset` bytes in,
    /// or, where it has none, an address of nothing.
    fn peer_pointer(&self, i: u8, offset: u16) -> DevicePtr {
        pick(&self.pointers, i).map_or(u64::from(offset) << 16, |(p, _)| p + u64::from(offset))
    }

    /// The ticket a peer step names: one handed out (`i` modulo their number), or a
    /// forged one (`i` 0xFF, or none handed out).
    fn peer_ticket(&self, i: u8) -> Ticket {
        match pick(&self.peer_tickets, i) {
            Some((ticket, _)) if i != 0xFF => ticket,
            _ => [i; 16],
        }
    }

    /// `size` bytes of the session's memory at `src`, read as a guest reads them (None
    /// where the session refuses: a capture under way, say), 256 KiB at a time (a
    /// larger read's bytes go by the worker's reply area, which the harness has not).
    fn read_device(&mut self, src: DevicePtr, size: u64) -> Option<Vec<u8>> {
        const PIECE: u64 = 256 << 10;
        let mut out = Vec::with_capacity(size as usize);
        let mut done = 0;
        while done < size {
            let req = MemcpyDtoH {
                src: src + done,
                size: (size - done).min(PIECE),
                stream: StreamHandle::LEGACY,
                is_async: false,
            };
            let meta = postcard::to_stdvec(&req).expect("requests encode");
            self.session.enter(&self.ctx).ok()?;
            match dispatch(&mut self.session, &self.ctx, MemcpyDtoH::OP, &meta, &[]) {
                Ok(reply) if reply.data.len() as u64 == req.size => out.extend(reply.data),
                Ok(_) | Err(DispatchError::Cuda(_)) => return None,
                Err(e) => panic!("a well-formed request was not decoded: {e}"),
            }
            done += req.size;
        }
        Some(out)
    }

    /// The quota invariant, after every step: in the session and in both processes
    /// beside it.
    pub fn check(&mut self) {
        let (ctx, step) = (self.ctx, self.steps);
        check_process("the session", &mut self.session, &self.held, &ctx, step);
        let peer = &mut self.peer;
        check_process(
            "the VM's other process",
            &mut peer.session,
            &peer.held,
            &ctx,
            step,
        );
        let other = &mut self.other;
        check_process(
            "another VM's process",
            &mut other.session,
            &other.held,
            &ctx,
            step,
        );
    }

    /// Run one step, then check the invariant. Every result is legitimate for some
    /// input: the target checks only the invariant, the seed generator the results.
    pub fn step(&mut self, step: Step) -> Result<(), CudaStatus> {
        self.steps += 1;
        let result = self.run_step(step);
        self.check();
        result
    }

    fn run_step(&mut self, step: Step) -> Result<(), CudaStatus> {
        let bad = Err(CudaStatus::ErrorInvalidValue);
        match step {
            Step::Alloc { size } => {
                let size = u64::from(size) * 256;
                let ptr = self.call(&MemAlloc { size }, &[])?.ptr;
                keep(&mut self.pointers, (ptr, size));
            }
            Step::Free { pick: i } => {
                let Some((ptr, _)) = pick(&self.pointers, i) else {
                    return bad;
                };
                self.call(&MemFree { ptr }, &[])?;
            }
            Step::Memset {
                pick: i,
                offset,
                len,
                stream: s,
            } => {
                let Some((ptr, _)) = pick(&self.pointers, i) else {
                    return bad;
                };
                let req = Memset {
                    dst: ptr + u64::from(offset),
                    value: 0xA5,
                    size: u64::from(len),
                    stream: stream(s),
                    is_async: s & 4 != 0,
                };
                self.call(&req, &[])?;
            }
            Step::CopyHtoD {
                pick: i,
                offset,
                len,
            } => {
                let Some((ptr, _)) = pick(&self.pointers, i) else {
                    return bad;
                };
                let req = MemcpyHtoD {
                    dst: ptr + u64::from(offset),
                    stream: StreamHandle::LEGACY,
                    is_async: false,
                };
                self.call(&req, &vec![0x5A; usize::from(len) % 4097])?;
            }
            Step::CopyDtoD {
                dst,
                src,
                len,
                stream: s,
            } => {
                let (Some((dst, _)), Some((src, _))) =
                    (pick(&self.pointers, dst), pick(&self.pointers, src))
                else {
                    return bad;
                };
                let req = MemcpyDtoD {
                    dst,
                    src,
                    size: u64::from(len),
                    stream: stream(s),
                    is_async: s & 4 != 0,
                };
                self.call(&req, &[])?;
            }
            Step::AllocAsync { size, stream: s } => {
                let size = u64::from(size) * 256;
                let req = MemAllocAsync {
                    size,
                    stream: stream(s),
                };
                let ptr = self.call(&req, &[])?.ptr;
                keep(&mut self.pointers, (ptr, size));
            }
            Step::FreeAsync { pick: i, stream: s } => {
                let Some((ptr, _)) = pick(&self.pointers, i) else {
                    return bad;
                };
                let req = MemFreeAsync {
                    ptr,
                    stream: stream(s),
                };
                self.call(&req, &[])?;
            }
            Step::PoolSetAttr { attr, value } => {
                let req = MemPoolSetAttribute {
                    pool: PoolRef::Default(0),
                    attr: u32::from(attr % 9),
                    value: u64::from(value) * 4096,
                };
                self.call(&req, &[])?;
            }
            Step::PoolGetAttr { attr } => {
                let req = MemPoolGetAttribute {
                    pool: PoolRef::Default(0),
                    attr: u32::from(attr % 9),
                };
                self.call(&req, &[])?;
            }
            Step::PoolTrim { keep } => {
                let req = MemPoolTrimTo {
                    pool: PoolRef::Default(0),
                    min_bytes_to_keep: u64::from(keep) * 4096,
                };
                self.call(&req, &[])?;
            }
            Step::BeginCapture { stream: s } => {
                self.call(&StreamBeginCapture { stream: stream(s) }, &[])?;
            }
            Step::EndCapture { stream: s } => {
                let req = StreamEndCapture {
                    stream: stream(s),
                    invalidated: false,
                };
                let graph = self.call(&req, &[])?.graph;
                keep(&mut self.graphs, graph);
            }
            Step::Instantiate { graph } => {
                let Some(graph) = pick(&self.graphs, graph) else {
                    return bad;
                };
                let exec = self.call(&GraphInstantiate { graph, flags: 0 }, &[])?.exec;
                keep(&mut self.execs, exec);
            }
            Step::Launch { exec, stream: s } => {
                let Some(exec) = pick(&self.execs, exec) else {
                    return bad;
                };
                let req = GraphLaunch {
                    exec,
                    stream: stream(s),
                };
                self.call(&req, &[])?;
            }
            Step::GraphDestroy { graph } => {
                let Some(graph) = pick(&self.graphs, graph) else {
                    return bad;
                };
                self.call(&GraphDestroy { graph }, &[])?;
            }
            Step::ExecDestroy { exec } => {
                let Some(exec) = pick(&self.execs, exec) else {
                    return bad;
                };
                self.call(&GraphExecDestroy { exec }, &[])?;
            }
            Step::Reserve { chunks } => {
                let size = u64::from(chunks % 6) * GRANULE;
                let req = MemAddressReserve {
                    size,
                    alignment: 0,
                    addr: 0,
                    flags: 0,
                };
                let ptr = self.call(&req, &[])?.ptr;
                keep(&mut self.reservations, (ptr, size));
            }
            Step::Create { chunks } => {
                let size = u64::from(chunks % 6) * GRANULE;
                let req = MemCreate {
                    size,
                    prop: AllocationProp {
                        alloc_type: 1,
                        location_type: 1,
                        ..Default::default()
                    },
                    flags: 0,
                };
                let handle = self.call(&req, &[])?.handle;
                keep(&mut self.handles, (handle, size));
            }
            Step::Map {
                reservation,
                handle,
                offset,
            } => {
                let (Some((base, _)), Some((handle, size))) = (
                    pick(&self.reservations, reservation),
                    pick(&self.handles, handle),
                ) else {
                    return bad;
                };
                let ptr = base + u64::from(offset % 4) * GRANULE;
                let req = MemMap {
                    ptr,
                    size,
                    offset: 0,
                    handle,
                    flags: 0,
                };
                self.call(&req, &[])?;
                keep(&mut self.mappings, (ptr, size));
            }
            Step::Unmap { mapping } => {
                let Some((ptr, size)) = pick(&self.mappings, mapping) else {
                    return bad;
                };
                self.call(&MemUnmap { ptr, size }, &[])?;
            }
            Step::Release { handle } => {
                let Some((handle, _)) = pick(&self.handles, handle) else {
                    return bad;
                };
                self.call(&MemRelease { handle }, &[])?;
            }
            Step::SetAccess { mapping } => {
                let Some((ptr, size)) = pick(&self.mappings, mapping) else {
                    return bad;
                };
                let req = MemSetAccess {
                    ptr,
                    size,
                    descs: vec![AccessDesc {
                        location_type: 1,
                        location_id: 0,
                        flags: 3,
                    }],
                };
                self.call(&req, &[])?;
            }
            Step::AddressFree { reservation } => {
                let Some((ptr, size)) = pick(&self.reservations, reservation) else {
                    return bad;
                };
                self.call(&MemAddressFree { ptr, size }, &[])?;
            }
            Step::Sync { stream: s } => {
                self.call(&StreamSynchronize { stream: stream(s) }, &[])?;
            }
            Step::DeviceSync => {
                self.call(&DeviceSynchronize, &[])?;
            }
            Step::DeviceReset => {
                self.call(&DeviceReset, &[])?;
            }
            Step::LaunchMany { count, stream: s } => {
                let (function, len) = self.big;
                let params = vec![0u8; len];
                for _ in 0..=count % MAX_LAUNCHES {
                    let req = LaunchKernel {
                        function,
                        grid: [1; 3],
                        block: [1; 3],
                        shared_mem: 0,
                        stream: stream(s),
                        attributes: vec![],
                    };
                    self.call(&req, &params)?;
                }
            }
            Step::PoolImport => {
                let pool = self.call(&SHAREABLE_POOL, &[])?.pool;
                keep(&mut self.pools, pool);
                let export = self.call(&MemPoolExportShareable { pool }, &[])?.export;
                keep(&mut self.exports, export);
                let imported = self.call(&MemPoolImportShareable { export }, &[])?.pool;
                keep(&mut self.pools, imported);
            }
            Step::AllocFromPool {
                pool,
                size,
                stream: s,
            } => {
                let Some(pool) = pick(&self.pools, pool) else {
                    return bad;
                };
                let size = u64::from(size) * 256;
                let req = MemAllocFromPoolAsync {
                    size,
                    pool: PoolRef::Created(pool),
                    stream: stream(s),
                };
                let ptr = self.call(&req, &[])?.ptr;
                keep(&mut self.pointers, (ptr, size));
            }
            Step::IpcExport { pick: i, offset } => {
                let Some((ptr, _)) = pick(&self.pointers, i) else {
                    return bad;
                };
                let req = IpcGetMemHandle {
                    ptr: ptr + u64::from(offset),
                };
                let token = self.call(&req, &[])?.token;
                keep(&mut self.tokens, token);
            }
            Step::IpcPeerExport { size } => {
                let size = u64::from(size) * 256;
                let ptr = self.call_peer(&MemAlloc { size })?.ptr;
                let token = self.call_peer(&IpcGetMemHandle { ptr })?.token;
                keep(&mut self.tokens, token);
            }
            Step::IpcOpen { token, flags } => {
                let token = pick(&self.tokens, token).unwrap_or([token; 16]);
                let req = IpcOpenMemHandle {
                    token,
                    flags: u32::from(flags % 3),
                };
                let opened = self.call(&req, &[])?;
                keep(&mut self.imports, opened.ptr);
                keep(&mut self.pointers, (opened.ptr, opened.size));
            }
            Step::IpcClose { pick: i } => {
                let Some(ptr) = pick(&self.imports, i) else {
                    return bad;
                };
                self.call(&IpcCloseMemHandle { ptr }, &[])?;
            }
            Step::IpcEvent { token } => {
                let event = EventHandle(self.next_event);
                self.next_event += 1;
                let create = EventCreate {
                    event,
                    flags: 2 | 4,
                };
                self.call_peer(&create)?;
                let exported = self.call_peer(&IpcGetEventHandle { event })?.token;
                let token = match token % 2 {
                    0 => exported,
                    _ => pick(&self.tokens, token).unwrap_or(exported),
                };
                let open = IpcOpenEventHandle {
                    event: EventHandle(self.next_event),
                    token,
                };
                self.next_event += 1;
                self.call(&open, &[])?;
            }
            Step::IpcPhysical { pick: i } => {
                let token = if i % 2 == 0 {
                    let req = MemCreate {
                        size: GRANULE,
                        prop: AllocationProp {
                            alloc_type: 1,
                            location_type: 1,
                            requested_handle_types: 1,
                            ..Default::default()
                        },
                        flags: 0,
                    };
                    let handle = self.call_peer(&req)?.handle;
                    let export = MemExportShareable {
                        handle,
                        handle_type: 1,
                    };
                    self.call_peer(&export)?.token
                } else {
                    let Some((handle, _)) = pick(&self.handles, i) else {
                        return bad;
                    };
                    let export = MemExportShareable {
                        handle,
                        handle_type: 1,
                    };
                    self.call(&export, &[])?.token
                };
                let import = MemImportShareable {
                    token,
                    handle_type: 1,
                };
                let handle = self.call(&import, &[])?.handle;
                keep(&mut self.handles, (handle, GRANULE));
            }
            Step::GraphCreate => {
                let graph = self.call(&GraphCreate { flags: 0 }, &[])?.graph;
                keep(&mut self.graphs, graph);
            }
            Step::CaptureToGraph { graph, stream: s } => {
                let Some(graph) = pick(&self.graphs, graph) else {
                    return bad;
                };
                let req = StreamBeginCaptureToGraph {
                    stream: stream(s),
                    graph,
                    dependencies: vec![],
                    edges: vec![],
                };
                self.call(&req, &[])?;
            }
            Step::AddChild { graph, child } => {
                let (Some(graph), Some(child)) =
                    (pick(&self.graphs, graph), pick(&self.graphs, child))
                else {
                    return bad;
                };
                let req = GraphAddNode {
                    graph,
                    dependencies: vec![],
                    node: PlainNode::ChildGraph(child),
                };
                self.call(&req, &[])?;
            }
            Step::Clone { graph } => {
                let Some(original) = pick(&self.graphs, graph) else {
                    return bad;
                };
                let clone = self.call(&GraphClone { original }, &[])?.graph;
                keep(&mut self.graphs, clone);
            }
            Step::ExecUpdate { exec, graph } => {
                let (Some(exec), Some(graph)) =
                    (pick(&self.execs, exec), pick(&self.graphs, graph))
                else {
                    return bad;
                };
                self.call(&GraphExecUpdate { exec, graph }, &[])?;
            }
            Step::PoolExportPointer { pick: i } => {
                let Some((ptr, _)) = pick(&self.pointers, i) else {
                    return bad;
                };
                let export = self.call(&MemPoolExportPointer { ptr }, &[])?.export;
                keep(&mut self.exports, export);
            }
            Step::PoolImportPointer { pool, export } => {
                let (Some(pool), Some(export)) =
                    (pick(&self.pools, pool), pick(&self.exports, export))
                else {
                    return bad;
                };
                let imported = self.call(&MemPoolImportPointer { pool, export }, &[])?;
                keep(&mut self.pointers, (imported.ptr, imported.size));
            }
            Step::PoolShare { export } => {
                let export = pick(&self.exports, export).unwrap_or(u64::from(export));
                let token = self.call(&MemPoolShareExport { export }, &[])?.token;
                keep(&mut self.tokens, token);
            }
            Step::ProcessPoolExport { from, size } => {
                let ctx = self.ctx;
                let (session, pools, pointers) = self.process(from % 2 + 1);
                let size = u64::from(size) * 256;
                let pool = call_on(session, &ctx, &SHAREABLE_POOL, &[])?.pool;
                keep(pools, pool);
                let alloc = MemAllocFromPoolAsync {
                    size,
                    pool: PoolRef::Created(pool),
                    stream: StreamHandle::LEGACY,
                };
                let ptr = call_on(session, &ctx, &alloc, &[])?.ptr;
                keep(pointers, (ptr, size));
                let pool_export = call_on(session, &ctx, &MemPoolExportShareable { pool }, &[]);
                let ptr_export = call_on(session, &ctx, &MemPoolExportPointer { ptr }, &[]);
                let tokens = [pool_export?.export, ptr_export?.export]
                    .map(|export| call_on(session, &ctx, &MemPoolShareExport { export }, &[]));
                for token in tokens {
                    keep(&mut self.tokens, token?.token);
                }
            }
            Step::PoolImportShared { who, token, garble } => {
                let (ctx, token) = (self.ctx, self.token(token, garble));
                let (session, pools, _) = self.process(who);
                let pool = call_on(session, &ctx, &MemPoolImportShared { token }, &[])?.pool;
                keep(pools, pool);
            }
            Step::PointerImportShared {
                who,
                pool,
                token,
                garble,
            } => {
                let (ctx, token) = (self.ctx, self.token(token, garble));
                let (session, pools, pointers) = self.process(who);
                let Some(pool) = pick(pools, pool) else {
                    return bad;
                };
                let req = MemPoolImportSharedPointer { pool, token };
                let imported = call_on(session, &ctx, &req, &[])?;
                keep(pointers, (imported.ptr, imported.size));
            }
            Step::ProcessFree { who, pick: i, how } => {
                let ctx = self.ctx;
                let (session, _, pointers) = self.process(who);
                let Some((ptr, _)) = pick(pointers, i) else {
                    return bad;
                };
                if how % 2 == 0 {
                    call_on(session, &ctx, &MemFree { ptr }, &[])?;
                } else {
                    let req = MemFreeAsync {
                        ptr,
                        stream: StreamHandle::LEGACY,
                    };
                    call_on(session, &ctx, &req, &[])?;
                }
                if how & 2 != 0 {
                    call_on(session, &ctx, &DeviceSynchronize, &[])?;
                }
            }
            Step::ProcessPoolDestroy { who, pool } => {
                let ctx = self.ctx;
                let (session, pools, _) = self.process(who);
                let Some(pool) = pick(pools, pool) else {
                    return bad;
                };
                call_on(session, &ctx, &MemPoolDestroy { pool }, &[])?;
            }
            Step::PeerExpect {
                pick: i,
                offset,
                size,
            } => {
                let req = PeerExpect {
                    dst: self.peer_pointer(i, offset),
                    size: peer_size(size),
                };
                let ticket = self.call(&req, &[])?;
                assert_eq!(
                    ticket.endpoint,
                    fake_broker::ENDPOINT,
                    "after step {}: a ticket names another endpoint than the broker's",
                    self.steps
                );
                keep(&mut self.peer_tickets, (ticket.ticket, req.size));
            }
            Step::PeerSend {
                pick: i,
                offset,
                size,
                ticket,
                to,
            } => {
                let endpoint = match to % 4 {
                    0 => fake_broker::ENDPOINT.to_string(),
                    1 => "elsewhere.fuzz:7732".to_string(),
                    2 => String::new(),
                    _ => "x".repeat(MAX_ENDPOINT + 1),
                };
                let req = PeerSend {
                    src: self.peer_pointer(i, offset),
                    size: peer_size(size),
                    ticket: self.peer_ticket(ticket),
                    endpoint,
                };
                let (src, size, ticket, to_self) = (
                    req.src,
                    req.size,
                    req.ticket,
                    req.endpoint == fake_broker::ENDPOINT,
                );
                let before = self.broker.delivered(&ticket);
                self.call(&req, &[])?;
                // Sent to this host's broker: it holds the guest's bytes, whole.
                if to_self && size > 0 {
                    let sent = self.broker.delivered(&ticket);
                    assert!(
                        before.is_none() && sent.as_ref().map(Vec::len) == Some(size as usize),
                        "after step {}: a send succeeded but its {size} bytes did not all arrive",
                        self.steps
                    );
                    if let Some(there) = self.read_device(src, size) {
                        let sent = sent.as_deref().unwrap_or_default();
                        assert!(
                            sent == &there[..],
                            "after step {}: the bytes sent are not the guest's ({} bytes sent, \
                             {} read back, first difference at {:?})",
                            self.steps,
                            sent.len(),
                            there.len(),
                            sent.iter().zip(&there).position(|(a, b)| a != b)
                        );
                    }
                }
            }
            Step::PeerDeliver { ticket, sent } => {
                let Some((ticket, size)) = pick(&self.peer_tickets, ticket) else {
                    return bad;
                };
                let announced = size.saturating_add(u64::from(sent >> 15));
                let bytes = pattern(usize::from(sent & 0x7fff) * 64);
                if !self.broker.deliver(&ticket, announced, bytes) {
                    return bad;
                }
            }
            Step::PeerReceive {
                pick: i,
                offset,
                size,
                ticket,
            } => {
                let req = PeerReceive {
                    dst: self.peer_pointer(i, offset),
                    size: peer_size(size),
                    ticket: self.peer_ticket(ticket),
                };
                let (dst, size) = (req.dst, req.size);
                let delivered = self.broker.delivered(&req.ticket);
                self.call(&req, &[])?;
                // Received: what was delivered is in the guest's memory, whole.
                let bytes = delivered.unwrap_or_else(|| {
                    panic!(
                        "after step {}: a receive succeeded with nothing delivered",
                        self.steps
                    )
                });
                assert_eq!(
                    bytes.len() as u64,
                    size,
                    "after step {}: a receive succeeded with part of its bytes",
                    self.steps
                );
                if let Some(there) = self.read_device(dst, size) {
                    assert!(
                        there == bytes,
                        "after step {}: the bytes received are not those delivered",
                        self.steps
                    );
                }
            }
            Step::PeerCut => self.broker.cut(),
            Step::Flood { who, count } => {
                let ctx = self.ctx;
                let (session, pools, pointers) = self.process(who);
                let (mut tokens, mut result) = (Vec::new(), Ok(()));
                // Pool pointers need their pool offered too (one export more).
                let pool = match count & 0x20 {
                    0 => {
                        let pool = call_on(session, &ctx, &SHAREABLE_POOL, &[])?.pool;
                        keep(pools, pool);
                        let export = call_on(session, &ctx, &MemPoolExportShareable { pool }, &[])?;
                        let share = MemPoolShareExport {
                            export: export.export,
                        };
                        tokens.push(call_on(session, &ctx, &share, &[])?.token);
                        Some(pool)
                    }
                    _ => None,
                };
                for _ in 0..=count % 32 {
                    let allocated = match pool {
                        None => call_on(session, &ctx, &MemAlloc { size: 256 }, &[]),
                        Some(pool) => {
                            let req = MemAllocFromPoolAsync {
                                size: 256,
                                pool: PoolRef::Created(pool),
                                stream: StreamHandle::LEGACY,
                            };
                            call_on(session, &ctx, &req, &[])
                        }
                    };
                    let ptr = match allocated {
                        Ok(a) => a.ptr,
                        Err(e) => {
                            result = Err(e);
                            break;
                        }
                    };
                    keep(pointers, (ptr, 256));
                    let token = match pool {
                        None => call_on(session, &ctx, &IpcGetMemHandle { ptr }, &[]),
                        Some(_) => call_on(session, &ctx, &MemPoolExportPointer { ptr }, &[])
                            .and_then(|e| {
                                let share = MemPoolShareExport { export: e.export };
                                call_on(session, &ctx, &share, &[])
                            }),
                    };
                    match token {
                        Ok(t) => tokens.push(t.token),
                        Err(e) => {
                            result = Err(e);
                            break;
                        }
                    }
                }
                for token in tokens {
                    keep(&mut self.tokens, token);
                }
                return result;
            }
        }
        Ok(())
    }

    /// Drop the session, then the processes beside it; each executor must then hold
    /// nothing.
    pub fn finish(self) {
        let Run {
            session,
            held,
            peer,
            other,
            steps,
            broker,
            registry_threads,
            ..
        } = self;
        let ended = [
            ("the session", session, held),
            ("the VM's other process", peer.session, peer.held),
            ("another VM's process", other.session, other.held),
        ];
        for (name, session, held) in ended {
            drop(session);
            let left = held.load(Relaxed);
            assert_eq!(
                left, 0,
                "after {steps} steps and the end of {name} its executor still holds {left} bytes"
            );
        }
        // Every link is closed: the threads serving them end.
        drop(broker);
        for t in registry_threads {
            let _ = t.join();
        }
    }
}

impl Default for Run {
    fn default() -> Run {
        Run::new()
    }
}

/// The quota invariant of one process's `session` after step `step`: what it charged
/// stays within [`QUOTA`] and equals what its executor holds (`held`), and the host
/// memory it keeps stays within [`HOST_MEMORY`].
fn check_process(
    name: &str,
    session: &mut Session,
    held: &AtomicU64,
    ctx: &CallContext,
    step: usize,
) {
    let info = call_on(session, ctx, &MemGetInfo, &[]).expect("MemGetInfo cannot fail");
    let held = held.load(Relaxed);
    assert_eq!(
        info.total, QUOTA,
        "after step {step}: a guest with a quota sees the quota as its memory ({name})"
    );
    assert!(
        held <= QUOTA,
        "after step {step}: the executor of {name} holds {held} bytes, over the \
         {QUOTA}-byte quota (its session reports {} charged)",
        QUOTA - info.free
    );
    // Below the quota the executor's free memory is larger than the quota's rest, so
    // `free` is exactly `QUOTA - charged`.
    let charged = QUOTA - info.free;
    assert_eq!(
        charged, held,
        "after step {step}: {name} charged {charged} bytes, its executor holds {held}"
    );
    let host = session.host_memory_bytes();
    assert!(
        host <= HOST_MEMORY,
        "after step {step}: {name} keeps {host} bytes of host memory, over its \
         {HOST_MEMORY}-byte limit"
    );
}

/// Run `req` on `session` as the worker does (current device first, then the handler),
/// and decode its reply.
fn call_on<R: Request>(
    session: &mut Session,
    ctx: &CallContext,
    req: &R,
    data: &[u8],
) -> Result<R::Reply, CudaStatus> {
    let meta = postcard::to_stdvec(req).expect("requests encode");
    if R::OP != vmcuda_wire::op::Op::Hello {
        session.enter(ctx)?;
    }
    match dispatch(session, ctx, R::OP, &meta, data) {
        Ok(reply) => Ok(postcard::from_bytes(&reply.meta).expect("replies decode")),
        Err(vmcuda_wire::op::DispatchError::Cuda(status)) => Err(status),
        Err(e) => panic!("a well-formed request was not decoded: {e}"),
    }
}

/// Run `input` as a whole session, checking the invariant throughout.
pub fn run(input: &[u8]) {
    let mut run = Run::new();
    for step in Step::decode(input) {
        let _ = run.step(step);
    }
    run.finish();
}
