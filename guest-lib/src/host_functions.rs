//! Host functions inside graphs: a graph's host nodes and `cudaLaunchHostFunc` in a
//! stream capture.
//!
//! The GPU cannot call into the guest, so a host function's place in a graph is a
//! pair of words in shared pinned memory (a slot): the stream clears the done word,
//! sets the request word, and waits until the done word is set
//! (`HostFunctionSignal`, stream memory operations, so the wait is the GPU's own and
//! no host thread blocks). A thread of ours watches every slot: it clears a request,
//! calls the function, and sets done. It looks often right after a graph launch and
//! seldom when nothing happened for a while. Slots need memory the host maps: where
//! there is none (a remote host), host nodes are refused.
//!
//! A node's function and argument can change (`cudaGraphHostNodeSetParams`): the slot
//! calls whatever was set last, and the graph code (`driver::inner::graph_build`)
//! gives a node a new slot where an executable graph or a clone may hold its old one.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use vmcuda_wire::op::{HostFunctionSignal, StreamHandle};
use vmcuda_wire::CudaStatus;

use crate::pages::Shared;
use crate::{caller, pinned};

pub type HostFn = unsafe extern "C" fn(*mut std::ffi::c_void);

/// Bytes of one slot: request and done, 4 each.
const SLOT_LEN: usize = 8;
/// Pages of slots are this large.
const PAGE_LEN: usize = 4096;
/// At most this many slots (host nodes and captured host functions) per process.
const MAX_SLOTS: usize = 1 << 16;
/// `cudaHostAllocPortable`: every context's.
const PORTABLE: u32 = 1;

struct Slot {
    at: usize,
    f: HostFn,
    data: usize,
}

#[derive(Default)]
struct Slots {
    slots: Vec<Slot>,
    /// The current page of slot memory and how much of it is used.
    page: Option<(usize, usize)>,
    /// The pages, kept for the process's life (graphs may run until it ends).
    pages: Vec<Shared>,
    watching: bool,
}

static SLOTS: Mutex<Option<Slots>> = Mutex::new(None);
static WAKE: Condvar = Condvar::new();
/// When work that may reach a slot was last started (ms since the watcher began).
static LAST_LAUNCH: AtomicU64 = AtomicU64::new(0);

fn words(at: usize) -> (&'static AtomicU32, &'static AtomicU32) {
    // SAFETY: `at` is a slot of a page that stays mapped for the process's life,
    // 4-aligned; the GPU and the host only ever store whole words there.
    unsafe { (&*(at as *const AtomicU32), &*((at + 4) as *const AtomicU32)) }
}

/// A new slot calling `f(data)`: its address.
pub fn new_slot(f: HostFn, data: usize) -> Result<usize, CudaStatus> {
    let mut guard = SLOTS.lock().unwrap_or_else(|p| p.into_inner());
    let s = guard.get_or_insert_with(Slots::default);
    if s.slots.len() >= MAX_SLOTS {
        return Err(CudaStatus::ErrorMemoryAllocation);
    }
    let at = match s.page {
        Some((page, used)) if used + SLOT_LEN <= PAGE_LEN => {
            s.page = Some((page, used + SLOT_LEN));
            page + used
        }
        _ => {
            let Some((page, region)) = pinned::alloc(PAGE_LEN, PORTABLE) else {
                return Err(crate::notice::refuse(
                    "a host function in a graph",
                    "needs memory shared with the host, which this connection has not",
                ));
            };
            s.pages.push(region);
            s.page = Some((page, SLOT_LEN));
            page
        }
    };
    let (request, done) = words(at);
    request.store(0, Ordering::SeqCst);
    done.store(0, Ordering::SeqCst);
    s.slots.push(Slot { at, f, data });
    if !s.watching {
        std::thread::Builder::new()
            .name("vmcuda-host-fn".into())
            .spawn(watch)
            .map_err(|_| CudaStatus::ErrorOperatingSystem)?;
        s.watching = true;
    }
    Ok(at)
}

/// Change what the slot at `at` calls.
pub fn set(at: usize, f: HostFn, data: usize) {
    let mut guard = SLOTS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(slot) = guard
        .as_mut()
        .and_then(|s| s.slots.iter_mut().find(|s| s.at == at))
    {
        slot.f = f;
        slot.data = data;
    }
}

/// What the slot at `at` calls.
pub fn get(at: usize) -> Option<(HostFn, usize)> {
    let guard = SLOTS.lock().unwrap_or_else(|p| p.into_inner());
    guard
        .as_ref()?
        .slots
        .iter()
        .find(|s| s.at == at)
        .map(|s| (s.f, s.data))
}

/// Put the slot's function in `stream`'s order (the stream captures).
pub fn signal(stream: StreamHandle, at: usize) -> Result<(), CudaStatus> {
    crate::request::post(
        &HostFunctionSignal {
            stream,
            slot: at as u64,
        },
        &[],
    )
}

/// Work that may reach a slot was started: look often for a while.
pub fn launched() {
    let guard = SLOTS.lock().unwrap_or_else(|p| p.into_inner());
    if guard.as_ref().is_some_and(|s| s.watching) {
        LAST_LAUNCH.store(now_ms(), Ordering::Relaxed);
        WAKE.notify_all();
    }
}

