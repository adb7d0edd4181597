//! What the fuzz targets share with each other and with the seed generator
//! (`examples/seeds.rs`): how a host session is set up, and the two structured input
//! formats. Each format has its encoder next to its decoder, so seeds and targets
//! cannot drift apart (`cargo test --manifest-path tests/fuzz/Cargo.toml --lib` checks
//! that they round-trip).

use std::io::Write;

pub mod fake_broker;
pub mod peer;
pub mod session;

use vmcuda_host::executor::host_memory::HostMemoryExecutor;
use vmcuda_host::policy::{Caller, Policy};
use vmcuda_host::session::Session;
use vmcuda_host::worker;
use vmcuda_wire::frame::{self, FrameError, FrameHeader, FLAG_NO_REPLY};
use vmcuda_wire::handshake::{caps, PROTOCOL_VERSION, RUNTIME_VERSION};
use vmcuda_wire::op::{Hello, Op};

/// "Device memory" of the fuzzed host-memory executor: small, so absurd sizes fail
/// with a CUDA error quickly instead of exhausting the fuzzer's memory.
pub const FUZZ_DEVICE_MEMORY: u64 = 64 << 20;

/// Serve `input` as one guest connection to a fresh host-memory session, writing the
/// replies to `out`. The only place the targets build a session: adapt it here when
/// `Session::new` or `worker::serve` change.
pub fn serve_host_memory(input: &[u8], out: &mut impl Write) -> Result<(), FrameError> {
    // Admitted the way a local program is, with a quota and small limits, so the fuzzer
    // also reaches the quota, limit and range checks.
    let open = |hello: &Hello| {
        let mut grant = Policy::builtin().admit(&Caller::Local { pid: None }, &hello.token)?;
        grant.memory_quota = Some(FUZZ_DEVICE_MEMORY / 2);
        grant.max_streams = 16;
        grant.max_events = 16;
        grant.max_modules = 4;
        let exec =
            HostMemoryExecutor::new(FUZZ_DEVICE_MEMORY, None).expect("no launch log to open");
        Ok(Session::new(Box::new(exec), grant))
    };
    worker::serve(input, out, Default::default(), open, None, None).map(|_ended| ())
}

/// One whole frame, as a guest sends it.
pub fn frame(
    op: u16,
    flags: u16,
    request_id: u64,
    device: i32,
    meta: &[u8],
    data: &[u8],
) -> Vec<u8> {
    let header =
        FrameHeader::new(op, flags, request_id, meta.len(), data.len()).with_device(device);
    let mut out = Vec::with_capacity(frame::HEADER_LEN + meta.len() + data.len());
    frame::write_frame(&mut out, &header, meta, data).expect("writing to a Vec cannot fail");
    out
}

/// The hello a current guest library sends.
pub fn valid_hello() -> Hello {
    Hello {
        protocol: PROTOCOL_VERSION,
        runtime_version: RUNTIME_VERSION,
        capabilities: caps::ASYNC_REQUESTS | caps::CONSOLE,
        token: Vec::new(),
        client: "fuzz".into(),
        pid: 1,
    }
}

/// The hello frame (request id 1) that opens every `dispatch` input.
pub fn hello_frame() -> Vec<u8> {
    let meta = postcard::to_stdvec(&valid_hello()).expect("hello encodes");
    frame(Op::Hello.code(), 0, 1, 0, &meta, &[])
}

/// Read `n` little-endian bytes as an integer; missing bytes read as zero.
fn take_uint(input: &mut &[u8], n: usize) -> u64 {
    let mut v = 0u64;
    for i in 0..n {
        if let Some((&b, rest)) = input.split_first() {
            v |= u64::from(b) << (8 * i);
            *input = rest;
        }
    }
    v
}

/// Up to `n` bytes (fewer when the input ends first).
fn take_bytes<'a>(input: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (head, rest) = input.split_at(n.min(input.len()));
    *input = rest;
    head
}

/// The `dispatch` target's structured format: a run of requests whose framing is
/// always right, so the fuzzer spends its effort on the argument blocks and the order
/// of calls rather than on rediscovering frame headers.
///
/// Record: `u8 op` (an index into [`Op::ALL`], or 0xFF followed by a raw `u16` code),
/// `u8 flags` (bit 0: no reply wanted; bit 1: address device 1, which does not exist),
/// `u16 meta length`, the meta bytes, `u16 data length`, the data bytes. Lengths are
/// cut short where the input ends.
pub mod requests {
    use super::*;

    pub const RAW_OP: u8 = 0xFF;
    pub const NO_REPLY: u8 = 1;
    pub const OTHER_DEVICE: u8 = 2;

