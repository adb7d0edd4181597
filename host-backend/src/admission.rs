//! Before admission: what a connection may cost the host until its guest is admitted.
//!
//! A connection the daemon accepts gets a worker at once, but until the guest's hello
//! is read and admitted, that worker is the daemon's problem: each listener lets at
//! most `[admission] max_pending` of them wait at once (more are closed as they come),
//! and at most `max_pending_per_source` from any one source (a VM's vsock CID, a TCP
//! address, a Unix peer's uid: [`Source`]), so one caller flooding a listener with
//! silent connections cannot lock the others out; one that has sent no hello after
//! `hello_timeout_ms` is killed. The worker tells
//! the daemon how it is doing over a pipe it inherits as [`CHANNEL_FD`], one line per
//! event ([`Event`]): the hello is in, the guest is admitted, or a log line. Log
//! lines from before admission reach the host log only through the daemon, at a
//! bounded rate for each source ([`PRE_ADMISSION_LOG`], a [`SourceLog`]): a flood of
//! bad connections cannot fill the disk, nor crowd out the lines about other sources'
//! connections (their refusals above all).
//!
//! Everything a guest says about itself (its program name, above all) goes through
//! [`guest_text`] before it reaches a log line or the figures.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tracing::warn;

use crate::source_log::Source;
use crate::source_log::{self, SourceLog};

/// The descriptor a daemon-started worker finds its admission channel on.
pub const CHANNEL_FD: i32 = 3;

/// Default `[admission] max_pending`: connections per listener not admitted yet.
pub const DEFAULT_MAX_PENDING: u32 = 64;
/// Default `[admission] max_pending_per_source`: a quarter of `max_pending`.
pub fn default_max_pending_per_source(max_pending: u32) -> u32 {
    (max_pending / 4).max(1)
}
/// Default `[admission] hello_timeout_ms`.
pub const DEFAULT_HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest guest-supplied text kept, in characters.
pub const MAX_GUEST_TEXT: usize = 96;

/// One line on the channel, worker to daemon.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A hello frame has arrived: the hello deadline no longer applies.
    Hello,
    /// The guest is admitted: the connection no longer counts as pending.
    Admitted,
    /// The guest was refused: the connection no longer waits for admission (the
    /// worker ends soon, and may still log until it does).
    Refused,
    /// The VM the caller was found to be (its lines count under its VM's limit).
    Vm(String),
    /// A line for the host log, from before admission.
    Log(String),
}

impl Event {
    fn encode(&self) -> String {
        match self {
            Event::Hello => "hello\n".into(),
            Event::Admitted => "admitted\n".into(),
            Event::Refused => "refused\n".into(),
            Event::Vm(name) => format!("vm {}\n", name.replace(['\n', '\r'], " ")),
            // One line, whatever the text held.
            Event::Log(text) => format!("log {}\n", text.replace(['\n', '\r'], " ")),
        }
    }

    fn decode(line: &str) -> Option<Event> {
        match line.trim_end_matches('\n') {
            "hello" => Some(Event::Hello),
            "admitted" => Some(Event::Admitted),
            "refused" => Some(Event::Refused),
            other => match other.strip_prefix("vm ") {
                Some(name) => Some(Event::Vm(guest_text(name, MAX_GUEST_TEXT))),
                None => other
                    .strip_prefix("log ")
                    .map(|t| Event::Log(guest_text(t, 512))),
            },
        }
    }
}

/// The worker's end of the channel, when a daemon started it with one.
static CHANNEL: OnceLock<Mutex<Option<File>>> = OnceLock::new();
/// What this worker has reported: a hello, an admission.
static HELLO_SEEN: AtomicBool = AtomicBool::new(false);
static ADMITTED: AtomicBool = AtomicBool::new(false);

/// Whether this worker's guest has been admitted.
pub fn admitted() -> bool {
    ADMITTED.load(Ordering::Acquire)
}

