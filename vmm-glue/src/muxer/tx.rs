//! Guest to host: payload from the guest's tx queue goes into the host stream, and is
//! buffered (within the `buf_alloc` we advertise) only while that stream would block.

use std::collections::VecDeque;
use std::io;

use tracing::{debug, warn};

use crate::packet::{SHUTDOWN_BOTH, SHUTDOWN_SEND};

use super::{ConnId, Connector, HostStream, Muxer, MAX_PAYLOAD};

impl<C: Connector> Muxer<C> {
    pub(super) fn guest_data(&mut self, id: ConnId, payload: &[u8]) {
        let buf_alloc = self.cfg.buf_alloc as usize;
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        if conn.guest_shutdown & SHUTDOWN_SEND != 0 {
            warn!(
                connection = id,
                "data after the guest's SHUTDOWN(send); resetting"
            );
            self.close(id, true, "data after the guest's SHUTDOWN(send)");
            return;
        }
        if conn.to_host.len().saturating_add(payload.len()) > buf_alloc {
            warn!(
                connection = id,
                buffered = conn.to_host.len(),
                len = payload.len(),
                buf_alloc,
                "guest exceeded the credit we gave it; resetting the connection"
            );
            self.close(id, true, "credit violation");
            return;
        }
        if conn.host_write_failed {
            // Nobody takes it any more; count it as consumed so the guest is not stuck.
            conn.fwd_cnt = conn.fwd_cnt.wrapping_add(payload.len() as u32);
        } else {
            conn.to_host.extend(payload);
        }
        self.flush(id);
    }

    pub(super) fn guest_shutdown(&mut self, id: ConnId, flags: u32) {
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        conn.guest_shutdown |= flags & SHUTDOWN_BOTH;
        debug!(connection = id, flags, "guest shutdown");
        if conn.guest_shutdown == SHUTDOWN_BOTH {
            // The guest is closing its socket and waits for our reset.
            self.close(id, true, "guest closed");
            return;
        }
        self.flush(id);
    }

    /// Push buffered guest bytes into the host stream; half-close it once the guest has
    /// said it sends no more; owe the guest a credit update when enough room was freed.
    pub(super) fn flush(&mut self, id: ConnId) {
        let threshold = (self.cfg.buf_alloc / 4).max(1);
        let Some(conn) = self.conns.get_mut(&id) else {
            return;
        };
        while !conn.to_host.is_empty() && !conn.host_write_failed {
            let (front, _) = conn.to_host.as_slices();
            match conn.stream.write(front) {
                Ok(0) => break,
                Ok(n) => {
                    let n = n.min(front.len());
                    conn.to_host.drain(..n);
                    conn.fwd_cnt = conn.fwd_cnt.wrapping_add(n as u32);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    debug!(
                        connection = id,
                        "host stream write failed: {e}; discarding guest data"
                    );
                    conn.host_write_failed = true;
                    conn.fwd_cnt = conn.fwd_cnt.wrapping_add(conn.to_host.len() as u32);
                    conn.to_host = VecDeque::new();
                }
            }
        }
        if conn.to_host.is_empty() {
            if conn.to_host.capacity() > MAX_PAYLOAD as usize {
                conn.to_host = VecDeque::new();
            }
            if conn.guest_shutdown & SHUTDOWN_SEND != 0 && !conn.host_write_shut {
                conn.host_write_shut = true;
                if let Err(e) = conn.stream.shutdown_write() {
                    debug!(connection = id, "half-closing the host stream: {e}");
                }
            }
        }
        if conn.fwd_cnt.wrapping_sub(conn.fwd_cnt_told) >= threshold {
            conn.want_credit_update = true;
        }
        self.enqueue(id);
    }
}
