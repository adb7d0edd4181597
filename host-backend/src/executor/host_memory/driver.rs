//! The driver-API calls on the host-memory test double.
//!
//! Virtual memory management is modelled with the same fake device memory: a
//! reservation is a stretch of fake addresses, a physical allocation a zeroed buffer,
//! and mapping one moves its buffer to the mapped address, where copies and memsets
//! find it like any allocation (unmapping moves it back, so its contents survive a
//! remap). Limits of the model, answered with `cudaErrorNotSupported` and logged: a
//! mapping must cover its whole allocation from offset 0, an allocation may be mapped
//! at one place at a time, and one copy cannot run across two mappings. Linking and
//! tensor-map encoding need the real driver: `cudaErrorNotSupported` too.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::OwnedFd;

use tracing::warn;
use vmcuda_wire::driver::{
    AccessDesc, AllocationProp, DecompressOp, Linked, MemOp, TensorMapEncodeIm2col,
    TensorMapEncodeTiled, TENSOR_MAP_LEN,
};
use vmcuda_wire::op::DevicePtr;
use vmcuda_wire::CudaStatus;

use super::super::driver::{Driver, ExecAllocation, LinkInputData};
use super::super::{ExecResult, ExecStream, StreamOrder};
use super::graph::Recorded;
use super::shared::{Bytes, SharedBytes};
use super::{align_up, HostMemoryExecutor, GUARD};

impl HostMemoryExecutor {
    /// `addr` as the address of a `width`-byte word of registered host memory (a
    /// guest's shared page), where it is one: aligned, and inside a registered range.
    fn registered_word(&self, addr: DevicePtr, width: u8) -> Option<usize> {
        let width = u64::from(width);
        let inside = self
            .host_registered
            .iter()
            .any(|(p, s)| addr >= *p && addr.saturating_add(width) <= p + s);
        (inside && addr.is_multiple_of(width)).then_some(addr as usize)
    }
}

/// What `cuMemGetAllocationGranularity` answers (the H200's, for both options).
const GRANULARITY: u64 = 2 << 20;

struct Physical {
    /// `None` while mapped: the buffer then lives in the executor's memory.
    bytes: Option<Bytes>,
    size: u64,
    mapped_at: Option<DevicePtr>,
    released: bool,
    /// Another worker's (CUDA IPC): its memory is not this device's to count.
    imported: bool,
}

#[derive(Default)]
pub(super) struct HostVmm {
    reservations: BTreeMap<DevicePtr, u64>,
    physical: HashMap<ExecAllocation, Physical>,
    /// Access set by `mem_set_access`: (start, end, device) -> flags, latest last.
    access: Vec<(DevicePtr, DevicePtr, i32, u32)>,
}

fn not_supported(what: &str) -> CudaStatus {
    warn!("the host-memory test executor cannot {what}; reporting cudaErrorNotSupported");
    CudaStatus::ErrorNotSupported
}

impl HostMemoryExecutor {
    /// A physical allocation the guest has not released (else `cudaErrorInvalidValue`).
    fn live_physical(&mut self, handle: ExecAllocation) -> ExecResult<&mut Physical> {
        self.vmm
            .physical
            .get_mut(&handle)
            .filter(|p| !p.released)
            .ok_or(CudaStatus::ErrorInvalidValue)
    }

    /// Drop a physical allocation that is released and unmapped.
    fn settle_physical(&mut self, handle: ExecAllocation) {
        let done = self
            .vmm
            .physical
            .get(&handle)
            .is_some_and(|p| p.released && p.mapped_at.is_none());
        if done {
            if let Some(p) = self.vmm.physical.remove(&handle) {
                if !p.imported {
                    self.used_memory -= p.size;
                }
            }
        }
    }
}

impl Driver for HostMemoryExecutor {
    fn memset_elements(
        &mut self,
        dst: DevicePtr,
        value: u32,
        element_size: u8,
        count: u64,
        order: StreamOrder,
    ) -> ExecResult<()> {
        let stream = order.stream();
        self.check_stream(stream)?;
        let width = element_size as usize;
        let len = count
            .checked_mul(width as u64)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        // Taken into a capture whatever it names, as `memset` is.
        let op = || Recorded::MemsetElements {
            dst,
            value,
            element_size,
            count,
        };
        if self.record(stream, op) {
            return Ok(());
        }
        let pattern = value.to_le_bytes();
        for element in self.slice_mut(dst, len)?.chunks_exact_mut(width) {
            element.copy_from_slice(&pattern[..width]);
        }
        Ok(())
    }

