//! Batches of 3D copies (`cudaMemcpy3DBatchAsync`): each operand an array or a
//! pointer, checked and sent as one request.

use super::*;

// ---- batches of 3D copies --------------------------------------------------------------

pub(super) const OPERAND_POINTER: u32 = 1;
const OPERAND_ARRAY: u32 = 2;

/// A batch op as the `cudaMemcpy3DParms` copy it is: extents count elements, of the
/// array's size where an array takes part and of one byte between pointers (CUDA's
/// rule); rows and layers of a pointer side are its own lengths, or the copy's.
pub(super) fn batch_parms(op: &Memcpy3DBatchOp) -> Result<Memcpy3DParms> {
    let e = op.extent;
    // cudaMemcpySrcAccessOrderStream, DuringApiCall or Any: every source is read before
    // the call returns here (the request carries a host source's bytes), which each
    // of them allows.
    if e.width == 0 || e.height == 0 || e.depth == 0 || !(1..=3).contains(&op.src_access_order) {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let element = |o: &Memcpy3DOperand| -> Result<Option<usize>> {
        match o.kind {
            OPERAND_ARRAY => Ok(Some(
                array_info(o.op[0] as RawHandle)?
                    .desc
                    .element_bytes()
                    .ok_or(CudaStatus::ErrorInvalidValue)? as usize,
            )),
            OPERAND_POINTER => Ok(None),
            _ => Err(CudaStatus::ErrorInvalidValue),
        }
    };
    let elem = match (element(&op.src)?, element(&op.dst)?) {
        (Some(a), Some(b)) if a != b => return Err(CudaStatus::ErrorInvalidValue),
        (Some(a), _) | (None, Some(a)) => a,
        (None, None) => 1,
    };
    let side = |o: &Memcpy3DOperand| -> Result<(RawHandle, Pos, PitchedPtr)> {
        if o.kind == OPERAND_ARRAY {
            let pos = Pos {
                x: o.op[1],
                y: o.op[2],
                z: o.op[3],
            };
            let none = PitchedPtr {
                ptr: std::ptr::null_mut(),
                pitch: 0,
                xsize: 0,
                ysize: 0,
            };
            return Ok((o.op[0] as RawHandle, pos, none));
        }
        let length = |given: usize, copied: usize| match given {
            0 => Ok(copied),
            n if n >= copied => Ok(n),
            _ => Err(CudaStatus::ErrorInvalidValue),
        };
        let row = length(o.op[1], e.width)?
            .checked_mul(elem)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        let ptr = PitchedPtr {
            ptr: o.op[0] as *mut c_void,
            pitch: row,
            xsize: row,
            ysize: length(o.op[2], e.height)?,
        };
        Ok((std::ptr::null_mut(), Pos { x: 0, y: 0, z: 0 }, ptr))
    };
    let (src_array, src_pos, src_ptr) = side(&op.src)?;
    let (dst_array, dst_pos, dst_ptr) = side(&op.dst)?;
    Ok(Memcpy3DParms {
        src_array,
        src_pos,
        src_ptr,
        dst_array,
        dst_pos,
        dst_ptr,
        extent: e,
        // cudaMemcpyDefault: where each pointer lives says the direction.
        kind: 4,
    })
}

/// `cudaMemcpy3DBatchAsync`: each op a 3D copy in stream order (copies within a batch
/// are unordered in CUDA, so one after another is one of their orders). Every op is
/// checked before any is made.
///
/// # Safety
/// `ops` holds `count` ops describing the program's memory.
unsafe fn memcpy_3d_batch(
    count: usize,
    ops: *const Memcpy3DBatchOp,
    flags: u64,
    stream: RawHandle,
    per_thread: bool,
) -> Result<()> {
    // Flags are for later CUDAs; the legacy NULL stream is refused, as CUDA documents.
    let legacy = stream as usize == 1 || (stream.is_null() && !per_thread);
    if count == 0 || flags != 0 || legacy {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: as the caller promised.
    let ops = unsafe { caller::slice(ops, count) }?;
    let parms = ops.iter().map(batch_parms).collect::<Result<Vec<_>>>()?;
    let stream = stream_handle(stream, per_thread);
    for p in &parms {
        // SAFETY: as the caller promised.
        unsafe { memcpy_3d(p, stream, true) }?;
    }
    Ok(())
}

pub extern "C" fn cudaMemcpy3DBatchAsync(
    count: usize,
    ops: *const Memcpy3DBatchOp,
    flags: u64,
    stream: RawHandle,
) -> cudaError_t {
    guard("cudaMemcpy3DBatchAsync", || {
        // SAFETY: by its contract `ops` holds `count` ops of the program's memory.
        unsafe { memcpy_3d_batch(count, ops, flags, stream, false) }
    })
}
