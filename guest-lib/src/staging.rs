//! The shared-memory data path for copies.
//!
//! Where the host can map this process's memory (a same-host backend on a Unix socket,
//! see [`crate::shared`]), no copy needs to put its bytes on the socket:
//! - pinned memory (`cudaMallocHost`, `cudaHostAlloc`, `cudaHostRegister`) is already
//!   shared and registered with the GPU, so a copy names its address and the GPU's DMA
//!   engine reads or writes those pages directly ([`crate::copy_route::pinned_region`]);
//! - pageable memory goes through a staging area, one memfd of [`slots`] slots, shared
//!   and registered the same way: the guest fills slot `i + 1` while the GPU copies slot
//!   `i`, as the driver's own pipelined staging does natively.
//!
//! Where memory cannot be shared (TCP, vsock), or `VMCUDA_SHARED_MEMORY=0`, copies use
//! the socket as before; `VMCUDA_VERBOSE` says which path a process got.

use std::sync::OnceLock;

use vmcuda_wire::op::{MemcpyShared, StreamHandle, SHARED_STAGING};
use vmcuda_wire::CudaStatus;

use crate::{client, guest_pages, shared, sizes, state};

/// Pageable copies smaller than this use the socket: they cost one round trip either
/// way, and a small asynchronous copy can be posted with its bytes without waiting.
pub const MIN_STAGED: usize = 256 << 10;

/// The staging area: `slots` slots of `slot` bytes from `start`.
#[derive(Debug)]
pub struct Staging {
    start: usize,
    slot: usize,
    slots: usize,
}

/// The process's staging area, made on first use; `None` when memory cannot be
/// shared with this host (said once under `VMCUDA_VERBOSE`).
pub fn staging() -> Option<&'static Staging> {
    static STAGING: OnceLock<Option<Staging>> = OnceLock::new();
    STAGING
        .get_or_init(|| {
            // Slot size and count: 4 x 4 MiB by default (rCUDA found 0.5-2 MiB chunks
            // best over a network; here the socket carries no bytes, so larger slots
            // spend fewer round trips). Tunable for measurement.
            let (slot, slots) = (sizes::staging_slot(), sizes::staging_slots());
            let len = (slot * slots) as u64;
            let wanted = std::env::var("VMCUDA_STAGING").map_or(true, |v| v != "0")
                && std::env::var("VMCUDA_SHARED_MEMORY").map_or(true, |v| v != "0")
                && len <= vmcuda_wire::op::MAX_STAGING_LEN;
            let made = if !wanted {
                Err("turned off".to_string())
            } else if client::client().is_ok_and(|c| c.is_vsock()) {
                // A VM guest: the host may map our pages by guest-physical address.
                guest_pages::alloc(slot * slots, SHARED_STAGING).map(|start| (start, " in guest huge pages"))
            } else {
                shared::alloc(slot * slots, SHARED_STAGING)
                    .map(|(start, _)| (start, ""))
                    .ok_or_else(|| "memory cannot be shared with this host".to_string())
            };
            let verbose = std::env::var_os("VMCUDA_VERBOSE").is_some();
            match made {
                Ok((start, where_)) => {
                    if verbose {
                        eprintln!(
                            "vmcuda: copies use the shared-memory data path ({slots} x {} KiB staging{where_})",
                            slot >> 10
                        );
                    }
                    Some(Staging { start, slot, slots })
                }
                Err(why) => {
                    if verbose {
                        eprintln!("vmcuda: {why}; copies go over the socket");
                    }
                    None
                }
            }
        })
        .as_ref()
}

/// How many threads copy a large slot (`VMCUDA_COPY_THREADS`, default up to 4): one
/// core's memcpy is slower than the GPU's DMA engine.
fn copy_threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        sizes::env_count("VMCUDA_COPY_THREADS", cores.min(4)).min(64)
    })
}

/// The parked copy threads, made on the first large copy (none when they cannot be).
fn copy_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(copy_threads())
            .thread_name(|i| format!("vmcuda-copy-{i}"))
            .build()
            .map_err(|e| eprintln!("vmcuda: no copy threads ({e}); staging copies spawn their own"))
            .ok()
    })
    .as_ref()
}

