//! Copies: host to device, device to host, device to device, 2D, between peers, and
//! between device memory and registered (guest-shared) host memory. Large synchronous
//! copies from pageable memory go through the staging buffers (see `staging`).

use std::ffi::c_void;
use std::ptr;

use cudarc::driver::{result, sys};

use super::super::{DeviceRange, ExecResult, ExecStream, PitchedRange, StreamOrder, LEGACY_STREAM};
use super::staging::{staged_dtoh, staged_htod, SMALL_DTOH, STAGING_THRESHOLD};
use super::{check, status, to_usize, CudaExecutor};
use crate::executor::CopyExec;

impl CudaExecutor {
    /// Runs a 2D copy: the synchronous driver call on the legacy stream, else the
    /// asynchronous one on `s`, followed by a wait on `s` when `wait`.
    fn memcpy_2d(
        &self,
        p: &sys::CUDA_MEMCPY2D,
        stream: ExecStream,
        s: sys::CUstream,
        is_async: bool,
        wait: bool,
    ) -> ExecResult<()> {
        if !is_async && stream == LEGACY_STREAM {
            // SAFETY: `p` describes buffers the caller checked and keeps alive.
            return check(unsafe { sys::cuMemcpy2D_v2(p) });
        }
        // SAFETY: as above; a pageable source is staged by the driver before the
        // call returns, and a host destination is waited for below.
        check(unsafe { sys::cuMemcpy2DAsync_v2(p, s) })?;
        if wait {
            // SAFETY: `s` is a checked stream of this executor or a default stream.
            unsafe { result::stream::synchronize(s) }.map_err(status)?;
        }
        Ok(())
    }
}

impl CopyExec for CudaExecutor {
    fn copy_htod(&mut self, dst: DeviceRange, src: &[u8], order: StreamOrder) -> ExecResult<()> {
        let (stream, is_async) = (order.stream(), order.is_queued());
        let idx = self.bind()?;
        let s = self.stream(stream)?;
        if src.is_empty() {
            return Ok(());
        }
        let dst = dst.ptr();
        if is_async {
            // SAFETY: `src` is valid for its length during the call, and the driver
            // copies pageable memory to its own staging before returning.
            unsafe { result::memcpy_htod_async(dst, src, s) }.map_err(status)?;
            if self.page_locked(src.as_ptr() as usize, src.len()) {
                // From page-locked memory the DMA really is asynchronous, and `src`
                // (the worker's receive buffer) is reused as soon as we return: wait,
                // as the driver itself does for a pageable source.
                // SAFETY: `s` is a checked stream of this executor or a default stream.
                unsafe { result::stream::synchronize(s) }.map_err(status)?;
            }
            return Ok(());
        }
        if src.len() > STAGING_THRESHOLD && !self.page_locked(src.as_ptr() as usize, src.len()) {
            if let Some(st) = self.staging(idx) {
                return staged_htod(st, dst, src, s);
            }
        }
        if stream == LEGACY_STREAM {
            // SAFETY: `src` is valid for its length during the call.
            return unsafe { result::memcpy_htod_sync(dst, src) }.map_err(status);
        }
        // SAFETY: as above; the wait below keeps the copy synchronous.
        unsafe { result::memcpy_htod_async(dst, src, s) }.map_err(status)?;
        // SAFETY: `s` is a checked stream of this executor or a default stream.
        unsafe { result::stream::synchronize(s) }.map_err(status)
    }

    fn copy_dtoh(
        &mut self,
        dst: &mut [u8],
        src: DeviceRange,
        order: StreamOrder,
    ) -> ExecResult<()> {
        let stream = order.stream();
        // Asynchronous or not, the reply carries the bytes: the copy is waited for.
        let idx = self.bind()?;
        let s = self.stream(stream)?;
        if dst.is_empty() {
            return Ok(());
        }
        let src = src.ptr();
        let staged = dst.len() > STAGING_THRESHOLD || dst.len() <= SMALL_DTOH;
        if staged && !self.page_locked(dst.as_ptr() as usize, dst.len()) {
            if let Some(st) = self.staging(idx) {
                return staged_dtoh(st, dst, src, s);
            }
        }
        if stream == LEGACY_STREAM {
            // SAFETY: `dst` is valid and exclusively ours for its length.
            return unsafe { result::memcpy_dtoh_sync(dst, src) }.map_err(status);
        }
        // SAFETY: as above; the copy is waited for before `dst` is used again.
        unsafe { result::memcpy_dtoh_async(dst, src, s) }.map_err(status)?;
        // SAFETY: `s` is a checked stream of this executor or a default stream.
        unsafe { result::stream::synchronize(s) }.map_err(status)
    }

    fn copy_dtod(
        &mut self,
        dst: DeviceRange,
        src: DeviceRange,
        order: StreamOrder,
    ) -> ExecResult<()> {
        let (stream, is_async) = (order.stream(), order.is_queued());
        self.bind()?;
        let s = self.stream(stream)?;
        if src.is_empty() {
            return Ok(());
        }
        let (dst, src, size) = (dst.ptr(), src.ptr(), src.len_usize());
        if !is_async && stream == LEGACY_STREAM {
            // SAFETY: device pointers are validated by the driver.
            return unsafe { result::memcpy_dtod_sync(dst, src, size) }.map_err(status);
        }
        // SAFETY: as above; `s` is checked.
        unsafe { result::memcpy_dtod_async(dst, src, size, s) }.map_err(status)
    }

