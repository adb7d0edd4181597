use super::*;
use crate::muxer::testing::FakeConnector;
use crate::packet::*;
use virtio_bindings::virtio_ring::{VRING_DESC_F_NEXT, VRING_DESC_F_WRITE};
use virtio_queue::desc::{split::Descriptor as SplitDescriptor, RawDescriptor};
use virtio_queue::mock::MockSplitQueue;
use vm_memory::{Bytes, GuestAddress};

const GUEST: u64 = 3;
const PORT: u32 = 7731;
const QSIZE: u16 = 64;
const RXQ_ADDR: u64 = 0x1_0000;
const TXQ_ADDR: u64 = 0x2_0000;
const BUFS: u64 = 0x10_0000;

/// A driver's view of one split queue: builds chains, reads the used ring. The layout
/// comes from virtio-queue's `MockSplitQueue` (which zeroes the rings when created, so
/// it is created once per ring); the driver then works on guest memory directly.
struct Driver {
    desc: u64,
    avail: u64,
    used: u64,
    next_desc: u16,
    used_seen: u16,
}

impl Driver {
    fn create(mem: &Mem, vring: &VringRwLock, base: u64) -> Driver {
        let guard = mem.memory();
        let q = MockSplitQueue::create(&*guard, GuestAddress(base), QSIZE);
        vring.set_queue_size(QSIZE);
        vring
            .set_queue_info(q.desc_table_addr().0, q.avail_addr().0, q.used_addr().0)
            .unwrap();
        vring.set_queue_next_avail(0);
        vring.set_queue_next_used(0);
        Driver {
            desc: q.desc_table_addr().0,
            avail: q.avail_addr().0,
            used: q.used_addr().0,
            next_desc: 0,
            used_seen: 0,
        }
    }

    /// Put a chain of (address, length, flags) descriptors on the avail ring.
    fn add_chain(&mut self, mem: &Mem, descs: &[(u64, u32, u16)]) {
        let m = mem.memory();
        let head = self.next_desc;
        for (i, &(addr, len, flags)) in descs.iter().enumerate() {
            let idx = self.next_desc;
            self.next_desc = (self.next_desc + 1) % QSIZE;
            let last = i + 1 == descs.len();
            let flags = if last {
                flags
            } else {
                flags | VRING_DESC_F_NEXT as u16
            };
            let d = RawDescriptor::from(SplitDescriptor::new(addr, len, flags, self.next_desc));
            m.write_obj(d, GuestAddress(self.desc + 16 * u64::from(idx)))
                .unwrap();
        }
        let avail_idx: u16 = m.read_obj(GuestAddress(self.avail + 2)).unwrap();
        let slot = self.avail + 4 + 2 * u64::from(avail_idx % QSIZE);
        m.write_obj(head, GuestAddress(slot)).unwrap();
        m.write_obj(avail_idx.wrapping_add(1), GuestAddress(self.avail + 2))
            .unwrap();
    }

    fn used_idx(&self, mem: &Mem) -> u16 {
        mem.memory().read_obj(GuestAddress(self.used + 2)).unwrap()
    }

    /// Used entries (descriptor head, length) since the last call.
    fn take_used(&mut self, mem: &Mem) -> Vec<(u16, u32)> {
        let m = mem.memory();
        let mut out = Vec::new();
        while self.used_seen != self.used_idx(mem) {
            let at = self.used + 4 + 8 * u64::from(self.used_seen % QSIZE);
            let id: u32 = m.read_obj(GuestAddress(at)).unwrap();
            let len: u32 = m.read_obj(GuestAddress(at + 4)).unwrap();
            out.push((id as u16, len));
            self.used_seen = self.used_seen.wrapping_add(1);
        }
        out
    }

    fn desc_addr(&self, mem: &Mem, index: u16) -> u64 {
        mem.memory()
            .read_obj(GuestAddress(self.desc + 16 * u64::from(index)))
            .unwrap()
    }
}

struct Rig {
    mem: Mem,
    dev: VsockDevice<FakeConnector>,
    conn: FakeConnector,
    vrings: Vec<VringRwLock>,
    rx: Driver,
    tx: Driver,
    next_buf: u64,
}