/// Copy `src` into `dst` (equal lengths), in parallel when large.
fn copy(dst: &mut [u8], src: &[u8]) {
    const PER_THREAD_MIN: usize = 64 << 10;
    let threads = copy_threads().min(src.len() / PER_THREAD_MIN).max(1);
    if threads == 1 {
        dst.copy_from_slice(src);
        return;
    }
    match copy_pool() {
        Some(pool) => copy_with_pool(pool, dst, src, threads),
        None => {
            let piece = src.len().div_ceil(threads);
            std::thread::scope(|scope| {
                let mut pieces = dst.chunks_mut(piece).zip(src.chunks(piece));
                let mine = pieces.next();
                for (d, s) in pieces {
                    scope.spawn(move || d.copy_from_slice(s));
                }
                if let Some((d, s)) = mine {
                    d.copy_from_slice(s);
                }
            });
        }
    }
}

/// One copy shared out in blocks: whoever takes part claims the next block until none
/// is left.
struct SharedCopy {
    dst: *mut u8,
    src: *const u8,
    len: usize,
    next: std::sync::atomic::AtomicUsize,
    done: std::sync::atomic::AtomicUsize,
}

// SAFETY: the pointers are only dereferenced for blocks claimed before every block was
// claimed, and `copy_with_pool` does not return (so both buffers stay borrowed) until
// every claimed block is done; blocks are disjoint, so no byte has two writers.
unsafe impl Send for SharedCopy {}
// SAFETY: as above; the counters are atomics.
unsafe impl Sync for SharedCopy {}

impl SharedCopy {
    /// Small enough to even out threads that start late, large enough to stream.
    const BLOCK: usize = 64 << 10;

    fn blocks(&self) -> usize {
        self.len.div_ceil(Self::BLOCK)
    }

    /// Copy blocks until none is left to claim.
    fn work(&self) {
        use std::sync::atomic::Ordering::{AcqRel, Release};
        loop {
            let i = self.next.fetch_add(1, AcqRel);
            if i >= self.blocks() {
                return;
            }
            let at = i * Self::BLOCK;
            let n = Self::BLOCK.min(self.len - at);
            // SAFETY: block `i` is `[at, at + n)` of both buffers, claimed by this
            // thread alone, and the buffers outlive the copy (see the `Send` impl).
            unsafe { std::ptr::copy_nonoverlapping(self.src.add(at), self.dst.add(at), n) };
            self.done.fetch_add(1, Release);
        }
    }
}