    #[derive(Clone, Debug)]
    pub struct Request {
        pub op: u16,
        pub flags: u8,
        pub meta: Vec<u8>,
        pub data: Vec<u8>,
    }

    impl Request {
        pub fn new(op: Op, meta: Vec<u8>, data: Vec<u8>) -> Request {
            Request {
                op: op.code(),
                flags: 0,
                meta,
                data,
            }
        }

        /// A request of the table's type `R` with these arguments.
        pub fn of<R: vmcuda_wire::op::Request>(req: &R, data: &[u8]) -> Request {
            let meta = postcard::to_stdvec(req).expect("requests encode");
            Request::new(R::OP, meta, data.to_vec())
        }

        pub fn no_reply(mut self) -> Request {
            self.flags |= NO_REPLY;
            self
        }
    }

    /// Encode requests in the structured format.
    pub fn encode(requests: &[Request]) -> Vec<u8> {
        let mut out = Vec::new();
        for r in requests {
            match Op::ALL.iter().position(|op| op.code() == r.op) {
                Some(i) => out.push(i as u8),
                None => {
                    out.push(RAW_OP);
                    out.extend_from_slice(&r.op.to_le_bytes());
                }
            }
            out.push(r.flags);
            for part in [&r.meta, &r.data] {
                let len = u16::try_from(part.len()).expect("seed parts fit in u16 lengths");
                out.extend_from_slice(&len.to_le_bytes());
                out.extend_from_slice(part);
            }
        }
        out
    }

    /// Decode the structured format into the frame stream after the hello, and the
    /// request ids that must be answered, in order.
    pub fn decode(mut input: &[u8]) -> (Vec<u8>, Vec<u64>) {
        let mut stream = Vec::new();
        let mut answered = Vec::new();
        let mut request_id = 1u64;
        while !input.is_empty() {
            let selector = take_uint(&mut input, 1) as u8;
            let op = if selector == RAW_OP {
                take_uint(&mut input, 2) as u16
            } else {
                Op::ALL[usize::from(selector) % Op::ALL.len()].code()
            };
            let flags = take_uint(&mut input, 1) as u8;
            let meta_len = take_uint(&mut input, 2) as usize;
            let meta = take_bytes(&mut input, meta_len);
            let data_len = take_uint(&mut input, 2) as usize;
            let data = take_bytes(&mut input, data_len);
            request_id += 1;
            let wire_flags = if flags & NO_REPLY != 0 {
                FLAG_NO_REPLY
            } else {
                0
            };
            let device = i32::from(flags & OTHER_DEVICE != 0);
            stream.extend(frame(op, wire_flags, request_id, device, meta, data));
            if wire_flags & FLAG_NO_REPLY == 0 {
                answered.push(request_id);
            }
        }
        (stream, answered)
    }
}

/// The `vsock_packet` target's format: a script of events for the vsock muxer, the way
/// the device and the host sockets would produce them. Each action starts with a tag
/// byte (taken modulo the number of actions); missing bytes read as zero.
pub mod vsock {
    use super::*;
    use vmcuda_vmm_glue::packet::{Header, HEADER_SIZE};

    /// The guest CID and host port of the fuzzed muxer.
    pub const GUEST_CID: u64 = 3;
    pub const PORT: u32 = vmcuda_wire::handshake::WELL_KNOWN_PORT as u32;
    /// Guest source ports of [`Action::Packet`] are this plus a byte.
    pub const GUEST_PORT_BASE: u32 = 40000;

    #[derive(Clone, Debug, PartialEq, Eq)]
    pub enum Action {
        /// A tx chain as the device reads it: 44 header bytes, then a payload of at most
        /// the header's `len` (the device never reads more).
        Raw {
            header: [u8; HEADER_SIZE],
            payload: Vec<u8>,
        },
        /// A packet from the guest's CID to the vmcuda port, with a payload of `len`
        /// copies of `fill` (so large payloads cost the fuzzer four bytes).
        Packet {
            op: u8,
            port: u8,
            flags: u8,
            buf_alloc: u32,
            fwd_cnt: u32,
            len: u16,
            fill: u8,
        },
        /// The host stream of the `conn`th connection ever made became ready.
        Ready {
            conn: u8,
            readable: bool,
            writable: bool,
        },
        /// That stream's worker writes `len` bytes for the guest.
        HostSend { conn: u8, len: u16 },
        /// That stream accepts `room` more bytes before it would block.
        HostRoom { conn: u8, room: u16 },
        /// That stream's worker exits (end of stream after what it wrote).
        HostEof { conn: u8 },
        /// Writes to that stream fail from now on.
        HostBroken { conn: u8 },
        /// The guest offers an rx buffer with room for `max_payload` bytes of payload.
        Rx { max_payload: u16 },
        /// The guest driver restarted: forget every connection.
        Reset,
        /// Whether spawning the host side of a new connection fails.
        ConnectFails(bool),
    }

