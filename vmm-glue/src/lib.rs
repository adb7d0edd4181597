//! vmcuda's VM plumbing: `vmcuda-vhost-vsock`, a vhost-user virtio-vsock device for one
//! VM. A CUDA program in the guest connects an `AF_VSOCK` stream socket to the host
//! (CID 2) on the vmcuda port (7731); this device accepts the connection and hands it to
//! a fresh `vmcuda-host worker` process, shuttling the stream's bytes between the guest's
//! virtqueues and a Unix socket whose other end is the worker's stdin.
//!
//! Module map (dependencies point down):
//!
//! | module | what |
//! | --- | --- |
//! | [`worker`] | the real host side: spawns `vmcuda-host worker` on a socket pair, registers the socket with an epoll, reaps the process |
//! | [`device`] | the vhost-user backend: virtqueue plumbing (tx chains in, rx chains out), features, config space, epoll wiring; no protocol decisions |
//! | [`muxer`] | the vsock stream protocol as a pure state machine: connections, credit accounting, shutdown, resets, caps; host sockets behind two small traits |
//! | `muxer/conn.rs` | one connection's state and credit arithmetic |
//! | `muxer/tx.rs` | guest to host: buffering within the advertised credit, half-close |
//! | `muxer/rx.rs` | host to guest: the round-robin rx queue, control packets, pending resets |
//! | [`packet`] | the 44-byte packet header (zerocopy raw struct, native [`packet::Header`]) and the protocol constants |
//!
//! The guest is hostile: every header field, length and descriptor it provides is
//! checked, nothing it sends can panic the device, every per-connection buffer is bounded
//! by the credit we advertise, and the number of connections is capped. See
//! `vmm-glue/README.md` for the threat model and how QEMU attaches the device.
//!
//! Unit tests live beside the code they test (`muxer/tests.rs`, `device/tests.rs`); the
//! in-memory host-side doubles both use are in `muxer/testing.rs`.

pub mod device;
pub mod muxer;
pub mod packet;
pub mod worker;
