//! Device-to-device copies whose two sides are on different hosts: over the hosts'
//! peer link where there is one, else through the guest.

use super::*;

/// The devices of a device-to-device copy whose two sides are on different hosts.
pub(super) fn across_hosts(
    direction: Direction,
    dst: usize,
    src: usize,
) -> Result<Option<(i32, i32)>> {
    if direction != Direction::DeviceToDevice {
        return Ok(None);
    }
    match (
        crate::driver::inner::device_of_ptr(dst),
        crate::driver::inner::device_of_ptr(src),
    ) {
        (Some(d), Some(s)) if crate::driver::inner::on_different_hosts(d, s)? => Ok(Some((d, s))),
        _ => Ok(None),
    }
}

/// A copy between devices of two hosts, each side in its device's legacy stream
/// order, after `stream` (waited for on its own host). The bytes go from one host's
/// daemon to the other's over their peer link where both have one; else they come up
/// through the guest, a frame at a time, and go down to the other host.
pub(super) fn across_hosts_copy(
    rows: Rows,
    dst_device: i32,
    src_device: i32,
    stream: StreamHandle,
) -> Result<()> {
    if !stream.is_default() {
        wait_for_stream(stream)?;
    }
    match peer_copy(rows, dst_device, src_device) {
        Err(CudaStatus::ErrorNotSupported) => {}
        done => return done,
    }
    through_guest(rows, dst_device, src_device)
}

/// Host pairs (source, destination) found to have no peer link: their copies go
/// through the guest from then on.
static NO_PEER_LINK: std::sync::Mutex<Vec<(usize, usize)>> = std::sync::Mutex::new(Vec::new());

/// [`across_hosts_copy`] host to host: the destination's host hands out a ticket
/// (`PeerExpect`), the source's host is told to send its bytes for it (`PeerSend`,
/// posted: it may wait for the receiver, which is told next to take them in,
/// `PeerReceive`), then one waited-for call to the source's host collects what its
/// sending owes. `ErrorNotSupported`: either host has no `[peers]`.
fn peer_copy(rows: Rows, dst_device: i32, src_device: i32) -> Result<()> {
    let hosts = client::client()?;
    let pair = (hosts.host_of(src_device), hosts.host_of(dst_device));
    let unlinked = || NO_PEER_LINK.lock().unwrap_or_else(|p| p.into_inner());
    if unlinked().contains(&pair) {
        return Err(CudaStatus::ErrorNotSupported);
    }
    // Whether the source's host has the link (zero bytes are only a question), and
    // the errors its posted calls owe, before anything is registered on the other.
    let asked = crate::driver::inner::on_host_of(Some(src_device), || call(&no_bytes(rows.src)));
    // Rows that lie back to back on both sides go as one transfer.
    let packed = rows.height == 1 || (rows.dpitch == rows.width && rows.spitch == rows.width);
    let (count, len) = if packed {
        (1, rows.width * rows.height)
    } else {
        (rows.height, rows.width)
    };
    let result = asked.and_then(|()| {
        (0..count).try_for_each(|row| {
            let (dst, src) = (rows.dst + row * rows.dpitch, rows.src + row * rows.spitch);
            peer_transfer(dst, dst_device, src, src_device, len)
        })
    });
    // Only the first question or the first expectation answers this: nothing was
    // copied, and the copy goes through the guest instead.
    if result == Err(CudaStatus::ErrorNotSupported) {
        unlinked().push(pair);
        no_peer_link_once();
    }
    result
}

/// A `PeerSend` of nothing: a question to the source's host, and a waited-for call
/// that collects what its posted calls owe.
fn no_bytes(src: usize) -> PeerSend {
    PeerSend {
        src: src as u64,
        size: 0,
        ticket: [0; 16],
        endpoint: String::new(),
    }
}

/// One transfer of `len` bytes from `src` (on `src_device`'s host) to `dst`.
fn peer_transfer(
    dst: usize,
    dst_device: i32,
    src: usize,
    src_device: i32,
    len: usize,
) -> Result<()> {
    let ticket = crate::driver::inner::on_host_of(Some(dst_device), || {
        call(&PeerExpect {
            dst: dst as u64,
            size: len as u64,
        })
    })?;
    let send = PeerSend {
        src: src as u64,
        size: len as u64,
        ticket: ticket.ticket,
        endpoint: ticket.endpoint,
    };
    // Posted straight to the client, even under VMCUDA_SYNC: the sender may wait for
    // the receiver, which only the next call starts.
    crate::driver::inner::on_host_of(Some(src_device), || {
        client::client()?.post_now(state::current_device(), &send, &[])
    })?;
    let received = crate::driver::inner::on_host_of(Some(dst_device), || {
        call(&PeerReceive {
            dst: dst as u64,
            size: len as u64,
            ticket: ticket.ticket,
        })
    });
    // The sender's outcome, whatever the receiver's was, so no error of it is left
    // owed to a later call.
    let sent = crate::driver::inner::on_host_of(Some(src_device), || call(&no_bytes(src)));
    received.and(sent)
}

/// Say once per program that copies between hosts go through the guest.
fn no_peer_link_once() {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        eprintln!(
            "vmcuda: copies between devices of different hosts go through the guest: \
             the hosts have no peer link ([peers] in their host.toml)"
        )
    });
}

/// [`across_hosts_copy`] through the guest.
fn through_guest(rows: Rows, dst_device: i32, src_device: i32) -> Result<()> {
    let chunk = client::chunk();
    let mut buf = vec![0u8; rows.width.min(chunk)];
    for row in 0..rows.height {
        let (dst, src) = (rows.dst + row * rows.dpitch, rows.src + row * rows.spitch);
        let mut done = 0;
        while done < rows.width {
            let n = (rows.width - done).min(chunk);
            let part = &mut buf[..n];
            crate::driver::inner::on_host_of(Some(src_device), || {
                let req = MemcpyDtoH {
                    src: (src + done) as u64,
                    size: n as u64,
                    stream: StreamHandle::LEGACY,
                    is_async: false,
                };
                client::client()?.call(state::current_device(), &req, &[], Sink::Into(part))
            })?;
            crate::driver::inner::on_host_of(Some(dst_device), || {
                let req = MemcpyHtoD {
                    dst: (dst + done) as u64,
                    stream: StreamHandle::LEGACY,
                    is_async: false,
                };
                call_with(&req, &buf[..n], Sink::None)
            })?;
            done += n;
        }
    }
    Ok(())
}
