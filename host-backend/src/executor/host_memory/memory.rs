//! Memory on the host-memory test double: allocations behind fake device addresses,
//! bounds checks, fills, host registration and pointer attributes.

use vmcuda_wire::op::{DevicePtr, PointerAttributes};
use vmcuda_wire::CudaStatus;

use super::super::{DeviceRange, ExecResult, PitchedRange, StreamOrder};
use super::shared::{Bytes, SharedBytes};
use super::{
    align_up, allocation_footprint, graph, HostMemoryExecutor, Region, ALIGN, GUARD, PITCH_ALIGN,
};
use crate::executor::{IpcExported, MemoryExec, IPC_HANDLE_LEN};
use std::os::fd::OwnedFd;

impl HostMemoryExecutor {
    pub(super) fn allocate(&mut self, size: u64, init: Option<&[u8]>) -> ExecResult<DevicePtr> {
        // The GPU takes more than was asked for: so does this memory.
        let extra = allocation_footprint(size) - size;
        let fits = self
            .used_memory
            .checked_add(extra)
            .and_then(|u| u.checked_add(size))
            .is_some_and(|u| u <= self.total_memory);
        if !fits {
            return Err(CudaStatus::ErrorMemoryAllocation);
        }
        let mut bytes = self.take_zeroed(size)?;
        self.used_memory += extra;
        if let Some(init) = init {
            bytes[..init.len()].copy_from_slice(init);
        }
        let ptr = self.next_address;
        self.next_address = align_up(ptr + size.max(1) + GUARD, ALIGN);
        self.memory.insert(ptr, bytes.into());
        self.device_of.insert(ptr, self.current);
        Ok(ptr)
    }

    /// Drop the allocation at `ptr`, giving its memory back; false if there is none.
    pub(super) fn release(&mut self, ptr: DevicePtr) -> bool {
        let Some(bytes) = self.memory.remove(&ptr) else {
            return false;
        };
        // Another worker's memory mapped here takes none of this device's.
        let imported = self.ipc_imports.remove(&ptr) | self.pool_pointer_imports.remove(&ptr);
        if !imported {
            self.used_memory -= allocation_footprint(bytes.len() as u64);
        }
        self.device_of.remove(&ptr);
        true
    }

    /// A descriptor of the memfd holding the allocation at `ptr`, and its length: its
    /// bytes move into one at the first share (the address stays the same), so that
    /// another worker mapping it sees them, as two contexts see device memory.
    pub(super) fn share_allocation(&mut self, ptr: DevicePtr) -> ExecResult<(OwnedFd, u64)> {
        let bytes = self
            .memory
            .get_mut(&ptr)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        if let Bytes::Own(own) = bytes {
            *bytes = Bytes::Shared(SharedBytes::copy_of(own)?);
        }
        let len = bytes.len() as u64;
        match bytes {
            Bytes::Shared(shared) => Ok((shared.share()?, len)),
            Bytes::Own(_) => unreachable!("made shared above"),
        }
    }

    /// Map `size` bytes of another worker's shared allocation at a new address of
    /// the current device.
    pub(super) fn map_shared(&mut self, fd: OwnedFd, size: u64) -> ExecResult<DevicePtr> {
        let len = usize::try_from(size).map_err(|_| CudaStatus::ErrorInvalidValue)?;
        let mapped = SharedBytes::map(fd, len)?;
        let ptr = self.next_address;
        self.next_address = align_up(ptr + size.max(1) + GUARD, ALIGN);
        self.memory.insert(ptr, Bytes::Shared(mapped));
        self.device_of.insert(ptr, self.current);
        Ok(ptr)
    }

    /// `size` zeroed bytes of this executor's memory, counted as used: out of memory
    /// past the executor's total, or when the process cannot get them.
    pub(super) fn take_zeroed(&mut self, size: u64) -> ExecResult<Vec<u8>> {
        let fits = self
            .used_memory
            .checked_add(size)
            .is_some_and(|u| u <= self.total_memory);
        if !fits {
            return Err(CudaStatus::ErrorMemoryAllocation);
        }
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(size as usize)
            .map_err(|_| CudaStatus::ErrorMemoryAllocation)?;
        bytes.resize(size as usize, 0);
        self.used_memory += size;
        Ok(bytes)
    }

