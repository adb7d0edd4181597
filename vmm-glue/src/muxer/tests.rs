use super::testing::*;
use super::*;
use crate::packet::{OP_RESPONSE, SHUTDOWN_BOTH, SHUTDOWN_RCV, SHUTDOWN_SEND};

const GUEST: u64 = 3;
const PORT: u32 = 7731;
const GPORT: u32 = 40000;

fn muxer() -> (Muxer<FakeConnector>, FakeConnector) {
    let conn = FakeConnector::new();
    let mut cfg = MuxerConfig::new(GUEST, PORT);
    cfg.buf_alloc = 4096;
    cfg.max_connections = 4;
    (Muxer::new(cfg, conn.clone()), conn)
}

fn guest(op: u16, src_port: u32, len: u32) -> Header {
    Header {
        src_cid: GUEST,
        dst_cid: HOST_CID,
        src_port,
        dst_port: PORT,
        len,
        type_: TYPE_STREAM,
        op,
        flags: 0,
        buf_alloc: 65536,
        fwd_cnt: 0,
    }
}

/// Drain every packet the muxer has for the guest.
fn drain(m: &mut Muxer<FakeConnector>, max_payload: usize) -> Vec<(Header, Vec<u8>)> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(h) = m.next_rx_packet(max_payload, &mut buf) {
        assert_eq!(h.len as usize, buf.len(), "header len matches payload");
        out.push((h, buf.clone()));
        assert!(out.len() < 10_000, "muxer keeps producing packets");
    }
    assert!(!m.has_rx_work() || m.next_rx_packet(max_payload, &mut buf).is_none());
    out
}

fn ops(pkts: &[(Header, Vec<u8>)]) -> Vec<u16> {
    pkts.iter().map(|(h, _)| h.op).collect()
}

/// Connect from `port` and check the RESPONSE; returns the connection id.
fn connect(m: &mut Muxer<FakeConnector>, c: &FakeConnector, port: u32) -> ConnId {
    m.handle_guest_packet(&guest(OP_REQUEST, port, 0), &[]);
    let pkts = drain(m, 4096);
    assert_eq!(ops(&pkts), vec![OP_RESPONSE]);
    let h = pkts[0].0;
    assert_eq!(
        (h.src_cid, h.dst_cid, h.src_port, h.dst_port, h.type_),
        (HOST_CID, GUEST, PORT, port, TYPE_STREAM)
    );
    assert_eq!(h.buf_alloc, 4096);
    c.last_id()
}

#[test]
fn connect_is_accepted_and_starts_a_host_side() {
    let (mut m, c) = muxer();
    let id = connect(&mut m, &c, GPORT);
    assert_eq!(m.connection_count(), 1);
    let wires = c.wires.lock().unwrap();
    assert_eq!(wires.len(), 1);
    assert_eq!((wires[0].0, wires[0].1), (id, GPORT));
}

#[test]
fn request_to_other_port_or_cid_is_reset() {
    let (mut m, c) = muxer();
    let mut h = guest(OP_REQUEST, GPORT, 0);
    h.dst_port = 22;
    m.handle_guest_packet(&h, &[]);
    let mut h2 = guest(OP_REQUEST, GPORT + 1, 0);
    h2.dst_cid = 7;
    m.handle_guest_packet(&h2, &[]);
    let pkts = drain(&mut m, 4096);
    assert_eq!(ops(&pkts), vec![OP_RST, OP_RST]);
    let r = pkts[0].0;
    assert_eq!(
        (r.src_cid, r.dst_cid, r.src_port, r.dst_port),
        (HOST_CID, GUEST, 22, GPORT)
    );
    let r = pkts[1].0;
    assert_eq!((r.src_cid, r.dst_cid, r.dst_port), (7, GUEST, GPORT + 1));
    assert_eq!(m.connection_count(), 0);
    assert!(
        c.wires.lock().unwrap().is_empty(),
        "no worker for refused requests"
    );
}

#[test]
fn non_stream_types_are_reset_and_resets_are_never_answered() {
    let (mut m, c) = muxer();
    let mut h = guest(OP_REQUEST, GPORT, 0);
    h.type_ = 2; // SEQPACKET
    m.handle_guest_packet(&h, &[]);
    let pkts = drain(&mut m, 4096);
    assert_eq!(ops(&pkts), vec![OP_RST]);
    assert_eq!(pkts[0].0.type_, 2);
    assert!(c.wires.lock().unwrap().is_empty());

    // A reset for nothing, of any type, gets no answer.
    m.handle_guest_packet(&guest(OP_RST, GPORT, 0), &[]);
    let mut h = guest(OP_RST, GPORT, 0);
    h.type_ = 9;
    m.handle_guest_packet(&h, &[]);
    assert!(drain(&mut m, 4096).is_empty());
}

