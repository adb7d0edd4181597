//! Memsets: `cudaMemset`, `cudaMemset2D` and their asynchronous variants.

use std::ffi::c_void;

use vmcuda_wire::op::{Memset, Memset2D, StreamHandle};

use super::{admit, can_post, enqueue, on_memory_host};
use crate::cudaError_t;
use crate::driver::inner::{call, guard, stream_handle, RawHandle, Result};

/// A memset runs on the current device, which reaches another device's memory only as
/// its peer (natively `cudaErrorInvalidValue` without peer access): a device of another
/// host never is one.
fn refuse_other_hosts_memory(ptr: usize) -> Result<()> {
    match crate::driver::inner::device_of_ptr(ptr) {
        Some(owner)
            if crate::driver::inner::on_different_hosts(owner, crate::state::current_device())? =>
        {
            Err(vmcuda_wire::CudaStatus::ErrorInvalidValue)
        }
        _ => Ok(()),
    }
}

fn memset(
    ptr: usize,
    value: i32,
    count: usize,
    stream: StreamHandle,
    is_async: bool,
) -> Result<()> {
    if count == 0 {
        return Ok(());
    }
    refuse_other_hosts_memory(ptr)?;
    on_memory_host(&[ptr], stream, is_async, |stream, is_async| {
        memset_here(ptr, value, count, stream, is_async)
    })
}

fn memset_here(
    ptr: usize,
    value: i32,
    count: usize,
    stream: StreamHandle,
    is_async: bool,
) -> Result<()> {
    admit(stream, is_async, true)?;
    let req = Memset {
        dst: ptr as u64,
        value: value as u8,
        size: count as u64,
        stream,
        is_async,
    };
    let post = is_async && can_post(stream, ptr, count);
    enqueue(stream, is_async, move || {
        if post {
            crate::driver::inner::post(&req, &[])
        } else {
            call(&req)
        }
    })
}

pub extern "C" fn cudaMemset(ptr: *mut c_void, value: i32, count: usize) -> cudaError_t {
    guard("cudaMemset", || {
        memset(ptr as usize, value, count, StreamHandle::LEGACY, false)
    })
}

pub extern "C" fn cudaMemsetAsync(
    ptr: *mut c_void,
    value: i32,
    count: usize,
    stream: RawHandle,
) -> cudaError_t {
    guard("cudaMemsetAsync", || {
        memset(
            ptr as usize,
            value,
            count,
            stream_handle(stream, false),
            true,
        )
    })
}

fn memset_2d(
    ptr: usize,
    pitch: usize,
    value: i32,
    width: usize,
    height: usize,
    stream: StreamHandle,
    is_async: bool,
) -> Result<()> {
    if width == 0 || height == 0 {
        return Ok(());
    }
    refuse_other_hosts_memory(ptr)?;
    on_memory_host(&[ptr], stream, is_async, |stream, is_async| {
        admit(stream, is_async, true)?;
        let req = Memset2D {
            dst: ptr as u64,
            pitch: pitch as u64,
            value: value as u8,
            width: width as u64,
            height: height as u64,
            stream,
            is_async,
        };
        enqueue(stream, is_async, move || call(&req))
    })
}

pub extern "C" fn cudaMemset2D(
    ptr: *mut c_void,
    pitch: usize,
    value: i32,
    width: usize,
    height: usize,
) -> cudaError_t {
    guard("cudaMemset2D", || {
        memset_2d(
            ptr as usize,
            pitch,
            value,
            width,
            height,
            StreamHandle::LEGACY,
            false,
        )
    })
}

pub extern "C" fn cudaMemset2DAsync(
    ptr: *mut c_void,
    pitch: usize,
    value: i32,
    width: usize,
    height: usize,
    stream: RawHandle,
) -> cudaError_t {
    guard("cudaMemset2DAsync", || {
        memset_2d(
            ptr as usize,
            pitch,
            value,
            width,
            height,
            stream_handle(stream, false),
            true,
        )
    })
}
