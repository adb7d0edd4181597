//! Streams and events: the runtime's (a `CUstream` is a `cudaStream_t`, a `CUevent` a
//! `cudaEvent_t`), plus the stream memory operations (`cuStreamWriteValue32/64`,
//! `cuStreamWaitValue32/64`, and their batches, `cuStreamBatchMemOp` and its graph
//! nodes).

use vmcuda_wire::driver::{
    mem_op, MemOp, StreamBatchMemOp, StreamWaitValue, StreamWriteValue32, StreamWriteValue64,
};
use vmcuda_wire::op::GraphNodeHandle;
use vmcuda_wire::CudaStatus;

use super::inner;
use super::inner::memory::known_range;
use super::{check_initialized, export, keeping_last_error};
use crate::abi::driver::{BatchMemOpNodeParams, DecompressParamsC, RawMemOp};
use crate::driver::inner::graph_build::{self, Kept};
use crate::driver::inner::node_builder;
use crate::driver::inner::{call, known_stream, post, stream_handle, RawHandle};
use crate::{caller, gate};

export! {
    /// `CU_STREAM_NON_BLOCKING` is `cudaStreamNonBlocking`.
    fn cuStreamCreate(out: *mut RawHandle, flags: u32) {
        check_initialized()?;
        keeping_last_error(|| inner::stream::cudaStreamCreateWithPriority(out, flags, 0))
    }
}
export! {
    fn cuStreamCreateWithPriority(out: *mut RawHandle, flags: u32, priority: i32) {
        check_initialized()?;
        keeping_last_error(|| inner::stream::cudaStreamCreateWithPriority(out, flags, priority))
    }
}
export! {
    fn cuStreamDestroy_v2(stream: RawHandle) {
        check_initialized()?;
        keeping_last_error(|| inner::stream::cudaStreamDestroy(stream))
    }
}
export! {
    fn cuStreamSynchronize(stream: RawHandle) {
        check_initialized()?;
        keeping_last_error(|| inner::stream::cudaStreamSynchronize(stream))
    }
}
export! {
    fn cuStreamQuery(stream: RawHandle) {
        check_initialized()?;
        keeping_last_error(|| inner::stream::cudaStreamQuery(stream))
    }
}
export! {
    fn cuStreamWaitEvent(stream: RawHandle, event: RawHandle, flags: u32) {
        check_initialized()?;
        keeping_last_error(|| inner::stream::cudaStreamWaitEvent(stream, event, flags))
    }
}
export! {
    /// `CU_EVENT_*` flags are the runtime's `cudaEvent*` flags.
    fn cuEventCreate(out: *mut RawHandle, flags: u32) {
        check_initialized()?;
        keeping_last_error(|| inner::stream::cudaEventCreateWithFlags(out, flags))
    }
}
export! {
    fn cuEventDestroy_v2(event: RawHandle) {
        check_initialized()?;
        keeping_last_error(|| inner::stream::cudaEventDestroy(event))
    }
}
export! {
    fn cuEventRecord(event: RawHandle, stream: RawHandle) {
        check_initialized()?;
        keeping_last_error(|| inner::stream::cudaEventRecord(event, stream))
    }
}
export! {
    fn cuEventSynchronize(event: RawHandle) {
        check_initialized()?;
        keeping_last_error(|| inner::stream::cudaEventSynchronize(event))
    }
}
export! {
    fn cuEventQuery(event: RawHandle) {
        check_initialized()?;
        keeping_last_error(|| inner::stream::cudaEventQuery(event))
    }
}
export! {
    fn cuEventElapsedTime_v2(ms: *mut f32, start: RawHandle, end: RawHandle) {
        check_initialized()?;
        keeping_last_error(|| inner::stream::cudaEventElapsedTime(ms, start, end))
    }
}

export! {
    /// In stream order; waited for when the address or stream is not one the guest
    /// knows, so a bad one is reported by the call itself.
    fn cuStreamWriteValue32_v2(stream: RawHandle, addr: u64, value: u32, flags: u32) {
        check_initialized()?;
        let stream = stream_handle(stream, false);
        if !addr.is_multiple_of(4) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let req = StreamWriteValue32 { stream, addr, value, flags };
        let fire_and_forget = known_stream(stream) && known_range(addr, 4);
        gate::submit(stream, move || if fire_and_forget { post(&req, &[]) } else { call(&req) })
    }
}

export! {
    /// As `cuStreamWriteValue32_v2`, for 8 bytes. The flags are
    /// `CU_STREAM_WRITE_VALUE_DEFAULT` or `_NO_MEMORY_BARRIER`.
    fn cuStreamWriteValue64_v2(stream: RawHandle, addr: u64, value: u64, flags: u32) {
        check_initialized()?;
        let stream = stream_handle(stream, false);
        if !addr.is_multiple_of(8) || flags & !1 != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let req = StreamWriteValue64 { stream, addr, value, flags };
        let fire_and_forget = known_stream(stream) && known_range(addr, 8);
        gate::submit(stream, move || if fire_and_forget { post(&req, &[]) } else { call(&req) })
    }
}