#[test]
fn packets_for_unknown_connections_are_reset() {
    let (mut m, _c) = muxer();
    for op in [
        OP_SHUTDOWN,
        OP_CREDIT_UPDATE,
        OP_CREDIT_REQUEST,
        OP_RESPONSE,
        99,
    ] {
        m.handle_guest_packet(&guest(op, GPORT, 0), &[]);
    }
    m.handle_guest_packet(&guest(OP_RW, GPORT, 3), b"abc");
    assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST; 6]);
}

#[test]
fn data_flows_both_ways_with_credit_accounting() {
    let (mut m, c) = muxer();
    let id = connect(&mut m, &c, GPORT);
    let wire = c.wire(id);

    // Guest -> host.
    m.handle_guest_packet(&guest(OP_RW, GPORT, 5), b"hello");
    assert_eq!(wire.lock().unwrap().received, b"hello");

    // Host -> guest, limited by the guest's window: buf_alloc 10, nothing consumed.
    wire.lock()
        .unwrap()
        .to_send
        .extend(b"0123456789abcdef".iter());
    let mut h = guest(OP_CREDIT_UPDATE, GPORT, 0);
    h.buf_alloc = 10;
    m.handle_guest_packet(&h, &[]);
    m.handle_host_ready(
        id,
        Readiness {
            readable: true,
            writable: false,
        },
    );
    let pkts = drain(&mut m, 4);
    assert_eq!(ops(&pkts), vec![OP_RW, OP_RW, OP_RW]);
    let data: Vec<u8> = pkts.iter().flat_map(|(_, p)| p.clone()).collect();
    assert_eq!(
        data, b"0123456789",
        "exactly the guest's credit, in max_payload pieces"
    );
    assert!(pkts
        .iter()
        .all(|(h, _)| h.fwd_cnt == 5 && h.buf_alloc == 4096));
    assert!(!m.has_rx_work(), "no credit left: wait for the guest");

    // The guest consumes 6 bytes: 6 more may flow.
    let mut h = guest(OP_CREDIT_UPDATE, GPORT, 0);
    h.buf_alloc = 10;
    h.fwd_cnt = 6;
    m.handle_guest_packet(&h, &[]);
    let pkts = drain(&mut m, 4096);
    assert_eq!(ops(&pkts), vec![OP_RW]);
    assert_eq!(pkts[0].1, b"abcdef");

    // All read: the next read would block, so no more work until the next readiness.
    assert!(drain(&mut m, 4096).is_empty());
}

#[test]
fn guest_data_is_buffered_while_the_host_is_full_then_credit_is_returned() {
    let (mut m, c) = muxer();
    let id = connect(&mut m, &c, GPORT);
    let wire = c.wire(id);
    wire.lock().unwrap().room = 100;

    let chunk = vec![7u8; 1000];
    for _ in 0..4 {
        m.handle_guest_packet(&guest(OP_RW, GPORT, 1000), &chunk);
    }
    assert_eq!(wire.lock().unwrap().received.len(), 100);
    assert_eq!(m.buffered_bytes(), 3900);
    assert!(
        drain(&mut m, 4096).is_empty(),
        "nothing freed enough for an update"
    );

    // The host drains: room for everything; fwd_cnt reaches 4000 and an update is owed.
    wire.lock().unwrap().room = usize::MAX;
    m.handle_host_ready(
        id,
        Readiness {
            readable: false,
            writable: true,
        },
    );
    assert_eq!(m.buffered_bytes(), 0);
    assert_eq!(wire.lock().unwrap().received.len(), 4000);
    let pkts = drain(&mut m, 4096);
    assert_eq!(ops(&pkts), vec![OP_CREDIT_UPDATE]);
    assert_eq!(pkts[0].0.fwd_cnt, 4000);
    assert_eq!(pkts[0].0.buf_alloc, 4096);
}

