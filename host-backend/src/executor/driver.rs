//! The driver-API part of the executor seam: element memsets, stream memory writes and
//! waits,
//! virtual memory management, linking and tensor maps.
//!
//! The session has checked every range against the guest's own reservations and
//! mappings, and counts physical memory against the quota, before an executor sees a
//! call; it also keeps the reference counts of physical allocations and releases one
//! here exactly once, when it is released and no longer mapped.

use std::os::fd::OwnedFd;

use vmcuda_wire::driver::{
    AccessDesc, AllocationProp, DecompressOp, Linked, MemOp, TensorMapEncodeIm2col,
    TensorMapEncodeTiled, TENSOR_MAP_LEN,
};
use vmcuda_wire::op::DevicePtr;
use vmcuda_wire::CudaStatus;

use super::{ExecResult, ExecStream, StreamOrder};

/// An executor's physical allocation id.
pub type ExecAllocation = u64;

/// One checked link input: its `CUjitInputType`, name and bytes.
pub struct LinkInputData<'a> {
    pub kind: u32,
    pub name: &'a str,
    pub bytes: &'a [u8],
}

pub trait Driver {
    /// Set `count` elements of `element_size` (2 or 4) bytes at `dst` to `value`.
    fn memset_elements(
        &mut self,
        dst: DevicePtr,
        value: u32,
        element_size: u8,
        count: u64,
        order: StreamOrder,
    ) -> ExecResult<()>;
    fn stream_write_value32(
        &mut self,
        stream: ExecStream,
        addr: DevicePtr,
        value: u32,
        flags: u32,
    ) -> ExecResult<()>;
    /// Write 8 bytes at `addr` in `stream`'s order (`cuStreamWriteValue64`).
    fn stream_write_value64(
        &mut self,
        stream: ExecStream,
        addr: DevicePtr,
        value: u64,
        flags: u32,
    ) -> ExecResult<()>;
    /// `stream`'s later work waits for the `width` (4 or 8) bytes at `addr` to compare
    /// with `value` as `flags` say (`cuStreamWaitValue32/64`; `flags` checked).
    fn stream_wait_value(
        &mut self,
        stream: ExecStream,
        addr: DevicePtr,
        value: u64,
        width: u8,
        flags: u32,
    ) -> ExecResult<()>;
    /// `ops` (each checked: words in the guest's memory, aligned, valid flags) in
    /// `stream`'s order (`cuStreamBatchMemOp_v2`).
    fn stream_batch_mem_op(&mut self, stream: ExecStream, ops: &[MemOp]) -> ExecResult<()>;
    /// `cuMemBatchDecompressAsync` of checked operations in `stream`'s order: the
    /// driver's answer and its error index (`u64::MAX` for none).
    fn mem_batch_decompress(
        &mut self,
        stream: ExecStream,
        ops: &[DecompressOp],
    ) -> ExecResult<(CudaStatus, u64)>;
    fn mem_address_reserve(
        &mut self,
        size: u64,
        alignment: u64,
        addr: DevicePtr,
        flags: u64,
    ) -> ExecResult<DevicePtr>;
    fn mem_address_free(&mut self, ptr: DevicePtr, size: u64) -> ExecResult<()>;
    fn mem_create(&mut self, size: u64, prop: &AllocationProp) -> ExecResult<ExecAllocation>;
    fn mem_release(&mut self, handle: ExecAllocation) -> ExecResult<()>;
    fn mem_map(
        &mut self,
        ptr: DevicePtr,
        size: u64,
        offset: u64,
        handle: ExecAllocation,
    ) -> ExecResult<()>;
    fn mem_unmap(&mut self, ptr: DevicePtr, size: u64) -> ExecResult<()>;
    fn mem_set_access(&mut self, ptr: DevicePtr, size: u64, descs: &[AccessDesc])
        -> ExecResult<()>;
    /// The access flags device `location_id` has to the mapped byte at `ptr`.
    fn mem_get_access(&mut self, ptr: DevicePtr, location_id: i32) -> ExecResult<u64>;
    fn mem_allocation_granularity(&mut self, prop: &AllocationProp, option: u32)
        -> ExecResult<u64>;
    /// A POSIX descriptor another process's driver imports the allocation by
    /// (`cuMemExportToShareableHandle`).
    fn mem_export_shareable(&mut self, handle: ExecAllocation) -> ExecResult<OwnedFd>;
    /// Another worker's exported allocation of `size` bytes, imported here.
    fn mem_import_shareable(&mut self, shared: OwnedFd, size: u64) -> ExecResult<ExecAllocation>;
    /// Link the inputs into one cubin with the given numeric linker options (checked to
    /// be of `vmcuda_wire::driver::LINK_OPTIONS`), returned with the linker's logs and
    /// wall time.
    fn link(
        &mut self,
        inputs: &[LinkInputData<'_>],
        options: &[(u32, u32)],
    ) -> ExecResult<(Vec<u8>, Linked)>;
    fn tensor_map_encode_tiled(&mut self, req: &TensorMapEncodeTiled) -> ExecResult<Vec<u8>>;
    /// `cuTensorMapEncodeIm2col(Wide)` (the shape checked by the session).
    fn tensor_map_encode_im2col(&mut self, req: &TensorMapEncodeIm2col) -> ExecResult<Vec<u8>>;
    /// `cuTensorMapReplaceAddress` on a copy of `map`.
    fn tensor_map_replace_address(
        &mut self,
        map: &[u8; TENSOR_MAP_LEN],
        global_address: DevicePtr,
    ) -> ExecResult<Vec<u8>>;
}
