//! One connection's exchanges: requests out, replies in (kept for a return after a
//! drop), posted frames flushed, pipelines and batches of calls.

use super::*;

impl Connection {
    /// The connection failed: say so once; every later call fails.
    pub(super) fn lost(&mut self, e: impl std::fmt::Display) -> CudaStatus {
        if !self.broken {
            self.broken = true;
            eprintln!("vmcuda: lost the connection to the vmcuda host ({e}); CUDA calls now fail");
        }
        CudaStatus::ErrorDevicesUnavailable
    }

    pub(super) fn flush_posted(&mut self) {
        if self.broken {
            return;
        }
        if let Err(e) = self.posted.flush(&mut self.writer) {
            // What was queued is in the journal: sent again on the new connection.
            if let Err(e) = self.recover(e.into()) {
                self.lost(e);
            }
        }
    }

    pub(super) fn exchange<R: Request>(
        &mut self,
        device: i32,
        req: &R,
        data: &[u8],
        sink: Sink<'_>,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<R::Reply, CudaStatus> {
        if self.broken {
            return Err(CudaStatus::ErrorDevicesUnavailable);
        }
        if self.reattach {
            self.reattach = false;
            if let Some(addr) = self.resume.as_ref().map(|r| r.addr.clone()) {
                self.attach_ring(
                    &addr,
                    polling::window_from_env(RING_REPLY_POLL_WINDOW),
                    None,
                );
            }
        }
        match self.exchange_inner(device, req, data, sink, fd) {
            Ok(r) => {
                match &r {
                    Err(status) if status.is_sticky() => {
                        self.sticky.insert(device, *status);
                    }
                    // A reset device starts over with a fresh context.
                    Ok(_) if R::OP == Op::DeviceReset => {
                        self.sticky.remove(&device);
                    }
                    _ => {}
                }
                r
            }
            Err(e) => Err(self.lost(e)),
        }
    }