#[test]
fn credit_violation_resets_the_connection() {
    let (mut m, c) = muxer();
    let id = connect(&mut m, &c, GPORT);
    let wire = c.wire(id);
    wire.lock().unwrap().room = 0; // the worker is not reading

    let chunk = vec![1u8; 4096];
    m.handle_guest_packet(&guest(OP_RW, GPORT, 4096), &chunk); // exactly the credit
    assert_eq!(m.buffered_bytes(), 4096);
    assert!(drain(&mut m, 4096).is_empty());
    m.handle_guest_packet(&guest(OP_RW, GPORT, 1), &[1]); // one byte too many
    let pkts = drain(&mut m, 4096);
    assert_eq!(ops(&pkts), vec![OP_RST]);
    assert_eq!(pkts[0].0.dst_port, GPORT);
    assert_eq!(m.connection_count(), 0);
    assert_eq!(m.buffered_bytes(), 0);
    assert!(wire.lock().unwrap().closed, "host side closed");
}

#[test]
fn credit_request_gets_a_credit_update() {
    let (mut m, c) = muxer();
    let _ = connect(&mut m, &c, GPORT);
    m.handle_guest_packet(&guest(OP_RW, GPORT, 3), b"abc");
    m.handle_guest_packet(&guest(OP_CREDIT_REQUEST, GPORT, 0), &[]);
    let pkts = drain(&mut m, 4096);
    assert_eq!(ops(&pkts), vec![OP_CREDIT_UPDATE]);
    assert_eq!((pkts[0].0.buf_alloc, pkts[0].0.fwd_cnt), (4096, 3));
}

#[test]
fn guest_shutdown_send_half_closes_after_flushing() {
    let (mut m, c) = muxer();
    let id = connect(&mut m, &c, GPORT);
    let wire = c.wire(id);
    wire.lock().unwrap().room = 2;
    m.handle_guest_packet(&guest(OP_RW, GPORT, 4), b"abcd");
    let mut h = guest(OP_SHUTDOWN, GPORT, 0);
    h.flags = SHUTDOWN_SEND;
    m.handle_guest_packet(&h, &[]);
    assert!(!wire.lock().unwrap().write_shut, "data still buffered");
    wire.lock().unwrap().room = 100;
    m.handle_host_ready(
        id,
        Readiness {
            readable: false,
            writable: true,
        },
    );
    let w = wire.lock().unwrap();
    assert_eq!(w.received, b"abcd");
    assert!(w.write_shut);
    assert!(!w.closed, "the host may still answer");
    drop(w);

    // The host can still send to the guest.
    wire.lock().unwrap().to_send.extend(b"reply".iter());
    m.handle_host_ready(
        id,
        Readiness {
            readable: true,
            writable: false,
        },
    );
    let pkts = drain(&mut m, 4096);
    assert_eq!(ops(&pkts), vec![OP_RW]);
    assert_eq!(pkts[0].1, b"reply");

    // More data after SHUTDOWN(send) is a protocol violation.
    m.handle_guest_packet(&guest(OP_RW, GPORT, 1), b"x");
    assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST]);
    assert_eq!(m.connection_count(), 0);
}

#[test]
fn guest_shutdown_rcv_stops_reading_the_host() {
    let (mut m, c) = muxer();
    let id = connect(&mut m, &c, GPORT);
    let wire = c.wire(id);
    let mut h = guest(OP_SHUTDOWN, GPORT, 0);
    h.flags = SHUTDOWN_RCV;
    m.handle_guest_packet(&h, &[]);
    wire.lock().unwrap().to_send.extend(b"unwanted".iter());
    m.handle_host_ready(
        id,
        Readiness {
            readable: true,
            writable: false,
        },
    );
    assert!(drain(&mut m, 4096).is_empty());
    assert_eq!(wire.lock().unwrap().to_send.len(), 8, "nothing read");
    // Guest -> host still works.
    m.handle_guest_packet(&guest(OP_RW, GPORT, 2), b"ok");
    assert_eq!(wire.lock().unwrap().received, b"ok");

    // The second flag completes the shutdown: reset and close.
    let mut h = guest(OP_SHUTDOWN, GPORT, 0);
    h.flags = SHUTDOWN_SEND;
    m.handle_guest_packet(&h, &[]);
    assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST]);
    assert!(wire.lock().unwrap().closed);
    assert_eq!(m.connection_count(), 0);
}

