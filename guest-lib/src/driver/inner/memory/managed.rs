//! Managed memory's runtime API: allocation, prefetch, advice, range attributes and
//! stream attachment, over the page model of [`crate::managed`].

use std::ffi::c_void;

use vmcuda_wire::op::{MemAlloc, Memset, StreamHandle};
use vmcuda_wire::CudaStatus;

use super::copy::{memcpy_now, shared_copy};
use super::{allocate_clear, free_device, free_held, wait_for_stream};
use crate::abi::runtime::MemLocation;
use crate::capture;
use crate::copy_route::Direction;
use crate::driver::inner::{call, guard, stream_handle, RawHandle, Result};
use crate::managed::{self, Location, Origin, PAGE};
use crate::state;
use crate::{caller, cudaError_t};

/// Managed pages move as synchronous copies on the legacy stream of the region's
/// device: the GPU's DMA to and from the region's writable view where the host maps it
/// (shared memory on one host), else through the guest's usual copy paths (staging,
/// guest RAM, the socket) from that view as from any pageable buffer.
struct DeviceMover;

impl managed::Mover for DeviceMover {
    fn to_device(
        &self,
        device: i32,
        addr: usize,
        via: usize,
        len: usize,
        shared: bool,
    ) -> Result<()> {
        state::as_device(device, || {
            if shared {
                return shared_copy(
                    addr as u64,
                    via as u64,
                    len,
                    true,
                    StreamHandle::LEGACY,
                    false,
                );
            }
            // SAFETY: `[via, via + len)` is a region's writable view, read while the
            // region's lock is held.
            unsafe {
                memcpy_now(
                    addr,
                    via,
                    len,
                    Direction::HostToDevice,
                    StreamHandle::LEGACY,
                    false,
                )
            }
        })
    }

    fn to_host(
        &self,
        device: i32,
        addr: usize,
        via: usize,
        len: usize,
        shared: bool,
    ) -> Result<()> {
        state::as_device(device, || {
            if shared {
                return shared_copy(
                    addr as u64,
                    via as u64,
                    len,
                    false,
                    StreamHandle::LEGACY,
                    false,
                );
            }
            // SAFETY: `[via, via + len)` is a region's writable view, written while the
            // region's lock is held.
            unsafe {
                memcpy_now(
                    via,
                    addr,
                    len,
                    Direction::DeviceToHost,
                    StreamHandle::LEGACY,
                    false,
                )
            }
        })
    }

    fn share(&self, fd: &std::os::fd::OwnedFd, via: usize, len: usize) -> bool {
        crate::shared::share_mapping(fd, via, len).is_some()
    }

    fn unshare(&self, via: usize, len: usize) {
        crate::shared::unregister(crate::pages::Shared {
            start: via,
            len,
            device_ptr: via as u64,
        });
    }
}

static MOVER: DeviceMover = DeviceMover;

/// `cudaMemAttach*` flags.
const ATTACH_GLOBAL: u32 = 1;
const ATTACH_HOST: u32 = 2;
const ATTACH_SINGLE: u32 = 4;

/// Device memory for managed allocations comes in whole 2 MiB granules, the GPU's
/// own VA granularity: a small device allocation shares its granule with others, and
/// a granule where the program's own memory lies cannot hold managed pages (they must
/// sit at the device's addresses). So small managed allocations are pieces of 2 MiB
/// chunks made here, page by page, and large ones have granules of their own; either
/// way a collision with the program's memory is met by asking for other granules.
const CHUNK: usize = 2 << 20;

/// A 2 MiB chunk that small managed allocations are cut from.
struct Chunk {
    device_ptr: u64,
    device: i32,
    used: Vec<bool>,
}

/// What a managed allocation's device memory is.
#[derive(Clone, Copy)]
enum Backing {
    Own(u64),
    Piece(u64),
}

#[derive(Default)]
struct Heap {
    chunks: Vec<Chunk>,
    backing: std::collections::HashMap<usize, Backing>,
}

static HEAP: std::sync::Mutex<Option<Heap>> = std::sync::Mutex::new(None);

fn heap() -> std::sync::MutexGuard<'static, Option<Heap>> {
    let mut h = HEAP.lock().unwrap_or_else(|p| p.into_inner());
    h.get_or_insert_with(Heap::default);
    h
}

