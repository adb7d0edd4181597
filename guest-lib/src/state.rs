//! What the guest library keeps between calls.
//!
//! Per thread: the current device and the last error. Per process: cached device
//! properties, the guest-made stream and event ids, and the device and pinned host
//! ranges the program got from this library (to infer copy directions and answer
//! pointer queries).

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use vmcuda_wire::op::DeviceProperties;

thread_local! {
    static CURRENT_DEVICE: Cell<i32> = const { Cell::new(0) };
    static LAST_ERROR: Cell<u32> = const { Cell::new(0) };
}

pub fn current_device() -> i32 {
    CURRENT_DEVICE.with(|d| d.get())
}

pub fn set_current_device(device: i32) {
    CURRENT_DEVICE.with(|d| d.set(device));
}

/// Run `f` with `device` current on this thread, then put the program's current device
/// back: for a call about another host's stream, event or memory, which has to reach
/// that host (see [`crate::request::on_host_of`]).
pub fn as_device<T>(device: i32, f: impl FnOnce() -> T) -> T {
    struct Restore(i32);
    impl Drop for Restore {
        fn drop(&mut self) {
            set_current_device(self.0);
        }
    }
    let _restore = Restore(current_device());
    set_current_device(device);
    f()
}

thread_local! {
    static RUNTIME_CONTEXT: Cell<bool> = const { Cell::new(false) };
}

/// Threads of the process that have called into CUDA and not ended.
static CUDA_THREADS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A thread's place in [`CUDA_THREADS`], given back when it ends.
struct Present;