#[test]
fn guest_full_shutdown_is_answered_with_a_reset_and_closes() {
    let (mut m, c) = muxer();
    let id = connect(&mut m, &c, GPORT);
    let mut h = guest(OP_SHUTDOWN, GPORT, 0);
    h.flags = SHUTDOWN_BOTH;
    m.handle_guest_packet(&h, &[]);
    let pkts = drain(&mut m, 4096);
    assert_eq!(ops(&pkts), vec![OP_RST]);
    assert_eq!(pkts[0].0.dst_port, GPORT);
    assert!(c.wire(id).lock().unwrap().closed);
    assert_eq!(m.connection_count(), 0);
}

#[test]
fn host_eof_sends_data_then_shutdown_and_waits_for_the_guest_reset() {
    let (mut m, c) = muxer();
    let id = connect(&mut m, &c, GPORT);
    let wire = c.wire(id);
    {
        let mut w = wire.lock().unwrap();
        w.to_send.extend(b"last words".iter());
        w.eof = true;
    }
    m.handle_host_ready(
        id,
        Readiness {
            readable: true,
            writable: false,
        },
    );
    let pkts = drain(&mut m, 4096);
    assert_eq!(ops(&pkts), vec![OP_RW, OP_SHUTDOWN]);
    assert_eq!(pkts[0].1, b"last words");
    assert_eq!(pkts[1].0.flags, SHUTDOWN_BOTH);
    assert_eq!(m.connection_count(), 1, "waiting for the guest");

    // A second readiness does not repeat the shutdown.
    m.handle_host_ready(
        id,
        Readiness {
            readable: true,
            writable: true,
        },
    );
    assert!(drain(&mut m, 4096).is_empty());

    m.handle_guest_packet(&guest(OP_RST, GPORT, 0), &[]);
    assert!(drain(&mut m, 4096).is_empty(), "no answer to a reset");
    assert_eq!(m.connection_count(), 0);
    assert!(wire.lock().unwrap().closed);
}

#[test]
fn guest_reset_closes_immediately() {
    let (mut m, c) = muxer();
    let id = connect(&mut m, &c, GPORT);
    c.wire(id).lock().unwrap().room = 0;
    m.handle_guest_packet(&guest(OP_RW, GPORT, 3), b"abc");
    m.handle_guest_packet(&guest(OP_RST, GPORT, 0), &[]);
    assert_eq!(m.connection_count(), 0);
    assert_eq!(m.buffered_bytes(), 0);
    assert!(c.wire(id).lock().unwrap().closed);
    assert!(drain(&mut m, 4096).is_empty());
    // Later packets on that port are answered with a reset.
    m.handle_guest_packet(&guest(OP_RW, GPORT, 1), b"z");
    assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST]);
}

#[test]
fn bad_lengths_never_panic_and_reset() {
    let (mut m, c) = muxer();
    let id = connect(&mut m, &c, GPORT);
    // The header claims 100 bytes, the chain held 10.
    m.handle_guest_packet(&guest(OP_RW, GPORT, 100), &[0u8; 10]);
    assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST]);
    assert!(
        c.wire(id).lock().unwrap().received.is_empty(),
        "nothing forwarded"
    );
    assert_eq!(m.connection_count(), 0);

    // Absurd lengths on requests and other ops.
    m.handle_guest_packet(&guest(OP_REQUEST, GPORT, u32::MAX), &[]);
    m.handle_guest_packet(&guest(OP_REQUEST, GPORT + 1, 4), b"junk");
    assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST, OP_RST]);
    assert_eq!(m.connection_count(), 0);

    let _ = connect(&mut m, &c, GPORT + 2);
    m.handle_guest_packet(&guest(OP_CREDIT_UPDATE, GPORT + 2, 8), b"12345678");
    assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST]);
    let _ = connect(&mut m, &c, GPORT + 3);
    let big = vec![0u8; MAX_PAYLOAD as usize + 1];
    m.handle_guest_packet(&guest(OP_RW, GPORT + 3, big.len() as u32), &big);
    assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST]);
    assert_eq!(m.connection_count(), 0);
}

#[test]
fn unknown_op_on_a_connection_resets_it() {
    let (mut m, c) = muxer();
    let id = connect(&mut m, &c, GPORT);
    m.handle_guest_packet(&guest(42, GPORT, 0), &[]);
    assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST]);
    assert!(c.wire(id).lock().unwrap().closed);
    // The guest answering a RESPONSE we never asked for is also a violation.
    let _ = connect(&mut m, &c, GPORT);
    m.handle_guest_packet(&guest(OP_RESPONSE, GPORT, 0), &[]);
    assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST]);
    assert_eq!(m.connection_count(), 0);
}

