//! Completion words: how a synchronous copy of pinned memory learns that the GPU is done
//! without waiting for the worker's reply.
//!
//! Natively, `cudaMemcpy` from pinned memory returns when the driver sees a word the
//! GPU writes after the copy. Through the bridge it waited for the worker's reply,
//! which the worker sends only after its own synchronous copy returns: one more hop,
//! and the worker's bookkeeping, after every copy. Instead the copy is posted as an
//! asynchronous one that names a word in memory shared with the host and a fresh
//! value ([`DoneWord`]); once the copy is enqueued, the worker has the stream write
//! the value there after it (`cuStreamWriteValue32`), and the calling thread watches
//! that word: the GPU tells it directly, as natively. A copy the worker refuses writes
//! no word. A word that does not come in time (a long queue ahead of the copy, a
//! refusal, or an error that stopped the stream) falls back to a synchronous
//! `cudaStreamSynchronize`, which also returns the error.
//!
//! Stream and device synchronizes end on a word the same way ([`watch`]): the guest
//! posts a request that has the GPU write the word once the stream (or every stream of
//! the device) has done the work queued so far, and watches the word for a while
//! before it waits as before. A worker that owes the guest an error from an earlier
//! request does not run that request, so the error still comes back from the
//! synchronize (by the wait that follows). No round trip, and no worker thread held
//! while other threads of the process make calls.
//! `VMCUDA_DONE_WORDS=0` turns this off.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use vmcuda_wire::op::{DoneWord, StreamHandle, StreamSynchronize, StreamWriteValue32};

use crate::pages::PAGE;
use crate::pinned;
use crate::request::{call, Result};

const WORD: usize = 4;

/// The largest copy that ends on a word. Above it the reply's hop is under 1% of the
/// copy's time (16 MiB take 300 us at 55 GB/s), and waiting for the reply lets the
/// calling thread sleep after its polling window, where watching a word spins it for
/// the whole copy.
const MAX_WORD_COPY: usize = 16 << 20;

/// How long a synchronize watches its word before it waits as it did without one:
/// longer than the small work a framework synchronizes after, short enough that the
/// spinning costs a long wait little. `VMCUDA_SYNC_WATCH_US` sets it.
const WATCH: Duration = Duration::from_millis(1);

fn watch_window() -> Duration {
    static WINDOW: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *WINDOW.get_or_init(|| {
        std::env::var("VMCUDA_SYNC_WATCH_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .map_or(WATCH, Duration::from_micros)
    })
}

/// The page words are handed out from: its address here, its device pointer, the next
/// free word's offset; `None` once no page can be had.
struct Pages {
    current: Option<(usize, u64, usize)>,
    unavailable: bool,
}

static PAGES: Mutex<Pages> = Mutex::new(Pages {
    current: None,
    unavailable: false,
});

thread_local! {
    /// This thread's word (its address here, its device pointer) and the last value
    /// written to it. Words are never given back: a thread's word outlives it, at 4
    /// bytes each.
    static SLOT: Cell<Option<(usize, u64, u32)>> = const { Cell::new(None) };
}

fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("VMCUDA_DONE_WORDS").map_or(true, |v| v != "0"))
}

/// Whether stream and device synchronizes end on words (`VMCUDA_SYNC_WORDS=1`). Off by
/// default: on the H200 (bench/results/RESULTS-SYNC-WORDS.md, native beside, the same
/// processes with words on and off) a launch and device synchronize took 1.14x native
/// with them and 0.94x without, and an NCCL all-reduce 8.2x against 2.4x; only CUDA-graph
/// replay gained (1.71x against 1.92x).
fn sync_words() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("VMCUDA_SYNC_WORDS").is_ok_and(|v| v == "1"))
}

/// Whether a module whose kernels call `printf` was loaded: what they print comes out
/// of the host's driver when the host synchronizes, so from then on a synchronize
/// waits for the host (and so prints where it does natively) instead of for a word.
static PRINTING: AtomicBool = AtomicBool::new(false);

/// A module was loaded; the host said whether its kernels call `printf`.
pub fn note_module(prints: bool) {
    if prints {
        PRINTING.store(true, Ordering::Relaxed);
    }
}

/// Whether a module whose kernels call `printf` was loaded in this process.
pub fn printing() -> bool {
    PRINTING.load(Ordering::Relaxed)
}

/// This thread's word, made on first use; `None` where no memory is shared with a
/// single host.
fn slot() -> Option<(usize, u64, u32)> {
    if let Some(slot) = SLOT.with(Cell::get) {
        return Some(slot);
    }
    let mut pages = PAGES.lock().unwrap_or_else(|p| p.into_inner());
    if pages.unavailable || !crate::client::client().is_ok_and(|c| c.single().is_some()) {
        return None;
    }
    let (host, device, used) = match pages.current {
        Some((host, device, used)) if used + WORD <= PAGE => (host, device, used),
        _ => match pinned::alloc(PAGE, 0x1) {
            Some((host, region)) => (host, region.device_ptr, 0),
            None => {
                pages.unavailable = true;
                return None;
            }
        },
    };
    pages.current = Some((host, device, used + WORD));
    let slot = (host + used, device + used as u64, 0);
    SLOT.with(|s| s.set(Some(slot)));
    Some(slot)
}

