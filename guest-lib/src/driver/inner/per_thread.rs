//! Each thread's own default stream (`cudaStreamPerThread`, `CU_STREAM_PER_THREAD`,
//! and the NULL stream of a driver `_ptsz` call). The per-thread variants of the
//! driver's functions themselves are `driver::twins`.

/// Each thread's own default stream (`cudaStreamPerThread`, `CU_STREAM_PER_THREAD`,
/// and the NULL stream of a `_ptsz` call): a blocking stream the guest makes for the
/// thread on first use on each device, so that the default streams of two threads run
/// independently of each other, as natively, and each synchronizes with the legacy
/// stream. It goes away with its thread. If it cannot be made (no connection), the host's
/// shared per-thread stream stands in, and the call fails there as it would.
pub(crate) mod default_stream {
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicU64, Ordering};

    use vmcuda_wire::op::{StreamCreate, StreamDestroy, StreamHandle};

    use crate::state::{self, registry, StreamInfo};

    /// Bumped by a device reset, which destroys every stream of the device on the host:
    /// streams made before it are made again.
    static EPOCH: AtomicU64 = AtomicU64::new(0);

    /// This thread's streams: device -> (stream, the epoch it was made in).
    struct Streams(HashMap<i32, (StreamHandle, u64)>);

    impl Drop for Streams {
        /// Nothing here waits: a thread may exit while another holds the connection in
        /// a long call, or the whole process may be exiting under one. What is not done
        /// (the connection busy, host functions still queued on the stream) the host
        /// undoes when the connection closes.
        fn drop(&mut self) {
            let epoch = EPOCH.load(Ordering::Acquire);
            for (device, (stream, made)) in self.0.drain() {
                if let Some(mut r) = state::try_registry() {
                    r.streams.remove(&stream.0);
                }
                if made == epoch && !crate::gate::stream_busy(stream) {
                    // Posted behind the thread's own work on it, which still runs.
                    let _ = std::panic::catch_unwind(|| {
                        crate::client::client()
                            .and_then(|c| c.post_if_free(device, &StreamDestroy { stream }))
                    });
                }
            }
        }
    }

    thread_local! {
        static STREAMS: RefCell<Streams> = RefCell::new(Streams(HashMap::new()));
    }

    /// The calling thread's default stream on the current device.
    pub(crate) fn current() -> StreamHandle {
        let device = state::current_device();
        let epoch = EPOCH.load(Ordering::Acquire);
        let known = STREAMS
            .try_with(|s| s.borrow().0.get(&device).copied())
            .ok()
            .flatten();
        match known {
            Some((stream, made)) if made == epoch => stream,
            _ => make(device, epoch).unwrap_or(StreamHandle::PER_THREAD),
        }
    }

    fn make(device: i32, epoch: u64) -> Option<StreamHandle> {
        let stream = StreamHandle(state::fresh_id());
        let req = StreamCreate {
            stream,
            flags: 0,
            priority: 0,
        };
        crate::driver::inner::post(&req, &[]).ok()?;
        registry().streams.insert(
            stream.0,
            StreamInfo {
                device,
                flags: 0,
                priority: 0,
            },
        );
        let kept = STREAMS.try_with(|s| s.borrow_mut().0.insert(device, (stream, epoch)));
        if let Ok(Some((old, _))) = kept {
            registry().streams.remove(&old.0);
        }
        Some(stream)
    }

    /// A device was reset: its streams are gone on the host.
    pub(crate) fn forget() {
        EPOCH.fetch_add(1, Ordering::AcqRel);
    }
}
