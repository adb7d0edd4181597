//! The launch ABI before `cuLaunchKernel` (CUDA 1 to 3, deprecated since CUDA 4):
//! `cuFuncSetBlockShape`, `cuFuncSetSharedSize`, `cuParamSetSize`, `cuParamSeti`,
//! `cuParamSetf`, `cuParamSetv`, then `cuLaunch`, `cuLaunchGrid` or
//! `cuLaunchGridAsync`.
//!
//! As in the real driver, the block shape, the dynamic shared memory and the parameter
//! buffer are state of the `CUfunction`, kept here in the guest (nothing crosses to the
//! host until the launch). A launch is `cuLaunchKernel`'s path with the buffer as
//! `CU_LAUNCH_PARAM_BUFFER_POINTER` / `CU_LAUNCH_PARAM_BUFFER_SIZE` hand it over: the
//! kernel's parameter layout, which the guest knows, cuts it to the kernel's
//! parameters, a shorter buffer being padded with zeros as the driver launches with it.
//! A launch of the current ABI (`cuLaunchKernel`, cooperative, `Ex`) sets that state
//! in turn, as cuda.h documents: its block shape, shared memory and parameters.
//!
//! Defaults, before any call sets them: a block of 1x1x1 threads, no dynamic shared
//! memory, an empty parameter buffer. Errors: a function this process does not hold is
//! `CUDA_ERROR_INVALID_HANDLE`; a zero or negative block or grid dimension, and a
//! parameter buffer or a parameter past what a kernel may take (32764 bytes) are
//! `CUDA_ERROR_INVALID_VALUE`. A parameter written past the size `cuParamSetSize` gave
//! is taken, as NVIDIA's driver takes it (measured on the H200), and a launch passes
//! that size's bytes. The state of a function
//! stays until the process ends (function ids are never reused).

use std::ffi::c_void;

use vmcuda_wire::CudaStatus;

use super::inner;
use super::module::legacy_state::with_setup;
use super::module::{cuLaunchCooperativeKernel, launch_buffer};
use super::result::status;
use super::{check_initialized, export, keeping_last_error, Result};
use crate::abi::driver::LaunchParams;
use crate::driver::inner::{stream_handle, RawHandle};
use crate::{caller, state};

/// A dimension given as C `int`: positive.
fn dimension(v: i32) -> Result<u32> {
    u32::try_from(v)
        .ok()
        .filter(|v| *v > 0)
        .ok_or(CudaStatus::ErrorInvalidValue)
}

export! {
    fn cuFuncSetBlockShape(f: *mut c_void, x: i32, y: i32, z: i32) {
        let block = [dimension(x)?, dimension(y)?, dimension(z)?];
        with_setup(f, |s| {
            s.block = block;
            Ok(())
        })
    }
}

export! {
    fn cuFuncSetSharedSize(f: *mut c_void, bytes: u32) {
        with_setup(f, |s| {
            s.shared = bytes;
            Ok(())
        })
    }
}

export! {
    fn cuParamSetSize(f: *mut c_void, bytes: u32) {
        with_setup(f, |s| s.set_size(bytes))
    }
}

export! {
    fn cuParamSeti(f: *mut c_void, offset: i32, value: u32) {
        with_setup(f, |s| s.write(offset, &value.to_ne_bytes()))
    }
}

export! {
    fn cuParamSetf(f: *mut c_void, offset: i32, value: f32) {
        with_setup(f, |s| s.write(offset, &value.to_ne_bytes()))
    }
}

export! {
    fn cuParamSetv(f: *mut c_void, offset: i32, ptr: *mut c_void, bytes: u32) {
        with_setup(f, |s| {
            // SAFETY: by cuParamSetv's contract `ptr` holds `bytes` readable bytes.
            let value = unsafe { caller::bytes(ptr.cast_const().cast(), bytes as usize) }?;
            s.write(offset, value)
        })
    }
}

/// Launch `f` with its setup on a grid of `width` x `height` blocks.
fn launch_grid(f: *mut c_void, width: i32, height: i32, stream: RawHandle) -> Result<()> {
    let grid = [dimension(width)?, dimension(height)?, 1];
    let setup = with_setup(f, |s| Ok(s.clone()))?;
    launch_buffer(
        f,
        grid,
        setup.block,
        setup.shared,
        stream,
        setup.launch_bytes(),
    )
}

export! {
    fn cuLaunch(f: *mut c_void) {
        launch_grid(f, 1, 1, std::ptr::null_mut())
    }
}

export! {
    fn cuLaunchGrid(f: *mut c_void, width: i32, height: i32) {
        launch_grid(f, width, height, std::ptr::null_mut())
    }
}

