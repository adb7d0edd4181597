//! The peer link: copies between devices of two hosts go from daemon to daemon over
//! mutual TLS, never through the guest (docs/multi-gpu.md, docs/security.md).
//!
//! A guest copying from host A's device to host B's asks B's worker for a ticket
//! (`PeerExpect`), tells A's worker to send its bytes for that ticket to B's
//! endpoint (`PeerSend`), and tells B's worker to take them in (`PeerReceive`).
//! Workers cannot open connections, so each has a socket to its daemon's
//! [`Broker`](broker::Broker): the daemon connects only to `[peers] allow` endpoints,
//! draws the tickets, and hands an arriving transfer to the worker that registered
//! its ticket, once.
//!
//! - [`proto`]: the worker-broker messages and the daemon-daemon header;
//! - [`broker`]: the daemon's side: tickets, relays, the peer listener;
//! - [`link`]: the worker's side.

pub mod broker;
pub mod link;
pub mod proto;

pub use broker::{Broker, PeerTls};
pub use link::{LinkError, PeerLink, BROKER_FD};

#[cfg(test)]
mod tests;
