//! The vhost-user side of the device: virtqueue plumbing around the [`Muxer`].
//!
//! Virtio device id 19 (vsock) with three queues: rx 0, tx 1, event 2. The VMM owns the
//! event queue (QEMU's `vhost-user-vsock` configures only rx and tx on the backend and
//! keeps the event queue to itself), so nothing here touches it. The config space is
//! `le64 guest_cid`, served through `VHOST_USER_GET_CONFIG` (QEMU reads it once while
//! realizing the device, so the `CONFIG` protocol feature is required). Features offered:
//! `VIRTIO_F_VERSION_1`, `VIRTIO_RING_F_EVENT_IDX` (optional for the driver) and
//! `VHOST_USER_F_PROTOCOL_FEATURES`; protocol features `MQ` and `CONFIG`.
//!
//! Events, all handled on the one vhost-user-backend worker thread:
//! - tx kick: pop every tx chain, read the 44-byte header and at most `len` payload bytes
//!   (never more than the chain really holds, never more than [`MAX_PAYLOAD`]), hand
//!   them to the muxer, return the chain with used length 0;
//! - rx kick: the guest gave us buffers, so fill them;
//! - [`BACKEND_EVENT`]: a nested epoll holding every worker socket (edge-triggered) is
//!   readable, so collect readiness, hand it to the muxer, then fill rx buffers.
//!
//! After every event the device fills as many rx chains as the muxer has packets for. A
//! chain the muxer has nothing for is put back (`next_avail` moved back by one).
//!
//! Guest memory: the device keeps the `GuestMemoryAtomic` map the vhost-user handler
//! builds from `SET_MEM_TABLE` ([`VsockDevice::guest_memory`]). Every guest RAM region is
//! a shared-memory file mapped here, so a later zero-copy path can reach guest buffers by
//! guest-physical address (or pass the region's file on to a worker) instead of copying
//! payloads through the stream.
//!
//! Guest driver resets: a vhost-user backend is not told about them. When the tx ring is
//! restarted (after `GET_VRING_BASE` stopped it) at avail index 0, the driver is new (a
//! pause/resume restarts at the old index), so every open connection belongs to a guest
//! that no longer exists: they are all closed, which ends their workers.

use std::io::{self, Read, Write};
use std::sync::Arc;

use tracing::{debug, info, warn, Span};
use vhost::vhost_user::message::{VhostUserProtocolFeatures, VhostUserVirtioFeatures};
use vhost_user_backend::{VhostUserBackendMut, VringRwLock, VringT};
use virtio_bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::virtio_ring::VIRTIO_RING_F_EVENT_IDX;
use virtio_queue::{DescriptorChain, QueueT};
use vm_memory::{
    Address, GuestAddressSpace, GuestMemoryAtomic, GuestMemoryBackend, GuestMemoryLoadGuard,
    GuestMemoryMmap, GuestMemoryRegion,
};
use vmm_sys_util::epoll::{Epoll, EpollEvent, EventSet};
use vmm_sys_util::event::{
    new_event_consumer_and_notifier, EventConsumer, EventFlag, EventNotifier,
};

use crate::muxer::{
    log_sampled, Connector, GuestRamRegion, Muxer, MuxerConfig, Readiness, MAX_PAYLOAD,
};
use crate::packet::{Header, HEADER_SIZE};

/// Virtio device id of vsock (the VMM's device model decides it; recorded for logs).
pub const VIRTIO_ID_VSOCK: u32 = 19;
pub const NUM_QUEUES: usize = 3;
pub const RX_QUEUE: u16 = 0;
pub const TX_QUEUE: u16 = 1;
pub const EVENT_QUEUE: u16 = 2;
/// Event id of the nested worker-socket epoll in the vhost-user epoll (ids up to
/// `NUM_QUEUES` are reserved for the queues and the exit event).
pub const BACKEND_EVENT: u16 = NUM_QUEUES as u16 + 1;
/// Largest ring size we accept (QEMU uses 128).
pub const MAX_QUEUE_SIZE: usize = 1024;

type Mem = GuestMemoryAtomic<GuestMemoryMmap>;
type MemGuard = GuestMemoryLoadGuard<GuestMemoryMmap>;

