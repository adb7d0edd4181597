//! Copies on the host-memory test double: every one completes in issue order.

use vmcuda_wire::CudaStatus;

use super::super::{DeviceRange, ExecResult, PitchedRange, StreamOrder};
use super::{graph, HostMemoryExecutor};
use crate::executor::CopyExec;
use crate::executor::DeviceExec;

impl CopyExec for HostMemoryExecutor {
    fn copy_htod(&mut self, dst: DeviceRange, src: &[u8], order: StreamOrder) -> ExecResult<()> {
        let stream = order.stream();
        self.check_stream(stream)?;
        self.refuse_in_capture(stream)?;
        self.slice_mut(dst.ptr(), dst.len())?.copy_from_slice(src);
        Ok(())
    }

    fn copy_dtoh(
        &mut self,
        dst: &mut [u8],
        src: DeviceRange,
        order: StreamOrder,
    ) -> ExecResult<()> {
        let stream = order.stream();
        self.check_stream(stream)?;
        self.refuse_in_capture(stream)?;
        dst.copy_from_slice(self.slice(src.ptr(), src.len())?);
        Ok(())
    }

    fn copy_dtod(
        &mut self,
        dst: DeviceRange,
        src: DeviceRange,
        order: StreamOrder,
    ) -> ExecResult<()> {
        let stream = order.stream();
        self.check_stream(stream)?;
        self.slice(src.ptr(), src.len())?;
        self.slice(dst.ptr(), dst.len())?;
        if self.record(stream, || graph::Recorded::CopyDtoD { dst, src }) {
            return Ok(());
        }
        let bytes = self.slice(src.ptr(), src.len())?.to_vec();
        self.slice_mut(dst.ptr(), dst.len())?
            .copy_from_slice(&bytes);
        Ok(())
    }

    fn copy_2d_htod(
        &mut self,
        dst: PitchedRange,
        src: &[u8],
        order: StreamOrder,
    ) -> ExecResult<()> {
        let stream = order.stream();
        self.check_stream(stream)?;
        self.refuse_in_capture(stream)?;
        let Some(region) = self.pitched(dst)? else {
            return Ok(());
        };
        let bytes = self.allocation_mut(region.start);
        for (row, packed) in region.rows().zip(src.chunks_exact(region.width)) {
            bytes[row].copy_from_slice(packed);
        }
        Ok(())
    }

    fn copy_2d_dtoh(
        &mut self,
        dst: &mut [u8],
        src: PitchedRange,
        order: StreamOrder,
    ) -> ExecResult<()> {
        let stream = order.stream();
        self.check_stream(stream)?;
        self.refuse_in_capture(stream)?;
        let Some(region) = self.pitched(src)? else {
            return Ok(());
        };
        let bytes = &self.memory[&region.start];
        for (row, packed) in region.rows().zip(dst.chunks_exact_mut(region.width)) {
            packed.copy_from_slice(&bytes[row]);
        }
        Ok(())
    }

    fn copy_2d_dtod(
        &mut self,
        dst: PitchedRange,
        src: PitchedRange,
        order: StreamOrder,
    ) -> ExecResult<()> {
        let stream = order.stream();
        self.check_stream(stream)?;
        // Both regions are found before anything is allocated or copied.
        let (Some(from), Some(to)) = (self.pitched(src)?, self.pitched(dst)?) else {
            return Ok(());
        };
        let op = || graph::Recorded::Copy2DDtoD { dst, src };
        if self.record(stream, op) {
            return Ok(());
        }
        // Staged, so overlapping regions copy as if through a temporary, like CUDA.
        let mut packed = Vec::with_capacity(from.width * from.height);
        let bytes = &self.memory[&from.start];
        for row in from.rows() {
            packed.extend_from_slice(&bytes[row]);
        }
        let bytes = self.allocation_mut(to.start);
        for (row, staged) in to.rows().zip(packed.chunks_exact(to.width)) {
            bytes[row].copy_from_slice(staged);
        }
        Ok(())
    }

    fn copy_peer(
        &mut self,
        dst: DeviceRange,
        dst_device: i32,
        src: DeviceRange,
        src_device: i32,
        order: StreamOrder,
    ) -> ExecResult<()> {
        self.set_device(dst_device)?;
        self.set_device(src_device)?;
        self.copy_dtod(dst, src, order)
    }

    fn copy_registered(
        &mut self,
        device: DeviceRange,
        host: u64,
        to_device: bool,
        order: StreamOrder,
    ) -> ExecResult<()> {
        let stream = order.stream();
        self.check_stream(stream)?;
        let size = device.len();
        let end = host
            .checked_add(size)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        if !self
            .host_registered
            .iter()
            .any(|(p, s)| host >= *p && end <= p + s)
        {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let len = usize::try_from(size).map_err(|_| CudaStatus::ErrorInvalidValue)?;
        self.slice(device.ptr(), size)?;
        let op = || graph::Recorded::CopyRegistered {
            device,
            host,
            to_device,
        };
        if self.record(stream, op) {
            return Ok(());
        }
        let host = host as *mut u8;
        if to_device {
            let dst = self.slice_mut(device.ptr(), size)?;
            // SAFETY: `[host, host + len)` lies inside a range registered with this
            // executor, which the session keeps mapped until host_unregister; it is
            // shared guest memory, never this executor's own (`dst`), so they do not
            // overlap. Like a DMA engine, this reads whatever the guest has there now.
            unsafe { std::ptr::copy_nonoverlapping(host, dst.as_mut_ptr(), len) };
        } else {
            let src = self.slice(device.ptr(), size)?;
            // SAFETY: as above, writing the guest's shared pages.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), host, len) };
        }
        Ok(())
    }
}