    /// The allocation holding `[ptr, ptr + len)` and the offset of `ptr` in it.
    pub(super) fn locate(&self, ptr: DevicePtr, len: u64) -> ExecResult<(u64, usize)> {
        let (start, bytes) = self
            .memory
            .range(..=ptr)
            .next_back()
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        let offset = ptr - start;
        let end = offset
            .checked_add(len)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        if end > bytes.len() as u64 || (len == 0 && offset > bytes.len() as u64) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok((*start, offset as usize))
    }

    pub(super) fn slice(&self, ptr: DevicePtr, len: u64) -> ExecResult<&[u8]> {
        let (start, off) = self.locate(ptr, len)?;
        Ok(&self.memory[&start][off..off + len as usize])
    }

    pub(super) fn slice_mut(&mut self, ptr: DevicePtr, len: u64) -> ExecResult<&mut [u8]> {
        let (start, off) = self.locate(ptr, len)?;
        Ok(&mut self.allocation_mut(start)[off..off + len as usize])
    }

    /// The bytes of the allocation starting at `start`, which `locate` just found.
    pub(super) fn allocation_mut(&mut self, start: u64) -> &mut [u8] {
        self.memory
            .get_mut(&start)
            .expect("located allocation exists")
    }

    /// Where a pitched region (`height` rows of `width` bytes, `pitch` apart) lies:
    /// `None` when it is empty (zero width or height: a no-op, as in CUDA), else the one
    /// allocation holding all of it. The region is checked as a whole before a byte
    /// moves, so a bad one fails without a partial copy, with no arithmetic overflow,
    /// and in one lookup however many rows it claims.
    pub(super) fn pitched(&self, p: PitchedRange) -> ExecResult<Option<Region>> {
        let (width, height) = (p.width(), p.height());
        if width > p.pitch() && height > 1 {
            return Err(CudaStatus::ErrorInvalidPitchValue);
        }
        if width == 0 || height == 0 {
            return Ok(None);
        }
        // The session checked the span lies in the guest's memory (no overflow).
        // Saturating, so a range no session would make fails here rather than wraps.
        let span = p.pitch().saturating_mul(height - 1).saturating_add(width);
        let (start, offset) = self.locate(p.ptr(), span)?;
        // All of it fits in one allocation, so every number below fits in a usize.
        Ok(Some(Region {
            start,
            offset,
            pitch: p.pitch() as usize,
            width: width as usize,
            height: height as usize,
        }))
    }
}

impl MemoryExec for HostMemoryExecutor {
    fn mem_info(&mut self) -> ExecResult<(u64, u64)> {
        Ok((self.total_memory - self.used_memory, self.total_memory))
    }

    fn alloc(&mut self, size: u64) -> ExecResult<DevicePtr> {
        if size == 0 {
            return Ok(0);
        }
        self.allocate(size, None)
    }

    fn free(&mut self, ptr: DevicePtr) -> ExecResult<()> {
        if ptr == 0 {
            return Ok(());
        }
        // Graph memory is the guest's to free only while live; its graph may keep it.
        if self.graph_memory_idle(ptr) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        if self.graph_memory_free(ptr) {
            return Ok(());
        }
        // Another process's memory is closed, never freed, here.
        if self.ipc_imports.contains(&ptr) || !self.release(ptr) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.pool_forget(ptr);
        Ok(())
    }

    fn alloc_pitch(&mut self, width: u64, height: u64) -> ExecResult<(DevicePtr, u64)> {
        if width == 0 || height == 0 {
            return Ok((0, 0));
        }
        let pitch = align_up(width, PITCH_ALIGN);
        let size = pitch
            .checked_mul(height)
            .ok_or(CudaStatus::ErrorMemoryAllocation)?;
        Ok((self.allocate(size, None)?, pitch))
    }

