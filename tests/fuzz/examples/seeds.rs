//! Writes the committed seed corpus, tests/fuzz/corpus/<target>/: small, valid inputs
//! that take each target deep at once (real requests, real nvcc output, whole vsock
//! conversations); libFuzzer mutates from there.
//!
//!     cargo run --manifest-path tests/fuzz/Cargo.toml --example seeds
//!
//! Rerun it when the protocol changes. It only writes the files it names, so minimized
//! crash inputs added to the corpus by hand stay.

use std::fs;
use std::path::{Path, PathBuf};

use vmcuda_fuzz::peer::{self, Action as PeerAction};
use vmcuda_fuzz::requests;
use vmcuda_fuzz::session::{self, Step};
use vmcuda_fuzz::vsock::{self, Action};
use vmcuda_fuzz::{frame, hello_frame, serve_host_memory, valid_hello};
use vmcuda_host::executor::host_memory::ADDRESS_BASE;
use vmcuda_vmm_glue::packet::{
    Header, HOST_CID, OP_CREDIT_REQUEST, OP_CREDIT_UPDATE, OP_REQUEST, OP_RST, OP_RW, OP_SHUTDOWN,
    SHUTDOWN_BOTH, SHUTDOWN_SEND, TYPE_STREAM,
};
use vmcuda_wire::fatbin::{self, CONTAINER_MAGIC};
use vmcuda_wire::frame::{FrameBatch, FrameHeader, FLAG_NO_REPLY, FLAG_REPLY};
use vmcuda_wire::handshake::PROTOCOL_VERSION;
use vmcuda_wire::op::*;
use vmcuda_wire::{cubin, CudaStatus};

fn testdata(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../wire/testdata")
        .join(name);
    fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn write(target: &str, name: &str, bytes: &[u8]) {
    let dir: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target);
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join(name), bytes).unwrap();
}

fn meta<R: Request>(req: &R) -> Vec<u8> {
    postcard::to_stdvec(req).expect("requests encode")
}

/// One container holding one uncompressed sm_90 ELF entry: how nvcc would package a
/// cubin, for cubins the test data only has bare.
fn fatbin_of_cubin(elf: &[u8]) -> Vec<u8> {
    let padded = elf.len().div_ceil(8) * 8;
    let mut entry = vec![0u8; 64];
    entry[0..2].copy_from_slice(&2u16.to_le_bytes()); // ELF
    entry[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
    entry[4..8].copy_from_slice(&64u32.to_le_bytes());
    entry[8..16].copy_from_slice(&(padded as u64).to_le_bytes());
    entry[0x1A..0x1C].copy_from_slice(&1u16.to_le_bytes());
    entry[0x1C..0x20].copy_from_slice(&90u32.to_le_bytes());
    entry[0x28..0x30].copy_from_slice(&(fatbin::FLAG_64BIT | fatbin::FLAG_LINUX).to_le_bytes());
    entry.extend_from_slice(elf);
    entry.resize(64 + padded, 0);
    let mut out = Vec::new();
    out.extend_from_slice(&CONTAINER_MAGIC.to_le_bytes());
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&16u16.to_le_bytes());
    out.extend_from_slice(&(entry.len() as u64).to_le_bytes());
    out.extend(entry);
    assert!(fatbin::parse(&out).is_ok());
    out
}

fn frame_seeds() {
    write("frame_decode", "hello", &hello_frame());
    let alloc = meta(&MemAlloc { size: 4096 });
    write(
        "frame_decode",
        "mem_alloc",
        &frame(Op::MemAlloc.code(), 0, 2, 0, &alloc, &[]),
    );
    // Asynchronous requests batched into one write, as the guest library sends them.
    let mut batch = FrameBatch::default();
    let copy = meta(&MemcpyHtoD {
        dst: ADDRESS_BASE,
        stream: StreamHandle::LEGACY,
        is_async: true,
    });
    batch.push(
        &FrameHeader::new(Op::MemcpyHtoD.code(), FLAG_NO_REPLY, 3, copy.len(), 16),
        &copy,
        &[0xAB; 16],
    );
    let set = meta(&Memset {
        dst: ADDRESS_BASE + 16,
        value: 7,
        size: 32,
        stream: StreamHandle::PER_THREAD,
        is_async: true,
    });
    batch.push(
        &FrameHeader::new(Op::Memset.code(), FLAG_NO_REPLY, 4, set.len(), 0),
        &set,
        &[],
    );
    let sync = meta(&DeviceSynchronize);
    batch.push(
        &FrameHeader::new(Op::DeviceSynchronize.code(), 0, 5, sync.len(), 0),
        &sync,
        &[],
    );
    let mut bytes = Vec::new();
    batch.flush_to(&mut bytes).unwrap();
    write("frame_decode", "async_batch", &bytes);
    // A reply with a status and a data section, as the guest reads it.
    let reply = FrameHeader::new(Op::MemcpyDtoH.code(), FLAG_REPLY, 6, 0, 8)
        .with_status(CudaStatus::ErrorInvalidValue.0);
    let mut bytes = Vec::new();
    vmcuda_wire::frame::write_frame(&mut bytes, &reply, &[], &[1; 8]).unwrap();
    write("frame_decode", "reply_with_data", &bytes);
}