/// End this worker process unless a hello has been reported within `timeout`: the
/// daemon enforces the deadline too, but a worker another spawner started has only
/// this. Nothing was admitted, so there is nothing to clean up.
pub fn hello_deadline(timeout: Duration) {
    let _ = std::thread::Builder::new()
        .name("hello-deadline".into())
        .spawn(move || {
            std::thread::sleep(timeout);
            if !HELLO_SEEN.load(Ordering::Acquire) {
                log(format!(
                    "no hello within {} ms; connection dropped",
                    timeout.as_millis()
                ));
                std::process::exit(0);
            }
        });
}

/// Take the channel this process inherited at [`CHANNEL_FD`], if that descriptor is a
/// pipe; call once, early. Without one (a worker of the vhost-user device, a test),
/// events are logged here instead.
pub fn take_inherited_channel() {
    let fd = CHANNEL_FD;
    // SAFETY: fstat only reads into a stat buffer; a closed descriptor answers EBADF.
    let is_pipe = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFIFO
    };
    if !is_pipe {
        return;
    }
    // SAFETY: the daemon put the channel's write end at this descriptor for this
    // purpose; nothing else in the worker uses it, so it is owned from here on.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let _ = nix::fcntl::fcntl(
        &owned,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    );
    let _ = CHANNEL.set(Mutex::new(Some(File::from(owned))));
}

/// Tell the daemon (if any) how admission goes. After [`Event::Admitted`] the channel
/// is closed. Without a channel, log lines are logged here and the rest dropped.
pub fn report(event: Event) {
    match event {
        Event::Hello => HELLO_SEEN.store(true, Ordering::Release),
        Event::Admitted => ADMITTED.store(true, Ordering::Release),
        Event::Log(_) | Event::Vm(_) | Event::Refused => {}
    }
    let Some(channel) = CHANNEL.get() else {
        if let Event::Log(text) = event {
            warn!("{text}");
        }
        return;
    };
    let mut channel = channel.lock().unwrap_or_else(|p| p.into_inner());
    let Some(file) = channel.as_mut() else {
        if let Event::Log(text) = event {
            warn!("{text}");
        }
        return;
    };
    // The daemon may be gone; the guest is served all the same.
    let _ = file.write_all(event.encode().as_bytes());
    if event == Event::Admitted {
        *channel = None;
    }
}

/// A pre-admission log line: through the daemon's rate limit when there is one.
pub fn log(text: impl Into<String>) {
    report(Event::Log(text.into()));
}

/// Whether this worker reports to a daemon.
pub fn has_channel() -> bool {
    CHANNEL
        .get()
        .is_some_and(|c| c.lock().unwrap_or_else(|p| p.into_inner()).is_some())
}

/// Guest-supplied `text` as it may appear in a log line or a figure: control and
/// invisible formatting characters written as escapes (`\u{1b}`), so no guest can
/// forge a line or drive a terminal, and at most `max` characters kept.
pub fn guest_text(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max + 8));
    for (n, c) in text.chars().enumerate() {
        if n == max {
            out.push_str("...");
            break;
        }
        if c.is_control() || invisible(c) || c == '\\' {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// Formatting characters that reorder or hide text (bidirectional overrides,
/// zero-width ones, the byte-order mark).
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{00ad}' | '\u{061c}' | '\u{180e}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}')
}

/// The daemon's limits on log lines about connections not admitted yet, all listeners
/// together: per [`Source`], and all sources together ([`source_log::PRE_ADMISSION`]).
/// What they drop is said before the source's next line let through, or within
/// [`source_log::SUMMARY_EVERY`] by a thread of its own.
pub static PRE_ADMISSION_LOG: LazyLock<SourceLog> = LazyLock::new(|| {
    let _ = std::thread::Builder::new()
        .name("pre-admission-log".into())
        .stack_size(64 * 1024)
        .spawn(|| loop {
            std::thread::sleep(source_log::SUMMARY_EVERY);
            PRE_ADMISSION_LOG.summarize();
        });
    SourceLog::with_limits("connections not admitted yet", source_log::PRE_ADMISSION)
});

/// A `tracing` event under a [`RateLimit`] (`$limit`), `what` naming the lines in the
/// one that says how many were dropped.
#[macro_export]
macro_rules! rate_limited {
    ($limit:expr, $what:literal, $level:ident, $($arg:tt)+) => {
        if let Some(suppressed) = $limit.allow() {
            if suppressed > 0 {
                tracing::warn!(suppressed, concat!("log lines about ", $what, " were dropped (rate limit)"));
            }
            tracing::$level!($($arg)+);
        }
    };
}