    fn copy_2d_htod(
        &mut self,
        dst: PitchedRange,
        src: &[u8],
        order: StreamOrder,
    ) -> ExecResult<()> {
        let (stream, is_async) = (order.stream(), order.is_queued());
        self.bind()?;
        let s = self.stream(stream)?;
        let (width, height) = (dst.width(), dst.height());
        if width == 0 || height == 0 {
            return Ok(());
        }
        let p = sys::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_HOST,
            srcHost: src.as_ptr().cast(),
            srcDevice: 0,
            srcArray: ptr::null_mut(),
            srcPitch: to_usize(width)?,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: ptr::null_mut(),
            dstDevice: dst.ptr(),
            dstArray: ptr::null_mut(),
            dstPitch: to_usize(dst.pitch())?,
            WidthInBytes: to_usize(width)?,
            Height: to_usize(height)?,
        };
        // A page-locked source (the worker's receive buffer) is reused once we
        // return, so an asynchronous copy from it is waited for, as the driver waits
        // for a pageable one.
        let wait = !is_async || self.page_locked(src.as_ptr() as usize, src.len());
        self.memcpy_2d(&p, stream, s, is_async, wait)
    }

    fn copy_2d_dtoh(
        &mut self,
        dst: &mut [u8],
        src: PitchedRange,
        order: StreamOrder,
    ) -> ExecResult<()> {
        let (stream, is_async) = (order.stream(), order.is_queued());
        self.bind()?;
        let s = self.stream(stream)?;
        let (width, height) = (src.width(), src.height());
        if width == 0 || height == 0 {
            return Ok(());
        }
        let p = sys::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: ptr::null(),
            srcDevice: src.ptr(),
            srcArray: ptr::null_mut(),
            srcPitch: to_usize(src.pitch())?,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_HOST,
            dstHost: dst.as_mut_ptr().cast(),
            dstDevice: 0,
            dstArray: ptr::null_mut(),
            dstPitch: to_usize(width)?,
            WidthInBytes: to_usize(width)?,
            Height: to_usize(height)?,
        };
        // The reply carries the bytes: always wait.
        self.memcpy_2d(&p, stream, s, is_async, true)
    }

    fn copy_2d_dtod(
        &mut self,
        dst: PitchedRange,
        src: PitchedRange,
        order: StreamOrder,
    ) -> ExecResult<()> {
        let (stream, is_async) = (order.stream(), order.is_queued());
        self.bind()?;
        let s = self.stream(stream)?;
        let (width, height) = (src.width(), src.height());
        if width == 0 || height == 0 {
            return Ok(());
        }
        let p = sys::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            srcHost: ptr::null(),
            srcDevice: src.ptr(),
            srcArray: ptr::null_mut(),
            srcPitch: to_usize(src.pitch())?,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: sys::CUmemorytype::CU_MEMORYTYPE_DEVICE,
            dstHost: ptr::null_mut(),
            dstDevice: dst.ptr(),
            dstArray: ptr::null_mut(),
            dstPitch: to_usize(dst.pitch())?,
            WidthInBytes: to_usize(width)?,
            Height: to_usize(height)?,
        };
        self.memcpy_2d(&p, stream, s, is_async, false)
    }

    fn copy_peer(
        &mut self,
        dst: DeviceRange,
        dst_device: i32,
        src: DeviceRange,
        src_device: i32,
        order: StreamOrder,
    ) -> ExecResult<()> {
        let (stream, is_async) = (order.stream(), order.is_queued());
        let dst_idx = self.device_index(dst_device)?;
        let src_idx = self.device_index(src_device)?;
        let dst_ctx = self.context(dst_idx)?;
        let src_ctx = self.context(src_idx)?;
        self.bind()?;
        let s = self.stream(stream)?;
        if src.is_empty() {
            return Ok(());
        }
        let (dst, src, size) = (dst.ptr(), src.ptr(), src.len_usize());
        if is_async {
            // SAFETY: both contexts are retained primary contexts; `s` is checked;
            // device pointers are validated by the driver.
            return unsafe { result::memcpy_peer_async(dst_ctx, dst, src_ctx, src, size, s) }
                .map_err(status);
        }
        // SAFETY: as above.
        check(unsafe { sys::cuMemcpyPeer(dst, dst_ctx, src, src_ctx, size) })
    }

    fn copy_registered(
        &mut self,
        device: DeviceRange,
        host: u64,
        to_device: bool,
        order: StreamOrder,
    ) -> ExecResult<()> {
        let (stream, is_async) = (order.stream(), order.is_queued());
        self.bind()?;
        let s = self.stream(stream)?;
        if device.is_empty() {
            return Ok(());
        }
        let (device, len) = (device.ptr(), device.len_usize());
        let host = host as *mut c_void;
        // A synchronous copy on the legacy stream is the driver's one synchronous call,
        // as the program's own cudaMemcpy would be natively: one call and the driver's
        // own wait instead of two calls.
        let sync_call = !is_async && stream == LEGACY_STREAM;
        // Raw calls: the host range is memory the guest shares and may write at any
        // time, so no Rust slice may be made over it for cudarc's wrappers.
        // SAFETY: the session checked that `[host, host + len)` lies inside one range it
        // mapped and registered with the driver (host_register), which stays mapped and
        // registered until host_unregister, and that `[device, device + len)` is the
        // guest's own memory. Guest memory changing under the DMA is the guest's race,
        // as with native pinned memory; it cannot touch this process's own memory.
        check(unsafe {
            match (to_device, sync_call) {
                (true, true) => sys::cuMemcpyHtoD_v2(device, host, len),
                (false, true) => sys::cuMemcpyDtoH_v2(host, device, len),
                (true, false) => sys::cuMemcpyHtoDAsync_v2(device, host, len, s),
                (false, false) => sys::cuMemcpyDtoHAsync_v2(host, device, len, s),
            }
        })?;
        if is_async || sync_call {
            return Ok(());
        }
        // SAFETY: `s` is a checked stream of this executor or a default stream.
        unsafe { result::stream::synchronize(s) }.map_err(status)
    }
}
