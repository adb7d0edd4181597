//! Driver-API requests the runtime's ops do not cover: element-wide memsets, stream
//! memory writes, the virtual memory management family (reserve, create, map, access),
//! the linker and tensor-map encoding.
//!
//! Physical allocations are named by the host ([`AllocationHandle`], a per-connection
//! id, never a host pointer); address reservations and mappings are named by their
//! device address, as in CUDA. The host checks every range against what the guest
//! reserved and mapped itself.

use serde::{Deserialize, Serialize};

pub use crate::handle::AllocationHandle;
use crate::handle::{DevicePtr, StreamHandle};

/// `cuMemsetD16(Async)` / `cuMemsetD32(Async)`: `count` elements of `element_size`
/// (2 or 4) bytes, each set to `value`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemsetElements {
    pub dst: DevicePtr,
    pub value: u32,
    pub element_size: u8,
    pub count: u64,
    pub stream: StreamHandle,
    pub is_async: bool,
}

impl MemsetElements {
    /// The bytes the memset covers, if the shape is valid.
    pub fn byte_len(&self) -> Option<u64> {
        matches!(self.element_size, 2 | 4)
            .then(|| self.count.checked_mul(self.element_size as u64))
            .flatten()
    }
}

/// `cuStreamWriteValue32`: write `value` to `addr` (4 bytes) in stream order.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StreamWriteValue32 {
    pub stream: StreamHandle,
    pub addr: DevicePtr,
    pub value: u32,
    pub flags: u32,
}

/// `cuStreamWriteValue64`: write `value` to `addr` (8 bytes) in stream order.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StreamWriteValue64 {
    pub stream: StreamHandle,
    pub addr: DevicePtr,
    pub value: u64,
    pub flags: u32,
}

/// `cuStreamWaitValue32` / `cuStreamWaitValue64`: the stream's later work waits until
/// the `width` (4 or 8) bytes at `addr` compare with `value` as `flags` say
/// (`CUstreamWaitValue_flags`: GEQ 0, EQ 1, AND 2, NOR 3, and FLUSH).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StreamWaitValue {
    pub stream: StreamHandle,
    pub addr: DevicePtr,
    pub value: u64,
    pub width: u8,
    pub flags: u32,
}

/// `CUstreamWaitValue_flags`: the comparison (the low bits) and the flush request.
pub mod wait_value {
    pub const GEQ: u32 = 0;
    pub const EQ: u32 = 1;
    pub const AND: u32 = 2;
    pub const NOR: u32 = 3;
    pub const FLUSH: u32 = 1 << 30;

    /// Whether `flags` name one comparison (and perhaps FLUSH), nothing else.
    pub fn valid(flags: u32) -> bool {
        flags & !FLUSH <= NOR
    }