/// A `tracing` event about a connection not admitted yet from `$source` (a
/// [`Source`]), under [`PRE_ADMISSION_LOG`].
#[macro_export]
macro_rules! pre_admission {
    ($source:expr, $level:ident, $($arg:tt)+) => {
        if $crate::admission::PRE_ADMISSION_LOG.allow($source) {
            tracing::$level!($($arg)+);
        }
    };
}

/// Why a connection got no pending place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoPlace {
    /// The listener has `max_pending` waiting.
    Listener,
    /// Its source has its share (`max_pending_per_source`) waiting.
    Source,
}

/// Connections of one listener not admitted yet: at most `max` in all, and at most
/// `per_source` from any one [`Source`], so a source that floods the listener with
/// silent connections leaves the other places to the other sources.
#[derive(Clone, Debug)]
pub struct Pending {
    places: Arc<Mutex<Places>>,
    max: usize,
    per_source: usize,
}

#[derive(Debug, Default)]
struct Places {
    total: usize,
    by_source: HashMap<Source, usize>,
}

impl Pending {
    pub fn new(max: u32, per_source: u32) -> Pending {
        let max = max.max(1) as usize;
        Pending {
            places: Arc::default(),
            max,
            per_source: (per_source.max(1) as usize).min(max),
        }
    }

    fn places(&self) -> std::sync::MutexGuard<'_, Places> {
        self.places.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for one more from `source`, unless the listener has `max` waiting, or
    /// it has half of them waiting and that source its share. Below half, a source may
    /// take more than its share: one VM or user starting many processes at once (each
    /// connection waits for its worker's CUDA context, hundreds of milliseconds on a
    /// GPU) is no flood while the others have room. A flooder so holds at most half the
    /// places, or its share if that is more, and every other source still finds its
    /// share free.
    pub fn enter(&self, source: Source) -> Result<PendingSlot, NoPlace> {
        let mut places = self.places();
        if places.total >= self.max {
            return Err(NoPlace::Listener);
        }
        let crowded = places.total >= self.max / 2;
        let mine = places.by_source.entry(source.clone()).or_insert(0);
        if crowded && *mine >= self.per_source {
            return Err(NoPlace::Source);
        }
        *mine += 1;
        places.total += 1;
        Ok(PendingSlot {
            places: self.places.clone(),
            source,
        })
    }

    /// Connections waiting now, all sources together.
    pub fn now(&self) -> usize {
        self.places().total
    }
}

/// One pending connection's place; dropping it frees the place.
pub struct PendingSlot {
    places: Arc<Mutex<Places>>,
    source: Source,
}

impl PendingSlot {
    /// The source whose place it is.
    pub fn source(&self) -> &Source {
        &self.source
    }
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        let mut places = self.places.lock().unwrap_or_else(|p| p.into_inner());
        places.total -= 1;
        if let Some(n) = places.by_source.get_mut(&self.source) {
            *n -= 1;
            if *n == 0 {
                places.by_source.remove(&self.source);
            }
        }
    }
}

/// How a worker's admission went, as its channel told.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Admitted,
    /// The worker ended (refused, or the peer left) before admission.
    Ended,
    /// No hello within the deadline.
    TimedOut,
}