fn now_ms() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// The watching thread: run every requested function; poll every 20 us within a
/// second of a launch or a call, and every 2 ms otherwise.
fn watch() {
    let mut last_call = now_ms();
    loop {
        let due: Vec<(usize, HostFn, usize)> = {
            let guard = SLOTS.lock().unwrap_or_else(|p| p.into_inner());
            let Some(s) = guard.as_ref() else { return };
            s.slots
                .iter()
                .filter(|slot| words(slot.at).0.load(Ordering::Acquire) == 1)
                .map(|slot| (slot.at, slot.f, slot.data))
                .collect()
        };
        for (at, f, data) in &due {
            let (request, done) = words(*at);
            request.store(0, Ordering::SeqCst);
            // SAFETY: the program's host function and argument, called once per
            // request, as its contract says (the stream waits until it returns).
            unsafe { caller::call_host_fn(*f, *data as *mut std::ffi::c_void) };
            done.store(1, Ordering::Release);
        }
        let now = now_ms();
        if !due.is_empty() {
            last_call = now;
            continue;
        }
        let busy = now.saturating_sub(last_call.max(LAST_LAUNCH.load(Ordering::Relaxed))) < 1000;
        let pause = if busy {
            Duration::from_micros(20)
        } else {
            Duration::from_millis(2)
        };
        let guard = SLOTS.lock().unwrap_or_else(|p| p.into_inner());
        let _ = WAKE.wait_timeout(guard, pause);
    }
}

/// A copy between the program's own (pageable) memory and a staging buffer of shared
/// pinned memory, made by a host function when the graph runs. Kept for the
/// process's life, as its graph may run until then.
struct StagedCopy {
    /// The program's side: its rows (`width` bytes at `pitch`), and the buffer's
    /// packed rows.
    program: usize,
    pitch: usize,
    width: usize,
    height: usize,
    staging: usize,
    into_program: bool,
}

/// The staging buffers, kept for the process's life (at most this many bytes).
static STAGING: Mutex<(Vec<Shared>, usize)> = Mutex::new((Vec::new(), 0));
const MAX_STAGING: usize = 1 << 30;

/// The host function of a staged copy.
extern "C" fn staged_copy(p: *mut std::ffi::c_void) {
    // SAFETY: `p` is a leaked `StagedCopy` (see `capture_pageable_copy`), never freed.
    let c = unsafe { &*(p as *const StagedCopy) };
    for row in 0..c.height {
        let program = (c.program + row * c.pitch) as *mut u8;
        let staging = (c.staging + row * c.width) as *mut u8;
        let (from, to) = match c.into_program {
            true => (staging.cast_const(), program),
            false => (program.cast_const(), staging),
        };
        // SAFETY: the program promised its side stays valid until the graph's work
        // that reads or writes it is done (CUDA's contract for asynchronous copies);
        // the staging buffer is ours and as large as the rows.
        unsafe { std::ptr::copy_nonoverlapping(from, to, c.width) };
    }
}

/// A copy between device memory and the program's own memory: its rows (`width`
/// bytes each, `height` of them) on each side.
pub struct PageableCopy {
    /// The program's side and its pitch.
    pub host: usize,
    pub pitch: usize,
    /// The device side and its pitch.
    pub device: u64,
    pub device_pitch: usize,
    pub width: usize,
    pub height: usize,
    pub to_device: bool,
}

/// A copy between device memory and the program's pageable memory in a stream
/// capture: the copy the graph makes goes through a staging buffer of shared pinned
/// memory, and a host function moves the bytes between it and the program's memory
/// when the graph runs, before (to the device) or after (to the host) the device's
/// copy. `None`: no shared memory here.
pub fn capture_pageable_copy(
    stream: StreamHandle,
    c: PageableCopy,
) -> Option<Result<(), CudaStatus>> {
    let len = c.width.checked_mul(c.height)?;
    let staging = {
        let mut s = STAGING.lock().unwrap_or_else(|p| p.into_inner());
        if s.1.saturating_add(len) > MAX_STAGING {
            return Some(Err(CudaStatus::ErrorMemoryAllocation));
        }
        let (at, region) = pinned::alloc(len.max(1), PORTABLE)?;
        s.0.push(region);
        s.1 += region.len;
        at
    };
    let copy = Box::into_raw(Box::new(StagedCopy {
        program: c.host,
        pitch: c.pitch,
        width: c.width,
        height: c.height,
        staging,
        into_program: !c.to_device,
    }));
    let slot = match new_slot(staged_copy, copy as usize) {
        Ok(slot) => slot,
        Err(e) => return Some(Err(e)),
    };
    let device_rows = || -> Result<(), CudaStatus> {
        for row in 0..c.height {
            crate::request::post(
                &vmcuda_wire::op::MemcpyShared {
                    device: c.device + (row * c.device_pitch) as u64,
                    host: (staging + row * c.width) as u64,
                    size: c.width as u64,
                    to_device: c.to_device,
                    stream,
                    is_async: true,
                    done: None,
                },
                &[],
            )?;
        }
        Ok(())
    };
    Some(match c.to_device {
        true => signal(stream, slot).and_then(|()| device_rows()),
        false => device_rows().and_then(|()| signal(stream, slot)),
    })
}