    /// Outer error: the connection is unusable. Inner: the call's own CUDA status.
    pub(super) fn exchange_inner<R: Request>(
        &mut self,
        device: i32,
        req: &R,
        data: &[u8],
        mut sink: Sink<'_>,
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<Result<R::Reply, CudaStatus>, FrameError> {
        let id = self.next_id;
        self.next_id += 1;
        let meta = postcard::to_stdvec(req).expect("requests always encode");
        let header =
            FrameHeader::new(R::OP.code(), 0, id, meta.len(), data.len()).with_device(device);
        // The clock only for the profile: this is every waited-for call's path.
        let sent = crate::profile::get().map(|_| Instant::now());
        let mut written = self.send_request(header, &meta, data, fd);
        // A drop on the way out or back: the session is come back to, and this
        // request sent again unless the worker took it (it then sends its reply again).
        loop {
            if let Err(e) = written {
                written = match self.recover(e)? {
                    taken if taken < id => self.send_request(header, &meta, data, fd),
                    _ => Ok(()),
                };
                continue;
            }
            match self.read_reply_profiled::<R>(id, sink.again(), sent, frame_bytes(&meta, data)) {
                Err(e) => written = Err(e),
                done => return done,
            }
        }
    }

    /// Write one request (posted frames first, in the same write).
    pub(super) fn send_request(
        &mut self,
        mut header: FrameHeader,
        meta: &[u8],
        data: &[u8],
        fd: Option<BorrowedFd<'_>>,
    ) -> Result<(), FrameError> {
        match fd {
            Some(fd) => {
                self.posted.flush(&mut self.writer)?;
                self.writer.send_with_fd(&mut header, meta, data, fd)?;
            }
            None => self
                .posted
                .write_with(&mut self.writer, &header, meta, data)?,
        }
        Ok(())
    }

    /// [`Connection::read_reply_profiled`] for a request the journal keeps: after a
    /// drop the session is come back to (the journal sends it again) and its reply
    /// read there.
    pub(super) fn read_kept_reply<R: Request>(
        &mut self,
        id: u64,
        mut sink: Sink<'_>,
        bytes_out: u64,
    ) -> Result<Result<R::Reply, CudaStatus>, FrameError> {
        loop {
            match self.read_reply_profiled::<R>(id, sink.again(), None, bytes_out) {
                Err(e) => {
                    self.recover(e)?;
                }
                done => return done,
            }
        }
    }

    /// Write the posted queue (journaled requests): after a drop, the session is come
    /// back to and the journal sends them again.
    pub(super) fn flush_kept(&mut self) -> Result<(), FrameError> {
        match self.posted.flush(&mut self.writer) {
            Ok(()) => Ok(()),
            Err(e) => self.recover(e.into()).map(|_| ()),
        }
    }

    /// Read the reply to request `id`, writing console output that comes first.
    pub(super) fn read_reply<R: Request>(
        &mut self,
        id: u64,
        sink: Sink<'_>,
    ) -> Result<Result<R::Reply, CudaStatus>, FrameError> {
        loop {
            let (h, meta) = frame::read_head(&mut self.reader)?;
            if h.has(FLAG_EVENT) && h.op.get() == OP_CONSOLE {
                let console: Console =
                    postcard::from_bytes(&meta).map_err(|source| FrameError::Decode {
                        op: OP_CONSOLE,
                        source,
                    })?;
                let text = frame::read_data(&mut self.reader, &h)?;
                write_console(console.fd, &text);
                continue;
            }
            if !h.has(FLAG_REPLY) || h.request_id.get() != id || h.op.get() != R::OP.code() {
                return Err(FrameError::UnknownOp(h.op.get()));
            }
            let status = CudaStatus(h.status.get());
            self.last_reply_size = (
                HEADER_LEN as u64 + meta.len() as u64 + h.data_len.get(),
                h.worker_time(),
            );
            if !status.is_success() {
                // An error reply may say why (a refused hello does), in a few words.
                let len = h.data_len.get();
                if len > 0 && len <= MAX_REASON_LEN {
                    let text = frame::read_data(&mut self.reader, &h)?;
                    self.reason = Some(String::from_utf8_lossy(&text).into_owned());
                } else {
                    frame::skip_data(&mut self.reader, len)?;
                }
                self.replied(id);
                return Ok(Err(status));
            }
            let reply: R::Reply =
                postcard::from_bytes(&meta).map_err(|source| FrameError::Decode {
                    op: h.op.get(),
                    source,
                })?;
            let len = h.data_len.get();
            match sink {
                Sink::Into(buf) if buf.len() as u64 == len => self.reader.read_exact(buf)?,
                Sink::Grow(buf) => *buf = frame::read_data(&mut self.reader, &h)?,
                Sink::None if len == 0 => {}
                _ => {
                    frame::skip_data(&mut self.reader, len)?;
                    return Err(FrameError::DataTooLarge(len));
                }
            }
            self.replied(id);
            return Ok(Ok(reply));
        }
    }

    /// [`Connection::read_reply`], counted in the profile (if on) as a round trip of
    /// `bytes_out` sent at `sent`, or, for a request of several in flight (`None`),
    /// from when its reply was waited for.
    pub(super) fn read_reply_profiled<R: Request>(
        &mut self,
        id: u64,
        sink: Sink<'_>,
        sent: Option<Instant>,
        bytes_out: u64,
    ) -> Result<Result<R::Reply, CudaStatus>, FrameError> {
        let Some(p) = crate::profile::get() else {
            return self.read_reply::<R>(id, sink);
        };
        let sent = sent.unwrap_or_else(Instant::now);
        let reply = self.read_reply::<R>(id, sink);
        let (bytes_in, worker) = self.last_reply_size;
        p.waited(R::OP, sent, sent.elapsed(), worker, bytes_out, bytes_in);
        reply
    }

    /// [`Client::pipeline`]'s traffic; the outer error means the connection is lost.
    pub(super) fn run_pipeline<R: Request<Reply = ()>>(
        &mut self,
        device: i32,
        n: usize,
        depth: usize,
        prepare: &mut dyn FnMut(usize) -> R,
        done: &mut dyn FnMut(usize, Result<(), CudaStatus>),
    ) -> Result<(), FrameError> {
        let first = self.next_id;
        // The sizes of the requests in flight, for the profile.
        let mut in_flight = std::collections::VecDeque::with_capacity(depth);
        for i in 0..n {
            if i >= depth {
                let bytes_out = in_flight.pop_front().unwrap_or_default();
                let reply =
                    self.read_kept_reply::<R>(first + (i - depth) as u64, Sink::None, bytes_out)?;
                done(i - depth, reply);
            }
            let req = prepare(i);
            let meta = postcard::to_stdvec(&req).expect("requests always encode");
            in_flight.push_back(frame_bytes(&meta, &[]));
            let header =
                FrameHeader::new(R::OP.code(), 0, self.next_id, meta.len(), 0).with_device(device);
            self.next_id += 1;
            // Behind whatever was posted before it, in the same write.
            self.journal.record(&header, &meta, &[]);
            self.posted.push(&header, &meta, &[]);
            self.flush_kept()?;
        }
        for i in n.saturating_sub(depth)..n {
            let bytes_out = in_flight.pop_front().unwrap_or_default();
            let reply = self.read_kept_reply::<R>(first + i as u64, Sink::None, bytes_out)?;
            done(i, reply);
        }
        Ok(())
    }

    /// Send every request first, then read their replies in order, each reply's data
    /// into its buffer: the host works on one while the next is already queued.
    pub(super) fn exchange_many<R: Request>(
        &mut self,
        device: i32,
        requests: Vec<(R, &mut [u8])>,
    ) -> Result<Result<(), CudaStatus>, FrameError> {
        let first = self.next_id;
        // Behind whatever was posted, all in one write; their sizes for the profile.
        let mut sizes = Vec::with_capacity(requests.len());
        for (req, _) in &requests {
            let meta = postcard::to_stdvec(req).expect("requests always encode");
            let header =
                FrameHeader::new(R::OP.code(), 0, self.next_id, meta.len(), 0).with_device(device);
            self.journal.record(&header, &meta, &[]);
            self.posted.push(&header, &meta, &[]);
            sizes.push(frame_bytes(&meta, &[]));
            self.next_id += 1;
        }
        self.flush_kept()?;
        let mut result = Ok(());
        for (i, ((_, buf), bytes_out)) in requests.into_iter().zip(sizes).enumerate() {
            // Every reply is read, even after a failure, to stay in step.
            if let Err(e) =
                self.read_kept_reply::<R>(first + i as u64, Sink::Into(buf), bytes_out)?
            {
                result = result.and(Err(e));
            }
        }
        Ok(result)
    }
}

/// A frame's size on the connection.
pub(super) fn frame_bytes(meta: &[u8], data: &[u8]) -> u64 {
    (HEADER_LEN + meta.len() + data.len()) as u64
}

impl Drop for Connection {
    /// A client that goes away sends what was posted on it.
    fn drop(&mut self) {
        self.flush_posted();
    }
}
