//! In-memory doubles for the host side, shared by the muxer and device tests.

use super::*;
use std::sync::{Arc, Mutex};

/// One connection's host side as the test sees it.
#[derive(Default, Debug)]
pub struct Wire {
    /// Bytes the host side received from the guest.
    pub received: Vec<u8>,
    /// Bytes the host side will send to the guest.
    pub to_send: VecDeque<u8>,
    /// How many more bytes the host side accepts before writes would block.
    pub room: usize,
    /// The host side closed its end (reads see end of stream once `to_send` is empty).
    pub eof: bool,
    pub write_shut: bool,
    /// The stream was dropped by the muxer.
    pub closed: bool,
    /// Writes fail with a broken pipe.
    pub broken: bool,
}

pub type WireRef = Arc<Mutex<Wire>>;

pub struct FakeStream(pub WireRef);

impl HostStream for FakeStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut w = self.0.lock().unwrap();
        if w.to_send.is_empty() {
            return if w.eof {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        }
        let n = buf.len().min(w.to_send.len());
        for (dst, src) in buf.iter_mut().zip(w.to_send.drain(..n)) {
            *dst = src;
        }
        Ok(n)
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut w = self.0.lock().unwrap();
        if w.broken {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        if w.room == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = buf.len().min(w.room);
        w.room -= n;
        w.received.extend_from_slice(&buf[..n]);
        Ok(n)
    }

    fn shutdown_write(&mut self) -> io::Result<()> {
        self.0.lock().unwrap().write_shut = true;
        Ok(())
    }
}

impl Drop for FakeStream {
    fn drop(&mut self) {
        // Never panic in a destructor, even after a failed assertion poisoned the lock.
        self.0.lock().unwrap_or_else(|e| e.into_inner()).closed = true;
    }
}

/// Hands out [`FakeStream`]s and remembers their wires by connection id.
#[derive(Clone, Default)]
pub struct FakeConnector {
    pub wires: Arc<Mutex<Vec<(ConnId, u32, WireRef)>>>,
    pub fail: Arc<Mutex<bool>>,
    /// Room each new wire starts with.
    pub initial_room: usize,
}

impl FakeConnector {
    pub fn new() -> FakeConnector {
        FakeConnector {
            initial_room: usize::MAX,
            ..Default::default()
        }
    }

    pub fn wire(&self, id: ConnId) -> WireRef {
        let wires = self.wires.lock().unwrap();
        wires
            .iter()
            .find(|(i, _, _)| *i == id)
            .map(|(_, _, w)| w.clone())
            .expect("no such connection")
    }

    pub fn last_id(&self) -> ConnId {
        self.wires.lock().unwrap().last().expect("no connection").0
    }
}

impl Connector for FakeConnector {
    type Stream = FakeStream;

    fn connect(&mut self, id: ConnId, guest_port: u32) -> io::Result<FakeStream> {
        if *self.fail.lock().unwrap() {
            return Err(io::Error::other("spawn failed"));
        }
        let wire = Arc::new(Mutex::new(Wire {
            room: self.initial_room,
            ..Default::default()
        }));
        self.wires
            .lock()
            .unwrap()
            .push((id, guest_port, wire.clone()));
        Ok(FakeStream(wire))
    }
}