/// The vsock device for one VM.
pub struct VsockDevice<C: Connector> {
    span: Span,
    guest_cid: u64,
    event_idx: bool,
    /// Guest RAM as mapped from `SET_MEM_TABLE`; kept for the zero-copy path.
    mem: Option<Mem>,
    muxer: Muxer<C>,
    /// Nested epoll with the host streams, keyed by connection id.
    streams: Arc<Epoll>,
    exit: (EventConsumer, EventNotifier),
    /// The tx ring was stopped; check on restart whether the driver is a new one.
    tx_stopped: bool,
    scratch: Vec<u8>,
    /// Unusable descriptor chains seen (for sampled logging).
    bad_chains: u64,
}

impl<C: Connector> VsockDevice<C> {
    /// `streams` is the epoll the connector registers host streams with (data = the
    /// connection id, edge-triggered).
    pub fn new(
        cfg: MuxerConfig,
        connector: C,
        streams: Arc<Epoll>,
        span: Span,
    ) -> io::Result<VsockDevice<C>> {
        let exit = new_event_consumer_and_notifier(EventFlag::NONBLOCK | EventFlag::CLOEXEC)?;
        Ok(VsockDevice {
            span,
            guest_cid: cfg.guest_cid,
            event_idx: false,
            mem: None,
            muxer: Muxer::new(cfg, connector),
            streams,
            exit,
            tx_stopped: false,
            scratch: Vec::with_capacity(MAX_PAYLOAD as usize),
            bad_chains: 0,
        })
    }

    /// Guest memory as last mapped by `SET_MEM_TABLE`, if the VMM sent one.
    pub fn guest_memory(&self) -> Option<&Mem> {
        self.mem.as_ref()
    }

    pub fn muxer(&self) -> &Muxer<C> {
        &self.muxer
    }

    /// Notifier that stops the vhost-user worker thread.
    pub fn exit_notifier(&self) -> io::Result<EventNotifier> {
        self.exit.1.try_clone()
    }

    /// Close every connection (the VMM went away). Returns how many there were.
    pub fn close_all(&mut self) -> usize {
        self.muxer.reset()
    }

    fn config_space(&self) -> [u8; 8] {
        self.guest_cid.to_le_bytes()
    }

    fn memory(&self) -> Option<MemGuard> {
        self.mem.as_ref().map(|m| m.memory())
    }

    /// A new driver restarts the tx ring at avail index 0; see the module docs.
    fn check_driver_restart(&mut self, tx: &VringRwLock) {
        if !self.tx_stopped {
            return;
        }
        let (ready, next_avail) = {
            let state = tx.get_ref();
            (state.get_queue().ready(), state.get_queue().next_avail())
        };
        if !ready {
            return;
        }
        self.tx_stopped = false;
        if next_avail == 0 && self.muxer.connection_count() > 0 {
            let n = self.muxer.reset();
            info!(
                connections = n,
                "guest driver restarted; closed the previous driver's connections"
            );
        }
    }

    /// Take every packet the guest queued on tx.
    fn process_tx(&mut self, vring: &VringRwLock) -> io::Result<()> {
        let Some(mem) = self.memory() else {
            return Ok(());
        };
        if !ring_usable(vring) {
            return Ok(());
        }
        let mut used_any = false;
        loop {
            vring.disable_notification().map_err(io::Error::other)?;
            loop {
                let chain = vring
                    .get_mut()
                    .get_queue_mut()
                    .pop_descriptor_chain(mem.clone());
                let Some(chain) = chain else {
                    break;
                };
                let head = chain.head_index();
                self.tx_chain(&mem, chain);
                vring.add_used(head, 0).map_err(io::Error::other)?;
                used_any = true;
            }
            if !vring.enable_notification().map_err(io::Error::other)? {
                break;
            }
        }
        if used_any && vring.needs_notification().map_err(io::Error::other)? {
            vring.signal_used_queue()?;
        }
        Ok(())
    }