fn handshake_seeds() {
    let hello = valid_hello();
    write(
        "handshake",
        "hello_postcard",
        &postcard::to_stdvec(&hello).unwrap(),
    );
    write("handshake", "hello_frame", &hello_frame());
    let old = Hello {
        protocol: 0,
        runtime_version: 12080,
        token: b"secret".to_vec(),
        ..hello
    };
    let old_meta = postcard::to_stdvec(&old).unwrap();
    write(
        "handshake",
        "hello_refused_frame",
        &frame(Op::Hello.code(), 0, 1, 0, &old_meta, &[]),
    );
    let alloc = meta(&MemAlloc { size: 1 });
    write(
        "handshake",
        "request_before_hello",
        &frame(Op::MemAlloc.code(), 0, 1, 0, &alloc, &[]),
    );
    let reply = HelloReply {
        protocol: PROTOCOL_VERSION,
        driver_version: 13000,
        device_count: 1,
        executor: ExecutorKind::HostMemory,
        capabilities: 3,
        banner: "fuzz".into(),
    };
    write(
        "handshake",
        "hello_reply_postcard",
        &postcard::to_stdvec(&reply).unwrap(),
    );
}

fn fatbin_seeds() {
    for name in [
        "tiny.fatbin",
        "tiny_lz4.fatbin",
        "tiny_debug.fatbin",
        "bigglobals.fatbin",
        "bigglobals_lz4.fatbin",
        "bigglobals_zstd.fatbin",
        "tiny_exe.nv_fatbin",
        "tiny_exe.nvFatBinSegment",
        "globals.cubin",
        "globals_rdc.cubin",
        "bigparam.cubin",
    ] {
        write("fatbin", name, &testdata(name));
    }
}

/// Serve a structured `dispatch` seed and insist that every answer is a success, but
/// for the ops in `failing`: a seed whose calls fail early would only test the errors.
fn check_served(name: &str, reqs: &[requests::Request], failing: &[Op]) {
    let (frames, _) = requests::decode(&requests::encode(reqs));
    let mut stream = hello_frame();
    stream.extend(frames);
    let mut out = Vec::new();
    serve_host_memory(&stream, &mut out).unwrap();
    let mut r = &out[..];
    while let Ok((h, _)) = vmcuda_wire::frame::read_head(&mut r) {
        vmcuda_wire::frame::skip_data(&mut r, h.data_len.get()).unwrap();
        let op = Op::from_code(h.op.get()).unwrap();
        let status = CudaStatus(h.status.get());
        assert!(
            status.is_success() || failing.contains(&op),
            "seed {name}: {} failed with {status}",
            op.name()
        );
    }
}