/// The word at `host`: 4 aligned bytes of shared memory the GPU writes.
fn word(host: usize) -> &'static AtomicU32 {
    // SAFETY: `host` is a 4-aligned word of a shared page that is never unmapped
    // (words are never given back), written only whole, by the GPU and by no one else.
    unsafe { &*(host as *const AtomicU32) }
}

/// Post, through `signal`, a request that has the GPU write the [`DoneWord`] it is
/// given, and watch the word for `window`: `Some(Ok(true))` once it is written,
/// `Some(Ok(false))` if it was not in time, `Some(Err)` if the request could not be
/// sent, and `None` where words cannot be used here.
fn signal_and_watch(
    window: Duration,
    signal: impl FnOnce(DoneWord) -> Result<()>,
) -> Option<Result<bool>> {
    if !enabled() || crate::request::synchronous() {
        return None;
    }
    let (host, device, last) = slot()?;
    let value = last.wrapping_add(1).max(1);
    SLOT.with(|s| s.set(Some((host, device, value))));
    let done = DoneWord {
        addr: device,
        value,
    };
    if let Err(e) = signal(done) {
        return Some(Err(e));
    }
    let until = Instant::now() + window;
    let w = word(host);
    let mut turns = 0u32;
    while w.load(Ordering::Acquire) != value {
        turns = turns.wrapping_add(1);
        if turns.is_multiple_of(256) && Instant::now() >= until {
            return Some(Ok(false));
        }
        std::hint::spin_loop();
    }
    Some(Ok(true))
}

/// Run `post_copy` (which must post, and send at once, an asynchronous copy on
/// `stream` that writes the [`DoneWord`] it is given when done) and return once the GPU
/// has done it, as a synchronous copy would; `None` when words cannot be used here (the
/// caller then makes a synchronous copy itself).
pub fn synchronous(
    stream: StreamHandle,
    bytes: usize,
    post_copy: impl FnOnce(DoneWord) -> Result<()>,
) -> Option<Result<()>> {
    if bytes > MAX_WORD_COPY {
        return None;
    }
    // Longer than the copy could take at 5 GB/s, and at least 2 ms.
    let window = Duration::from_millis(2) + Duration::from_nanos(bytes as u64 / 5);
    Some(match signal_and_watch(window, post_copy)? {
        Ok(true) => Ok(()),
        // Not in time: wait as CUDA does; a refusal, or an error that stopped the
        // stream, comes back here.
        Ok(false) => call(&StreamSynchronize { stream }).map(|_| ()),
        Err(e) => Err(e),
    })
}

/// Post, through `signal`, a request that has the GPU write the [`DoneWord`] it is
/// given once the work to wait for is done, and watch the word for [`WATCH`] (or
/// what `VMCUDA_SYNC_WATCH_US` says):
/// `Some(Ok(true))` once it is written, `Some(Ok(false))` if it was not in time (the
/// caller then waits as it would have without a word), `Some(Err)` if the request could
/// not be sent, and `None` where words cannot be used here.
pub fn watch(signal: impl FnOnce(DoneWord) -> Result<()>) -> Option<Result<bool>> {
    if !sync_words() || PRINTING.load(Ordering::Relaxed) {
        return None;
    }
    signal_and_watch(watch_window(), signal)
}

/// How often a long wait on a word asks the host too, for an error that stopped the
/// stream (its word never comes then).
const ASK_EVERY: Duration = Duration::from_millis(2);

/// Wait, off the program's threads (a stream gate's), until the GPU has written the
/// [`DoneWord`] that `signal` has it write: spin for the watch window, then look every
/// 50 us, asking `query` every [`ASK_EVERY`] whether the work is done or failed.
/// `Some(result)`: done (or `query`'s failure); `None` where words cannot be used here
/// (the caller then waits by queries alone). Host functions wait so: natively the
/// driver's thread for them is woken by the GPU, not by polling the host.
pub fn wait_off_thread(
    signal: impl FnOnce(DoneWord) -> Result<()>,
    mut query: impl FnMut() -> Result<()>,
) -> Option<Result<()>> {
    match signal_and_watch(watch_window(), signal)? {
        Ok(true) => return Some(Ok(())),
        Ok(false) => {}
        Err(e) => return Some(Err(e)),
    }
    // The word and value `signal_and_watch` just gave out.
    let (host, _, value) = SLOT.with(Cell::get)?;
    let w = word(host);
    let mut asked = Instant::now();
    loop {
        if w.load(Ordering::Acquire) == value {
            return Some(Ok(()));
        }
        if asked.elapsed() >= ASK_EVERY {
            match query() {
                Err(vmcuda_wire::CudaStatus::ErrorNotReady) => asked = Instant::now(),
                done => return Some(done),
            }
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Post, and send at once, a write of `done` on `stream` after the work queued on it so
/// far: the signal of a stream's synchronize and of a host function's wait.
pub fn write_after(stream: StreamHandle, done: DoneWord) -> Result<()> {
    let write = StreamWriteValue32 {
        stream,
        addr: done.addr,
        value: done.value,
        flags: 0,
    };
    crate::request::post_now(&write, &[])
}
