//! The virtio-vsock packet header: the raw 44-byte wire struct (zerocopy, little endian)
//! and the plain [`Header`] the rest of the crate works with, plus the protocol constants.
//!
//! Parsing cannot fail on content: every bit pattern is a header. Whether its fields make
//! sense (type, op, lengths, addresses) is decided by [`crate::muxer`].

use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// Size of the packet header on the wire.
pub const HEADER_SIZE: usize = 44;

/// The host's CID: the only destination this device serves.
pub const HOST_CID: u64 = 2;

/// `type` field: connection-oriented stream, the only type this device speaks.
pub const TYPE_STREAM: u16 = 1;

/// `op` values.
pub const OP_REQUEST: u16 = 1;
pub const OP_RESPONSE: u16 = 2;
pub const OP_RST: u16 = 3;
pub const OP_SHUTDOWN: u16 = 4;
pub const OP_RW: u16 = 5;
pub const OP_CREDIT_UPDATE: u16 = 6;
pub const OP_CREDIT_REQUEST: u16 = 7;

/// `SHUTDOWN` flags: the sender will receive no more data.
pub const SHUTDOWN_RCV: u32 = 1;
/// `SHUTDOWN` flags: the sender will send no more data.
pub const SHUTDOWN_SEND: u32 = 2;
/// Both shutdown flags.
pub const SHUTDOWN_BOTH: u32 = SHUTDOWN_RCV | SHUTDOWN_SEND;

/// The header exactly as it lies in guest memory.
#[derive(Clone, Copy, Debug, Default, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
#[repr(C)]
pub struct RawHeader {
    pub src_cid: U64,
    pub dst_cid: U64,
    pub src_port: U32,
    pub dst_port: U32,
    pub len: U32,
    pub type_: U16,
    pub op: U16,
    pub flags: U32,
    pub buf_alloc: U32,
    pub fwd_cnt: U32,
}

const _: () = assert!(std::mem::size_of::<RawHeader>() == HEADER_SIZE);

/// A packet header in native integers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub src_cid: u64,
    pub dst_cid: u64,
    pub src_port: u32,
    pub dst_port: u32,
    /// Payload length the sender claims; checked against the bytes really provided.
    pub len: u32,
    pub type_: u16,
    pub op: u16,
    pub flags: u32,
    pub buf_alloc: u32,
    pub fwd_cnt: u32,
}

impl Header {
    /// Decode the 44 wire bytes.
    pub fn from_bytes(bytes: &[u8; HEADER_SIZE]) -> Header {
        let raw = RawHeader::read_from_bytes(bytes).unwrap_or_default();
        Header::from(raw)
    }

    /// Encode to the 44 wire bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_SIZE] {
        let mut out = [0u8; HEADER_SIZE];
        out.copy_from_slice(RawHeader::from(*self).as_bytes());
        out
    }
}

impl From<RawHeader> for Header {
    fn from(r: RawHeader) -> Header {
        Header {
            src_cid: r.src_cid.get(),
            dst_cid: r.dst_cid.get(),
            src_port: r.src_port.get(),
            dst_port: r.dst_port.get(),
            len: r.len.get(),
            type_: r.type_.get(),
            op: r.op.get(),
            flags: r.flags.get(),
            buf_alloc: r.buf_alloc.get(),
            fwd_cnt: r.fwd_cnt.get(),
        }
    }
}

impl From<Header> for RawHeader {
    fn from(h: Header) -> RawHeader {
        RawHeader {
            src_cid: h.src_cid.into(),
            dst_cid: h.dst_cid.into(),
            src_port: h.src_port.into(),
            dst_port: h.dst_port.into(),
            len: h.len.into(),
            type_: h.type_.into(),
            op: h.op.into(),
            flags: h.flags.into(),
            buf_alloc: h.buf_alloc.into(),
            fwd_cnt: h.fwd_cnt.into(),
        }
    }
}

/// A readable name for an op code, for logs.
pub fn op_name(op: u16) -> &'static str {
    match op {
        OP_REQUEST => "REQUEST",
        OP_RESPONSE => "RESPONSE",
        OP_RST => "RST",
        OP_SHUTDOWN => "SHUTDOWN",
        OP_RW => "RW",
        OP_CREDIT_UPDATE => "CREDIT_UPDATE",
        OP_CREDIT_REQUEST => "CREDIT_REQUEST",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_little_endian_and_44_bytes() {
        let h = Header {
            src_cid: 0x0102_0304_0506_0708,
            dst_cid: 2,
            src_port: 0x1122_3344,
            dst_port: 7731,
            len: 5,
            type_: TYPE_STREAM,
            op: OP_RW,
            flags: 3,
            buf_alloc: 0x4000,
            fwd_cnt: 9,
        };
        let b = h.to_bytes();
        assert_eq!(&b[0..8], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&b[8..16], &[2, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[16..20], &[0x44, 0x33, 0x22, 0x11]);
        assert_eq!(&b[20..24], &7731u32.to_le_bytes());
        assert_eq!(&b[24..28], &5u32.to_le_bytes());
        assert_eq!(&b[28..30], &1u16.to_le_bytes());
        assert_eq!(&b[30..32], &5u16.to_le_bytes());
        assert_eq!(&b[32..36], &3u32.to_le_bytes());
        assert_eq!(&b[36..40], &0x4000u32.to_le_bytes());
        assert_eq!(&b[40..44], &9u32.to_le_bytes());
        assert_eq!(Header::from_bytes(&b), h);
    }
}
