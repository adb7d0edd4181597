//! A guest that speaks the wire protocol itself, one request at a time: for tests of
//! the host's admission and quotas where no guest library is needed (the admin API,
//! the Slurm prolog and epilog).

use vmcuda_wire::frame::{self, FrameHeader};
use vmcuda_wire::op::{Allocated, Hello, MemAlloc, Op};
use vmcuda_wire::transport::{ServerAddr, Stream};
use vmcuda_wire::CudaStatus;

pub struct Guest {
    s: Stream,
}

impl Guest {
    /// Connect to `server` (`unix:PATH`, `tcp:HOST:PORT`) with `token`: the guest, or
    /// the status it was refused with.
    pub fn connect(server: &str, token: &str) -> Result<Guest, CudaStatus> {
        Self::connect_then(server, token, || {})
    }

    /// [`Guest::connect`], running `before_hello` once connected and before the hello
    /// is sent (a guest slow to send it).
    pub fn connect_then(
        server: &str,
        token: &str,
        before_hello: impl FnOnce(),
    ) -> Result<Guest, CudaStatus> {
        let addr: ServerAddr = server.parse().map_err(|_| CudaStatus::ErrorInvalidValue)?;
        let s = Stream::connect(&addr, None).map_err(|_| CudaStatus::ErrorNoDevice)?;
        before_hello();
        Self::hello(s, token)
    }

    /// Say hello with `token` on a connection made otherwise (a worker's own socket).
    pub fn hello(s: Stream, token: &str) -> Result<Guest, CudaStatus> {
        let mut g = Guest { s };
        let hello = Hello {
            protocol: vmcuda_wire::handshake::PROTOCOL_VERSION,
            runtime_version: vmcuda_wire::handshake::RUNTIME_VERSION,
            capabilities: 0,
            token: token.as_bytes().to_vec(),
            client: "raw-guest".into(),
            pid: std::process::id(),
        };
        let meta = postcard::to_stdvec(&hello).map_err(|_| CudaStatus::ErrorUnknown)?;
        match g.call(Op::Hello, &meta) {
            Some((CudaStatus::Success, _)) => Ok(g),
            Some((status, _)) => Err(status),
            None => Err(CudaStatus::ErrorUnknown),
        }
    }

    /// One request and its reply's status and meta; `None` when the connection is gone.
    pub fn call(&mut self, op: Op, meta: &[u8]) -> Option<(CudaStatus, Vec<u8>)> {
        let h = FrameHeader::new(op.code(), 0, 1, meta.len(), 0);
        frame::write_frame(&mut self.s, &h, meta, &[]).ok()?;
        let (h, meta) = frame::read_head(&mut self.s).ok()?;
        frame::read_data(&mut self.s, &h).ok()?;
        Some((CudaStatus(h.status.get()), meta))
    }

    /// cuMemAlloc of `size` bytes: its status (`None`: the connection is gone).
    pub fn alloc(&mut self, size: u64) -> Option<CudaStatus> {
        let meta = postcard::to_stdvec(&MemAlloc { size }).ok()?;
        let (status, meta) = self.call(Op::MemAlloc, &meta)?;
        if status == CudaStatus::Success {
            postcard::from_bytes::<Allocated>(&meta).ok()?;
        }
        Some(status)
    }
}