    /// Whether the `width`-byte (4 or 8) word `current` satisfies the wait for `value`
    /// with `flags` (`valid` ones). A 32-bit wait compares 32-bit words.
    pub fn satisfied(current: u64, value: u64, width: u8, flags: u32) -> bool {
        let mask = if width == 4 {
            u64::from(u32::MAX)
        } else {
            u64::MAX
        };
        let (current, value) = (current & mask, value & mask);
        match flags & !FLUSH {
            GEQ => current >= value,
            EQ => current == value,
            AND => current & value != 0,
            _ => !(current | value) & mask != 0,
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn each_comparison_as_the_driver_documents_it() {
            assert!(satisfied(5, 5, 4, GEQ) && satisfied(6, 5, 8, GEQ) && !satisfied(4, 5, 4, GEQ));
            assert!(satisfied(7, 7, 4, EQ | FLUSH) && !satisfied(7, 8, 8, EQ));
            assert!(satisfied(0b110, 0b010, 4, AND) && !satisfied(0b100, 0b010, 4, AND));
            // NOR: ~(current | value) != 0, within the word's width.
            assert!(satisfied(0, 0, 4, NOR) && !satisfied(u64::from(u32::MAX), 0, 4, NOR));
            assert!(satisfied(u64::from(u32::MAX), 0, 8, NOR) && !satisfied(u64::MAX, 0, 8, NOR));
            // A 32-bit wait looks at 32 bits only.
            assert!(satisfied(1 << 32 | 3, 3, 4, EQ));
            assert!(valid(NOR | FLUSH) && !valid(4) && !valid(1 << 2));
        }
    }
}

/// One operation of a `cuStreamBatchMemOp` batch (a `CUstreamBatchMemOpParams`).
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub enum MemOp {
    /// `CU_STREAM_MEM_OP_WAIT_VALUE_32` / `_64`: as [`StreamWaitValue`].
    WaitValue {
        addr: DevicePtr,
        value: u64,
        width: u8,
        flags: u32,
    },
    /// `CU_STREAM_MEM_OP_WRITE_VALUE_32` / `_64`: as [`StreamWriteValue32`] / `64`.
    WriteValue {
        addr: DevicePtr,
        value: u64,
        width: u8,
        flags: u32,
    },
    /// `CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES` (its flags must be 0).
    FlushRemoteWrites { flags: u32 },
    /// `CU_STREAM_MEM_OP_BARRIER`: `flags` the `CUstreamMemoryBarrier_flags` scope
    /// (system 0, GPU 1).
    Barrier { flags: u32 },
}

/// `CUstreamBatchMemOpType` values.
pub mod mem_op {
    pub const WAIT_VALUE_32: u32 = 1;
    pub const WRITE_VALUE_32: u32 = 2;
    pub const FLUSH_REMOTE_WRITES: u32 = 3;
    pub const WAIT_VALUE_64: u32 = 4;
    pub const WRITE_VALUE_64: u32 = 5;
    pub const BARRIER: u32 = 6;
    /// The bytes of one `CUstreamBatchMemOpParams` (a union padded to six words).
    pub const PARAMS_LEN: usize = 48;
    /// A batch holds fewer than 256 operations (the driver's documented limit).
    pub const MAX_COUNT: usize = 255;
}

impl MemOp {
    /// One `CUstreamBatchMemOpParams` as the C union lays it out: the operation at 0;
    /// a wait's or write's address at 8, value at 16 (4 or 8 bytes), flags at 24
    /// (`alias`, at 32, is ignored as the driver documents); a flush's or barrier's
    /// flags at 4. `None` for an operation vmcuda does not know (the atomic
    /// reductions of CUDA 13.1 among them).
    pub fn from_c(raw: &[u8; mem_op::PARAMS_LEN]) -> Option<MemOp> {
        let u32_at = |o: usize| u32::from_le_bytes(raw[o..o + 4].try_into().unwrap_or([0; 4]));
        let u64_at = |o: usize| u64::from_le_bytes(raw[o..o + 8].try_into().unwrap_or([0; 8]));
        let (addr, flags) = (u64_at(8), u32_at(24));
        Some(match u32_at(0) {
            mem_op::WAIT_VALUE_32 => MemOp::WaitValue {
                addr,
                value: u64::from(u32_at(16)),
                width: 4,
                flags,
            },
            mem_op::WAIT_VALUE_64 => MemOp::WaitValue {
                addr,
                value: u64_at(16),
                width: 8,
                flags,
            },
            mem_op::WRITE_VALUE_32 => MemOp::WriteValue {
                addr,
                value: u64::from(u32_at(16)),
                width: 4,
                flags,
            },
            mem_op::WRITE_VALUE_64 => MemOp::WriteValue {
                addr,
                value: u64_at(16),
                width: 8,
                flags,
            },
            mem_op::FLUSH_REMOTE_WRITES => MemOp::FlushRemoteWrites { flags: u32_at(4) },
            mem_op::BARRIER => MemOp::Barrier { flags: u32_at(4) },
            _ => return None,
        })
    }