/// A wait of the stream's later work for the `width`-byte word at `addr` (in stream
/// order, on the host's stream; waited for when the address or stream is not one the
/// guest knows, so a bad one is reported by the call itself).
fn wait_value(
    stream: RawHandle,
    addr: u64,
    value: u64,
    width: u8,
    flags: u32,
) -> super::Result<()> {
    check_initialized()?;
    let stream = stream_handle(stream, false);
    if !addr.is_multiple_of(u64::from(width)) || !vmcuda_wire::driver::wait_value::valid(flags) {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let req = StreamWaitValue {
        stream,
        addr,
        value,
        width,
        flags,
    };
    let fire_and_forget = known_stream(stream) && known_range(addr, u64::from(width));
    gate::submit(stream, move || {
        if fire_and_forget {
            post(&req, &[])
        } else {
            call(&req)
        }
    })
}

export! {
    fn cuStreamWaitValue32_v2(stream: RawHandle, addr: u64, value: u32, flags: u32) {
        wait_value(stream, addr, u64::from(value), 4, flags)
    }
}

export! {
    fn cuStreamWaitValue64_v2(stream: RawHandle, addr: u64, value: u64, flags: u32) {
        wait_value(stream, addr, value, 8, flags)
    }
}

export! {
    /// No stream belongs to a green context here (vmcuda makes none): NULL, as the
    /// driver answers for a stream made without one.
    fn cuStreamGetGreenCtx(stream: RawHandle, green: *mut RawHandle) {
        check_initialized()?;
        inner::stream::stream_info(stream, false)?;
        // SAFETY: by cuStreamGetGreenCtx's contract `green` is NULL or writable.
        unsafe { crate::caller::write(green, std::ptr::null_mut()) }
    }
}

/// A batch's operations from the program's array, each known and well formed.
///
/// # Safety
/// `params` is NULL (refused unless `count` is 0) or holds `count` readable entries.
unsafe fn read_batch(params: *const RawMemOp, count: u32) -> super::Result<Vec<RawMemOp>> {
    let count = count as usize;
    if count > mem_op::MAX_COUNT || (count > 0 && params.is_null()) {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    if count == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: as the caller promised; `count` is at most 255 entries.
    unsafe { caller::slice(params, count) }
}

/// The operations of raw entries, refused (`CUDA_ERROR_INVALID_VALUE`) if one is not
/// known or not well formed.
fn batch_ops(raw: &[RawMemOp]) -> super::Result<Vec<MemOp>> {
    raw.iter()
        .map(|r| MemOp::from_c(r).filter(MemOp::is_valid))
        .collect::<Option<Vec<_>>>()
        .ok_or(CudaStatus::ErrorInvalidValue)
}

/// `ops` in `stream`'s order: posted when the stream and every word are the guest's
/// own, else waited for so that a bad one is reported by the call itself.
fn submit_batch(stream: RawHandle, ops: Vec<MemOp>, flags: u32) -> super::Result<()> {
    check_initialized()?;
    if flags != 0 {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let stream = stream_handle(stream, false);
    let fire_and_forget = known_stream(stream)
        && ops
            .iter()
            .filter_map(MemOp::word)
            .all(|(addr, len)| known_range(addr, len));
    let req = StreamBatchMemOp { stream, ops, flags };
    gate::submit(stream, move || {
        if fire_and_forget {
            post(&req, &[])
        } else {
            call(&req)
        }
    })
}

export! {
    /// Waits and writes of 32- and 64-bit words, remote-write flushes and memory
    /// barriers, in the stream's order, as one request (the host runs the batch with
    /// its driver's `cuStreamBatchMemOp_v2`).
    fn cuStreamBatchMemOp_v2(stream: RawHandle, count: u32, params: *const RawMemOp, flags: u32) {
        check_initialized()?;
        // SAFETY: by cuStreamBatchMemOp's contract `params` holds `count` entries.
        let raw = unsafe { read_batch(params, count) }?;
        submit_batch(stream, batch_ops(&raw)?, flags)
    }
}

/// A batch node's parameters as kept: the program's, with its array copied.
fn batch_kept(p: &BatchMemOpNodeParams, raw: Vec<RawMemOp>) -> Kept {
    let mut ops = raw.into_boxed_slice();
    let params = BatchMemOpNodeParams {
        param_array: if ops.is_empty() {
            std::ptr::null_mut()
        } else {
            ops.as_mut_ptr()
        },
        ..*p
    };
    Kept::DriverBatchMemOp { params, _ops: ops }
}

/// A batch node of `graph` (after `deps`): the batch on a stream capturing into it.
///
/// # Safety
/// `p`'s array holds `p.count` readable entries.
pub(crate) unsafe fn add_batch_node(
    graph: RawHandle,
    deps: &[GraphNodeHandle],
    p: &BatchMemOpNodeParams,
) -> super::Result<GraphNodeHandle> {
    // SAFETY: as the caller promised.
    let raw = unsafe { read_batch(p.param_array, p.count) }?;
    let ops = batch_ops(&raw)?;
    let flags = p.flags;
    let node = node_builder::build_node(graph, deps, |s| match submit_batch(s, ops, flags) {
        Ok(()) => 0,
        Err(e) => e.0,
    })?;
    graph_build::keep(node, batch_kept(p, raw));
    Ok(node)
}

/// New operations for a batch node (in its graph, or in `exec` only).
///
/// # Safety
/// As `add_batch_node`.
pub(crate) unsafe fn set_batch_node(
    exec: Option<RawHandle>,
    node: RawHandle,
    p: &BatchMemOpNodeParams,
) -> super::Result<()> {
    // SAFETY: as the caller promised.
    let raw = unsafe { read_batch(p.param_array, p.count) }?;
    let ops = batch_ops(&raw)?;
    let flags = p.flags;
    graph_build::set_params(node, exec, |g| {
        node_builder::build_node(g, &[], |s| match submit_batch(s, ops, flags) {
            Ok(()) => 0,
            Err(e) => e.0,
        })
    })?;
    if exec.is_none() {
        graph_build::keep(node.into(), batch_kept(p, raw));
    }
    Ok(())
}

export! {
    fn cuGraphAddBatchMemOpNode(
        out: *mut RawHandle,
        graph: RawHandle,
        deps: *const RawHandle,
        count: usize,
        params: *const BatchMemOpNodeParams,
    ) {
        check_initialized()?;
        // SAFETY: by cuGraphAddBatchMemOpNode's contract `deps` holds `count` nodes,
        // `params` is readable with its array of operations, `out` writable.
        unsafe {
            let deps = graph_build::dependencies(deps, count)?;
            let p = caller::read(params)?;
            graph_build::give(out, add_batch_node(graph, &deps, &p)?)
        }
    }
}

export! {
    /// The parameters given, with `paramArray` pointing at vmcuda's copy of the
    /// operations (valid until the node's parameters change, as the driver's is).
    fn cuGraphBatchMemOpNodeGetParams(node: RawHandle, out: *mut BatchMemOpNodeParams) {
        check_initialized()?;
        graph_build::with_kept(node, |k| match k {
            // SAFETY: by its contract `out` is writable.
            Kept::DriverBatchMemOp { params, .. } => unsafe { caller::write(out, *params) },
            _ => Err(CudaStatus::ErrorInvalidValue),
        })
    }
}

export! {
    fn cuGraphBatchMemOpNodeSetParams(node: RawHandle, params: *const BatchMemOpNodeParams) {
        check_initialized()?;
        // SAFETY: by its contract `params` is readable with its array of operations.
        unsafe { set_batch_node(None, node, &caller::read(params)?) }
    }
}

export! {
    fn cuGraphExecBatchMemOpNodeSetParams(
        exec: RawHandle,
        node: RawHandle,
        params: *const BatchMemOpNodeParams,
    ) {
        check_initialized()?;
        // SAFETY: by its contract `params` is readable with its array of operations.
        unsafe { set_batch_node(Some(exec), node, &caller::read(params)?) }
    }
}

export! {
    /// Forwarded to the host's driver, waited for (the driver answers which operation
    /// an error is about). A GPU without a decompression engine (Hopper and older) has
    /// its driver's answer; so does the test double, which has none. Refused here: an
    /// empty or oversized batch, flags, nonzero padding (`errorIndex` then names the
    /// entry, or is `SIZE_MAX` for the batch).
    fn cuMemBatchDecompressAsync(
        params: *const DecompressParamsC,
        count: usize,
        flags: u32,
        error_index: *mut usize,
        stream: RawHandle,
    ) {
        check_initialized()?;
        let fail = |index: usize| {
            // SAFETY: by its contract `error_index` is NULL or writable.
            unsafe { caller::write_opt(error_index, index) };
            Err(CudaStatus::ErrorInvalidValue)
        };
        if count == 0
            || count > vmcuda_wire::driver::MAX_DECOMPRESS_OPS
            || params.is_null()
            || flags != 0
        {
            return fail(usize::MAX);
        }
        // SAFETY: by its contract `params` holds `count` entries (at most the bound).
        let raw = unsafe { caller::slice(params, count) }?;
        if let Some(i) = raw.iter().position(|p| p.padding != [0; 20]) {
            return fail(i);
        }
        let ops = raw
            .iter()
            .map(|p| vmcuda_wire::driver::DecompressOp {
                src: p.src,
                src_bytes: p.src_bytes as u64,
                dst: p.dst,
                dst_bytes: p.dst_bytes as u64,
                dst_act_bytes: p.dst_act_bytes,
                algo: p.algo,
            })
            .collect();
        let req = vmcuda_wire::driver::MemBatchDecompress {
            stream: stream_handle(stream, false),
            ops,
            flags,
        };
        let answer = call(&req)?;
        if answer.status == 0 {
            return Ok(());
        }
        let index = usize::try_from(answer.error_index).unwrap_or(usize::MAX);
        // SAFETY: by its contract `error_index` is NULL or writable.
        unsafe { caller::write_opt(error_index, index) };
        Err(CudaStatus(answer.status))
    }
}