impl Rig {
    fn new() -> Rig {
        let _ = tracing_subscriber::fmt().with_test_writer().try_init();
        let mem = GuestMemoryAtomic::new(
            GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 0x40_0000)]).unwrap(),
        );
        let conn = FakeConnector::new();
        let epoll = Arc::new(Epoll::new().unwrap());
        let mut dev = VsockDevice::new(
            MuxerConfig::new(GUEST, PORT),
            conn.clone(),
            epoll,
            Span::none(),
        )
        .unwrap();
        dev.update_memory(mem.clone()).unwrap();
        let vrings: Vec<VringRwLock> = (0..3)
            .map(|_| VringRwLock::new(mem.clone(), QSIZE).unwrap())
            .collect();
        let rx = Driver::create(&mem, &vrings[0], RXQ_ADDR);
        let tx = Driver::create(&mem, &vrings[1], TXQ_ADDR);
        for v in &vrings[..2] {
            v.set_queue_ready(true);
            v.set_enabled(true);
        }
        Rig {
            mem,
            dev,
            conn,
            vrings,
            rx,
            tx,
            next_buf: BUFS,
        }
    }

    fn alloc(&mut self, len: u64) -> u64 {
        let a = self.next_buf;
        self.next_buf += len.next_multiple_of(64);
        a
    }

    fn add_chain(&mut self, tx: bool, descs: &[(u64, u32, u16)]) {
        let d = if tx { &mut self.tx } else { &mut self.rx };
        d.add_chain(&self.mem, descs);
    }

    /// The guest sends a packet as header + payload in two descriptors.
    fn send(&mut self, hdr: Header, payload: &[u8]) {
        let h = self.alloc(HEADER_SIZE as u64);
        self.mem
            .memory()
            .write_slice(&hdr.to_bytes(), GuestAddress(h))
            .unwrap();
        if payload.is_empty() {
            self.add_chain(true, &[(h, HEADER_SIZE as u32, 0)]);
        } else {
            let p = self.alloc(payload.len() as u64);
            self.mem
                .memory()
                .write_slice(payload, GuestAddress(p))
                .unwrap();
            self.add_chain(
                true,
                &[(h, HEADER_SIZE as u32, 0), (p, payload.len() as u32, 0)],
            );
        }
        self.event(TX_QUEUE);
    }

    /// The guest gives one rx buffer of `len` bytes (one descriptor, as Linux 6.2+).
    fn give_rx(&mut self, len: u32) -> u64 {
        let a = self.alloc(u64::from(len));
        self.add_chain(false, &[(a, len, VRING_DESC_F_WRITE as u16)]);
        a
    }

    fn event(&mut self, ev: u16) {
        self.dev
            .handle_event(ev, EventSet::IN, &self.vrings, 0)
            .unwrap();
    }

    /// Packets the device put on the rx used ring since the last call (buffers it
    /// rejected, used with length 0, are skipped).
    fn received(&mut self) -> Vec<(Header, Vec<u8>)> {
        let mut out = Vec::new();
        for (head, len) in self.rx.take_used(&self.mem) {
            if len == 0 {
                continue;
            }
            assert!(len as usize >= HEADER_SIZE);
            let addr = self.rx.desc_addr(&self.mem, head);
            let mut bytes = vec![0u8; len as usize];
            self.mem
                .memory()
                .read_slice(&mut bytes, GuestAddress(addr))
                .unwrap();
            let hdr = Header::from_bytes(bytes[..HEADER_SIZE].try_into().unwrap());
            assert_eq!(hdr.len as usize, bytes.len() - HEADER_SIZE);
            out.push((hdr, bytes[HEADER_SIZE..].to_vec()));
        }
        out
    }

    fn tx_used(&self) -> u16 {
        self.tx.used_idx(&self.mem)
    }
}

fn guest(op: u16, len: u32) -> Header {
    Header {
        src_cid: GUEST,
        dst_cid: HOST_CID,
        src_port: 5000,
        dst_port: PORT,
        len,
        type_: TYPE_STREAM,
        op,
        flags: 0,
        buf_alloc: 1 << 20,
        fwd_cnt: 0,
    }
}

#[test]
fn features_and_config_space() {
    let rig = Rig::new();
    let f = rig.dev.features();
    assert_ne!(f & (1 << VIRTIO_F_VERSION_1), 0);
    assert_ne!(f & VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits(), 0);
    let p = rig.dev.protocol_features();
    assert!(p.contains(VhostUserProtocolFeatures::CONFIG | VhostUserProtocolFeatures::MQ));
    assert_eq!(rig.dev.num_queues(), 3);
    assert_eq!(rig.dev.get_config(0, 8), 3u64.to_le_bytes());
    assert_eq!(rig.dev.get_config(4, 4), [0, 0, 0, 0]);
    assert!(rig.dev.get_config(4, 8).is_empty());
    assert!(rig.dev.get_config(u32::MAX, u32::MAX).is_empty());
    assert!(rig.dev.guest_memory().is_some());
}

#[test]
fn tx_queue_drives_a_connection_through_the_device() {
    let mut rig = Rig::new();
    rig.give_rx(4096);
    rig.send(guest(OP_REQUEST, 0), &[]);
    assert_eq!(rig.tx_used(), 1);
    let got = rig.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0.op, OP_RESPONSE);
    assert_eq!((got[0].0.dst_cid, got[0].0.dst_port), (GUEST, 5000));

    rig.send(guest(OP_RW, 11), b"hello world");
    let id = rig.conn.last_id();
    assert_eq!(rig.conn.wire(id).lock().unwrap().received, b"hello world");

    // The worker answers; with no rx buffer the packet waits.
    rig.conn
        .wire(id)
        .lock()
        .unwrap()
        .to_send
        .extend(b"pong".iter());
    rig.dev.muxer.handle_host_ready(
        id,
        Readiness {
            readable: true,
            writable: false,
        },
    );
    rig.event(BACKEND_EVENT);
    assert!(rig.received().is_empty());
    rig.give_rx(4096);
    rig.event(RX_QUEUE);
    let got = rig.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0.op, OP_RW);
    assert_eq!(got[0].1, b"pong");
    assert_eq!(got[0].0.fwd_cnt, 11);
}