    fn stream_write_value32(
        &mut self,
        stream: ExecStream,
        addr: DevicePtr,
        value: u32,
        _flags: u32,
    ) -> ExecResult<()> {
        self.check_stream(stream)?;
        if self.registered_word(addr, 4).is_some() {
            // Registered host memory (a guest's shared page), as a CUDA device writes it.
            // SAFETY: 4 aligned bytes inside a range the session mapped and registered,
            // which stays mapped until it is unregistered; written as one atomic word,
            // as the guest reads it.
            let word = unsafe { &*(addr as usize as *const std::sync::atomic::AtomicU32) };
            word.store(value, std::sync::atomic::Ordering::Release);
            return Ok(());
        }
        self.slice_mut(addr, 4)?
            .copy_from_slice(&value.to_le_bytes());
        Ok(())
    }

    fn stream_write_value64(
        &mut self,
        stream: ExecStream,
        addr: DevicePtr,
        value: u64,
        _flags: u32,
    ) -> ExecResult<()> {
        self.check_stream(stream)?;
        if let Some(word) = self.registered_word(addr, 8) {
            // SAFETY: as in stream_write_value32, for 8 aligned bytes.
            let word = unsafe { &*(word as *const std::sync::atomic::AtomicU64) };
            word.store(value, std::sync::atomic::Ordering::Release);
            return Ok(());
        }
        self.slice_mut(addr, 8)?
            .copy_from_slice(&value.to_le_bytes());
        Ok(())
    }

    /// The double runs each stream's work as it arrives, so a wait is decided then:
    /// met, it passes; not met, no later work of the double's could meet it (it would
    /// wait for ever, as a GPU waits for a value nothing writes), so it is refused,
    /// said once in the log, rather than stall the connection.
    fn stream_wait_value(
        &mut self,
        stream: ExecStream,
        addr: DevicePtr,
        value: u64,
        width: u8,
        flags: u32,
    ) -> ExecResult<()> {
        self.check_stream(stream)?;
        let current = match self.registered_word(addr, width) {
            Some(word) => {
                // SAFETY: as in stream_write_value32: aligned bytes of a registered
                // range, read as one atomic word of the wait's width.
                unsafe {
                    match width {
                        4 => u64::from(
                            (*(word as *const std::sync::atomic::AtomicU32))
                                .load(std::sync::atomic::Ordering::Acquire),
                        ),
                        _ => (*(word as *const std::sync::atomic::AtomicU64))
                            .load(std::sync::atomic::Ordering::Acquire),
                    }
                }
            }
            None => {
                let bytes = self.slice(addr, u64::from(width))?;
                let mut word = [0u8; 8];
                word[..bytes.len()].copy_from_slice(bytes);
                u64::from_le_bytes(word)
            }
        };
        if vmcuda_wire::driver::wait_value::satisfied(current, value, width, flags) {
            return Ok(());
        }
        static SAID: std::sync::Once = std::sync::Once::new();
        SAID.call_once(|| {
            warn!("the host-memory test executor cannot wait for a value nothing has written yet (cuStreamWaitValue); reporting cudaErrorNotSupported");
        });
        Err(CudaStatus::ErrorNotSupported)
    }

    /// Recorded as one node when the stream captures; else each operation as its
    /// single call runs (a flush or barrier has nothing to order in the double, which
    /// runs each stream's work as it arrives).
    fn stream_batch_mem_op(&mut self, stream: ExecStream, ops: &[MemOp]) -> ExecResult<()> {
        self.check_stream(stream)?;
        if self.record(stream, || Recorded::BatchMemOp(ops.to_vec())) {
            return Ok(());
        }
        for op in ops {
            match *op {
                MemOp::WaitValue {
                    addr,
                    value,
                    width,
                    flags,
                } => self.stream_wait_value(stream, addr, value, width, flags)?,
                MemOp::WriteValue {
                    addr,
                    value,
                    width: 4,
                    flags,
                } => self.stream_write_value32(stream, addr, value as u32, flags)?,
                MemOp::WriteValue {
                    addr, value, flags, ..
                } => self.stream_write_value64(stream, addr, value, flags)?,
                MemOp::FlushRemoteWrites { .. } | MemOp::Barrier { .. } => {}
            }
        }
        Ok(())
    }