/// `whole` bytes (a multiple of 2 MiB) of device memory on the current device, in
/// granules clear of the program's own memory: its address, page-aligned.
fn device_block(whole: usize) -> Result<u64> {
    let alloc = || {
        Ok((
            call(&MemAlloc { size: whole as u64 })?.ptr,
            whole as u64,
            (),
        ))
    };
    let (device_ptr, ()) = allocate_clear(alloc, free_held)?;
    if !(device_ptr as usize).is_multiple_of(PAGE)
        || !crate::device_addresses::claimed(device_ptr as usize, whole)
    {
        eprintln!("vmcuda: managed memory at {device_ptr:#x} would overlap this program's own memory; allocation refused");
        let _ = free_device(device_ptr, |p| call(&vmcuda_wire::op::MemFree { ptr: p }));
        return Err(CudaStatus::ErrorMemoryAllocation);
    }
    Ok(device_ptr)
}

/// Where `len` bytes (whole pages) of managed memory go on the current device: a
/// block of their own, or a piece of a chunk.
fn place(heap: &mut Heap, len: usize) -> Result<(usize, Backing)> {
    if len > CHUNK / 2 {
        let whole = len.div_ceil(CHUNK) * CHUNK;
        let p = device_block(whole)?;
        return Ok((p as usize, Backing::Own(p)));
    }
    let device = state::current_device();
    let pages = len / PAGE;
    let free_run =
        |c: &Chunk| (0..=c.used.len() - pages).find(|&i| c.used[i..i + pages].iter().all(|u| !u));
    let found = heap
        .chunks
        .iter()
        .enumerate()
        .filter(|(_, c)| c.device == device)
        .find_map(|(k, c)| free_run(c).map(|i| (k, i)));
    let (k, i) = match found {
        Some(found) => found,
        None => {
            let device_ptr = device_block(CHUNK)?;
            heap.chunks.push(Chunk {
                device_ptr,
                device,
                used: vec![false; CHUNK / PAGE],
            });
            (heap.chunks.len() - 1, 0)
        }
    };
    let chunk = &mut heap.chunks[k];
    chunk.used[i..i + pages].iter_mut().for_each(|u| *u = true);
    Ok((
        chunk.device_ptr as usize + i * PAGE,
        Backing::Piece(chunk.device_ptr),
    ))
}

/// Give back what [`place`] gave: a block to the host, a piece to its chunk (and an
/// emptied chunk to the host).
fn unplace(heap: &mut Heap, start: usize, len: usize, backing: Backing) -> Result<()> {
    let free = |p: u64| free_device(p, |p| call(&vmcuda_wire::op::MemFree { ptr: p }));
    match backing {
        Backing::Own(p) => free(p),
        Backing::Piece(chunk_ptr) => {
            let Some(k) = heap.chunks.iter().position(|c| c.device_ptr == chunk_ptr) else {
                return Ok(());
            };
            let first = (start - chunk_ptr as usize) / PAGE;
            let chunk = &mut heap.chunks[k];
            chunk.used[first..first + len / PAGE]
                .iter_mut()
                .for_each(|u| *u = false);
            if chunk.used.iter().any(|u| *u) {
                return Ok(());
            }
            let chunk = heap.chunks.swap_remove(k);
            state::as_device(chunk.device, || free(chunk.device_ptr))
        }
    }
}

