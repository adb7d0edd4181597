//! The requests to the host: each call forwarded for the calling thread's current
//! device, waited for ([`call`], [`call_with`]) or posted ([`post`], [`post_now`]),
//! waits that leave the connection free ([`wait_by_queries`]), and the host a call
//! about another device's stream, event or memory goes to ([`on_host_of`]). Everything
//! above the connection makes its requests through these.

use vmcuda_wire::op::{Request, StreamHandle};
use vmcuda_wire::CudaStatus;

use crate::client::{self, Sink};
use crate::state;

pub type Result<T> = std::result::Result<T, CudaStatus>;

/// Wait until `query` (a short waited call) stops answering `cudaErrorNotReady`,
/// leaving the connection free between queries: how a thread waits for the GPU while
/// other threads of the process make calls on the same connection (one waited
/// synchronize would hold it, and the worker, until the GPU was done, so their calls,
/// maybe the very work this one waits for, would queue behind it). Queries come back
/// to back for the first millisecond (each is a round trip, a few microseconds, with
/// other threads' calls between them), then after sleeps of 50 us (about 100 us as
/// the kernel wakes threads), so a long wait costs at most that much more.
pub(crate) fn wait_by_queries(mut query: impl FnMut() -> Result<()>) -> Result<()> {
    let start = std::time::Instant::now();
    loop {
        match query() {
            Err(CudaStatus::ErrorNotReady) => {}
            done => return done,
        }
        if start.elapsed() >= std::time::Duration::from_millis(1) {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
}

/// Forward one request for the calling thread's current device.
pub fn call<R: Request>(req: &R) -> Result<R::Reply> {
    state::note_runtime_context();
    client::client()?.call(state::current_device(), req, &[], Sink::None)
}

/// Forward one request with a data section and/or a reply data sink.
pub fn call_with<R: Request>(req: &R, data: &[u8], sink: Sink<'_>) -> Result<R::Reply> {
    state::note_runtime_context();
    client::client()?.call(state::current_device(), req, data, sink)
}

/// Whether asynchronous calls wait for their replies anyway (`VMCUDA_SYNC=1`: for
/// debugging, and to measure what the pipeline gains).
pub(crate) fn synchronous() -> bool {
    static SYNC: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SYNC.get_or_init(|| std::env::var("VMCUDA_SYNC").is_ok_and(|v| v == "1"))
}

/// Forward a call CUDA does not make the host wait for: sent without waiting for the
/// reply; its failure surfaces at the next waited-for call. Only for calls whose
/// synchronous errors the guest has already ruled out.
pub fn post<R: Request>(req: &R, data: &[u8]) -> Result<()>
where
    R::Reply: Default,
{
    post_when(req, data, false)
}

/// [`post`], sent at once (see [`client::Client::post_now`]).
pub fn post_now<R: Request>(req: &R, data: &[u8]) -> Result<()>
where
    R::Reply: Default,
{
    post_when(req, data, true)
}

fn post_when<R: Request>(req: &R, data: &[u8], now: bool) -> Result<()>
where
    R::Reply: Default,
{
    if synchronous() {
        return call_with(req, data, Sink::None).map(|_| ());
    }
    state::note_runtime_context();
    let client = client::client()?;
    if now {
        client.post_now(state::current_device(), req, data)
    } else {
        client.post(state::current_device(), req, data)
    }
}

/// Whether `stream` names a default stream or one this process made and still has.
pub fn known_stream(stream: StreamHandle) -> bool {
    stream.is_default() || state::registry().streams.contains_key(&stream.0)
}

/// Run `f`, whose calls go to the current device's host, on the host of `owner`
/// instead when the program uses several hosts and `owner` (the device of the stream,
/// event or memory the call is about) is on another one. With one host nothing
/// changes: the host itself handles a stream or pointer of another of its devices.
pub fn on_host_of<T>(owner: Option<i32>, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let (Some(owner), Some(hosts)) = (owner, client::connected_hosts()) else {
        return f();
    };
    if hosts.count() > 1 && hosts.host_of(owner) != hosts.host_of(state::current_device()) {
        state::as_device(owner, f)
    } else {
        f()
    }
}

/// The device whose memory `ptr` points into, if the program got it from this library.
pub fn device_of_ptr(ptr: usize) -> Option<i32> {
    state::registry()
        .device_range(ptr as u64)
        .map(|(_, _, d)| d)
}

/// The device a stream was made on (default streams: none, they are the current
/// device's).
pub fn device_of_stream(stream: StreamHandle) -> Option<i32> {
    state::registry().streams.get(&stream.0).map(|s| s.device)
}

/// The device an event was made on.
pub fn device_of_event(event: u64) -> Option<i32> {
    state::registry().events.get(&event).map(|e| e.0)
}

/// Whether two devices are on different hosts.
pub fn on_different_hosts(a: i32, b: i32) -> Result<bool> {
    Ok(client::connected_hosts()
        .is_some_and(|hosts| hosts.count() > 1 && hosts.host_of(a) != hosts.host_of(b)))
}

/// A device as its own host numbers it (what request fields that name a device carry).
pub fn local_device(device: i32) -> Result<i32> {
    Ok(client::client()?.route(device)?.2)
}

#[cfg(test)]
mod wait_tests {
    use super::*;

    /// A wait by queries ends with the first answer that is not "not ready": done, or
    /// the error the stream stopped on; it asks again in between.
    #[test]
    fn a_wait_by_queries_ends_on_the_first_answer_but_not_ready() {
        let mut asked = 0;
        let done = wait_by_queries(|| {
            asked += 1;
            match asked {
                1..=40 => Err(CudaStatus::ErrorNotReady),
                _ => Ok(()),
            }
        });
        assert_eq!(done, Ok(()));
        assert_eq!(asked, 41);
        let mut asked = 0;
        let failed = wait_by_queries(|| {
            asked += 1;
            match asked {
                1..=3 => Err(CudaStatus::ErrorNotReady),
                _ => Err(CudaStatus::ErrorIllegalAddress),
            }
        });
        assert_eq!(failed, Err(CudaStatus::ErrorIllegalAddress));
    }

    /// Threads count while they live: another thread that made a call makes this one's
    /// waits go by queries, until it ends.
    #[test]
    fn other_threads_count_while_they_live() {
        state::note_thread();
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            state::note_thread();
            tx.send(()).unwrap();
            stop_rx.recv().unwrap();
        });
        rx.recv().unwrap();
        assert!(state::other_threads());
        stop_tx.send(()).unwrap();
        t.join().unwrap();
    }
}
