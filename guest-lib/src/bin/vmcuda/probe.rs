//! One conversation with the host under a deadline, and what it learns: the hello,
//! each device's properties and memory, and a few timed round trips.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use vmcuda_guest::client::{Client, ConnectFailure, Looked, Sink};
use vmcuda_wire::op::{DeviceGetProperties, DeviceProperties, HelloReply, MemGetInfo, MemInfo};
use vmcuda_wire::transport::ServerAddr;
use vmcuda_wire::CudaStatus;

/// Round trips timed for the median: enough to shrug off one slow sample, few enough
/// to stay instant.
const ROUND_TRIPS: usize = 7;

/// One device as the guest sees it.
pub struct DeviceView {
    pub index: i32,
    pub props: Result<DeviceProperties, CudaStatus>,
    /// What `cudaMemGetInfo` answers: with a quota, the quota is the total.
    pub mem: Result<MemInfo, CudaStatus>,
}

pub struct Conversation {
    pub addr: ServerAddr,
    pub hello: HelloReply,
    pub devices: Vec<DeviceView>,
    /// Each timed call's round trip (the call's own result does not matter).
    pub round_trips: Vec<Duration>,
}

impl Conversation {
    pub fn median_round_trip(&self) -> Option<Duration> {
        median(&self.round_trips)
    }
}

pub enum Outcome {
    Talked(Box<Conversation>),
    Failed(ConnectFailure),
    /// Nothing came back in time (a dropped packet, a stuck host).
    TimedOut(Duration),
}

/// Connect to `addr` with `token`, ask about every device and time a few cheap
/// calls, all within `timeout`.
pub fn talk(addr: ServerAddr, token: Vec<u8>, timeout: Duration) -> Outcome {
    let work = move || -> Result<Conversation, ConnectFailure> {
        let client = Client::connect(addr.clone(), token)?;
        let devices = (0..client.hello.device_count)
            .map(|index| DeviceView {
                index,
                props: client.call(
                    index,
                    &DeviceGetProperties { device: index },
                    &[],
                    Sink::None,
                ),
                mem: client.call(index, &MemGetInfo, &[], Sink::None),
            })
            .collect();
        // The calls above created the device's context on the host; what remains is
        // the transport and the worker. With no device the error reply still times it.
        let round_trips = (0..ROUND_TRIPS)
            .map(|_| {
                let start = Instant::now();
                let _ = client.call(0, &MemGetInfo, &[], Sink::None);
                start.elapsed()
            })
            .collect();
        Ok(Conversation {
            addr,
            hello: client.hello.clone(),
            devices,
            round_trips,
        })
    };
    match within(timeout, work) {
        Some(Ok(c)) => Outcome::Talked(Box::new(c)),
        Some(Err(e)) => Outcome::Failed(e),
        None => Outcome::TimedOut(timeout),
    }
}

/// Talk to the first of `candidates` that answers (the default hosts: see
/// `client::connect_first`): the address talked to, the outcome, and what each host
/// passed over said.
pub fn talk_first(
    candidates: &[ServerAddr],
    token: Vec<u8>,
    timeout: Duration,
) -> (ServerAddr, Outcome, Vec<Looked>) {
    let mut passed = Vec::new();
    for (i, addr) in candidates.iter().enumerate() {
        let outcome = talk(addr.clone(), token.clone(), timeout);
        match &outcome {
            Outcome::Failed(ConnectFailure::Unreachable { source, .. })
                if i + 1 < candidates.len() =>
            {
                passed.push(Looked {
                    place: addr.to_string(),
                    found: format!("no daemon answers ({source}): the next is tried"),
                });
            }
            _ => return (addr.clone(), outcome, passed),
        }
    }
    unreachable!("the last candidate always returns")
}

/// Run `f` on its own thread and wait at most `timeout` for it. A connection attempt
/// has no deadline of its own (a TCP connect to a silent address waits minutes); on
/// timeout the thread is left behind, and the command exits soon after anyway.
pub fn within<T: Send + 'static>(
    timeout: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(timeout).ok()
}

pub fn median(samples: &[Duration]) -> Option<Duration> {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted.get(sorted.len() / 2).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_picks_the_middle_sample() {
        let ms = Duration::from_millis;
        assert_eq!(median(&[ms(9), ms(1), ms(5)]), Some(ms(5)));
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn within_gives_up_on_slow_work() {
        assert_eq!(within(Duration::from_secs(5), || 7), Some(7));
        let slow = within(Duration::from_millis(10), || {
            std::thread::sleep(Duration::from_secs(2));
        });
        assert_eq!(slow, None);
    }
}
