//! The hostile guest of the load test (issue 34): while the others run, one more
//! guest floods the daemon with silent connections (from a source of its own: TCP
//! from 127.0.0.2), with requests that each make its worker write a log line (unknown
//! ops, repeated hellos), and with graphs of many nodes kept until the host refuses
//! more. The load driver checks that the other guests still pass; the test checks
//! that the host log stayed within the worker's rate limit.

use std::io::Read;
use std::net::{Ipv4Addr, TcpStream};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use vmcuda_wire::frame::{self, FrameHeader};
use vmcuda_wire::op::{
    GraphAddNode, GraphCreate, GraphDestroy, GraphHandle, GraphMade, Hello, Op, PlainNode,
};
use vmcuda_wire::transport::{connect_tcp_from, ServerAddr, Stream};
use vmcuda_wire::CudaStatus;

/// What the hostile guest attacks.
#[derive(Clone, Debug, Default)]
pub struct Hostile {
    /// The daemon's TCP listener (`HOST:PORT`, loopback) for the connection flood;
    /// without one there is no connection flood (over the Unix socket the flood would
    /// share its source, the uid, with the other guests).
    pub flood_tcp: Option<String>,
    /// Where its admitted connections (log lines, graphs) go, and the token it presents
    /// there: a VM of its own (a `[[vm]]` admitted by that token over TCP), so that what
    /// it exhausts is its VM's, not the other guests'. Without it they go to the load's
    /// own server, as one more guest of the same VM.
    pub own_vm: Option<(ServerAddr, String)>,
}

/// What the hostile guest did.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostileReport {
    /// Silent connections it opened (the daemon closed most at once).
    pub connections: u64,
    /// Requests that each cost its worker a log line.
    pub bad_requests: u64,
    /// Graph nodes the host accepted, and graph requests it refused.
    pub graph_nodes: u64,
    pub graph_refusals: u64,
}
/// Whether the host has closed `s` (without waiting).
fn closed_now(s: &TcpStream) -> bool {
    let _ = s.set_nonblocking(true);
    let mut b = [0u8; 1];
    match (&*s).read(&mut b) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// Start the hostile guest against `server` until `stop`; its threads' report.
pub fn start(server: ServerAddr, hostile: &Hostile, stop: Instant) -> JoinHandle<HostileReport> {
    let flood = hostile.flood_tcp.clone().map(|addr| {
        thread::spawn(move || {
            let mut open: Vec<TcpStream> = Vec::new();
            let mut opened = 0;
            while Instant::now() < stop {
                if let Ok(s) = connect_tcp_from(Ipv4Addr::new(127, 0, 0, 2), &addr) {
                    open.push(s);
                    opened += 1;
                }
                if open.len() >= 128 {
                    open.retain(|s| !closed_now(s));
                }
                thread::sleep(Duration::from_millis(5));
            }
            opened
        })
    });
    let (server, token) = hostile.own_vm.clone().unwrap_or((server, String::new()));
    let logs = {
        let (server, token) = (server.clone(), token.clone());
        thread::spawn(move || bad_requests(&server, &token, stop))
    };
    let graphs = thread::spawn(move || graphs(&server, &token, stop));
    thread::spawn(move || {
        let mut report = HostileReport {
            connections: flood.map_or(0, |f| f.join().unwrap_or(0)),
            bad_requests: logs.join().unwrap_or(0),
            ..HostileReport::default()
        };
        (report.graph_nodes, report.graph_refusals) = graphs.join().unwrap_or((0, 0));
        report
    })
}

fn send(s: &mut Stream, op: u16, meta: &[u8], data: &[u8]) -> std::io::Result<()> {
    let h = FrameHeader::new(op, 0, 9, meta.len(), data.len());
    frame::write_frame(s, &h, meta, data)
}

/// One reply's status and meta (`None`: the connection is gone).
fn reply(s: &mut Stream) -> Option<(CudaStatus, Vec<u8>)> {
    let (h, meta) = frame::read_head(s).ok()?;
    frame::read_data(s, &h).ok()?;
    Some((CudaStatus(h.status.get()), meta))
}

fn admitted(server: &ServerAddr, token: &str, name: &str) -> Option<(Stream, Hello)> {
    let mut s = Stream::connect(server, None).ok()?;
    let hello = Hello {
        protocol: vmcuda_wire::handshake::PROTOCOL_VERSION,
        runtime_version: vmcuda_wire::handshake::RUNTIME_VERSION,
        capabilities: 0,
        token: token.as_bytes().to_vec(),
        client: name.into(),
        pid: std::process::id(),
    };
    let meta = postcard::to_stdvec(&hello).ok()?;
    send(&mut s, Op::Hello.code(), &meta, &[]).ok()?;
    (reply(&mut s)?.0 == CudaStatus::Success).then_some((s, hello))
}

/// Unknown ops and repeated hellos on one admitted connection, as fast as the worker
/// answers them; the count sent.
fn bad_requests(server: &ServerAddr, token: &str, stop: Instant) -> u64 {
    let Some((mut s, hello)) = admitted(server, token, "hostile-logs") else {
        return 0;
    };
    let hello = postcard::to_stdvec(&hello).unwrap_or_default();
    let mut sent = 0;
    while Instant::now() < stop {
        let (op, meta) = if sent % 2 == 0 {
            (0xEEEE, &[1u8, 2, 3][..])
        } else {
            (Op::Hello.code(), &hello[..])
        };
        if send(&mut s, op, meta, &[]).is_err() || reply(&mut s).is_none() {
            break;
        }
        sent += 1;
    }
    sent
}

/// Graphs of empty nodes, kept, until the host refuses one; then they are destroyed
/// and it starts over. (Nodes accepted, requests refused.)
fn graphs(server: &ServerAddr, token: &str, stop: Instant) -> (u64, u64) {
    let Some((mut s, _)) = admitted(server, token, "hostile-graphs") else {
        return (0, 0);
    };
    let (mut nodes, mut refusals) = (0, 0);
    let mut held: Vec<GraphHandle> = Vec::new();
    let call = |s: &mut Stream, op: Op, meta: Vec<u8>| -> Option<(CudaStatus, Vec<u8>)> {
        send(s, op.code(), &meta, &[]).ok()?;
        reply(s)
    };
    'run: while Instant::now() < stop {
        let meta = postcard::to_stdvec(&GraphCreate { flags: 0 }).unwrap_or_default();
        let Some((status, made)) = call(&mut s, Op::GraphCreate, meta) else {
            break;
        };
        let graph = match postcard::from_bytes::<GraphMade>(&made) {
            Ok(m) if status == CudaStatus::Success => m.graph,
            _ => {
                refusals += 1;
                // Each destroy's reply read, so the next create reads its own.
                for graph in held.drain(..) {
                    let meta = postcard::to_stdvec(&GraphDestroy { graph }).unwrap_or_default();
                    if call(&mut s, Op::GraphDestroy, meta).is_none() {
                        break 'run;
                    }
                }
                continue;
            }
        };
        held.push(graph);
        for _ in 0..4096 {
            let add = GraphAddNode {
                graph,
                dependencies: vec![],
                node: PlainNode::Empty,
            };
            let meta = postcard::to_stdvec(&add).unwrap_or_default();
            match call(&mut s, Op::GraphAddNode, meta) {
                Some((CudaStatus::Success, _)) => nodes += 1,
                Some(_) => {
                    refusals += 1;
                    break;
                }
                None => break 'run,
            }
            if Instant::now() >= stop {
                break 'run;
            }
        }
    }
    (nodes, refusals)
}