#[test]
fn payload_split_over_descriptors_and_small_rx_buffers() {
    let mut rig = Rig::new();
    rig.give_rx(4096);
    rig.send(guest(OP_REQUEST, 0), &[]);
    rig.received();
    // Header and payload in one descriptor, payload spread over three.
    let h = rig.alloc(64);
    let mut bytes = guest(OP_RW, 9).to_bytes().to_vec();
    bytes.extend_from_slice(b"abc");
    rig.mem
        .memory()
        .write_slice(&bytes, GuestAddress(h))
        .unwrap();
    let p1 = rig.alloc(3);
    rig.mem
        .memory()
        .write_slice(b"def", GuestAddress(p1))
        .unwrap();
    let p2 = rig.alloc(3);
    rig.mem
        .memory()
        .write_slice(b"ghi", GuestAddress(p2))
        .unwrap();
    rig.add_chain(true, &[(h, 47, 0), (p1, 3, 0), (p2, 3, 0)]);
    rig.event(TX_QUEUE);
    let id = rig.conn.last_id();
    assert_eq!(rig.conn.wire(id).lock().unwrap().received, b"abcdefghi");

    // Rx buffers of 44 + 5 bytes: the answer comes in 5-byte pieces.
    rig.conn
        .wire(id)
        .lock()
        .unwrap()
        .to_send
        .extend(b"0123456789ab".iter());
    rig.dev.muxer.handle_host_ready(
        id,
        Readiness {
            readable: true,
            writable: false,
        },
    );
    for _ in 0..3 {
        rig.give_rx(HEADER_SIZE as u32 + 5);
    }
    rig.event(RX_QUEUE);
    let got = rig.received();
    let data: Vec<u8> = got.iter().flat_map(|(_, p)| p.clone()).collect();
    assert_eq!(data, b"0123456789ab");
    assert_eq!(got.len(), 3);
}

#[test]
fn lying_length_and_short_chains_are_survived() {
    let mut rig = Rig::new();
    rig.give_rx(4096);
    rig.send(guest(OP_REQUEST, 0), &[]);
    rig.received();
    let id = rig.conn.last_id();

    // The header claims 60000 bytes; the chain holds 3.
    rig.send(guest(OP_RW, 60000), b"abc");
    // A chain too short for a header, and one pointing outside guest memory.
    rig.add_chain(true, &[(BUFS, 10, 0)]);
    rig.add_chain(true, &[(0xffff_0000_0000, 44, 0)]);
    rig.event(TX_QUEUE);
    assert_eq!(rig.tx_used(), 4, "every chain is returned");
    assert!(rig.conn.wire(id).lock().unwrap().received.is_empty());
    rig.give_rx(4096);
    rig.event(RX_QUEUE);
    let got = rig.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].0.op, OP_RST);
    assert!(rig.conn.wire(id).lock().unwrap().closed);

    // A read-only rx buffer and one too small for a header are consumed, not used.
    rig.add_chain(false, &[(BUFS, 4096, 0)]);
    rig.add_chain(false, &[(BUFS, 10, VRING_DESC_F_WRITE as u16)]);
    rig.send(guest(OP_REQUEST, 0), &[]);
    rig.give_rx(4096);
    rig.event(RX_QUEUE);
    let ops: Vec<u16> = rig.received().iter().map(|(h, _)| h.op).collect();
    assert_eq!(ops, vec![OP_RESPONSE]);
}

#[test]
fn driver_restart_at_index_zero_closes_old_connections() {
    let mut rig = Rig::new();
    rig.give_rx(4096);
    rig.send(guest(OP_REQUEST, 0), &[]);
    let id = rig.conn.last_id();
    assert_eq!(rig.dev.muxer().connection_count(), 1);

    // Pause/resume: stopped, restarted at the old index: connections survive.
    rig.dev.stop_vring(TX_QUEUE as u32).unwrap();
    rig.event(TX_QUEUE);
    assert_eq!(rig.dev.muxer().connection_count(), 1);

    // Reboot: the new driver sets up a fresh ring, which starts at index 0.
    rig.dev.stop_vring(TX_QUEUE as u32).unwrap();
    rig.tx = Driver::create(&rig.mem, &rig.vrings[TX_QUEUE as usize], TXQ_ADDR + 0x8000);
    rig.event(TX_QUEUE);
    assert_eq!(rig.dev.muxer().connection_count(), 0);
    assert!(rig.conn.wire(id).lock().unwrap().closed);
}
