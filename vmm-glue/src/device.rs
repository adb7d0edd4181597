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
mod tests;