    /// The double has no decompression engine, as a GPU without one (Hopper and
    /// older) has none.
    fn mem_batch_decompress(
        &mut self,
        stream: ExecStream,
        _ops: &[DecompressOp],
    ) -> ExecResult<(CudaStatus, u64)> {
        self.check_stream(stream)?;
        Ok((
            not_supported("decompress (it has no decompression engine)"),
            u64::MAX,
        ))
    }

    fn mem_address_reserve(
        &mut self,
        size: u64,
        alignment: u64,
        _addr: DevicePtr,
        _flags: u64,
    ) -> ExecResult<DevicePtr> {
        let ptr = align_up(self.next_address, alignment.max(GRANULARITY));
        let end = ptr
            .checked_add(size)
            .and_then(|e| e.checked_add(GUARD))
            .ok_or(CudaStatus::ErrorMemoryAllocation)?;
        self.next_address = end;
        self.vmm.reservations.insert(ptr, size);
        Ok(ptr)
    }

    fn mem_address_free(&mut self, ptr: DevicePtr, size: u64) -> ExecResult<()> {
        match self.vmm.reservations.get(&ptr) {
            Some(s) if *s == size => {
                self.vmm.reservations.remove(&ptr);
                Ok(())
            }
            _ => Err(CudaStatus::ErrorInvalidValue),
        }
    }

    fn mem_create(&mut self, size: u64, _prop: &AllocationProp) -> ExecResult<ExecAllocation> {
        if !size.is_multiple_of(GRANULARITY) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let bytes = self.take_zeroed(size)?;
        let handle = self.fresh_id();
        self.vmm.physical.insert(
            handle,
            Physical {
                bytes: Some(bytes.into()),
                size,
                mapped_at: None,
                released: false,
                imported: false,
            },
        );
        Ok(handle)
    }

    fn mem_release(&mut self, handle: ExecAllocation) -> ExecResult<()> {
        let p = self.live_physical(handle)?;
        p.released = true;
        self.settle_physical(handle);
        Ok(())
    }