fn dispatch_seeds() {
    const STRUCTURED: u8 = 1;
    use requests::Request;
    let structured = |reqs: &[Request]| {
        let mut input = vec![STRUCTURED];
        input.extend(requests::encode(reqs));
        input
    };
    let s = StreamHandle::LEGACY;
    let p = ADDRESS_BASE; // the first allocation of a fresh host-memory executor

    let memory = [
        Request::of(&MemGetInfo, &[]),
        Request::of(&MemAlloc { size: 8192 }, &[]),
        Request::of(
            &MemcpyHtoD {
                dst: p,
                stream: s,
                is_async: false,
            },
            &[0x5A; 64],
        ),
        Request::of(
            &MemcpyDtoH {
                src: p,
                size: 64,
                stream: s,
                is_async: false,
            },
            &[],
        ),
        Request::of(
            &Memset {
                dst: p + 64,
                value: 1,
                size: 128,
                stream: s,
                is_async: true,
            },
            &[],
        )
        .no_reply(),
        Request::of(
            &MemcpyDtoD {
                dst: p + 4096,
                src: p,
                size: 256,
                stream: s,
                is_async: true,
            },
            &[],
        )
        .no_reply(),
        Request::of(
            &Memset2D {
                dst: p,
                pitch: 512,
                value: 3,
                width: 100,
                height: 8,
                stream: s,
                is_async: false,
            },
            &[],
        ),
        Request::of(
            &Memcpy2DHtoD {
                dst: p,
                dpitch: 512,
                width: 4,
                height: 2,
                stream: s,
                is_async: false,
            },
            &[9; 8],
        ),
        Request::of(
            &Memcpy2DDtoH {
                src: p,
                spitch: 512,
                width: 4,
                height: 2,
                stream: s,
                is_async: false,
            },
            &[],
        ),
        Request::of(
            &Memcpy2DDtoD {
                dst: p + 4096,
                dpitch: 256,
                src: p,
                spitch: 512,
                width: 16,
                height: 4,
                stream: s,
                is_async: false,
            },
            &[],
        ),
        Request::of(&PointerGetAttributes { ptr: p + 10 }, &[]),
        Request::of(
            &MemAllocPitch {
                width: 100,
                height: 10,
            },
            &[],
        ),
        Request::of(&MemFree { ptr: p }, &[]),
        Request::of(&DeviceSynchronize, &[]),
    ];
    check_served("memory", &memory, &[]);
    write("dispatch", "memory", &structured(&memory));

    let tiny = testdata("tiny.fatbin");
    let kernel = cubin::kernels(&cubin::find_cubin(&fatbin::parse(&tiny).unwrap()).unwrap())
        .unwrap()[0]
        .clone();
    // Handles are numbered by the session in order: module 1, function 2.
    let (m, f) = (ModuleHandle(1), FunctionHandle(2));
    let launch = LaunchKernel {
        function: f,
        grid: [1, 1, 1],
        block: [32, 1, 1],
        shared_mem: 0,
        stream: s,
        attributes: vec![LaunchAttribute {
            id: 1,
            value: vec![0; 64],
        }],
    };
    let module = [
        Request::of(&ModuleLoad, &tiny),
        Request::of(
            &ModuleGetFunction {
                module: m,
                name: kernel,
            },
            &[],
        ),
        Request::of(&FuncGetAttributes { function: f }, &[]),
        Request::of(
            &FuncSetAttribute {
                function: f,
                attribute: 8,
                value: 65536,
            },
            &[],
        ),
        Request::of(
            &FuncSetCacheConfig {
                function: f,
                config: 1,
            },
            &[],
        ),
        Request::of(
            &OccupancyMaxActiveBlocks {
                function: f,
                block_size: 128,
                dynamic_smem: 0,
                flags: 0,
            },
            &[],
        ),
        Request::of(
            &OccupancyAvailableDynamicSmem {
                function: f,
                num_blocks: 2,
                block_size: 128,
            },
            &[],
        ),
        Request::of(&launch, &ADDRESS_BASE.to_le_bytes()).no_reply(),
        Request::of(&StreamSynchronize { stream: s }, &[]),
    ];
    check_served("module_launch", &module, &[]);
    write("dispatch", "module_launch", &structured(&module));

    let globals = fatbin_of_cubin(&testdata("globals.cubin"));
    let module_globals = [
        Request::of(&ModuleLoad, &globals),
        Request::of(
            &ModuleGetGlobal {
                module: m,
                name: "d2".into(),
            },
            &[],
        ),
        Request::of(
            &ModuleGetGlobal {
                module: m,
                name: "z".into(),
            },
            &[],
        ),
        Request::of(
            &MemcpyDtoH {
                src: p,
                size: 16,
                stream: s,
                is_async: false,
            },
            &[],
        ),
        Request::of(
            &ModuleGetFunction {
                module: m,
                name: "_Z11use_globalsPf".into(),
            },
            &[],
        ),
    ];
    check_served("module_globals", &module_globals, &[]);
    write("dispatch", "module_globals", &structured(&module_globals));

    let (s1, e1, e2) = (StreamHandle(10), EventHandle(20), EventHandle(21));
    let sync = [
        Request::of(&DeviceGetProperties { device: 0 }, &[]),
        Request::of(&DeviceGetLimit { limit: 2 }, &[]),
        Request::of(
            &DeviceSetLimit {
                limit: 0,
                value: 4096,
            },
            &[],
        ),
        Request::of(&CacheConfig { config: 2 }, &[]),
        Request::of(&DeviceGetCacheConfig, &[]),
        Request::of(&DeviceGetStreamPriorityRange, &[]),
        Request::of(&DeviceCanAccessPeer { device: 0, peer: 0 }, &[]),
        Request::of(&DeviceEnablePeerAccess { peer: 0, flags: 0 }, &[]),
        Request::of(
            &StreamCreate {
                stream: s1,
                flags: 1,
                priority: -1,
            },
            &[],
        )
        .no_reply(),
        Request::of(
            &EventCreate {
                event: e1,
                flags: 0,
            },
            &[],
        )
        .no_reply(),
        Request::of(
            &EventCreate {
                event: e2,
                flags: 0,
            },
            &[],
        )
        .no_reply(),
        Request::of(
            &EventRecord {
                event: e1,
                stream: s1,
                flags: 0,
            },
            &[],
        )
        .no_reply(),
        Request::of(
            &StreamWaitEvent {
                stream: StreamHandle::PER_THREAD,
                event: e1,
                flags: 0,
            },
            &[],
        )
        .no_reply(),
        Request::of(
            &EventRecord {
                event: e2,
                stream: s1,
                flags: 0,
            },
            &[],
        )
        .no_reply(),
        Request::of(&EventSynchronize { event: e2 }, &[]),
        Request::of(&EventQuery { event: e1 }, &[]),
        Request::of(&EventElapsedTime { start: e1, end: e2 }, &[]),
        Request::of(&StreamQuery { stream: s1 }, &[]),
        Request::of(&EventDestroy { event: e1 }, &[]).no_reply(),
        Request::of(&StreamDestroy { stream: s1 }, &[]).no_reply(),
        Request::of(&DeviceReset, &[]),
    ];
    // One device: it has no peer to enable.
    check_served("streams_events", &sync, &[Op::DeviceEnablePeerAccess]);
    write("dispatch", "streams_events", &structured(&sync));

    // A fault the target found (fixed): the host sized a staging buffer for a 2D copy
    // of 2 GiB rows before checking the ranges. Written here so it follows the op
    // table.
    let huge_2d = [Request::of(
        &Memcpy2DDtoD {
            dst: 4,
            dpitch: 0,
            src: 0,
            spitch: 2,
            width: 1 << 31,
            height: 512,
            stream: s,
            is_async: false,
        },
        &[],
    )];
    check_served("huge_2d", &huge_2d, &[Op::Memcpy2DDtoD]);
    write(
        "dispatch",
        "crash-2d-dtod-staging-buffer-sized-before-checks",
        &structured(&huge_2d),
    );

    // The raw format: frames as bytes, including an unknown op and a deferred error.
    let mut raw = vec![0u8];
    let alloc = meta(&MemAlloc { size: 64 });
    raw.extend(frame(Op::MemAlloc.code(), 0, 2, 0, &alloc, &[]));
    raw.extend(frame(0x7777, 0, 3, 0, &[], &[]));
    let bad = meta(&Memset {
        dst: 1,
        value: 0,
        size: 8,
        stream: s,
        is_async: true,
    });
    raw.extend(frame(Op::Memset.code(), FLAG_NO_REPLY, 4, 0, &bad, &[]));
    raw.extend(frame(
        Op::DeviceSynchronize.code(),
        0,
        5,
        1,
        &meta(&DeviceSynchronize),
        &[],
    ));
    write("dispatch", "raw_frames", &raw);
}

