//! Moving a connection's frames into a command ring (see [`vmcuda_wire::ring`]).

use std::io::BufReader;
use std::os::fd::AsFd;
use std::time::Duration;

use vmcuda_wire::frame;
use vmcuda_wire::op::{RingAttach, RingPlace};
use vmcuda_wire::ring::{self, Bell, RingMemory, DEFAULT_CAPACITY};
use vmcuda_wire::transport::ServerAddr;

use super::{Connection, Incoming, Sink};

/// Whether this process may use a command ring: `VMCUDA_RING=0` or
/// `VMCUDA_SHARED_MEMORY=0` (no memory shared with the host at all) say no.
fn wanted() -> bool {
    let off = |name| std::env::var(name).is_ok_and(|v| v == "0");
    !off("VMCUDA_RING") && !off("VMCUDA_SHARED_MEMORY")
}

impl Connection {
    /// Attach a command ring right after the hello, where memory can be shared with
    /// this host: a sealed memfd on one host, guest huge pages in a VM whose worker
    /// has the VM's RAM. Anything missing leaves the frames on the socket, the reason
    /// said under `VMCUDA_VERBOSE`.
    pub(super) fn attach_ring(
        &mut self,
        addr: &ServerAddr,
        window: Duration,
        area: Option<&crate::guest_ram::GuestArea>,
    ) {
        if !wanted() {
            return;
        }
        let outcome = match addr {
            ServerAddr::Unix(_) => self.attach_ring_in_memfd(window),
            ServerAddr::Vsock { .. } => self.attach_ring_in_guest_pages(area, window),
            _ => return,
        };
        if std::env::var_os("VMCUDA_VERBOSE").is_some() {
            match outcome {
                Ok(()) => eprintln!("vmcuda: calls travel through a command ring in shared memory"),
                Err(why) => {
                    eprintln!("vmcuda: no command ring ({why}); calls travel on the socket")
                }
            }
        }
    }

    fn attach_ring_in_memfd(&mut self, window: Duration) -> Result<(), String> {
        let fd = crate::pages::memfd(ring::area_len(DEFAULT_CAPACITY))
            .map_err(|e| format!("no memfd: {e}"))?;
        let memory = RingMemory::map_fd(fd.as_fd(), DEFAULT_CAPACITY).map_err(|e| e.to_string())?;
        let req = RingAttach {
            capacity: DEFAULT_CAPACITY,
            place: RingPlace::Descriptor,
        };
        self.attach(memory, &req, Some(fd.as_fd()), window)
    }

    /// Guest pages the worker maps: from the guest RAM the broker gave (`area`), or
    /// huge pages of a privileged process's own.
    fn attach_ring_in_guest_pages(
        &mut self,
        area: Option<&crate::guest_ram::GuestArea>,
        window: Duration,
    ) -> Result<(), String> {
        let pages = crate::guest_ram::HostPages::take(ring::area_len(DEFAULT_CAPACITY), area)?;
        let req = RingAttach {
            capacity: DEFAULT_CAPACITY,
            place: RingPlace::GuestPages {
                page_size: pages.page_size,
                pages: pages.pages.clone(),
            },
        };
        let (at, len) = (pages.at, pages.len);
        let memory = if pages.owned {
            // SAFETY: `take` made this mapping of `len` bytes; the ring owns it now.
            unsafe { RingMemory::from_mapping(at, len, DEFAULT_CAPACITY) }
        } else {
            // SAFETY: a piece of the broker's area, mapped for the life of the process
            // and handed out once, to this ring alone.
            unsafe { RingMemory::borrowed(at, len, DEFAULT_CAPACITY) }
        }
        .map_err(|e| e.to_string())?;
        self.attach(memory, &req, None, window)
    }

    fn attach(
        &mut self,
        memory: RingMemory,
        req: &RingAttach,
        fd: Option<std::os::fd::BorrowedFd<'_>>,
        window: Duration,
    ) -> Result<(), String> {
        let bell = self
            .writer
            .socket
            .socket_fd()
            .ok_or("no socket to ring")
            .and_then(|s| Bell::new(s, None).map_err(|_| "out of descriptors"))?;
        match self.exchange_inner(0, req, &[], Sink::None, fd) {
            Ok(Ok(())) => {}
            Ok(Err(status)) => return Err(format!("the host said {status}")),
            Err(e) => {
                self.lost(&e);
                return Err(e.to_string());
            }
        }
        // The host answered on the socket and will send nothing more there.
        let (reader, writer, _) = ring::open(memory, ring::End::Guest, bell, window);
        self.reader = BufReader::with_capacity(frame::READ_AHEAD, Incoming::Ring(reader));
        self.writer.ring = Some(writer);
        Ok(())
    }
}
