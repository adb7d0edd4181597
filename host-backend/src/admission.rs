//! Before admission: what a connection may cost the host until its guest is admitted.
//!
//! A connection the daemon accepts gets a worker at once, but until the guest's hello
//! is read and admitted, that worker is the daemon's problem: each listener lets at
//! most `[admission] max_pending` of them wait at once (more are closed as they come),
//! and one that has sent no hello after `hello_timeout_ms` is killed. The worker tells
//! the daemon how it is doing over a pipe it inherits as [`CHANNEL_FD`], one line per
//! event ([`Event`]): the hello is in, the guest is admitted, or a log line. Log
//! lines from before admission reach the host log only through the daemon, at a
//! bounded rate ([`RateLimit`]): a flood of bad connections cannot fill the disk.
//!
//! Everything a guest says about itself (its program name, above all) goes through
//! [`guest_text`] before it reaches a log line or the figures.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tracing::warn;

/// The descriptor a daemon-started worker finds its admission channel on.
pub const CHANNEL_FD: i32 = 3;

/// Default `[admission] max_pending`: connections per listener not admitted yet.
pub const DEFAULT_MAX_PENDING: u32 = 64;
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
    /// A line for the host log, from before admission.
    Log(String),
}

impl Event {
    fn encode(&self) -> String {
        match self {
            Event::Hello => "hello\n".into(),
            Event::Admitted => "admitted\n".into(),
            // One line, whatever the text held.
            Event::Log(text) => format!("log {}\n", text.replace(['\n', '\r'], " ")),
        }
    }

    fn decode(line: &str) -> Option<Event> {
        match line.trim_end_matches('\n') {
            "hello" => Some(Event::Hello),
            "admitted" => Some(Event::Admitted),
            other => other
                .strip_prefix("log ")
                .map(|t| Event::Log(guest_text(t, 512))),
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
        Event::Log(_) => {}
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

/// A token bucket for log lines: `burst` at once, then `per_second`. Lines over it are
/// counted, and the count is logged with the next line let through.
pub struct RateLimit {
    state: Mutex<Bucket>,
    burst: f64,
    per_second: f64,
}

struct Bucket {
    tokens: f64,
    at: Option<Instant>,
    suppressed: u64,
}

impl RateLimit {
    pub const fn new(burst: u32, per_second: u32) -> RateLimit {
        RateLimit {
            state: Mutex::new(Bucket {
                tokens: burst as f64,
                at: None,
                suppressed: 0,
            }),
            burst: burst as f64,
            per_second: per_second as f64,
        }
    }

    /// Whether a line may be logged now: `Some(lines suppressed since the last one)`.
    pub fn allow(&self) -> Option<u64> {
        let mut b = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if let Some(at) = b.at {
            let refill = now.duration_since(at).as_secs_f64() * self.per_second;
            b.tokens = (b.tokens + refill).min(self.burst);
        }
        b.at = Some(now);
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Some(std::mem::take(&mut b.suppressed))
        } else {
            b.suppressed += 1;
            None
        }
    }
}

/// The daemon's limit on log lines about connections not admitted yet, all listeners
/// together.
pub static PRE_ADMISSION_LOG: RateLimit = RateLimit::new(50, 10);

/// A `tracing` event about a connection not admitted yet, under [`PRE_ADMISSION_LOG`].
#[macro_export]
macro_rules! pre_admission {
    ($level:ident, $($arg:tt)+) => {
        if let Some(suppressed) = $crate::admission::PRE_ADMISSION_LOG.allow() {
            if suppressed > 0 {
                tracing::warn!(suppressed, "log lines about connections not admitted yet were dropped (rate limit)");
            }
            tracing::$level!($($arg)+);
        }
    };
}

/// Connections of one listener not admitted yet.
#[derive(Clone, Debug)]
pub struct Pending {
    count: Arc<AtomicUsize>,
    max: usize,
}

impl Pending {
    pub fn new(max: u32) -> Pending {
        Pending {
            count: Arc::new(AtomicUsize::new(0)),
            max: max.max(1) as usize,
        }
    }

    /// A place for one more, unless the listener has `max` waiting already.
    pub fn enter(&self) -> Option<PendingSlot> {
        self.count
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()?;
        Some(PendingSlot {
            count: self.count.clone(),
        })
    }

    pub fn now(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }
}

/// One pending connection's place; dropping it frees the place.
pub struct PendingSlot {
    count: Arc<AtomicUsize>,
}

impl Drop for PendingSlot {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
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
/// end, or `hello_timeout` without a hello; log lines go to `log`.
pub fn watch(read: OwnedFd, hello_timeout: Duration, mut log: impl FnMut(&str)) -> Outcome {
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
    fn the_rate_limit_lets_a_burst_through_then_counts_what_it_drops() {
        let limit = RateLimit::new(3, 1);
        assert_eq!(limit.allow(), Some(0));
        assert_eq!(limit.allow(), Some(0));
        assert_eq!(limit.allow(), Some(0));
        for _ in 0..100 {
            assert_eq!(limit.allow(), None);
        }
        std::thread::sleep(Duration::from_millis(1100));
        assert_eq!(limit.allow(), Some(100));
    }

    #[test]
    fn pending_places_are_capped_and_given_back() {
        let p = Pending::new(2);
        let a = p.enter().unwrap();
        let _b = p.enter().unwrap();
        assert!(p.enter().is_none());
        drop(a);
        assert_eq!(p.now(), 1);
        assert!(p.enter().is_some());
    }

    fn pipe() -> (OwnedFd, File) {
        let (r, w) = nix::unistd::pipe().unwrap();
        (r, File::from(w))
    }

    #[test]
    fn the_watch_follows_the_channel_and_enforces_the_hello_deadline() {
        // Admitted after a hello and a log line.
        let (r, mut w) = pipe();
        w.write_all(b"log refused x\nhel").unwrap();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            w.write_all(b"lo\nadmitted\n").unwrap();
            w
        });
        let mut logged = Vec::new();
        let outcome = watch(r, Duration::from_secs(5), |l| logged.push(l.to_string()));
        assert_eq!(outcome, Outcome::Admitted);
        assert_eq!(logged, ["refused x"]);
        drop(t.join());
        // Nothing said: timed out, promptly.
        let (r, w) = pipe();
        let started = Instant::now();
        assert_eq!(
            watch(r, Duration::from_millis(200), |_| {}),
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
        assert_eq!(watch(r, Duration::from_millis(100), |_| {}), Outcome::Ended);
        t.join().unwrap();
    }
}