/// Follow a worker's channel (`read`, the daemon's end) until admission, the worker's
/// end, or `hello_timeout` without a hello; log lines go to `log`, the VM the worker
/// names to `vm`. A refusal gives the connection's pending place (`slot`) back at once
/// (a refused worker may take a moment to end).
pub fn watch(
    read: OwnedFd,
    hello_timeout: Duration,
    vm: &OnceLock<String>,
    slot: &mut Option<PendingSlot>,
    mut log: impl FnMut(&str),
) -> Outcome {
    let deadline = Instant::now() + hello_timeout;
    let mut greeted = false;
    let _ = nix::fcntl::fcntl(
        &read,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    );
    let mut lines = BufReader::new(File::from(read));
    let mut line = Vec::new();
    loop {
        // Lines already buffered first; a partial line stays in `line` for the rest.
        loop {
            match lines.read_until(b'\n', &mut line) {
                Ok(0) => return Outcome::Ended,
                Ok(_) if line.last() == Some(&b'\n') => {
                    match Event::decode(&String::from_utf8_lossy(&line)) {
                        Some(Event::Hello) => greeted = true,
                        Some(Event::Admitted) => return Outcome::Admitted,
                        Some(Event::Log(text)) => log(&text),
                        Some(Event::Refused) => {
                            greeted = true;
                            slot.take();
                        }
                        Some(Event::Vm(name)) => {
                            let _ = vm.set(name);
                        }
                        None => {}
                    }
                    line.clear();
                }
                // The worker's end came mid-line.
                Ok(_) => return Outcome::Ended,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => return Outcome::Ended,
            }
            if line.len() > MAX_LINE {
                line.clear();
            }
        }
        if line.len() > MAX_LINE {
            line.clear();
        }
        let wait = if greeted {
            None
        } else {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Outcome::TimedOut;
            }
            Some(left)
        };
        let mut fds = [nix::poll::PollFd::new(
            lines.get_ref().as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        let timeout = match wait {
            None => nix::poll::PollTimeout::NONE,
            Some(d) => nix::poll::PollTimeout::try_from(d.as_millis().min(60_000) as u32 + 1)
                .unwrap_or(nix::poll::PollTimeout::MAX),
        };
        match nix::poll::poll(&mut fds, timeout) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return Outcome::Ended,
        }
    }
}