#[test]
fn spoofed_source_cid_is_dropped_silently() {
    let (mut m, c) = muxer();
    let id = connect(&mut m, &c, GPORT);
    for op in [OP_REQUEST, OP_RW, OP_RST, OP_SHUTDOWN] {
        let mut h = guest(op, GPORT, if op == OP_RW { 3 } else { 0 });
        h.src_cid = 4;
        h.flags = SHUTDOWN_BOTH;
        m.handle_guest_packet(&h, if op == OP_RW { b"bad" } else { &[] });
    }
    assert_eq!(m.spoofed_packets(), 4);
    assert!(drain(&mut m, 4096).is_empty(), "no answer at all");
    assert_eq!(m.connection_count(), 1, "the real connection is untouched");
    assert!(c.wire(id).lock().unwrap().received.is_empty());
    assert!(!c.wire(id).lock().unwrap().closed);
}

#[test]
fn connection_cap_resets_beyond_it() {
    let (mut m, c) = muxer(); // cap 4
    for p in 0..4 {
        connect(&mut m, &c, GPORT + p);
    }
    m.handle_guest_packet(&guest(OP_REQUEST, GPORT + 10, 0), &[]);
    let pkts = drain(&mut m, 4096);
    assert_eq!(ops(&pkts), vec![OP_RST]);
    assert_eq!(pkts[0].0.dst_port, GPORT + 10);
    assert_eq!(m.connection_count(), 4);
    assert_eq!(
        c.wires.lock().unwrap().len(),
        4,
        "no worker spawned beyond the cap"
    );
    // Closing one makes room.
    m.handle_guest_packet(&guest(OP_RST, GPORT, 0), &[]);
    connect(&mut m, &c, GPORT + 10);
    assert_eq!(m.connection_count(), 4);
}

#[test]
fn failing_host_side_refuses_the_connection() {
    let (mut m, c) = muxer();
    *c.fail.lock().unwrap() = true;
    m.handle_guest_packet(&guest(OP_REQUEST, GPORT, 0), &[]);
    assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_RST]);
    assert_eq!(m.connection_count(), 0);
}

#[test]
fn rerequest_on_a_live_port_replaces_the_old_connection() {
    let (mut m, c) = muxer();
    let old = connect(&mut m, &c, GPORT);
    let new = connect(&mut m, &c, GPORT);
    assert_ne!(old, new);
    assert!(c.wire(old).lock().unwrap().closed);
    assert!(!c.wire(new).lock().unwrap().closed);
    assert_eq!(m.connection_count(), 1);
}

#[test]
fn broken_host_side_discards_data_but_keeps_credit_flowing() {
    let (mut m, c) = muxer();
    let id = connect(&mut m, &c, GPORT);
    c.wire(id).lock().unwrap().broken = true;
    let chunk = vec![0u8; 2048];
    for _ in 0..8 {
        m.handle_guest_packet(&guest(OP_RW, GPORT, 2048), &chunk);
    }
    assert_eq!(m.buffered_bytes(), 0);
    let pkts = drain(&mut m, 4096);
    assert_eq!(ops(&pkts), vec![OP_CREDIT_UPDATE]);
    assert_eq!(pkts[0].0.fwd_cnt, 8 * 2048);
}