fn guest(op: u16, port: u8, len: u16, fill: u8) -> Action {
    Action::Packet {
        op: op as u8,
        port,
        flags: 0,
        buf_alloc: 64 << 10,
        fwd_cnt: 0,
        len,
        fill,
    }
}

fn vsock_seeds() {
    let readable = |conn| Action::Ready {
        conn,
        readable: true,
        writable: true,
    };
    let rx = Action::Rx { max_payload: 4096 };
    // A whole conversation: connect, request, answer, orderly close.
    let mut conversation = vec![
        guest(OP_REQUEST, 0, 0, 0),
        rx.clone(),
        guest(OP_RW, 0, 120, 0x11),
        Action::HostSend { conn: 0, len: 3000 },
        readable(0),
        rx.clone(),
        rx.clone(),
        guest(OP_CREDIT_UPDATE, 0, 0, 0),
        guest(OP_CREDIT_REQUEST, 0, 0, 0),
        rx.clone(),
    ];
    conversation.push(Action::Packet {
        op: OP_SHUTDOWN as u8,
        port: 0,
        flags: SHUTDOWN_SEND as u8,
        buf_alloc: 64 << 10,
        fwd_cnt: 3000,
        len: 0,
        fill: 0,
    });
    conversation.push(Action::HostEof { conn: 0 });
    conversation.push(readable(0));
    conversation.push(rx.clone());
    conversation.push(Action::Packet {
        op: OP_SHUTDOWN as u8,
        port: 0,
        flags: SHUTDOWN_BOTH as u8,
        buf_alloc: 64 << 10,
        fwd_cnt: 3000,
        len: 0,
        fill: 0,
    });
    conversation.push(rx.clone());
    write(
        "vsock_packet",
        "conversation",
        &vsock::encode(&conversation),
    );

    // Raw headers as the device reads them from the tx ring.
    let header = |op, len| {
        Header {
            src_cid: vsock::GUEST_CID,
            dst_cid: HOST_CID,
            src_port: 50000,
            dst_port: vsock::PORT,
            len,
            type_: TYPE_STREAM,
            op,
            flags: 0,
            buf_alloc: 4096,
            fwd_cnt: 0,
        }
        .to_bytes()
    };
    let raw = [
        Action::Raw {
            header: header(OP_REQUEST, 0),
            payload: vec![],
        },
        Action::Raw {
            header: header(OP_RW, 5),
            payload: b"hello".to_vec(),
        },
        Action::Raw {
            header: header(OP_RW, 100),
            payload: b"short".to_vec(),
        },
        Action::Raw {
            header: header(OP_RST, 0),
            payload: vec![],
        },
        rx.clone(),
    ];
    write("vsock_packet", "raw_headers", &vsock::encode(&raw));

    // Pressure: more connections than the cap, a worker that does not read, a guest
    // that ignores its credit, a broken worker, a failing spawn, a driver reset.
    let mut pressure = Vec::new();
    for port in 0..6 {
        pressure.push(guest(OP_REQUEST, port, 0, 0));
    }
    pressure.extend([
        Action::HostRoom { conn: 1, room: 0 },
        guest(OP_RW, 1, 4000, 1),
        guest(OP_RW, 1, 200, 2),
        Action::HostBroken { conn: 2 },
        guest(OP_RW, 2, 1000, 3),
        Action::ConnectFails(true),
        guest(OP_REQUEST, 9, 0, 0),
        Action::HostSend { conn: 3, len: 9000 },
        readable(3),
        Action::Rx { max_payload: 100 },
        Action::Rx { max_payload: 1 },
        Action::Reset,
        Action::ConnectFails(false),
        guest(OP_REQUEST, 1, 0, 0),
        rx,
    ]);
    write("vsock_packet", "pressure", &vsock::encode(&pressure));
}

/// Steps of a session seed that must fail, and with what: (step number, status).
type Failing = Vec<(usize, CudaStatus)>;