    fn tx_chain(&mut self, mem: &MemGuard, chain: DescriptorChain<MemGuard>) {
        let mut reader = match chain.reader(mem) {
            Ok(r) => r,
            Err(e) => {
                self.bad_chain(format_args!("tx: unusable descriptor chain dropped: {e}"));
                return;
            }
        };
        let mut raw = [0u8; HEADER_SIZE];
        if reader.available_bytes() < HEADER_SIZE || reader.read_exact(&mut raw).is_err() {
            let bytes = reader.available_bytes();
            self.bad_chain(format_args!(
                "tx: chain of {bytes} bytes, shorter than a packet header, dropped"
            ));
            return;
        }
        let hdr = Header::from_bytes(&raw);
        // Read at most what the header claims, what the chain holds, and one packet's
        // worth; the muxer rejects a header whose length the payload does not match.
        let want = (hdr.len as usize)
            .min(reader.available_bytes())
            .min(MAX_PAYLOAD as usize);
        self.scratch.resize(want, 0);
        if reader.read_exact(&mut self.scratch).is_err() {
            self.scratch.clear();
        }
        self.muxer.handle_guest_packet(&hdr, &self.scratch);
    }

    /// Give the guest every packet the muxer has, as long as it gives us rx buffers.
    fn process_rx(&mut self, vring: &VringRwLock) -> io::Result<()> {
        if !self.muxer.has_rx_work() {
            return Ok(());
        }
        let Some(mem) = self.memory() else {
            return Ok(());
        };
        if !ring_usable(vring) {
            return Ok(());
        }
        let mut used_any = false;
        loop {
            vring.disable_notification().map_err(io::Error::other)?;
            let mut out_of_buffers = false;
            while self.muxer.has_rx_work() {
                let chain = vring
                    .get_mut()
                    .get_queue_mut()
                    .pop_descriptor_chain(mem.clone());
                let Some(chain) = chain else {
                    out_of_buffers = true;
                    break;
                };
                let head = chain.head_index();
                match self.rx_chain(&mem, chain) {
                    Some(len) => {
                        vring.add_used(head, len).map_err(io::Error::other)?;
                        used_any = true;
                    }
                    None => {
                        // Nothing to send after all: put the chain back.
                        let next = vring.queue_next_avail().wrapping_sub(1);
                        vring.set_queue_next_avail(next);
                        break;
                    }
                }
            }
            // Re-enable notifications; if buffers arrived meanwhile, go on filling them.
            let more = vring.enable_notification().map_err(io::Error::other)?;
            if !(out_of_buffers && more) {
                break;
            }
        }
        if used_any && vring.needs_notification().map_err(io::Error::other)? {
            vring.signal_used_queue()?;
        }
        Ok(())
    }

    /// Fill one rx chain. `Some(used length)`, or `None` when the muxer had nothing.
    fn rx_chain(&mut self, mem: &MemGuard, chain: DescriptorChain<MemGuard>) -> Option<u32> {
        let mut writer = match chain.writer(mem) {
            Ok(w) => w,
            Err(e) => {
                self.bad_chain(format_args!("rx: unusable descriptor chain dropped: {e}"));
                return Some(0);
            }
        };
        let room = writer.available_bytes();
        if room < HEADER_SIZE {
            self.bad_chain(format_args!(
                "rx: buffer of {room} bytes, smaller than a packet header, dropped"
            ));
            return Some(0);
        }
        let max_payload = (room - HEADER_SIZE).min(MAX_PAYLOAD as usize);
        let hdr = self.muxer.next_rx_packet(max_payload, &mut self.scratch)?;
        let written = writer
            .write_all(&hdr.to_bytes())
            .and_then(|()| writer.write_all(&self.scratch));
        if let Err(e) = written {
            // Cannot happen after the room check; the packet is lost if it does.
            warn!("rx: writing a packet into guest memory failed: {e}");
        }
        Some(writer.bytes_written() as u32)
    }

    /// Log a malformed chain from the guest (sampled: a guest cannot flood the log).
    fn bad_chain(&mut self, what: std::fmt::Arguments<'_>) {
        self.bad_chains += 1;
        if log_sampled(self.bad_chains) {
            warn!(total = self.bad_chains, "{what}");
        }
    }

    /// Collect readiness of the host streams from the nested epoll.
    fn process_streams(&mut self) -> io::Result<()> {
        let mut events = [EpollEvent::default(); 64];
        loop {
            let n = match self.streams.wait(0, &mut events) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            for ev in &events[..n] {
                let set = ev.event_set();
                let bad = EventSet::HANG_UP | EventSet::ERROR;
                let ready = Readiness {
                    readable: set.intersects(EventSet::IN | EventSet::READ_HANG_UP | bad),
                    writable: set.intersects(EventSet::OUT | bad),
                };
                self.muxer.handle_host_ready(ev.data(), ready);
            }
            if n < events.len() {
                return Ok(());
            }
        }
    }
}