/// Allocate `size` bytes of managed memory: device memory on the host, and guest
/// pages at the same addresses. The device's copy starts as zeros (as a managed
/// allocation's untouched pages read natively), so the first touches need no copy.
pub fn allocate(size: usize, flags: u32) -> Result<usize> {
    if size == 0 || !(flags == ATTACH_GLOBAL || flags == ATTACH_HOST) {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    capture::check_unsafe_call()?;
    let len = size
        .checked_add(PAGE - 1)
        .ok_or(CudaStatus::ErrorMemoryAllocation)?
        & !(PAGE - 1);
    let mut guard = heap();
    let heap = guard.as_mut().expect("made by heap()");
    let (start, backing) = place(heap, len)?;
    let made = (|| {
        // A chunk's piece may have held an earlier allocation.
        call(&Memset {
            dst: start as u64,
            value: 0,
            size: len as u64,
            stream: StreamHandle::LEGACY,
            is_async: false,
        })?;
        let origin = Origin::Allocation { size, flags };
        managed::add_region(start, len, state::current_device(), true, origin, &MOVER)
    })();
    if let Err(e) = made {
        let _ = unplace(heap, start, len, backing);
        return Err(e);
    }
    heap.backing.insert(start, backing);
    Ok(start)
}

/// Free managed memory the program allocated at `ptr`; None if `ptr` is not the start
/// of a managed allocation.
pub fn free(ptr: usize) -> Option<Result<()>> {
    let (len, device) = match managed::region_of(ptr)? {
        (start, len, device, Origin::Allocation { .. }) if start == ptr => (len, device),
        _ => return None,
    };
    managed::remove_region(ptr)?;
    let mut guard = heap();
    let heap = guard.as_mut().expect("made by heap()");
    let backing = heap.backing.remove(&ptr)?;
    Some(state::as_device(device, || {
        unplace(heap, ptr, len, backing)
    }))
}

/// Mirror a `__managed__` variable the host placed at `[addr, addr + size)` on the
/// current device; a variable outside the addresses this process reserved for device
/// memory cannot be mirrored, and says so once.
pub fn mirror_variable(addr: u64, size: usize) -> Result<()> {
    let (lo, hi) = (
        addr as usize & !(PAGE - 1),
        (addr as usize + size.max(1) + PAGE - 1) & !(PAGE - 1),
    );
    if !crate::device_addresses::claimed(lo, hi - lo) {
        eprintln!("vmcuda: __managed__ variable at {addr:#x} overlaps this program's own memory; the CPU cannot reach it");
        return Err(CudaStatus::ErrorMemoryAllocation);
    }
    managed::add_variable(addr as usize, size, state::current_device(), &MOVER)
}

pub extern "C" fn cudaMallocManaged(ptr: *mut *mut c_void, size: usize, flags: u32) -> cudaError_t {
    guard("cudaMallocManaged", || {
        if ptr.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // NVIDIA's runtime answers a size of 0 with success and NULL (measured
        // through its static runtime); its driver refuses it (`cuMemAllocManaged`).
        let p = if size == 0 { 0 } else { allocate(size, flags)? };
        // SAFETY: by cudaMallocManaged's contract `ptr` is writable.
        unsafe { caller::write(ptr, p as *mut c_void) }
    })
}

/// Prefetch in stream order: to the device, the range's dirty pages go now (before
/// the stream's later work, which settles them anyway); to the CPU, after the
/// stream's work so far.
pub fn prefetch(ptr: usize, len: usize, location: Location, stream: StreamHandle) -> Result<()> {
    if let Location::Device(d) = location {
        crate::driver::inner::device::properties(d)?;
    }
    capture::check_stream_use(stream)?;
    capture::refuse_if_capturing(stream)?;
    if location == Location::Cpu {
        wait_for_stream(stream)?;
    }
    managed::prefetch(ptr, len, location)
}

fn prefetch_export(
    ptr: *const c_void,
    count: usize,
    location: MemLocation,
    flags: u32,
    stream: RawHandle,
    per_thread: bool,
) -> Result<()> {
    if flags != 0 {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let location = Location::from_mem_location(location.kind, location.id)?;
    prefetch(
        ptr as usize,
        count,
        location,
        stream_handle(stream, per_thread),
    )
}

pub extern "C" fn cudaMemPrefetchAsync(
    ptr: *const c_void,
    count: usize,
    location: MemLocation,
    flags: u32,
    stream: RawHandle,
) -> cudaError_t {
    guard("cudaMemPrefetchAsync", || {
        prefetch_export(ptr, count, location, flags, stream, false)
    })
}

/// The ranges of a batch call and the location each goes to: `locations[i]` applies
/// from range `indexes[i]` on.
///
/// # Safety
/// The arrays are NULL or readable for their counts (the batch calls' contract).
#[allow(clippy::too_many_arguments)]
pub unsafe fn batch(
    ptrs: *const *mut c_void,
    sizes: *const usize,
    count: usize,
    locations: *const MemLocation,
    indexes: *const usize,
    n_locations: usize,
) -> Result<Vec<(usize, usize, Location)>> {
    if count == 0 || (n_locations > 0 && (locations.is_null() || indexes.is_null())) {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: as the caller promised.
    let ptrs = unsafe { caller::slice(ptrs, count) }?;
    // SAFETY: as the caller promised.
    let sizes = unsafe { caller::slice(sizes, count) }?;
    // SAFETY: as the caller promised (nothing is read for a count of 0).
    let (locations, indexes) = unsafe {
        (
            caller::slice(locations, n_locations)?,
            caller::slice(indexes, n_locations)?,
        )
    };
    if indexes.first().is_some_and(|i| *i != 0) || indexes.windows(2).any(|w| w[0] >= w[1]) {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let mut out = Vec::with_capacity(count);
    for (i, (p, n)) in ptrs.iter().zip(sizes).enumerate() {
        let which = indexes.iter().rposition(|first| *first <= i);
        let location = match which {
            Some(w) => Location::from_mem_location(locations[w].kind, locations[w].id)?,
            None => Location::Invalid,
        };
        out.push((*p as usize, n, location));
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn prefetch_batch(
    ptrs: *const *mut c_void,
    sizes: *const usize,
    count: usize,
    locations: *const MemLocation,
    indexes: *const usize,
    n_locations: usize,
    flags: u64,
    stream: StreamHandle,
    discard_first: bool,
) -> Result<()> {
    if flags != 0 || (!discard_first && n_locations == 0) {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: by the batch calls' contract the arrays are NULL or readable for their
    // counts.
    let ranges = unsafe { batch(ptrs, sizes, count, locations, indexes, n_locations) }?;
    for (p, n, location) in ranges {
        if discard_first {
            managed::discard(p, n)?;
        }
        if location != Location::Invalid {
            prefetch(p, n, location, stream)?;
        }
    }
    Ok(())
}

/// The batch prefetches, plain (`false`) and discarding first (`true`), and their
/// per-thread default stream variants.
macro_rules! prefetch_batch_exports {
    ($($name:ident, $per_thread:expr, $discard_first:expr;)*) => {$(
        #[allow(clippy::too_many_arguments)]
        pub extern "C" fn $name(
            ptrs: *const *mut c_void,
            sizes: *const usize,
            count: usize,
            locations: *const MemLocation,
            indexes: *const usize,
            n_locations: usize,
            flags: u64,
            stream: RawHandle,
        ) -> cudaError_t {
            guard(stringify!($name), || {
                let stream = stream_handle(stream, $per_thread);
                prefetch_batch(
                    ptrs, sizes, count, locations, indexes, n_locations, flags, stream, $discard_first,
                )
            })
        }
    )*};
}

prefetch_batch_exports! {
    cudaMemPrefetchBatchAsync, false, false;
    cudaMemDiscardAndPrefetchBatchAsync, false, true;
}

fn discard_batch(
    ptrs: *const *mut c_void,
    sizes: *const usize,
    count: usize,
    flags: u64,
    stream: StreamHandle,
) -> Result<()> {
    if flags != 0 {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    capture::check_stream_use(stream)?;
    // SAFETY: by cudaMemDiscardBatchAsync's contract the arrays are NULL or readable
    // for `count` values.
    let ranges = unsafe { batch(ptrs, sizes, count, std::ptr::null(), std::ptr::null(), 0) }?;
    ranges
        .into_iter()
        .try_for_each(|(p, n, _)| managed::discard(p, n))
}

pub extern "C" fn cudaMemDiscardBatchAsync(
    ptrs: *const *mut c_void,
    sizes: *const usize,
    count: usize,
    flags: u64,
    stream: RawHandle,
) -> cudaError_t {
    guard("cudaMemDiscardBatchAsync", || {
        discard_batch(ptrs, sizes, count, flags, stream_handle(stream, false))
    })
}

/// Record advice (see [`managed::advise`]); a device location must name a device.
pub fn advise(ptr: usize, count: usize, advice: u32, location: Location) -> Result<()> {
    if let Location::Device(d) = location {
        crate::driver::inner::device::properties(d).map_err(|_| CudaStatus::ErrorInvalidDevice)?;
    }
    managed::advise(ptr, count, advice, location)
}

pub extern "C" fn cudaMemAdvise(
    ptr: *const c_void,
    count: usize,
    advice: u32,
    location: MemLocation,
) -> cudaError_t {
    guard("cudaMemAdvise", || {
        let location = match advice {
            managed::ADVISE_SET_READ_MOSTLY
            | managed::ADVISE_UNSET_READ_MOSTLY
            | managed::ADVISE_UNSET_PREFERRED_LOCATION => Location::Invalid,
            _ => Location::from_mem_location(location.kind, location.id)?,
        };
        advise(ptr as usize, count, advice, location)
    })
}

/// One range attribute written to `data` (`size` bytes).
///
/// # Safety
/// `data` is NULL or writable for `size` bytes.
pub unsafe fn range_attribute(
    data: *mut c_void,
    size: usize,
    attribute: u32,
    ptr: usize,
    count: usize,
) -> Result<()> {
    let slots = if attribute == managed::RANGE_ACCESSED_BY {
        if size == 0 || !size.is_multiple_of(4) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        size / 4
    } else {
        if size != 4 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        1
    };
    let values = managed::range_attribute(ptr, count, attribute, slots)?;
    // SAFETY: as the caller promised, `data` is writable for `size` = 4 * slots bytes.
    unsafe { caller::write_slice(data.cast::<i32>(), &values) }
}

pub extern "C" fn cudaMemRangeGetAttribute(
    data: *mut c_void,
    size: usize,
    attribute: u32,
    ptr: *const c_void,
    count: usize,
) -> cudaError_t {
    guard("cudaMemRangeGetAttribute", || {
        // SAFETY: by cudaMemRangeGetAttribute's contract `data` is NULL or writable
        // for `size` bytes.
        unsafe { range_attribute(data, size, attribute, ptr as usize, count) }
    })
}

/// Several range attributes.
///
/// # Safety
/// The arrays are NULL or readable for `n` values, and each `data[i]` NULL or
/// writable for `sizes[i]` bytes.
pub unsafe fn range_attributes(
    data: *const *mut c_void,
    sizes: *const usize,
    attributes: *const u32,
    n: usize,
    ptr: usize,
    count: usize,
) -> Result<()> {
    if n == 0 {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: as the caller promised.
    let (data, sizes, attributes) = unsafe {
        (
            caller::slice(data, n)?,
            caller::slice(sizes, n)?,
            caller::slice(attributes, n)?,
        )
    };
    for i in 0..n {
        // SAFETY: as the caller promised for `data[i]`.
        unsafe { range_attribute(data[i], sizes[i], attributes[i], ptr, count) }?;
    }
    Ok(())
}

pub extern "C" fn cudaMemRangeGetAttributes(
    data: *const *mut c_void,
    sizes: *const usize,
    attributes: *const u32,
    n: usize,
    ptr: *const c_void,
    count: usize,
) -> cudaError_t {
    guard("cudaMemRangeGetAttributes", || {
        // SAFETY: by cudaMemRangeGetAttributes's contract.
        unsafe { range_attributes(data, sizes, attributes, n, ptr as usize, count) }
    })
}

/// Attach managed memory to a stream, the host or every stream. Accepted and checked;
/// it changes nothing here, where every device operation settles all managed memory
/// first and a CPU touch fetches what it needs.
pub fn attach(stream: StreamHandle, ptr: usize, length: usize, flags: u32) -> Result<()> {
    if !matches!(flags, ATTACH_GLOBAL | ATTACH_HOST | ATTACH_SINGLE) {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    if flags == ATTACH_SINGLE && stream.is_default() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    capture::check_stream_use(stream)?;
    if !crate::driver::inner::known_stream(stream) {
        return Err(CudaStatus::ErrorInvalidResourceHandle);
    }
    let (start, len, _, _) = managed::region_of(ptr).ok_or(CudaStatus::ErrorInvalidValue)?;
    if length != 0 && ptr.checked_add(length).is_none_or(|end| end > start + len) {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    Ok(())
}

pub extern "C" fn cudaStreamAttachMemAsync(
    stream: RawHandle,
    ptr: *mut c_void,
    length: usize,
    flags: u32,
) -> cudaError_t {
    guard("cudaStreamAttachMemAsync", || {
        attach(stream_handle(stream, false), ptr as usize, length, flags)
    })
}
