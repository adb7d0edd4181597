//! Streams and events: the runtime's (a `CUstream` is a `cudaStream_t`, a `CUevent` a
//! `cudaEvent_t`), plus the stream memory operations (`cuStreamWriteValue32/64`,
//! `cuStreamWaitValue32/64`).

use vmcuda_wire::driver::{StreamWaitValue, StreamWriteValue32, StreamWriteValue64};
use vmcuda_wire::CudaStatus;

use super::memory::known_range;
use super::{check_initialized, export, via_runtime};
use crate::api::stream as rt;
use crate::api::{call, known_stream, post, stream_handle, RawHandle};
use crate::gate;

export! {
    /// `CU_STREAM_NON_BLOCKING` is `cudaStreamNonBlocking`.
    fn cuStreamCreate(out: *mut RawHandle, flags: u32) {
        check_initialized()?;
        via_runtime(|| rt::cudaStreamCreateWithPriority(out, flags, 0))
    }
}
export! {
    fn cuStreamCreateWithPriority(out: *mut RawHandle, flags: u32, priority: i32) {
        check_initialized()?;
        via_runtime(|| rt::cudaStreamCreateWithPriority(out, flags, priority))
    }
}
export! {
    fn cuStreamDestroy_v2(stream: RawHandle) {
        check_initialized()?;
        via_runtime(|| rt::cudaStreamDestroy(stream))
    }
}
export! {
    fn cuStreamSynchronize(stream: RawHandle) {
        check_initialized()?;
        via_runtime(|| rt::cudaStreamSynchronize(stream))
    }
}
export! {
    fn cuStreamQuery(stream: RawHandle) {
        check_initialized()?;
        via_runtime(|| rt::cudaStreamQuery(stream))
    }
}
export! {
    fn cuStreamWaitEvent(stream: RawHandle, event: RawHandle, flags: u32) {
        check_initialized()?;
        via_runtime(|| rt::cudaStreamWaitEvent(stream, event, flags))
    }
}
export! {
    /// `CU_EVENT_*` flags are the runtime's `cudaEvent*` flags.
    fn cuEventCreate(out: *mut RawHandle, flags: u32) {
        check_initialized()?;
        via_runtime(|| rt::cudaEventCreateWithFlags(out, flags))
    }
}
export! {
    fn cuEventDestroy_v2(event: RawHandle) {
        check_initialized()?;
        via_runtime(|| rt::cudaEventDestroy(event))
    }
}
export! {
    fn cuEventRecord(event: RawHandle, stream: RawHandle) {
        check_initialized()?;
        via_runtime(|| rt::cudaEventRecord(event, stream))
    }
}
export! {
    fn cuEventSynchronize(event: RawHandle) {
        check_initialized()?;
        via_runtime(|| rt::cudaEventSynchronize(event))
    }
}
export! {
    fn cuEventQuery(event: RawHandle) {
        check_initialized()?;
        via_runtime(|| rt::cudaEventQuery(event))
    }
}
export! {
    fn cuEventElapsedTime_v2(ms: *mut f32, start: RawHandle, end: RawHandle) {
        check_initialized()?;
        via_runtime(|| rt::cudaEventElapsedTime(ms, start, end))
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
        rt::stream_info(stream, false)?;
        // SAFETY: by cuStreamGetGreenCtx's contract `green` is NULL or writable.
        unsafe { crate::caller::write(green, std::ptr::null_mut()) }
    }
}