/// Run a `session` seed step by step and insist that every step succeeds but those
/// numbered (from 0) in `failing`, which must fail with the status given there: a seed
/// whose calls fail early, or otherwise than meant, would only test other errors. The
/// quota invariant is checked as the target checks it; a seed that breaks it is still
/// written (it shows a bug the target must keep finding until it is fixed) and
/// reported.
fn check_session(name: &str, steps: &[Step], failing: &[(usize, CudaStatus)]) {
    let steps = steps.to_vec();
    let failing = failing.to_vec();
    let outcome = std::panic::catch_unwind(move || {
        let mut run = session::Run::new();
        for (i, step) in steps.iter().enumerate() {
            let result = run.step(*step);
            let expected = failing.iter().find(|(at, _)| *at == i).map(|&(_, s)| s);
            if result.err() != expected {
                panic!("seed step {i} ({step:?}) gave {result:?}, not {expected:?}");
            }
        }
        run.finish();
    });
    if let Err(e) = outcome {
        let msg = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        assert!(
            !msg.starts_with("seed step "),
            "seed {name}: a call did not do what the seed expects: {msg}"
        );
        println!("session seed {name} breaks the quota invariant: {msg}");
    }
}

fn session_seeds() {
    use Step::*;
    // Sizes are in units of 256 bytes; VMM sizes in 2 MiB granules; stream 2 is one
    // of the session's own streams, 0 the legacy default stream.
    // Imports by process `who` (0: the session, 1: the other process of its VM, 2:
    // another VM's) of token `token` as it was handed out.
    let import_pool = |who, token| PoolImportShared {
        who,
        token,
        garble: 0,
    };
    let import_pointer = |who, pool, token| PointerImportShared {
        who,
        pool,
        token,
        garble: 0,
    };
    let seeds: &[(&str, Vec<Step>, Failing)] = &[
        (
            "memory",
            vec![
                Alloc { size: 16 },
                Memset {
                    pick: 0,
                    offset: 0,
                    len: 4096,
                    stream: 0,
                },
                CopyHtoD {
                    pick: 0,
                    offset: 16,
                    len: 1024,
                },
                Alloc { size: 16 },
                CopyDtoD {
                    dst: 1,
                    src: 0,
                    len: 4096,
                    stream: 6,
                },
                Sync { stream: 2 },
                Free { pick: 0 },
                Free { pick: 1 },
            ],
            vec![],
        ),
        (
            "quota",
            vec![
                Alloc { size: 24576 },
                Alloc { size: 16384 },
                Free { pick: 0 },
                Alloc { size: 16384 },
                Free { pick: 0 },
            ],
            // The second allocation is over the quota; the second free frees twice.
            vec![
                (1, CudaStatus::ErrorMemoryAllocation),
                (4, CudaStatus::ErrorInvalidValue),
            ],
        ),
        (
            "pool",
            vec![
                AllocAsync {
                    size: 4096,
                    stream: 2,
                },
                FreeAsync { pick: 0, stream: 2 },
                PoolSetAttr {
                    attr: 4,
                    value: 256,
                },
                Sync { stream: 2 },
                PoolGetAttr { attr: 5 },
                AllocAsync {
                    size: 4096,
                    stream: 2,
                },
                FreeAsync { pick: 1, stream: 2 },
                PoolTrim { keep: 0 },
                DeviceSync,
            ],
            vec![],
        ),
        (
            // The host-memory executor makes no graph memory nodes (an allocation
            // while capturing is refused there), so this graph only writes memory.
            "graph",
            vec![
                Alloc { size: 4096 },
                BeginCapture { stream: 2 },
                Memset {
                    pick: 0,
                    offset: 0,
                    len: 4096,
                    stream: 6,
                },
                CopyDtoD {
                    dst: 0,
                    src: 0,
                    len: 256,
                    stream: 6,
                },
                EndCapture { stream: 2 },
                Instantiate { graph: 0 },
                Launch { exec: 0, stream: 2 },
                Sync { stream: 2 },
                ExecDestroy { exec: 0 },
                GraphDestroy { graph: 0 },
            ],
            vec![],
        ),
        (
            "vmm",
            vec![
                Reserve { chunks: 2 },
                Create { chunks: 1 },
                Map {
                    reservation: 0,
                    handle: 0,
                    offset: 0,
                },
                SetAccess { mapping: 0 },
                Unmap { mapping: 0 },
                Release { handle: 0 },
                AddressFree { reservation: 0 },
            ],
            vec![],
        ),
        (
            "vmm_release_twice",
            vec![
                Reserve { chunks: 2 },
                Create { chunks: 1 },
                Map {
                    reservation: 0,
                    handle: 0,
                    offset: 0,
                },
                Release { handle: 0 },
                Release { handle: 0 },
                Unmap { mapping: 0 },
            ],
            // Releasing a released handle is an error.
            vec![(4, CudaStatus::ErrorInvalidValue)],
        ),
        (
            "reset",
            vec![
                Alloc { size: 4096 },
                AllocAsync {
                    size: 4096,
                    stream: 2,
                },
                Create { chunks: 1 },
                DeviceReset,
                Alloc { size: 4096 },
            ],
            vec![],
        ),
        (
            "big_graphs",
            vec![
                BeginCapture { stream: 2 },
                LaunchMany {
                    count: 99,
                    stream: 2,
                },
                EndCapture { stream: 2 },
                Instantiate { graph: 0 },
                Launch { exec: 0, stream: 2 },
                // A capture of 2,048 launches fits; its executable graph does not.
                BeginCapture { stream: 3 },
                LaunchMany {
                    count: 2047,
                    stream: 3,
                },
                EndCapture { stream: 3 },
                Instantiate { graph: 1 },
                // Another such capture is stopped partway, and leaves no room for an
                // executable graph of what it captured.
                BeginCapture { stream: 2 },
                LaunchMany {
                    count: 2047,
                    stream: 2,
                },
                EndCapture { stream: 2 },
                Instantiate { graph: 2 },
                GraphDestroy { graph: 2 },
                GraphDestroy { graph: 1 },
                ExecDestroy { exec: 0 },
                GraphDestroy { graph: 0 },
            ],
            vec![
                (8, CudaStatus::ErrorMemoryAllocation),
                (10, CudaStatus::ErrorMemoryAllocation),
                (12, CudaStatus::ErrorMemoryAllocation),
            ],
        ),
        (
            // A graph built by hand of thousands of kernel nodes: two child-graph
            // copies of a capture of 512 launches, 256 launches captured into it, and
            // a clone of the capture beside it.
            "built_graphs",
            vec![
                BeginCapture { stream: 2 },
                LaunchMany {
                    count: 511,
                    stream: 2,
                },
                EndCapture { stream: 2 },
                GraphCreate,
                AddChild { graph: 1, child: 0 },
                AddChild { graph: 1, child: 0 },
                CaptureToGraph {
                    graph: 1,
                    stream: 3,
                },
                LaunchMany {
                    count: 255,
                    stream: 3,
                },
                EndCapture { stream: 3 },
                Clone { graph: 0 },
                // 1,280 nodes beside 1,536 others: no room for their executable copies.
                Instantiate { graph: 1 },
                GraphDestroy { graph: 3 },
                GraphDestroy { graph: 0 },
                // Alone, they fit.
                Instantiate { graph: 1 },
                Launch { exec: 0, stream: 2 },
                Sync { stream: 2 },
                ExecUpdate { exec: 0, graph: 1 },
                // A child-graph node of the graph itself (a copy of its 1,280 nodes) no
                // longer fits beside its executable graph.
                AddChild { graph: 1, child: 1 },
                ExecDestroy { exec: 0 },
                GraphDestroy { graph: 1 },
            ],
            vec![
                (10, CudaStatus::ErrorMemoryAllocation),
                (17, CudaStatus::ErrorMemoryAllocation),
            ],
        ),
        (
            "pool_import",
            vec![
                PoolImport,
                AllocFromPool {
                    pool: 1,
                    size: 16,
                    stream: 2,
                },
                AllocFromPool {
                    pool: 0,
                    size: 16,
                    stream: 2,
                },
                FreeAsync { pick: 0, stream: 2 },
                Sync { stream: 2 },
            ],
            // An imported pool makes no allocations.
            vec![(1, CudaStatus::ErrorInvalidValue)],
        ),
        (
            "pool_pointers",
            vec![
                PoolImport,
                AllocFromPool {
                    pool: 0,
                    size: 16,
                    stream: 2,
                },
                PoolExportPointer { pick: 0 },
                // The test double has one address per allocation: refused there.
                PoolImportPointer { pool: 1, export: 1 },
                // A pool's export named as a pointer's.
                PoolImportPointer { pool: 1, export: 0 },
                // A pool that was not imported from the export's.
                PoolImportPointer { pool: 0, export: 1 },
                FreeAsync { pick: 0, stream: 2 },
                Sync { stream: 2 },
                // A freed allocation.
                PoolExportPointer { pick: 0 },
            ],
            vec![
                (3, CudaStatus::ErrorNotSupported),
                (4, CudaStatus::ErrorInvalidValue),
                (5, CudaStatus::ErrorInvalidValue),
                (8, CudaStatus::ErrorInvalidValue),
            ],
        ),
        (
            "ipc",
            vec![
                Alloc { size: 16 },
                IpcExport { pick: 0, offset: 0 },
                IpcPeerExport { size: 16 },
                // The other process's export, opened and written.
                IpcOpen { token: 1, flags: 1 },
                CopyHtoD {
                    pick: 1,
                    offset: 0,
                    len: 256,
                },
                // The session's own export: refused.
                IpcOpen { token: 0, flags: 0 },
                IpcClose { pick: 0 },
                IpcEvent { token: 0 },
                // A memory handle opened as an event: refused.
                IpcEvent { token: 1 },
                // The other process's physical allocation, imported and mapped.
                IpcPhysical { pick: 0 },
                Reserve { chunks: 1 },
                Map {
                    reservation: 0,
                    handle: 0,
                    offset: 0,
                },
                SetAccess { mapping: 0 },
                Unmap { mapping: 0 },
                Release { handle: 0 },
            ],
            vec![
                (5, CudaStatus::ErrorDeviceUninitialized),
                (8, CudaStatus::ErrorInvalidValue),
            ],
        ),
        (
            // A pool and an allocation of the session's offered to the other process of
            // its VM, imported there, then freed and destroyed in the order CUDA asks;
            // another VM's process, the session itself, tokens of the wrong kind, a
            // garbled one and stale ones are refused.
            "pool_share",
            vec![
                PoolImport,
                AllocFromPool {
                    pool: 0,
                    size: 16,
                    stream: 0,
                },
                PoolExportPointer { pick: 0 },
                PoolShare { export: 0 },
                PoolShare { export: 1 },
                // Offered again: the same token.
                PoolShare { export: 0 },
                import_pool(1, 0),
                import_pointer(1, 0, 1),
                import_pool(2, 0),
                import_pool(0, 0),
                import_pointer(1, 0, 0),
                import_pool(1, 1),
                PointerImportShared {
                    who: 1,
                    pool: 0,
                    token: 1,
                    garble: 1,
                },
                ProcessFree {
                    who: 1,
                    pick: 0,
                    how: 1,
                },
                ProcessFree {
                    who: 0,
                    pick: 0,
                    how: 3,
                },
                import_pointer(1, 0, 1),
                PoolShare { export: 1 },
                ProcessPoolDestroy { who: 0, pool: 0 },
                import_pool(1, 0),
                ProcessPoolDestroy { who: 1, pool: 0 },
            ],
            vec![
                (8, CudaStatus::ErrorInvalidValue),
                (9, CudaStatus::ErrorDeviceUninitialized),
                (10, CudaStatus::ErrorInvalidValue),
                (11, CudaStatus::ErrorInvalidValue),
                (12, CudaStatus::ErrorInvalidValue),
                (15, CudaStatus::ErrorInvalidValue),
                (16, CudaStatus::ErrorInvalidValue),
                (18, CudaStatus::ErrorInvalidValue),
            ],
        ),
        (
            // The other process's pool and allocation imported by the session, the
            // exporter freeing and destroying them first while the session still maps
            // the memory; another VM's export, and a forged token.
            "pool_share_odd_orders",
            vec![
                ProcessPoolExport { from: 0, size: 16 },
                import_pool(0, 0),
                import_pointer(0, 0, 1),
                CopyHtoD {
                    pick: 0,
                    offset: 0,
                    len: 256,
                },
                ProcessFree {
                    who: 1,
                    pick: 0,
                    how: 0,
                },
                ProcessPoolDestroy { who: 1, pool: 0 },
                CopyHtoD {
                    pick: 0,
                    offset: 0,
                    len: 256,
                },
                ProcessFree {
                    who: 0,
                    pick: 0,
                    how: 1,
                },
                import_pool(0, 0),
                ProcessPoolExport { from: 1, size: 16 },
                import_pool(0, 2),
                import_pool(2, 2),
                PoolImportShared {
                    who: 0,
                    token: 9,
                    garble: 3,
                },
            ],
            vec![
                (8, CudaStatus::ErrorInvalidValue),
                (10, CudaStatus::ErrorInvalidValue),
                (11, CudaStatus::ErrorDeviceUninitialized),
                (12, CudaStatus::ErrorInvalidValue),
            ],
        ),
        (
            // The other process fills the VM's registry (a pool and 23 of its
            // allocations): the session's export is refused until one is freed;
            // another VM's exports are its own.
            "pool_share_flood",
            vec![
                Flood { who: 1, count: 23 },
                Alloc { size: 1 },
                IpcExport { pick: 0, offset: 0 },
                Flood {
                    who: 2,
                    count: 0x20 | 3,
                },
                ProcessFree {
                    who: 1,
                    pick: 5,
                    how: 0,
                },
                IpcExport { pick: 0, offset: 0 },
                import_pool(0, 0),
                import_pointer(0, 0, 1),
                ProcessFree {
                    who: 0,
                    pick: 1,
                    how: 2,
                },
            ],
            vec![
                (0, CudaStatus::ErrorMemoryAllocation),
                (2, CudaStatus::ErrorMemoryAllocation),
            ],
        ),
        (
            // Copies through the peer link: a send to this host's own endpoint and
            // its receive (the bytes checked both ways), a delivery cut short, a send
            // to an endpoint not allowed, a forged ticket, a range past the guest's
            // memory, a size near 2^64, a spent ticket, then the link cut.
            "peer_ops",
            vec![
                Alloc { size: 64 },
                Alloc { size: 64 },
                CopyHtoD {
                    pick: 0,
                    offset: 0,
                    len: 4096,
                },
                PeerExpect {
                    pick: 1,
                    offset: 0,
                    size: 64,
                },
                PeerSend {
                    pick: 0,
                    offset: 0,
                    size: 64,
                    ticket: 0,
                    to: 0,
                },
                PeerReceive {
                    pick: 1,
                    offset: 0,
                    size: 64,
                    ticket: 0,
                },
                PeerExpect {
                    pick: 1,
                    offset: 256,
                    size: 32,
                },
                PeerDeliver {
                    ticket: 1,
                    sent: 16,
                },
                PeerReceive {
                    pick: 1,
                    offset: 256,
                    size: 32,
                    ticket: 1,
                },
                PeerSend {
                    pick: 0,
                    offset: 0,
                    size: 64,
                    ticket: 0,
                    to: 1,
                },
                PeerReceive {
                    pick: 1,
                    offset: 0,
                    size: 64,
                    ticket: 0xFF,
                },
                PeerExpect {
                    pick: 1,
                    offset: 0x4000,
                    size: 64,
                },
                PeerExpect {
                    pick: 1,
                    offset: 0,
                    size: 0x8001,
                },
                PeerReceive {
                    pick: 1,
                    offset: 0,
                    size: 64,
                    ticket: 0,
                },
                PeerCut,
                PeerSend {
                    pick: 0,
                    offset: 0,
                    size: 64,
                    ticket: 0,
                    to: 0,
                },
                PeerExpect {
                    pick: 1,
                    offset: 0,
                    size: 64,
                },
            ],
            vec![
                (8, CudaStatus::ErrorDevicesUnavailable),
                (9, CudaStatus::ErrorNotPermitted),
                (10, CudaStatus::ErrorInvalidValue),
                (11, CudaStatus::ErrorInvalidValue),
                (12, CudaStatus::ErrorInvalidValue),
                (13, CudaStatus::ErrorInvalidValue),
                (15, CudaStatus::ErrorDevicesUnavailable),
                (16, CudaStatus::ErrorNotSupported),
            ],
        ),
        (
            // A copy of more than one chunk of the link (1 MiB) each way, and
            // another host's delivery of a whole ticket, received at an offset.
            "peer_big",
            vec![
                Alloc { size: 0x2000 },
                Alloc { size: 0x2000 },
                CopyHtoD {
                    pick: 0,
                    offset: 0x100,
                    len: 4096,
                },
                PeerExpect {
                    pick: 1,
                    offset: 0,
                    size: 0x6000,
                },
                PeerSend {
                    pick: 0,
                    offset: 0,
                    size: 0x6000,
                    ticket: 0,
                    to: 0,
                },
                PeerReceive {
                    pick: 1,
                    offset: 0,
                    size: 0x6000,
                    ticket: 0,
                },
                PeerExpect {
                    pick: 0,
                    offset: 0x40,
                    size: 0x100,
                },
                PeerDeliver {
                    ticket: 1,
                    sent: 0x100,
                },
                PeerReceive {
                    pick: 0,
                    offset: 0x40,
                    size: 0x100,
                    ticket: 1,
                },
            ],
            vec![],
        ),
    ];
    for (name, steps, failing) in seeds {
        check_session(name, steps, failing);
        write("session", name, &Step::encode(steps));
    }
}