    const TAGS: u8 = 10;

    impl Action {
        /// The header of a [`Action::Packet`].
        pub fn packet_header(
            op: u8,
            port: u8,
            flags: u8,
            buf_alloc: u32,
            fwd_cnt: u32,
            len: u16,
        ) -> Header {
            Header {
                src_cid: GUEST_CID,
                dst_cid: vmcuda_vmm_glue::packet::HOST_CID,
                src_port: GUEST_PORT_BASE + u32::from(port),
                dst_port: PORT,
                len: len.into(),
                type_: vmcuda_vmm_glue::packet::TYPE_STREAM,
                op: op.into(),
                flags: flags.into(),
                buf_alloc,
                fwd_cnt,
            }
        }
    }

    pub fn encode(actions: &[Action]) -> Vec<u8> {
        let mut out = Vec::new();
        for a in actions {
            match a {
                Action::Raw { header, payload } => {
                    out.push(0);
                    out.extend_from_slice(header);
                    let len = u16::try_from(payload.len()).expect("seed payloads fit in u16");
                    out.extend_from_slice(&len.to_le_bytes());
                    out.extend_from_slice(payload);
                }
                Action::Packet {
                    op,
                    port,
                    flags,
                    buf_alloc,
                    fwd_cnt,
                    len,
                    fill,
                } => {
                    out.extend([1, *op, *port, *flags]);
                    out.extend_from_slice(&buf_alloc.to_le_bytes());
                    out.extend_from_slice(&fwd_cnt.to_le_bytes());
                    out.extend_from_slice(&len.to_le_bytes());
                    out.push(*fill);
                }
                Action::Ready {
                    conn,
                    readable,
                    writable,
                } => {
                    out.extend([2, *conn, u8::from(*readable) | u8::from(*writable) << 1]);
                }
                Action::HostSend { conn, len } => {
                    out.extend([3, *conn]);
                    out.extend_from_slice(&len.to_le_bytes());
                }
                Action::HostRoom { conn, room } => {
                    out.extend([4, *conn]);
                    out.extend_from_slice(&room.to_le_bytes());
                }
                Action::HostEof { conn } => out.extend([5, *conn]),
                Action::HostBroken { conn } => out.extend([6, *conn]),
                Action::Rx { max_payload } => {
                    out.push(7);
                    out.extend_from_slice(&max_payload.to_le_bytes());
                }
                Action::Reset => out.push(8),
                Action::ConnectFails(fails) => out.extend([9, u8::from(*fails)]),
            }
        }
        out
    }