    /// The C union's bytes (`from_c`'s inverse; padding and `alias` zero).
    pub fn to_c(&self) -> [u8; mem_op::PARAMS_LEN] {
        let mut raw = [0u8; mem_op::PARAMS_LEN];
        let mut put = |o: usize, b: &[u8]| raw[o..o + b.len()].copy_from_slice(b);
        match *self {
            MemOp::WaitValue {
                addr,
                value,
                width,
                flags,
            }
            | MemOp::WriteValue {
                addr,
                value,
                width,
                flags,
            } => {
                let wait = matches!(self, MemOp::WaitValue { .. });
                let op = match (wait, width) {
                    (true, 4) => mem_op::WAIT_VALUE_32,
                    (true, _) => mem_op::WAIT_VALUE_64,
                    (false, 4) => mem_op::WRITE_VALUE_32,
                    (false, _) => mem_op::WRITE_VALUE_64,
                };
                put(0, &op.to_le_bytes());
                put(8, &addr.to_le_bytes());
                if width == 4 {
                    put(16, &(value as u32).to_le_bytes());
                } else {
                    put(16, &value.to_le_bytes());
                }
                put(24, &flags.to_le_bytes());
            }
            MemOp::FlushRemoteWrites { flags } => {
                put(0, &mem_op::FLUSH_REMOTE_WRITES.to_le_bytes());
                put(4, &flags.to_le_bytes());
            }
            MemOp::Barrier { flags } => {
                put(0, &mem_op::BARRIER.to_le_bytes());
                put(4, &flags.to_le_bytes());
            }
        }
        raw
    }

    /// Whether the operation is well formed, as both ends check it: a word of 4 or 8
    /// bytes at an address aligned to it, a wait's comparison one of
    /// [`wait_value`]'s, a write's flags `CU_STREAM_WRITE_VALUE_DEFAULT` or
    /// `_NO_MEMORY_BARRIER`, a flush without flags, a barrier of system or GPU scope.
    pub fn is_valid(&self) -> bool {
        match *self {
            MemOp::WaitValue {
                addr, width, flags, ..
            } => {
                matches!(width, 4 | 8)
                    && addr.is_multiple_of(u64::from(width))
                    && wait_value::valid(flags)
            }
            MemOp::WriteValue {
                addr, width, flags, ..
            } => matches!(width, 4 | 8) && addr.is_multiple_of(u64::from(width)) && flags & !1 == 0,
            MemOp::FlushRemoteWrites { flags } => flags == 0,
            MemOp::Barrier { flags } => flags <= 1,
        }
    }

    /// The device word the operation reads or writes, if any: (address, bytes).
    pub fn word(&self) -> Option<(DevicePtr, u64)> {
        match *self {
            MemOp::WaitValue { addr, width, .. } | MemOp::WriteValue { addr, width, .. } => {
                Some((addr, u64::from(width)))
            }
            _ => None,
        }
    }
}

/// One operation of `cuMemBatchDecompressAsync` (a `CUmemDecompressParams`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct DecompressOp {
    pub src: DevicePtr,
    pub src_bytes: u64,
    pub dst: DevicePtr,
    pub dst_bytes: u64,
    /// Where the driver writes the bytes it wrote (a 32-bit word).
    pub dst_act_bytes: DevicePtr,
    /// `CUmemDecompressAlgorithm` (deflate 1, snappy 2, LZ4 4).
    pub algo: u32,
}

/// A batch holds at most this many decompressions (a bound of vmcuda's: far more than
/// a stream's worth of work, well under what a frame carries).
pub const MAX_DECOMPRESS_OPS: usize = 4096;

/// `cuMemBatchDecompressAsync`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct MemBatchDecompress {
    pub stream: StreamHandle,
    pub ops: Vec<DecompressOp>,
    pub flags: u32,
}

/// `cuStreamBatchMemOp_v2`: `ops` (at most [`mem_op::MAX_COUNT`]) in `stream`'s order;
/// `flags` reserved (0).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct StreamBatchMemOp {
    pub stream: StreamHandle,
    pub ops: Vec<MemOp>,
    pub flags: u32,
}