#[test]
fn a_connection_that_never_closes_stays_bounded() {
    let (mut m, c) = muxer();
    let id = connect(&mut m, &c, GPORT);
    let wire = c.wire(id);
    wire.lock().unwrap().room = 0; // a worker that never reads
                                   // A well-behaved guest fills its credit and then only asks for more.
    let chunk = vec![9u8; 1024];
    for _ in 0..4 {
        m.handle_guest_packet(&guest(OP_RW, GPORT, 1024), &chunk);
    }
    for _ in 0..10_000 {
        m.handle_guest_packet(&guest(OP_CREDIT_REQUEST, GPORT, 0), &[]);
        m.handle_host_ready(
            id,
            Readiness {
                readable: true,
                writable: true,
            },
        );
    }
    assert_eq!(m.buffered_bytes(), 4096, "never more than buf_alloc");
    // All those requests collapse into one owed update.
    assert_eq!(ops(&drain(&mut m, 4096)), vec![OP_CREDIT_UPDATE]);

    // A worker that never stops talking to a guest that never reads: nothing piles
    // up here, the bytes stay in the worker's socket.
    wire.lock()
        .unwrap()
        .to_send
        .extend(std::iter::repeat_n(1u8, 1 << 20));
    let mut h = guest(OP_CREDIT_UPDATE, GPORT, 0);
    h.buf_alloc = 1000;
    m.handle_guest_packet(&h, &[]);
    m.handle_host_ready(
        id,
        Readiness {
            readable: true,
            writable: false,
        },
    );
    let sent: usize = drain(&mut m, 4096).iter().map(|(_, p)| p.len()).sum();
    assert_eq!(sent, 1000);
    assert_eq!(wire.lock().unwrap().to_send.len(), (1 << 20) - 1000);
    assert_eq!(m.buffered_bytes(), 4096);

    // A guest flooding bad requests without giving rx buffers: resets are bounded.
    for p in 0..(3 * MAX_PENDING_RESETS as u32) {
        let mut h = guest(OP_REQUEST, p, 0);
        h.dst_port = 1;
        m.handle_guest_packet(&h, &[]);
    }
    assert_eq!(m.pending_resets(), MAX_PENDING_RESETS);

    // A guest that ignores its credit is reset, never buffered beyond buf_alloc.
    m.handle_guest_packet(&guest(OP_RST, GPORT, 0), &[]);
    let mut c2 = c.clone();
    c2.initial_room = 0;
    let mut m2 = Muxer::new(m.config().clone(), c2.clone());
    m2.handle_guest_packet(&guest(OP_REQUEST, GPORT, 0), &[]);
    for _ in 0..100 {
        m2.handle_guest_packet(&guest(OP_RW, GPORT, 1024), &chunk);
        assert!(m2.buffered_bytes() <= 4096);
    }
    assert_eq!(m2.connection_count(), 0);
}

#[test]
fn rx_buffer_without_room_for_data_is_declined() {
    // Found by the vsock_packet fuzz target: a 44-byte rx buffer (header only) while
    // the host side had data made next_rx_packet spin forever.
    let (mut m, c) = muxer();
    let id = connect(&mut m, &c, GPORT);
    c.wire(id).lock().unwrap().to_send.extend(b"data".iter());
    m.handle_host_ready(
        id,
        Readiness {
            readable: true,
            writable: false,
        },
    );
    let mut payload = Vec::new();
    assert_eq!(m.next_rx_packet(0, &mut payload), None);
    assert!(m.has_rx_work(), "the data still waits for a buffer");
    // Control packets need no payload room and still go out.
    m.handle_guest_packet(&guest(OP_CREDIT_REQUEST, GPORT, 0), &[]);
    let hdr = m.next_rx_packet(0, &mut payload).expect("a credit update");
    assert_eq!(hdr.op, OP_CREDIT_UPDATE);
    // A real buffer gets the data.
    let pkts = drain(&mut m, 4096);
    assert_eq!(ops(&pkts), vec![OP_RW]);
    assert_eq!(pkts[0].1, b"data");
}

#[test]
fn rx_work_is_shared_round_robin() {
    let (mut m, c) = muxer();
    let a = connect(&mut m, &c, GPORT);
    let b = connect(&mut m, &c, GPORT + 1);
    for id in [a, b] {
        c.wire(id).lock().unwrap().to_send.extend([0u8; 64]);
        m.handle_host_ready(
            id,
            Readiness {
                readable: true,
                writable: false,
            },
        );
    }
    let pkts = drain(&mut m, 16);
    let ports: Vec<u32> = pkts.iter().map(|(h, _)| h.dst_port).collect();
    assert_eq!(ports.len(), 8);
    assert_eq!(&ports[..4], &[GPORT, GPORT + 1, GPORT, GPORT + 1]);
}

#[test]
fn reset_forgets_everything_and_closes_host_sides() {
    let (mut m, c) = muxer();
    let a = connect(&mut m, &c, GPORT);
    m.handle_guest_packet(&guest(OP_CREDIT_REQUEST, GPORT, 0), &[]);
    assert_eq!(m.reset(), 1);
    assert!(c.wire(a).lock().unwrap().closed);
    assert!(!m.has_rx_work());
    assert_eq!(m.connection_count(), 0);
}