    pub fn decode(mut input: &[u8]) -> Vec<Action> {
        let mut actions = Vec::new();
        while let Some((&tag, rest)) = input.split_first() {
            input = rest;
            let action = match tag % TAGS {
                0 => {
                    let mut header = [0u8; HEADER_SIZE];
                    let got = take_bytes(&mut input, HEADER_SIZE);
                    header[..got.len()].copy_from_slice(got);
                    let claimed = Header::from_bytes(&header).len as usize;
                    let len = take_uint(&mut input, 2) as usize;
                    let payload = take_bytes(&mut input, len.min(claimed)).to_vec();
                    Action::Raw { header, payload }
                }
                1 => Action::Packet {
                    op: take_uint(&mut input, 1) as u8,
                    port: take_uint(&mut input, 1) as u8,
                    flags: take_uint(&mut input, 1) as u8,
                    buf_alloc: take_uint(&mut input, 4) as u32,
                    fwd_cnt: take_uint(&mut input, 4) as u32,
                    len: take_uint(&mut input, 2) as u16,
                    fill: take_uint(&mut input, 1) as u8,
                },
                2 => {
                    let conn = take_uint(&mut input, 1) as u8;
                    let bits = take_uint(&mut input, 1);
                    Action::Ready {
                        conn,
                        readable: bits & 1 != 0,
                        writable: bits & 2 != 0,
                    }
                }
                3 => Action::HostSend {
                    conn: take_uint(&mut input, 1) as u8,
                    len: take_uint(&mut input, 2) as u16,
                },
                4 => Action::HostRoom {
                    conn: take_uint(&mut input, 1) as u8,
                    room: take_uint(&mut input, 2) as u16,
                },
                5 => Action::HostEof {
                    conn: take_uint(&mut input, 1) as u8,
                },
                6 => Action::HostBroken {
                    conn: take_uint(&mut input, 1) as u8,
                },
                7 => Action::Rx {
                    max_payload: take_uint(&mut input, 2) as u16,
                },
                8 => Action::Reset,
                _ => Action::ConnectFails(take_uint(&mut input, 1) & 1 != 0),
            };
            actions.push(action);
        }
        actions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_format_round_trips() {
        let reqs = vec![
            requests::Request::new(Op::MemAlloc, vec![1, 2], vec![]),
            requests::Request {
                op: 0xEEEE,
                flags: 0,
                meta: vec![],
                data: vec![9; 3],
            }
            .no_reply(),
        ];
        let (stream, answered) = requests::decode(&requests::encode(&reqs));
        assert_eq!(answered, vec![2]);
        let mut r = &stream[..];
        let (h, meta) = frame::read_head(&mut r).unwrap();
        assert_eq!((h.op.get(), meta), (Op::MemAlloc.code(), vec![1, 2]));
        let (h, _) = frame::read_head(&mut r).unwrap();
        assert_eq!(
            (h.op.get(), h.data_len.get(), h.has(FLAG_NO_REPLY)),
            (0xEEEE, 3, true)
        );
    }

    #[test]
    fn session_format_round_trips() {
        use session::Step;
        let steps = vec![
            Step::Alloc { size: 0x1234 },
            Step::Memset {
                pick: 1,
                offset: 0x0203,
                len: 0x0405,
                stream: 6,
            },
            Step::CopyHtoD {
                pick: 7,
                offset: 8,
                len: 9,
            },
            Step::CopyDtoD {
                dst: 1,
                src: 2,
                len: 0x0304,
                stream: 5,
            },
            Step::AllocAsync {
                size: 0x0102,
                stream: 3,
            },
            Step::PoolSetAttr {
                attr: 4,
                value: 256,
            },
            Step::Map {
                reservation: 1,
                handle: 2,
                offset: 3,
            },
            Step::DeviceReset,
            Step::GraphCreate,
            Step::CaptureToGraph {
                graph: 1,
                stream: 2,
            },
            Step::AddChild { graph: 3, child: 4 },
            Step::Clone { graph: 5 },
            Step::ExecUpdate { exec: 6, graph: 7 },
            Step::PoolExportPointer { pick: 8 },
            Step::PoolImportPointer {
                pool: 9,
                export: 10,
            },
            Step::PoolShare { export: 11 },
            Step::ProcessPoolExport {
                from: 1,
                size: 0x0a0b,
            },
            Step::PoolImportShared {
                who: 2,
                token: 3,
                garble: 4,
            },
            Step::PointerImportShared {
                who: 5,
                pool: 6,
                token: 7,
                garble: 8,
            },
            Step::ProcessFree {
                who: 1,
                pick: 2,
                how: 3,
            },
            Step::ProcessPoolDestroy { who: 4, pool: 5 },
            Step::Flood {
                who: 6,
                count: 0x27,
            },
            Step::PeerExpect {
                pick: 1,
                offset: 0x0203,
                size: 0x0405,
            },
            Step::PeerSend {
                pick: 6,
                offset: 0x0708,
                size: 0x090a,
                ticket: 11,
                to: 12,
            },
            Step::PeerDeliver {
                ticket: 13,
                sent: 0x8e0f,
            },
            Step::PeerReceive {
                pick: 16,
                offset: 0x1112,
                size: 0x1314,
                ticket: 21,
            },
            Step::PeerCut,
        ];
        assert_eq!(Step::decode(&Step::encode(&steps)), steps);
    }

    #[test]
    fn peer_format_round_trips() {
        use peer::Action;
        let actions = vec![
            Action::Raw {
                worker: 1,
                tag: 2,
                claimed: 3,
                payload: vec![4, 5],
            },
            Action::Expect { worker: 0, size: 6 },
            Action::Send {
                worker: 1,
                ticket: 7,
                size: 8,
                to: 9,
            },
            Action::Receive {
                worker: 0,
                ticket: 10,
                size: 11,
            },
            Action::Deliver {
                ticket: 12,
                size: 13,
                damage: 14,
                flip: 15,
                sent: 16,
            },
            Action::Gone { worker: 17 },
        ];
        assert_eq!(
            peer::Action::decode(&peer::Action::encode(&actions)),
            actions
        );
    }

    #[test]
    fn vsock_format_round_trips() {
        use vsock::Action;
        let actions = vec![
            Action::Packet {
                op: 1,
                port: 2,
                flags: 0,
                buf_alloc: 4096,
                fwd_cnt: 0,
                len: 0,
                fill: 0,
            },
            Action::Ready {
                conn: 0,
                readable: true,
                writable: false,
            },
            Action::HostSend { conn: 0, len: 300 },
            Action::Rx { max_payload: 4096 },
            Action::Reset,
            Action::ConnectFails(true),
        ];
        assert_eq!(vsock::decode(&vsock::encode(&actions)), actions);
    }
}