    fn memset(&mut self, dst: DeviceRange, value: u8, order: StreamOrder) -> ExecResult<()> {
        let stream = order.stream();
        self.check_stream(stream)?;
        // A capture takes a memset whatever it names, as the driver's does: what it
        // names is looked up when it runs.
        if self.record(stream, || graph::Recorded::Memset { dst, value }) {
            return Ok(());
        }
        self.slice_mut(dst.ptr(), dst.len())?.fill(value);
        Ok(())
    }

    fn zero_fill(&mut self, dst: DevicePtr, size: u64) -> ExecResult<()> {
        self.slice_mut(dst, size)?.fill(0);
        Ok(())
    }

    fn memset_2d(&mut self, dst: PitchedRange, value: u8, order: StreamOrder) -> ExecResult<()> {
        let stream = order.stream();
        self.check_stream(stream)?;
        let region = self.pitched(dst);
        // Taken into a capture whatever it names, as `memset` is (an empty one is not).
        let op = || graph::Recorded::Memset2D { dst, value };
        if !matches!(region, Ok(None)) && self.record(stream, op) {
            return Ok(());
        }
        let Some(region) = region? else {
            return Ok(());
        };
        let bytes = self.allocation_mut(region.start);
        for row in region.rows() {
            bytes[row].fill(value);
        }
        Ok(())
    }

    fn pointer_attributes(&mut self, ptr: DevicePtr) -> ExecResult<PointerAttributes> {
        Ok(match self.locate(ptr, 0) {
            Ok(_) => PointerAttributes {
                memory_type: 2,
                device: 0,
                device_pointer: ptr,
            },
            Err(_) => PointerAttributes {
                memory_type: 0,
                device: -2,
                device_pointer: 0,
            },
        })
    }

    fn host_register(&mut self, ptr: u64, size: u64) -> ExecResult<DevicePtr> {
        // No GPU to map it for: the range is only remembered, and its device pointer
        // is the host pointer, as under UVA.
        if self
            .host_registered
            .iter()
            .any(|(p, s)| ptr < p + s && *p < ptr + size)
        {
            return Err(CudaStatus::ErrorHostMemoryAlreadyRegistered);
        }
        self.host_registered.push((ptr, size));
        Ok(ptr)
    }

    fn ipc_export_memory(&mut self, ptr: DevicePtr) -> ExecResult<IpcExported> {
        // Memory opened from another process is not exported again, as on a GPU.
        if self.ipc_imports.contains(&ptr) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let (shared, len) = self.share_allocation(ptr)?;
        let mut handle = vec![0u8; IPC_HANDLE_LEN];
        handle[..8].copy_from_slice(&ptr.to_le_bytes());
        handle[8..16].copy_from_slice(&len.to_le_bytes());
        Ok(IpcExported {
            handle,
            shared: Some(shared),
        })
    }

    fn ipc_open_memory(
        &mut self,
        _handle: &[u8],
        size: u64,
        _flags: u32,
        shared: Option<OwnedFd>,
    ) -> ExecResult<DevicePtr> {
        let fd = shared.ok_or(CudaStatus::ErrorInvalidValue)?;
        let ptr = self.map_shared(fd, size)?;
        self.ipc_imports.insert(ptr);
        Ok(ptr)
    }

    fn ipc_close_memory(&mut self, ptr: DevicePtr) -> ExecResult<()> {
        if !self.ipc_imports.contains(&ptr) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        self.release(ptr);
        Ok(())
    }

    fn host_unregister(&mut self, ptr: u64) -> ExecResult<()> {
        let before = self.host_registered.len();
        self.host_registered.retain(|(p, _)| *p != ptr);
        if self.host_registered.len() == before {
            return Err(CudaStatus::ErrorHostMemoryNotRegistered);
        }
        Ok(())
    }
}