/// `CUmemAllocationProp`, field for field (the Windows metadata pointer aside).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct AllocationProp {
    /// `CUmemAllocationType` (1: pinned).
    pub alloc_type: u32,
    /// `CUmemAllocationHandleType` bits.
    pub requested_handle_types: u32,
    /// `CUmemLocationType` (1: device) and its id (the device ordinal).
    pub location_type: u32,
    pub location_id: i32,
    pub compression_type: u8,
    pub gpu_direct_rdma_capable: u8,
    pub usage: u16,
}

pub const MEM_ALLOCATION_TYPE_PINNED: u32 = 1;
pub const MEM_LOCATION_TYPE_DEVICE: u32 = 1;

/// `CU_MEM_LOCATION_TYPE_HOST`, `_HOST_NUMA` and `_HOST_NUMA_CURRENT`: memory of the
/// host's, which a guest's allocation can never be (it is not in guest RAM).
pub fn is_host_location(location_type: u32) -> bool {
    (2..=4).contains(&location_type)
}

/// `cuMemAddressReserve`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemAddressReserve {
    pub size: u64,
    pub alignment: u64,
    /// A requested start address (a hint; 0 for none).
    pub addr: DevicePtr,
    pub flags: u64,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Reserved {
    pub ptr: DevicePtr,
}
/// `cuMemAddressFree` of a whole reservation.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemAddressFree {
    pub ptr: DevicePtr,
    pub size: u64,
}
/// `cuMemCreate`: physical memory, charged to the guest's quota.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemCreate {
    pub size: u64,
    pub prop: AllocationProp,
    pub flags: u64,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemCreated {
    pub handle: AllocationHandle,
}
/// `cuMemRelease`: the memory goes once it is released and no longer mapped.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemRelease {
    pub handle: AllocationHandle,
}
/// `cuMemMap`: `size` bytes of `handle` from `offset`, at `ptr` inside a reservation.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemMap {
    pub ptr: DevicePtr,
    pub size: u64,
    pub offset: u64,
    pub handle: AllocationHandle,
    pub flags: u64,
}
/// `cuMemUnmap` of one or more whole mappings.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemUnmap {
    pub ptr: DevicePtr,
    pub size: u64,
}
/// `CUmemAccessDesc`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct AccessDesc {
    pub location_type: u32,
    pub location_id: i32,
    /// `CUmemAccess_flags` (0 none, 1 read, 3 read-write).
    pub flags: u32,
}
/// `cuMemSetAccess` over mapped memory.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemSetAccess {
    pub ptr: DevicePtr,
    pub size: u64,
    pub descs: Vec<AccessDesc>,
}
/// `cuMemGetAllocationGranularity`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemGetAllocationGranularity {
    pub prop: AllocationProp,
    /// `CUmemAllocationGranularity_flags` (0 minimum, 1 recommended).
    pub option: u32,
}
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Granularity {
    pub bytes: u64,
}
/// `cuMemRetainAllocationHandle`: the handle mapped at `ptr`, with one more reference
/// (to be released with [`MemRelease`]).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemRetainAllocationHandle {
    pub ptr: DevicePtr,
}
/// `cuMemGetAllocationPropertiesFromHandle`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MemGetAllocationProperties {
    pub handle: AllocationHandle,
}

/// One input of a link (`cuLinkAddData` / `cuLinkAddFile`, files read by the guest):
/// its `CUjitInputType`, its name, and its length in the frame's data section, where
/// the inputs lie back to back.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct LinkInput {
    pub kind: u32,
    pub name: String,
    pub len: u64,
}
/// A whole link (`cuLinkCreate` .. `cuLinkComplete`), done by the host at once; the
/// reply's data section is the linked cubin.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Link {
    pub inputs: Vec<LinkInput>,
    /// The program's linker options that are plain numbers ([`LINK_OPTIONS`]): option,
    /// value.
    pub options: Vec<(u32, u32)>,
}