export! {
    fn cuLaunchGridAsync(f: *mut c_void, width: i32, height: i32, stream: RawHandle) {
        launch_grid(f, width, height, stream)
    }
}

/// `CUDA_COOPERATIVE_LAUNCH_MULTI_DEVICE_NO_PRE_LAUNCH_SYNC`, `..._NO_POST_LAUNCH_SYNC`.
const NO_PRE_LAUNCH_SYNC: u32 = 1;
const NO_POST_LAUNCH_SYNC: u32 = 2;

/// `cudaEventDisableTiming`.
const EVENT_DISABLE_TIMING: u32 = 2;

/// The device whose context a stream belongs to (a default stream: the current one).
fn stream_device(stream: RawHandle) -> Result<i32> {
    match stream as usize {
        0..=2 => super::context::current_device(),
        _ => crate::driver::inner::device_of_stream(stream_handle(stream, false))
            .ok_or(status(super::CUDA_ERROR_INVALID_HANDLE)),
    }
}

/// Every stream's later work waits for the work so far on all of them: an event
/// recorded on each, waited for by each of the others.
fn join(streams: &[(i32, RawHandle)]) -> Result<()> {
    if streams.len() < 2 {
        return Ok(());
    }
    let mut events = Vec::with_capacity(streams.len());
    let recorded = streams.iter().try_for_each(|(device, stream)| {
        state::as_device(*device, || {
            let mut event: RawHandle = std::ptr::null_mut();
            keeping_last_error(|| {
                inner::stream::cudaEventCreateWithFlags(&mut event, EVENT_DISABLE_TIMING)
            })?;
            events.push((*device, event));
            keeping_last_error(|| inner::stream::cudaEventRecord(event, *stream))
        })
    });
    let waited = recorded.and_then(|()| {
        streams
            .iter()
            .enumerate()
            .try_for_each(|(i, (device, stream))| {
                events
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .try_for_each(|(_, (_, event))| {
                        state::as_device(*device, || {
                            keeping_last_error(|| {
                                inner::stream::cudaStreamWaitEvent(*stream, *event, 0)
                            })
                        })
                    })
            })
    });
    // An event destroyed while waited for is released once the wait is done.
    for (device, event) in events {
        let _ = state::as_device(device, || {
            keeping_last_error(|| inner::stream::cudaEventDestroy(event))
        });
    }
    waited
}

export! {
    fn cuLaunchCooperativeKernelMultiDevice(params: *mut LaunchParams, count: u32, flags: u32) {
        check_initialized()?;
        if flags & !(NO_PRE_LAUNCH_SYNC | NO_POST_LAUNCH_SYNC) != 0 || count == 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by its contract `params` holds `count` CUDA_LAUNCH_PARAMS.
        let launches = unsafe { caller::slice(params.cast_const(), count as usize) }?;
        let mut streams = Vec::with_capacity(launches.len());
        for l in &launches {
            let device = stream_device(l.stream)?;
            // One launch per device, all of one shape.
            let first = &launches[0];
            if streams.iter().any(|(d, _)| *d == device)
                || (l.grid, l.block, l.shared_mem) != (first.grid, first.block, first.shared_mem)
            {
                return Err(CudaStatus::ErrorInvalidValue);
            }
            streams.push((device, l.stream));
        }
        if flags & NO_PRE_LAUNCH_SYNC == 0 {
            join(&streams)?;
        }
        for (l, (device, _)) in launches.iter().zip(&streams) {
            let [gx, gy, gz] = l.grid;
            let [bx, by, bz] = l.block;
            let r = state::as_device(*device, || {
                cuLaunchCooperativeKernel(
                    l.function, gx, gy, gz, bx, by, bz, l.shared_mem, l.stream, l.kernel_params,
                )
            });
            if r != 0 {
                return Err(status(r));
            }
        }
        if flags & NO_POST_LAUNCH_SYNC == 0 {
            join(&streams)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_params_are_laid_out_as_cuda_h_declares_them() {
        assert_eq!(std::mem::size_of::<LaunchParams>(), 56);
        assert_eq!(std::mem::offset_of!(LaunchParams, shared_mem), 32);
        assert_eq!(std::mem::offset_of!(LaunchParams, stream), 40);
        assert_eq!(std::mem::offset_of!(LaunchParams, kernel_params), 48);
    }

    #[test]
    fn dimensions_are_positive() {
        assert_eq!(dimension(3), Ok(3));
        assert_eq!(dimension(0), Err(CudaStatus::ErrorInvalidValue));
        assert_eq!(dimension(-2), Err(CudaStatus::ErrorInvalidValue));
    }
}