impl Drop for Present {
    fn drop(&mut self) {
        CUDA_THREADS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

thread_local! {
    static PRESENT: Present = {
        CUDA_THREADS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Present
    };
}

/// The calling thread makes CUDA calls (every export notes it).
pub fn note_thread() {
    let _ = PRESENT.try_with(|_| ());
}

/// Whether other threads of the process make CUDA calls too: their calls share this
/// one's connection, so its waits leave the connection free between short queries
/// (see [`crate::request::wait_by_queries`]). `VMCUDA_THREAD_WAITS=0` keeps every wait one call.
pub fn other_threads() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("VMCUDA_THREAD_WAITS").map_or(true, |v| v != "0"))
        && CUDA_THREADS.load(std::sync::atomic::Ordering::Relaxed) > 1
}
/// Devices whose primary context the runtime has brought up (bit per device).
static ACTIVE_DEVICES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The runtime has made the current device's primary context current on this thread,
/// as CUDA's runtime does in `cudaSetDevice` and in any call that needs the device: the
/// driver API then sees that context as current, and the primary context as active
/// (torch asks `cuCtxGetCurrent` / `cuDevicePrimaryCtxGetState` after runtime calls).
pub fn note_runtime_context() {
    let d = current_device();
    // Every forwarded call comes here: the shared bit is touched only on a change.
    if RUNTIME_CONTEXT.with(|c| c.replace(true)) && device_active(d) {
        return;
    }
    if (0..64).contains(&d) {
        ACTIVE_DEVICES.fetch_or(1 << d, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The device of the context the runtime made current on this thread, if any.
pub fn runtime_context() -> Option<i32> {
    RUNTIME_CONTEXT.with(|c| c.get()).then(current_device)
}

/// The driver API made no context current on this thread (`cuCtxSetCurrent(NULL)`).
pub fn clear_runtime_context() {
    RUNTIME_CONTEXT.with(|c| c.set(false));
}

/// Whether the runtime has brought up `device`'s primary context.
pub fn device_active(device: i32) -> bool {
    (0..64).contains(&device)
        && ACTIVE_DEVICES.load(std::sync::atomic::Ordering::Relaxed) & (1 << device) != 0
}

pub fn set_last_error(status: u32) {
    LAST_ERROR.with(|e| e.set(status));
}

/// `cudaGetLastError`: return and reset.
pub fn take_last_error() -> u32 {
    LAST_ERROR.with(|e| e.replace(0))
}

/// `cudaPeekAtLastError`: return without resetting.
pub fn peek_last_error() -> u32 {
    LAST_ERROR.with(|e| e.get())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostMemoryKind {
    /// `cudaMallocHost`/`cudaHostAlloc`: ours to free.
    Allocated,
    /// `cudaHostRegister`: the program's own memory.
    Registered,
}

#[derive(Clone, Copy, Debug)]
pub struct HostRange {
    pub size: usize,
    pub flags: u32,
    pub kind: HostMemoryKind,
    pub device: i32,
    /// Set when the memory is shared with the host and mapped for the GPU.
    pub shared: Option<crate::pages::Shared>,
}

#[derive(Clone, Copy, Debug)]
pub struct StreamInfo {
    pub device: i32,
    pub flags: u32,
    pub priority: i32,
}

#[derive(Default)]
pub struct Registry {
    pub properties: HashMap<i32, DeviceProperties>,
    /// Device ranges handed out: start -> (size, device).
    pub device_ranges: BTreeMap<u64, (u64, i32)>,
    pub host_ranges: BTreeMap<usize, HostRange>,
    pub streams: HashMap<u64, StreamInfo>,
    pub events: HashMap<u64, (i32, u32)>,
    pub device_flags: HashMap<i32, u32>,
    /// Stream priority ranges, per device (fixed for a device's life).
    pub priority_ranges: HashMap<i32, vmcuda_wire::op::PriorityRange>,
    /// `CU_POINTER_ATTRIBUTE_BUFFER_ID`s handed out, by the allocation's start.
    buffer_ids: HashMap<u64, u64>,
    last_buffer_id: u64,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);

/// The process-wide registry (locked; keep the guard short and never across a call
/// to the host).
pub fn registry() -> RegistryGuard {
    let mut guard = REGISTRY.lock().unwrap_or_else(|p| p.into_inner());
    guard.get_or_insert_with(Registry::default);
    RegistryGuard(guard)
}

/// [`registry`] if no other thread holds it now (for clean-up that must not wait).
pub fn try_registry() -> Option<RegistryGuard> {
    let mut guard = match REGISTRY.try_lock() {
        Ok(g) => g,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return None,
    };
    guard.get_or_insert_with(Registry::default);
    Some(RegistryGuard(guard))
}

pub struct RegistryGuard(MutexGuard<'static, Option<Registry>>);

impl std::ops::Deref for RegistryGuard {
    type Target = Registry;
    fn deref(&self) -> &Registry {
        self.0.as_ref().expect("initialised in registry()")
    }
}

impl std::ops::DerefMut for RegistryGuard {
    fn deref_mut(&mut self) -> &mut Registry {
        self.0.as_mut().expect("initialised in registry()")
    }
}

impl Registry {
    /// Remember a device range and keep the guest's own allocations out of its
    /// addresses: device pointers come from the host's address space, so without the
    /// reservation a guest host buffer could sit at the same numbers and be taken for
    /// device memory (`cudaMemcpyDefault`, pointer attributes).
    /// Returns whether the range is clear of the program's own memory.
    pub fn add_device_range(&mut self, ptr: u64, size: u64, device: i32) -> bool {
        if ptr == 0 {
            return true;
        }
        self.device_ranges.insert(ptr, (size, device));
        crate::device_addresses::reserve(ptr as usize, size.max(1) as usize)
    }

    /// Forget a device range and release its hold on the reserved addresses.
    pub fn remove_device_range(&mut self, ptr: u64) {
        self.forget_buffer_id(ptr);
        if let Some((size, _)) = self.device_ranges.remove(&ptr) {
            crate::device_addresses::release(ptr as usize, size.max(1) as usize);
        }
    }

    /// The buffer id of the allocation starting at `start`: a number no other
    /// allocation of this process has had (one freed and made again gets a new one),
    /// given on first asking. cuFFT asks it of every buffer it is handed.
    pub fn buffer_id(&mut self, start: u64) -> u64 {
        let last = &mut self.last_buffer_id;
        *self.buffer_ids.entry(start).or_insert_with(|| {
            *last += 1;
            *last
        })
    }

    /// Forget the buffer id of the allocation that started at `start` (it was freed).
    pub fn forget_buffer_id(&mut self, start: u64) {
        self.buffer_ids.remove(&start);
    }

    /// Forget every device range (the device was reset).
    pub fn clear_device_ranges(&mut self) {
        let starts: Vec<u64> = self.device_ranges.keys().copied().collect();
        for s in starts {
            self.remove_device_range(s);
        }
    }

    /// The device range containing `[ptr, ptr + len)`, if any.
    pub fn device_range(&self, ptr: u64) -> Option<(u64, u64, i32)> {
        let (start, (size, dev)) = self.device_ranges.range(..=ptr).next_back()?;
        (ptr < start + (*size).max(1)).then_some((*start, *size, *dev))
    }

    /// Remove and return the host range starting at `start`, if it is of `kind`.
    pub fn take_host_range(&mut self, start: usize, kind: HostMemoryKind) -> Option<HostRange> {
        if self.host_ranges.get(&start)?.kind != kind {
            return None;
        }
        self.host_ranges.remove(&start)
    }

    pub fn host_range(&self, ptr: usize) -> Option<(usize, HostRange)> {
        let (start, r) = self.host_ranges.range(..=ptr).next_back()?;
        (ptr < start + r.size.max(1)).then_some((*start, *r))
    }
}

/// Guest-made ids for streams and events: never 0, 1 or 2 (the special streams).
static NEXT_ID: AtomicU64 = AtomicU64::new(0x100);

pub fn fresh_id() -> u64 {
    NEXT_ID.fetch_add(0x10, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_ids_are_one_per_allocation_and_new_after_a_free() {
        let mut r = Registry::default();
        let a = r.buffer_id(0x1000);
        assert_ne!(a, 0);
        assert_eq!(r.buffer_id(0x1000), a, "the same allocation, the same id");
        let b = r.buffer_id(0x2000);
        assert_ne!(a, b);
        r.forget_buffer_id(0x1000);
        let c = r.buffer_id(0x1000);
        assert!(c != a && c != b, "an allocation made again gets a new id");
    }
}