/// The `CUjit_option`s a link carries to the host, each a plain number the driver
/// judges: `CU_JIT_MAX_REGISTERS` (0), `CU_JIT_OPTIMIZATION_LEVEL` (7),
/// `CU_JIT_GENERATE_DEBUG_INFO` (11), `CU_JIT_LOG_VERBOSE` (12),
/// `CU_JIT_GENERATE_LINE_INFO` (13), `CU_JIT_CACHE_MODE` (14). The log buffers stay in
/// the guest; pointer-valued options never travel.
pub const LINK_OPTIONS: [u32; 6] = [0, 7, 11, 12, 13, 14];
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Linked {
    /// The linker's information and error logs.
    pub info_log: String,
    pub error_log: String,
    /// `CU_JIT_WALL_TIME`: milliseconds the link took.
    pub wall_time_ms: f32,
}
/// The bytes of an encoded tensor map (`CUtensorMap`).
pub const TENSOR_MAP_LEN: usize = 128;
/// Tensor ranks `cuTensorMapEncodeTiled` accepts.
pub const TENSOR_MAP_MAX_RANK: usize = 5;

/// `cuTensorMapEncodeTiled`'s arguments; the reply's data is the 128-byte map.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct TensorMapEncodeTiled {
    pub data_type: u32,
    pub global_address: DevicePtr,
    /// `rank` entries.
    pub global_dim: Vec<u64>,
    /// `rank - 1` entries.
    pub global_strides: Vec<u64>,
    pub box_dim: Vec<u32>,
    pub element_strides: Vec<u32>,
    pub interleave: u32,
    pub swizzle: u32,
    pub l2_promotion: u32,
    pub oob_fill: u32,
}

impl TensorMapEncodeTiled {
    /// The shape checks both ends make before anything is encoded.
    pub fn shape_is_valid(&self) -> bool {
        let rank = self.global_dim.len();
        (1..=TENSOR_MAP_MAX_RANK).contains(&rank)
            && self.global_strides.len() == rank - 1
            && self.box_dim.len() == rank
            && self.element_strides.len() == rank
    }
}

/// `cuTensorMapEncodeIm2col` / `cuTensorMapEncodeIm2colWide`'s arguments; the reply's
/// data is the 128-byte map.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TensorMapEncodeIm2col {
    pub data_type: u32,
    pub global_address: DevicePtr,
    /// `rank` entries (3 to 5).
    pub global_dim: Vec<u64>,
    /// `rank - 1` entries.
    pub global_strides: Vec<u64>,
    /// `rank - 2` entries each (none for the wide encoding, which has `wide`).
    pub lower_corner: Vec<i32>,
    pub upper_corner: Vec<i32>,
    pub channels_per_pixel: u32,
    pub pixels_per_column: u32,
    /// `rank` entries.
    pub element_strides: Vec<u32>,
    pub interleave: u32,
    pub swizzle: u32,
    pub l2_promotion: u32,
    pub oob_fill: u32,
    /// The wide encoding's corner widths and `CUtensorMapIm2ColWideMode`.
    pub wide: Option<Im2colWide>,
}

#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Im2colWide {
    pub lower_width: i32,
    pub upper_width: i32,
    pub mode: u32,
}

impl TensorMapEncodeIm2col {
    /// The shape checks both ends make before anything is encoded (im2col needs a
    /// rank of 3 or more).
    pub fn shape_is_valid(&self) -> bool {
        let rank = self.global_dim.len();
        let corners = if self.wide.is_some() {
            0
        } else {
            rank.saturating_sub(2)
        };
        (3..=TENSOR_MAP_MAX_RANK).contains(&rank)
            && self.global_strides.len() == rank - 1
            && self.lower_corner.len() == corners
            && self.upper_corner.len() == corners
            && self.element_strides.len() == rank
    }
}