/// Copy with the calling thread and up to `threads - 1` pool threads: the caller
/// copies too instead of sleeping until the pool is done (waking it again would cost
/// more than a block takes), and threads the pool is slow to wake find less to do, so
/// the copy is never slower than the caller's alone.
fn copy_with_pool(pool: &rayon::ThreadPool, dst: &mut [u8], src: &[u8], threads: usize) {
    use std::sync::atomic::{AtomicUsize, Ordering::Acquire};
    assert_eq!(dst.len(), src.len());
    let job = std::sync::Arc::new(SharedCopy {
        dst: dst.as_mut_ptr(),
        src: src.as_ptr(),
        len: src.len(),
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
    });
    for _ in 1..threads {
        let job = job.clone();
        pool.spawn(move || job.work());
    }
    job.work();
    // Every block is claimed; the ones still being copied take a block's time at most.
    // A thread descheduled mid-block gets the core back by yielding.
    let mut spins = 0u32;
    while job.done.load(Acquire) < job.blocks() {
        spins += 1;
        if spins.is_multiple_of(1024) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Whether piece `i` of `n` of a host-to-device copy through `slots` slots may be left
/// running on its stream: no later piece of the copy fills its slot again, and it is not
/// the last, which is waited for. The stream runs in order, so once the last piece is
/// done every piece is, and the copy is complete when it returns, as a pageable copy
/// must be; meanwhile the worker queues the pieces back to back instead of waiting
/// for each (on the H100, 1 MiB copies ran at 0.82-0.97x native with every piece
/// waited for).
fn left_running(i: usize, n: usize, slots: usize) -> bool {
    i + 1 < n && i + slots >= n
}

impl Staging {
    fn slot_addr(&self, i: usize) -> usize {
        self.start + (i % self.slots) * self.slot
    }

    /// Slot `i`'s first `len` bytes.
    ///
    /// # Safety
    /// The caller holds the connection (inside `Client::pipeline`), so no other thread
    /// uses the staging area, and the host is not copying this slot (the reply of the
    /// request that last named it has come back).
    unsafe fn slot_mut<'a>(&self, i: usize, len: usize) -> &'a mut [u8] {
        assert!(len <= self.slot);
        // SAFETY: the slot is `slot` bytes of the staging mapping, which lives for the
        // whole process; exclusive use is the caller's promise above.
        unsafe { std::slice::from_raw_parts_mut(self.slot_addr(i) as *mut u8, len) }
    }

    /// How much of a `len`-byte copy each request moves: whole slots, except that a
    /// copy of under four slots still goes in four pieces, so that staging one
    /// overlaps the GPU's copy of another and only a quarter of the copy is not
    /// overlapped (see bench/results/RESULTS.md).
    fn piece(&self, len: usize) -> usize {
        len.div_ceil(4)
            .next_multiple_of(crate::pages::PAGE)
            .clamp(MIN_STAGED / 4, self.slot)
    }

    /// A pageable host-to-device copy through the staging slots, in stream order on
    /// `stream`. Complete on return, as pageable copies are natively: the program may
    /// reuse `src` at once.
    pub fn to_device(&self, dst: u64, src: &[u8], stream: StreamHandle) -> Result<(), CudaStatus> {
        let piece = self.piece(src.len());
        let n = src.len().div_ceil(piece);
        client::client()?.pipeline(
            state::current_device(),
            n,
            self.slots,
            |i| {
                let part = &src[i * piece..((i + 1) * piece).min(src.len())];
                // SAFETY: inside the pipeline; slot `i` was last named by request
                // `i - slots`, which was waited for (below) and whose reply the
                // pipeline read before preparing `i`.
                copy(unsafe { self.slot_mut(i, part.len()) }, part);
                MemcpyShared {
                    device: dst + (i * piece) as u64,
                    host: self.slot_addr(i) as u64,
                    size: part.len() as u64,
                    to_device: true,
                    stream,
                    is_async: left_running(i, n, self.slots),
                    done: None,
                }
            },
            |_| {},
        )
    }

    /// A device-to-host copy into pageable memory through the staging slots.
    pub fn to_host(
        &self,
        dst: &mut [u8],
        src: u64,
        stream: StreamHandle,
    ) -> Result<(), CudaStatus> {
        let piece = self.piece(dst.len());
        let n = dst.len().div_ceil(piece);
        let total = dst.len();
        let size = |i: usize| ((i + 1) * piece).min(total) - i * piece;
        client::client()?.pipeline(
            state::current_device(),
            n,
            self.slots,
            |i| MemcpyShared {
                device: src + (i * piece) as u64,
                host: self.slot_addr(i) as u64,
                size: size(i) as u64,
                to_device: false,
                stream,
                is_async: false,
                done: None,
            },
            |i| {
                let len = size(i);
                // SAFETY: inside the pipeline, after request `i`'s reply: the host has
                // finished writing the slot and nothing names it until `i + slots`.
                let slot = unsafe { self.slot_mut(i, len) };
                copy(&mut dst[i * piece..i * piece + len], slot);
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only pieces whose slot is not filled again, and never the last, run on.
    #[test]
    fn only_pieces_whose_slot_stays_untouched_are_left_running() {
        let running = |n, slots| {
            (0..n)
                .filter(|&i| left_running(i, n, slots))
                .collect::<Vec<_>>()
        };
        assert_eq!(running(4, 4), [0, 1, 2]);
        assert_eq!(running(1, 4), Vec::<usize>::new());
        assert_eq!(running(10, 4), [6, 7, 8]);
        assert_eq!(running(3, 2), [1]);
    }

    #[test]
    fn parallel_copy_copies_every_byte_of_odd_sizes() {
        for len in [0, 1, 4095, 512 << 10, (3 << 20) + 17] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
            let mut dst = vec![0u8; len];
            copy(&mut dst, &src);
            assert!(dst == src, "length {len}");
        }
    }

    #[test]
    fn parallel_copies_from_several_threads_at_once_stay_apart() {
        let threads: Vec<_> = (0..4u8)
            .map(|t| {
                std::thread::spawn(move || {
                    for round in 0..20usize {
                        let len = (1 << 20) + round * 4099;
                        let src = vec![t.wrapping_mul(31).wrapping_add(round as u8); len];
                        let mut dst = vec![0u8; len];
                        copy(&mut dst, &src);
                        assert!(dst == src);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