    fn mem_map(
        &mut self,
        ptr: DevicePtr,
        size: u64,
        offset: u64,
        handle: ExecAllocation,
    ) -> ExecResult<()> {
        let p = self
            .vmm
            .physical
            .get(&handle)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        if offset != 0 || size != p.size {
            return Err(not_supported("map part of an allocation"));
        }
        if p.mapped_at.is_some() {
            return Err(not_supported("map one allocation at two places"));
        }
        let in_reservation = self
            .vmm
            .reservations
            .range(..=ptr)
            .next_back()
            .is_some_and(|(s, len)| ptr + size <= s + len);
        let clashes = self
            .memory
            .range(..ptr + size)
            .next_back()
            .is_some_and(|(s, b)| s + b.len() as u64 > ptr);
        if !in_reservation || clashes {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let p = self.vmm.physical.get_mut(&handle).expect("found above");
        let bytes = p
            .bytes
            .take()
            .expect("an unmapped allocation holds its bytes");
        p.mapped_at = Some(ptr);
        self.memory.insert(ptr, bytes);
        Ok(())
    }

    fn mem_unmap(&mut self, ptr: DevicePtr, size: u64) -> ExecResult<()> {
        let end = ptr.checked_add(size).ok_or(CudaStatus::ErrorInvalidValue)?;
        // A mapping made again starts without access, as the driver's does.
        self.vmm
            .access
            .retain(|(start, stop, _, _)| *stop <= ptr || *start >= end);
        let mapped: Vec<ExecAllocation> = self
            .vmm
            .physical
            .iter()
            .filter(|(_, p)| p.mapped_at.is_some_and(|at| at >= ptr && at < end))
            .map(|(h, _)| *h)
            .collect();
        if mapped.is_empty() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        for handle in mapped {
            let p = self.vmm.physical.get_mut(&handle).expect("listed above");
            let at = p.mapped_at.take().expect("listed as mapped");
            p.bytes = self.memory.remove(&at);
            self.settle_physical(handle);
        }
        Ok(())
    }

    fn mem_set_access(
        &mut self,
        ptr: DevicePtr,
        size: u64,
        descs: &[AccessDesc],
    ) -> ExecResult<()> {
        // Nothing runs kernels here, so every mapped byte is as reachable as any; the
        // flags are kept for mem_get_access (a bounded list: the latest few thousand).
        let end = ptr.saturating_add(size);
        for d in descs {
            self.vmm.access.push((ptr, end, d.location_id, d.flags));
        }
        let excess = self.vmm.access.len().saturating_sub(4096);
        self.vmm.access.drain(..excess);
        Ok(())
    }

    /// The latest flags set over `ptr` for the device; none (0) before any were.
    fn mem_get_access(&mut self, ptr: DevicePtr, location_id: i32) -> ExecResult<u64> {
        let latest = self
            .vmm
            .access
            .iter()
            .rev()
            .find(|(start, end, device, _)| {
                *device == location_id && (*start..*end).contains(&ptr)
            });
        Ok(latest.map_or(0, |a| u64::from(a.3)))
    }

    fn mem_allocation_granularity(
        &mut self,
        _prop: &AllocationProp,
        option: u32,
    ) -> ExecResult<u64> {
        match option {
            0 | 1 => Ok(GRANULARITY),
            _ => Err(CudaStatus::ErrorInvalidValue),
        }
    }

    fn mem_export_shareable(&mut self, handle: ExecAllocation) -> ExecResult<OwnedFd> {
        let p = self.live_physical(handle)?;
        // Its bytes are in the physical allocation, or in memory where it is mapped.
        let bytes = match (p.bytes.as_mut(), p.mapped_at) {
            (Some(bytes), _) => bytes,
            (None, Some(at)) => self
                .memory
                .get_mut(&at)
                .ok_or(CudaStatus::ErrorInvalidValue)?,
            (None, None) => return Err(CudaStatus::ErrorInvalidValue),
        };
        if let Bytes::Own(own) = bytes {
            *bytes = Bytes::Shared(SharedBytes::copy_of(own)?);
        }
        match bytes {
            Bytes::Shared(shared) => shared.share(),
            Bytes::Own(_) => unreachable!("made shared above"),
        }
    }

    fn mem_import_shareable(&mut self, shared: OwnedFd, size: u64) -> ExecResult<ExecAllocation> {
        let len = usize::try_from(size).map_err(|_| CudaStatus::ErrorInvalidValue)?;
        let mapped = SharedBytes::map(shared, len)?;
        let handle = self.fresh_id();
        self.vmm.physical.insert(
            handle,
            Physical {
                bytes: Some(Bytes::Shared(mapped)),
                size,
                mapped_at: None,
                released: false,
                imported: true,
            },
        );
        Ok(handle)
    }

    fn link(
        &mut self,
        _inputs: &[LinkInputData<'_>],
        _options: &[(u32, u32)],
    ) -> ExecResult<(Vec<u8>, Linked)> {
        Err(not_supported(
            "link device code (that needs the CUDA driver)",
        ))
    }

    fn tensor_map_encode_tiled(&mut self, _req: &TensorMapEncodeTiled) -> ExecResult<Vec<u8>> {
        Err(not_supported(
            "encode a tensor map (that needs the CUDA driver)",
        ))
    }

    fn tensor_map_encode_im2col(&mut self, _req: &TensorMapEncodeIm2col) -> ExecResult<Vec<u8>> {
        Err(not_supported(
            "encode a tensor map (that needs the CUDA driver)",
        ))
    }

    fn tensor_map_replace_address(
        &mut self,
        _map: &[u8; TENSOR_MAP_LEN],
        _global_address: DevicePtr,
    ) -> ExecResult<Vec<u8>> {
        Err(not_supported(
            "change a tensor map (that needs the CUDA driver)",
        ))
    }
}