/// The peer target's seeds, each run through the target's checks before it is written.
fn peer_seeds() {
    use PeerAction::*;
    let whole = |ticket, size, sent| Deliver {
        ticket,
        size,
        damage: 0,
        flip: 0,
        sent,
    };
    // A transfer gets through once; its ticket is spent.
    let transfer = vec![
        Expect {
            worker: 0,
            size: 4096,
        },
        whole(0, 4096, 4096),
        Receive {
            worker: 0,
            ticket: 0,
            size: 4096,
        },
        whole(0, 4096, 4096),
        Receive {
            worker: 0,
            ticket: 0,
            size: 4096,
        },
    ];
    // What a guest or a stranger could try instead.
    let mut refusals = vec![
        Expect {
            worker: 0,
            size: 100,
        },
        // Another worker's ticket.
        Receive {
            worker: 1,
            ticket: 0,
            size: 100,
        },
        // Another size: refused, and the ticket spent.
        whole(0, 99, 99),
        Expect {
            worker: 0,
            size: 64,
        },
        // Not a transfer header (its magic), a header cut short.
        Deliver {
            ticket: 1,
            size: 64,
            damage: 0,
            flip: 0xFF,
            sent: 64,
        },
        Deliver {
            ticket: 1,
            size: 64,
            damage: 33,
            flip: 0,
            sent: 0,
        },
        // A sender that stops after 10 of its 64 bytes.
        whole(1, 64, 10),
        Receive {
            worker: 0,
            ticket: 1,
            size: 64,
        },
        Send {
            worker: 0,
            ticket: 1,
            size: 64,
            to: 0,
        },
        Send {
            worker: 0,
            ticket: 1,
            size: 64,
            to: 1,
        },
    ];
    for _ in 0..17 {
        refusals.push(Expect { worker: 1, size: 8 });
    }
    refusals.extend([Gone { worker: 1 }, whole(2, 8, 8)]);
    // Worker messages as bytes: well formed, unknown, too long, malformed, the
    // broker's own.
    let mut send = vec![7u8; 16];
    send.extend_from_slice(&64u64.to_le_bytes());
    send.extend_from_slice(peer::ALLOWED.as_bytes());
    let mut long_endpoint = send[..24].to_vec();
    long_endpoint.extend(std::iter::repeat_n(b'a', 300));
    let raw = |tag: u8, payload: &[u8]| Raw {
        worker: 0,
        tag,
        claimed: payload.len() as u32,
        payload: payload.to_vec(),
    };
    let raw_messages = vec![
        raw(1, &4096u64.to_le_bytes()),
        raw(2, &send),
        raw(3, &[9; 24]),
        raw(2, &long_endpoint),
        raw(1, &[1; 7]),
        Raw {
            worker: 1,
            tag: 5,
            claimed: (1 << 20) + 1,
            payload: vec![],
        },
        raw(99, &[]),
        raw(5, &[1, 2, 3]),
        raw(18, &[0]),
        raw(4, &[]),
    ];
    for (name, actions) in [
        ("transfer", transfer),
        ("refusals", refusals),
        ("raw_messages", raw_messages),
    ] {
        let bytes = PeerAction::encode(&actions);
        assert_eq!(
            PeerAction::decode(&bytes),
            actions,
            "seed {name} round-trips"
        );
        peer::run(&bytes);
        write("peer", name, &bytes);
    }
}

fn main() {
    frame_seeds();
    handshake_seeds();
    fatbin_seeds();
    dispatch_seeds();
    vsock_seeds();
    session_seeds();
    peer_seeds();
    println!("seeds written to {}/corpus", env!("CARGO_MANIFEST_DIR"));
}
