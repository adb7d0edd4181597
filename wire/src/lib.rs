//! The vmcuda wire protocol, shared by the guest library and the host backend.
//!
//! Module map:
//! - [`array`]: CUDA arrays, 3D copies (each side a place), texture and surface objects.
//! - [`driver`]: driver-API requests beyond the runtime's ops: element memsets, stream
//!   writes, virtual memory management, linking, tensor maps.
//! - [`frame`]: the fixed 40-byte frame header (zerocopy), frame flags, reading and
//!   writing whole frames, several of which may share one write.
//! - [`graph`]: stream capture, CUDA graphs and stream-ordered memory: host-named
//!   graph handles, capture modes, memory-pool attributes.
//! - [`table`]: the table of every forwarded call, one line per op, grouped by API
//!   family ([`op_lines!`]).
//! - [`op`]: what the table expands into: op codes, request and reply types, whether
//!   the guest waits, one handler trait per family and the host's dispatch.
//! - [`handle`]: the handles guests name their objects with (never host pointers).
//! - [`device`], [`memory`], [`module`]: the request and reply types of those families
//!   that carry more than plain fields.
//! - [`handshake`]: the versioned hello exchanged first on every connection.
//! - [`status`]: CUDA runtime error codes (`cudaError_t`), their names and messages.
//! - [`fatbin`]: parsing of nvcc fatbinary wrappers, containers and entries.
//! - [`cubin`]: reading kernel parameter layouts and global variables out of ELF cubins.
//! - [`ptx`]: the module-scope data a PTX text older than the linker takes declares.
//! - [`transport`]: server addresses (`unix:`, `tcp:`, `tls:`, `vsock:`) and blocking
//!   streams.
//! - [`ring`]: the command ring: frames through memory the guest and its worker share,
//!   with doorbells on the socket for a sleeping reader.
//! - [`tls`]: TLS for the TCP transport (rustls): configurations, handshakes, and the
//!   stream shared by a connection's reader and writer halves.
//!
//! The unit tests of `cubin` and `fatbin` live beside them in
//! `<module>/tests.rs`.

pub mod array;
pub mod cubin;
pub mod device;
pub mod driver;
pub mod fatbin;
pub mod frame;
pub mod graph;
pub mod handle;
pub mod handshake;
pub mod memory;
pub mod module;
pub mod no_sigpipe;
pub mod op;
pub mod polling;
pub mod ptx;
pub mod ring;
pub mod status;
pub mod table;
pub mod tls;
pub mod transport;

pub use frame::{FrameError, FrameHeader};
pub use status::CudaStatus;