/// The longest channel line kept; a longer one is dropped.
const MAX_LINE: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_text_cannot_forge_lines_or_drive_a_terminal() {
        let evil = "prog\nINFO forged line\r\u{1b}[2J\u{202e}gpj.exe\\";
        let shown = guest_text(evil, MAX_GUEST_TEXT);
        assert!(!shown.chars().any(|c| c.is_control()), "{shown:?}");
        assert!(!shown.contains('\u{202e}'));
        assert_eq!(
            shown,
            "prog\\nINFO forged line\\r\\u{1b}[2J\\u{202e}gpj.exe\\\\"
        );
        assert_eq!(guest_text("matmul", MAX_GUEST_TEXT), "matmul");
        let long = guest_text(&"x".repeat(1 << 20), MAX_GUEST_TEXT);
        assert_eq!(long.len(), MAX_GUEST_TEXT + 3);
    }

    #[test]
    fn pending_places_are_capped_and_given_back() {
        let p = Pending::new(2, 2);
        let a = p.enter(Source::Uid(1)).unwrap();
        let _b = p.enter(Source::Uid(1)).unwrap();
        assert_eq!(p.enter(Source::Uid(2)).err(), Some(NoPlace::Listener));
        drop(a);
        assert_eq!(p.now(), 1);
        assert!(p.enter(Source::Uid(1)).is_ok());
    }

    /// Finding 2 of issue 34: one source that keeps silent connections open holds its
    /// share of the listener and no more; every other source still gets a place.
    #[test]
    fn one_source_holds_only_its_share_of_the_pending_places() {
        let p = Pending::new(64, default_max_pending_per_source(64));
        let flooder = Source::of_ip("127.0.0.2".parse().unwrap());
        let mut held = Vec::new();
        let mut refused = 0;
        for _ in 0..1000 {
            match p.enter(flooder.clone()) {
                Ok(slot) => held.push(slot),
                Err(why) => {
                    assert_eq!(why, NoPlace::Source);
                    refused += 1;
                }
            }
        }
        // Half the places: past its share only while the listener is not crowded.
        assert_eq!(held.len(), 32);
        assert_eq!(refused, 1000 - 32);
        // Every other source gets in, one after another, while the flood holds on.
        for n in 1..=32u8 {
            let guest = Source::of_ip(std::net::Ipv4Addr::new(10, 0, 0, n).into());
            held.push(p.enter(guest).expect("another source gets a place"));
        }
        assert_eq!(p.now(), 64);
        // A freed place is the flooder's again only within its share.
        held.truncate(32);
        assert!(p.enter(flooder.clone()).is_err());
        assert!(p.enter(Source::Cid(3)).is_ok());
    }

    /// One source starting many processes at once, with no one else waiting, is no
    /// flood: on a GPU host each waits for its worker's CUDA context, and a share of
    /// 16 turned the 17th away (the load test's guests, one uid, on the H200).
    #[test]
    fn one_source_may_pass_its_share_while_the_listener_has_room() {
        let p = Pending::new(64, default_max_pending_per_source(64));
        let me = Source::Uid(1000);
        let held: Vec<_> = (0..32)
            .map(|_| p.enter(me.clone()).expect("room"))
            .collect();
        assert_eq!(held.len(), 32);
        assert_eq!(p.enter(me.clone()).err(), Some(NoPlace::Source));
        // Another source still has its share.
        let other: Vec<_> = (0..16)
            .map(|_| p.enter(Source::Uid(1001)).expect("its share"))
            .collect();
        assert_eq!(other.len(), 16);
    }

    #[test]
    fn an_ipv6_source_is_its_64_network() {
        let a = Source::of_ip("2001:db8:1:2::1".parse().unwrap());
        let b = Source::of_ip("2001:db8:1:2:ffff::9".parse().unwrap());
        let c = Source::of_ip("2001:db8:1:3::1".parse().unwrap());
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.to_string(), "2001:db8:1:2::/64");
        let mapped = Source::of_ip("::ffff:10.1.2.3".parse().unwrap());
        assert_eq!(mapped, Source::of_ip("10.1.2.3".parse().unwrap()));
    }

    fn pipe() -> (OwnedFd, File) {
        let (r, w) = nix::unistd::pipe().unwrap();
        (r, File::from(w))
    }

    /// A refused connection waits for admission no more: its place is free at the
    /// refusal, not when its worker has ended (a caller retrying at once would find its
    /// share taken by workers on their way out).
    #[test]
    fn a_refusal_gives_the_pending_place_back_at_once() {
        let p = Pending::new(4, 1);
        let mut slot = Some(p.enter(Source::Uid(7)).unwrap());
        let (r, mut w) = pipe();
        w.write_all(b"hello\nrefused\nlog refused x\n").unwrap();
        drop(w);
        let mut logged = Vec::new();
        let outcome = watch(
            r,
            Duration::from_secs(5),
            &OnceLock::new(),
            &mut slot,
            |l| logged.push(l.to_string()),
        );
        assert_eq!(outcome, Outcome::Ended);
        assert!(slot.is_none());
        assert_eq!(p.now(), 0);
        assert!(p.enter(Source::Uid(7)).is_ok());
        // What the worker logs after its refusal is still read.
        assert_eq!(logged, ["refused x"]);
    }

    #[test]
    fn the_watch_follows_the_channel_and_enforces_the_hello_deadline() {
        // Admitted after a hello and a log line.
        let (r, mut w) = pipe();
        w.write_all(b"log refused x\nhel").unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            w.write_all(b"lo\nvm vm1\nadmitted\n").unwrap();
            w
        });
        let mut logged = Vec::new();
        let vm = OnceLock::new();
        let outcome = watch(r, Duration::from_secs(5), &vm, &mut None, |l| {
            logged.push(l.to_string())
        });
        assert_eq!(outcome, Outcome::Admitted);
        assert_eq!(vm.get().map(String::as_str), Some("vm1"));
        assert_eq!(logged, ["refused x"]);
        drop(t.join());
        // Nothing said: timed out, promptly.
        let (r, w) = pipe();
        let started = Instant::now();
        assert_eq!(
            watch(
                r,
                Duration::from_millis(200),
                &OnceLock::new(),
                &mut None,
                |_| {}
            ),
            Outcome::TimedOut
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        drop(w);
        // A hello stops the deadline; the worker's end is an end.
        let (r, mut w) = pipe();
        w.write_all(b"hello\n").unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            drop(w);
        });
        assert_eq!(
            watch(
                r,
                Duration::from_millis(100),
                &OnceLock::new(),
                &mut None,
                |_| {}
            ),
            Outcome::Ended
        );
        t.join().unwrap();
    }
}