/// The driver set the ring up and the VMM enabled it.
fn ring_usable(vring: &VringRwLock) -> bool {
    let state = vring.get_ref();
    state.is_enabled() && state.get_queue().ready()
}

impl<C> VhostUserBackendMut for VsockDevice<C>
where
    C: Connector + Send + Sync + 'static,
    C::Stream: Send + Sync,
{
    type Bitmap = ();
    type Vring = VringRwLock;

    fn num_queues(&self) -> usize {
        NUM_QUEUES
    }

    fn max_queue_size(&self) -> usize {
        MAX_QUEUE_SIZE
    }

    fn features(&self) -> u64 {
        (1 << VIRTIO_F_VERSION_1)
            | (1 << VIRTIO_RING_F_EVENT_IDX)
            | VhostUserVirtioFeatures::PROTOCOL_FEATURES.bits()
    }

    fn acked_features(&mut self, features: u64) {
        let _g = self.span.enter();
        debug!(features = format_args!("{features:#x}"), "driver features");
    }

    fn protocol_features(&self) -> VhostUserProtocolFeatures {
        VhostUserProtocolFeatures::MQ | VhostUserProtocolFeatures::CONFIG
    }

    fn reset_device(&mut self) {
        let _g = self.span.clone().entered();
        let n = self.muxer.reset();
        info!(connections = n, "device reset by the VMM");
    }

    fn set_event_idx(&mut self, enabled: bool) {
        self.event_idx = enabled;
    }

    fn get_config(&self, offset: u32, size: u32) -> Vec<u8> {
        let config = self.config_space();
        let start = offset as usize;
        match start.checked_add(size as usize) {
            Some(end) if end <= config.len() => config[start..end].to_vec(),
            _ => {
                let _g = self.span.enter();
                warn!(
                    offset,
                    size, "config read outside the 8-byte vsock config space"
                );
                Vec::new()
            }
        }
    }

    fn update_memory(&mut self, mem: Mem) -> io::Result<()> {
        let _g = self.span.clone().entered();
        debug!("guest memory map updated");
        // The file-backed regions (all of them with QEMU's memory-backend-memfd or
        // -file, share=on); anonymous ones cannot be handed on.
        let regions = mem
            .memory()
            .iter()
            .filter_map(|r| {
                let f = r.file_offset()?;
                Some(GuestRamRegion {
                    gpa: r.start_addr().raw_value(),
                    len: r.len(),
                    file: f.arc().clone(),
                    offset: f.start(),
                })
            })
            .collect();
        self.muxer.connector_mut().guest_memory_changed(regions);
        self.mem = Some(mem);
        Ok(())
    }

    fn exit_event(&self, _thread_index: usize) -> Option<(EventConsumer, EventNotifier)> {
        Some((self.exit.0.try_clone().ok()?, self.exit.1.try_clone().ok()?))
    }

    fn stop_vring(&mut self, queue_index: u32) -> io::Result<()> {
        if queue_index == u32::from(TX_QUEUE) {
            self.tx_stopped = true;
        }
        Ok(())
    }

    fn handle_event(
        &mut self,
        device_event: u16,
        _evset: EventSet,
        vrings: &[VringRwLock],
        _thread_id: usize,
    ) -> io::Result<()> {
        let _g = self.span.clone().entered();
        let (Some(rx), Some(tx)) = (
            vrings.get(usize::from(RX_QUEUE)),
            vrings.get(usize::from(TX_QUEUE)),
        ) else {
            return Err(io::Error::other("vsock needs rx and tx vrings"));
        };
        // Errors below concern guest memory or eventfds; log them rather than return
        // them, which would end the vhost-user worker thread and with it the device.
        let result = match device_event {
            RX_QUEUE | EVENT_QUEUE => Ok(()),
            TX_QUEUE => {
                self.check_driver_restart(tx);
                self.process_tx(tx)
            }
            BACKEND_EVENT => self.process_streams(),
            other => {
                warn!(event = other, "unknown device event");
                Ok(())
            }
        };
        if let Err(e) = result.and_then(|()| self.process_rx(rx)) {
            warn!(event = device_event, "vsock event handling failed: {e}");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
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
}
