//! The hello exchanged first on every connection ([`Hello`]).
//!
//! The guest sends its protocol version, the CUDA runtime version it implements, its
//! capability bits and an authentication token; the host answers with its own
//! version, the driver version, the device count and which executor serves the guest.
//! A guest whose protocol version the host does not speak is refused with
//! `cudaErrorInsufficientDriver`, and the connection is closed.

use serde::{Deserialize, Serialize};

use crate::status::CudaStatus;

/// Bumped on every incompatible change of frames, op codes or argument types.
pub const PROTOCOL_VERSION: u32 = 3;

/// The CUDA runtime version the guest library implements (13.0).
pub const RUNTIME_VERSION: i32 = 13000;

/// The project's well-known port (TCP, and vsock from the VM issue on).
pub const WELL_KNOWN_PORT: u16 = 7731;

/// Capability bits a guest or host may advertise.
pub mod caps {
    /// The peer understands `FLAG_NO_REPLY` requests with deferred errors.
    pub const ASYNC_REQUESTS: u64 = 1 << 0;
    /// The peer forwards kernel console output (`OP_CONSOLE`).
    pub const CONSOLE: u64 = 1 << 1;
    /// The host keeps a module cache for the guest's VM and serves `ModuleLoadCached`:
    /// module and library images are named by their hash first, and cross only when
    /// the host lacks them. A guest sends the op only to a host that said this.
    pub const MODULE_CACHE: u64 = 1 << 2;
    /// Guest: it can come back to its session after a dropped connection. Host: it
    /// holds the session's state for a while after a drop and serves
    /// `SessionTicketGet` and `SessionResume`.
    pub const RESUMABLE: u64 = 1 << 3;
}

/// The length of a session ticket's secret: 256 random bits.
pub const TICKET_SECRET_LEN: usize = 32;

/// What lets a guest come back to its session: single-use, replaced by every resume.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SessionTicket {
    /// Which session (random: it names the worker's resume point).
    pub session: u64,
    /// Proof that the guest is the session's own.
    pub secret: [u8; TICKET_SECRET_LEN],
    /// How long the host holds the session after a drop, in milliseconds: the guest
    /// tries to come back this long.
    pub hold_ms: u64,
}

/// A guest coming back to its session: the first frame on the new connection.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SessionResume {
    /// Admission is decided again, as for a new connection; the program's name and
    /// pid are the same.
    pub hello: Hello,
    pub session: u64,
    pub secret: [u8; TICKET_SECRET_LEN],
    /// The id of the last reply the guest read whole: the worker sends again every
    /// reply after it.
    pub last_reply: u64,
}

/// The worker's answer to [`SessionResume`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SessionResumed {
    /// The id of the last request the worker took: the guest sends again every
    /// request after it, and none before it.
    pub last_request: u64,
    /// The ticket for the next drop (the one presented is spent).
    pub ticket: SessionTicket,
}

/// The guest's first request on every connection.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Hello {
    pub protocol: u32,
    /// The CUDA runtime version the guest library implements (e.g. 13000).
    pub runtime_version: i32,
    pub capabilities: u64,
    /// Authentication token (checked by policy; empty when none is configured).
    pub token: Vec<u8>,
    /// The guest program's name and pid, for the host's logs.
    pub client: String,
    pub pid: u32,
}

/// Which executor serves a guest.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum ExecutorKind {
    /// A real GPU through the CUDA driver.
    Cuda,
    /// The host-memory test double: kernels are recorded, never run.
    HostMemory,
}

/// The host's answer to [`Hello`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct HelloReply {
    pub protocol: u32,
    pub driver_version: i32,
    pub device_count: i32,
    pub executor: ExecutorKind,
    pub capabilities: u64,
    /// One human-readable line about the backend (shown by tools and the demo).
    pub banner: String,
}

/// The host's check of a guest's hello.
pub fn check_hello(hello: &Hello) -> Result<(), CudaStatus> {
    if hello.protocol != PROTOCOL_VERSION {
        return Err(CudaStatus::ErrorInsufficientDriver);
    }
    // A CUDA 13 runtime needs a CUDA 13 capable host; older runtimes never send this.
    if hello.runtime_version / 1000 != RUNTIME_VERSION / 1000 {
        return Err(CudaStatus::ErrorInsufficientDriver);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> Hello {
        Hello {
            protocol: PROTOCOL_VERSION,
            runtime_version: RUNTIME_VERSION,
            capabilities: caps::CONSOLE,
            token: vec![],
            client: "t".into(),
            pid: 1,
        }
    }

    #[test]
    fn accepts_matching_versions() {
        assert!(check_hello(&hello()).is_ok());
    }

    #[test]
    fn refuses_other_protocol_or_runtime() {
        let mut h = hello();
        h.protocol = 99;
        assert_eq!(check_hello(&h), Err(CudaStatus::ErrorInsufficientDriver));
        let mut h = hello();
        h.runtime_version = 12080;
        assert_eq!(check_hello(&h), Err(CudaStatus::ErrorInsufficientDriver));
    }

    #[test]
    fn hello_survives_encoding() {
        let bytes = postcard::to_stdvec(&hello()).unwrap();
        assert_eq!(postcard::from_bytes::<Hello>(&bytes).unwrap(), hello());
    }
}