/// `cuTensorMapReplaceAddress`: the map (its 128 bytes) with a new global address; the
/// reply's data is the map changed.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct TensorMapReplaceAddress {
    pub map: Vec<u8>,
    pub global_address: DevicePtr,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_mem_ops_round_trip_through_the_c_layout() {
        let ops = [
            MemOp::WaitValue {
                addr: 0x1000,
                value: 7,
                width: 4,
                flags: wait_value::EQ,
            },
            MemOp::WaitValue {
                addr: 0x1008,
                value: 1 << 40,
                width: 8,
                flags: wait_value::GEQ,
            },
            MemOp::WriteValue {
                addr: 0x2000,
                value: 9,
                width: 4,
                flags: 1,
            },
            MemOp::WriteValue {
                addr: 0x2008,
                value: u64::MAX,
                width: 8,
                flags: 0,
            },
            MemOp::FlushRemoteWrites { flags: 0 },
            MemOp::Barrier { flags: 1 },
        ];
        for op in ops {
            assert_eq!(MemOp::from_c(&op.to_c()), Some(op));
            assert!(op.is_valid());
        }
        // The layout: operation at 0, address at 8, value at 16, flags at 24.
        let raw = ops[2].to_c();
        assert_eq!(raw[0], 2);
        assert_eq!(raw[8..16], 0x2000u64.to_le_bytes());
        assert_eq!(raw[16..20], 9u32.to_le_bytes());
        assert_eq!(raw[24..28], 1u32.to_le_bytes());
        // Unknown operations (CUDA 13.1's atomic reduction is 8) and bad shapes.
        let mut unknown = [0u8; mem_op::PARAMS_LEN];
        unknown[0] = 8;
        assert_eq!(MemOp::from_c(&unknown), None);
        assert!(!MemOp::WaitValue {
            addr: 0x1004,
            value: 0,
            width: 8,
            flags: 0
        }
        .is_valid());
        assert!(!MemOp::WriteValue {
            addr: 0x1000,
            value: 0,
            width: 4,
            flags: 2
        }
        .is_valid());
        assert!(!MemOp::WaitValue {
            addr: 0x1000,
            value: 0,
            width: 4,
            flags: 4
        }
        .is_valid());
        assert!(!MemOp::FlushRemoteWrites { flags: 1 }.is_valid());
        assert!(!MemOp::Barrier { flags: 2 }.is_valid());
    }

    #[test]
    fn memset_elements_size_only_for_16_and_32_bits() {
        let m = |element_size, count| MemsetElements {
            dst: 0,
            value: 0,
            element_size,
            count,
            stream: StreamHandle::LEGACY,
            is_async: false,
        };
        assert_eq!(m(4, 10).byte_len(), Some(40));
        assert_eq!(m(2, 10).byte_len(), Some(20));
        assert_eq!(m(3, 10).byte_len(), None);
        assert_eq!(m(4, u64::MAX).byte_len(), None);
    }

    #[test]
    fn im2col_shapes_are_checked() {
        let mut t = TensorMapEncodeIm2col {
            global_dim: vec![8, 8, 8, 8],
            global_strides: vec![16, 128, 1024],
            lower_corner: vec![0, 0],
            upper_corner: vec![0, 0],
            element_strides: vec![1; 4],
            ..Default::default()
        };
        assert!(t.shape_is_valid());
        t.wide = Some(Im2colWide::default());
        assert!(
            !t.shape_is_valid(),
            "the wide encoding takes no corner arrays"
        );
        t.lower_corner.clear();
        t.upper_corner.clear();
        assert!(t.shape_is_valid());
        t.global_dim.truncate(2);
        assert!(!t.shape_is_valid(), "rank 2");
    }

    #[test]
    fn tensor_map_shapes_are_checked() {
        let mut t = TensorMapEncodeTiled {
            data_type: 0,
            global_address: 0,
            global_dim: vec![64, 64],
            global_strides: vec![256],
            box_dim: vec![8, 8],
            element_strides: vec![1, 1],
            interleave: 0,
            swizzle: 0,
            l2_promotion: 0,
            oob_fill: 0,
        };
        assert!(t.shape_is_valid());
        t.global_strides.push(1);
        assert!(!t.shape_is_valid());
        t.global_dim = vec![];
        assert!(!t.shape_is_valid());
    }
}
