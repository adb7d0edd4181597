//! The worker's host log, under a rate limit: everything a worker writes there is
//! caused by its guest (an unknown op, a refused copy, a repeated hello), so a guest
//! that repeats a bad request in a loop must not be able to fill the disk or crowd
//! other guests' lines out of the journal.
//!
//! Every line the worker's `tracing` subscriber writes goes through [`Limited`], one
//! token bucket per worker process (one process per connection): [`BURST`] lines at
//! once, then [`PER_SECOND`]. Lines over it are counted and dropped; the next line let
//! through is preceded by one summary line, "suppressed N lines from vm X (connection
//! C) in the last S s", and a worker that ends with lines dropped writes that summary
//! as it ends ([`flush`]). Lines are cut at [`MAX_LINE`] bytes. So one connection
//! writes at most `BURST + 60 * PER_SECOND` lines a minute, plus as many summaries at
//! most, each at most [`MAX_LINE`] bytes. A worker's log reaches the host log through
//! whoever started it, the daemon or the vhost-user device, which holds each VM, all
//! its connections together, to a limit of its own ([`crate::spawn::WorkerLogs`]); a
//! daemon's worker names its VM to it in the stream ([`VM_MARK`]). The daemon's own
//! lines about connections not admitted yet are under
//! [`crate::admission::PRE_ADMISSION_LOG`].

use std::io::{self, Write};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use crate::source_log::RateLimit;

/// Lines a worker may write at once.
pub const BURST: u32 = 50;
/// Lines a second a worker may write after its burst.
pub const PER_SECOND: u32 = 1;
/// The longest line written, in bytes; a longer one is cut (and says so).
pub const MAX_LINE: usize = 2048;

/// Who the summary lines name: the VM once admitted, and the connection.
static GUEST: OnceLock<String> = OnceLock::new();
static CONNECTION: OnceLock<u64> = OnceLock::new();

/// Name this worker's connection in its summary lines (when the worker starts).
pub fn set_connection(id: u64) {
    let _ = CONNECTION.set(id);
}

/// Name this worker's VM in its summary lines (at admission). A daemon's worker also
/// tells the daemon, in its log stream itself ([`VM_MARK`]), so that the daemon counts
/// every line after it under that VM's limit.
pub fn set_vm(name: &str) {
    let _ = GUEST.set(name.to_string());
    if crate::admission::has_channel() {
        if let Some(log) = WORKER_LOG.get() {
            let mut state = log.state.lock().unwrap_or_else(|p| p.into_inner());
            let mark = format!("{VM_MARK}{}\n", name.replace(['\n', '\r'], " "));
            let _ = state.out.write_all(mark.as_bytes());
            let _ = state.out.flush();
        }
    }
}

/// How a daemon's worker's log names its VM to the daemon (a line the daemon takes and
/// does not pass on; only the first counts).
pub const VM_MARK: &str = "\u{0}vm ";

/// A writer of whole log lines (one `write` call each, as `tracing`'s formatter makes
/// them) under a token bucket.
pub struct Limited<W> {
    state: Mutex<State<W>>,
    limit: RateLimit,
    /// Whose lines, for the summary: `None` this worker's (its VM and connection).
    whose: Option<String>,
    rate: (u32, u32),
}

struct State<W> {
    out: W,
    /// When the first line of the current run of dropped ones was dropped.
    dropping_since: Option<Instant>,
}

impl<W: Write> Limited<W> {
    pub fn new(out: W, burst: u32, per_second: u32) -> Limited<W> {
        Limited {
            state: Mutex::new(State {
                out,
                dropping_since: None,
            }),
            limit: RateLimit::new(burst, per_second),
            whose: None,
            rate: (burst, per_second),
        }
    }

    /// [`Limited::new`] for the lines of `whose` (named so in the summary), not this
    /// worker's.
    pub fn named(out: W, burst: u32, per_second: u32, whose: String) -> Limited<W> {
        Limited {
            whose: Some(whose),
            ..Limited::new(out, burst, per_second)
        }
    }

    /// Write `line` if the bucket allows, after the summary of what it dropped since
    /// the last one; otherwise count it.
    pub fn line(&self, line: &[u8]) -> io::Result<()> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match self.limit.allow() {
            Some(suppressed) => {
                if suppressed > 0 {
                    let since = state.dropping_since.take();
                    let summary = self.summary(suppressed, since);
                    state.out.write_all(summary.as_bytes())?;
                }
                if line.len() > MAX_LINE {
                    state.out.write_all(&line[..MAX_LINE])?;
                    state.out.write_all(b"... (line cut)\n")?;
                } else {
                    state.out.write_all(line)?;
                }
                state.out.flush()
            }
            None => {
                state.dropping_since.get_or_insert_with(Instant::now);
                Ok(())
            }
        }
    }

    /// Write the summary of lines dropped since the last one let through, if any (a
    /// worker's last words), whatever the bucket says.
    pub fn flush_summary(&self) -> io::Result<()> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let suppressed = self.limit.take_suppressed();
        if suppressed == 0 {
            return Ok(());
        }
        let since = state.dropping_since.take();
        let summary = self.summary(suppressed, since);
        state.out.write_all(summary.as_bytes())?;
        state.out.flush()
    }

    /// Write the summary of lines dropped since the last one let through, if any and
    /// if the bucket has a line for it (so that summaries too stay within the limit).
    pub fn summary_within_limit(&self) -> io::Result<()> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.dropping_since.is_none() {
            return Ok(());
        }
        let Some(suppressed) = self.limit.allow() else {
            return Ok(());
        };
        let since = state.dropping_since.take();
        if suppressed > 0 {
            let summary = self.summary(suppressed, since);
            state.out.write_all(summary.as_bytes())?;
        }
        state.out.flush()
    }

    fn summary(&self, suppressed: u64, since: Option<Instant>) -> String {
        let secs = since.map_or(0, |t| t.elapsed().as_secs().max(1));
        let whose = self.whose.clone().unwrap_or_else(|| {
            let vm = GUEST.get().map_or("not admitted yet", String::as_str);
            let connection = CONNECTION.get().copied().unwrap_or(0);
            format!("vm {vm} (connection {connection})")
        });
        let (burst, per_second) = self.rate;
        format!(
            "{} WARN suppressed {suppressed} lines from {whose} in the last {secs} s \
             (rate limit: {burst} at once, then {per_second} a second)\n",
            timestamp()
        )
    }
}

/// Now, as the log's formatter writes it.
fn timestamp() -> String {
    use tracing_subscriber::fmt::time::FormatTime;
    let mut now = String::new();
    let _ = tracing_subscriber::fmt::time::SystemTime
        .format_time(&mut tracing_subscriber::fmt::format::Writer::new(&mut now));
    now
}

/// The worker's log, once [`install`]ed.
static WORKER_LOG: OnceLock<Limited<Box<dyn Write + Send>>> = OnceLock::new();

/// Make `out` this process's rate-limited log; the writer for `tracing` is
/// [`WorkerLog`].
pub fn install(out: Box<dyn Write + Send>) -> WorkerLog {
    let _ = WORKER_LOG.set(Limited::new(out, BURST, PER_SECOND));
    WorkerLog
}

/// Write the summary of what this worker dropped, if anything (as it ends).
pub fn flush() {
    if let Some(log) = WORKER_LOG.get() {
        let _ = log.flush_summary();
    }
}

/// `tracing`'s writer for a worker: each event's line through the worker's limit.
#[derive(Clone, Copy)]
pub struct WorkerLog;

/// One event's line as `tracing` writes it, sent on when complete.
pub struct LineWriter(Vec<u8>);

impl Write for LineWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        if let Some(log) = WORKER_LOG.get() {
            let _ = log.line(&self.0);
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for WorkerLog {
    type Writer = LineWriter;

    fn make_writer(&'a self) -> LineWriter {
        LineWriter(Vec::with_capacity(256))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Sink = crate::spawn::LogCapture;

    #[test]
    fn a_flood_is_cut_to_the_burst_and_summed_up_in_one_line() {
        let sink = Sink::default();
        let log = Limited::new(sink.clone(), 5, 1);
        for n in 0..100_000 {
            log.line(format!("WARN unknown op {n}\n").as_bytes())
                .unwrap();
        }
        assert_eq!(sink.text().lines().count(), 5);
        log.flush_summary().unwrap();
        let text = sink.text();
        let last = text.lines().last().unwrap();
        assert!(last.contains("suppressed 99995 lines from vm"), "{last}");
        // Said once: nothing more to sum up.
        log.flush_summary().unwrap();
        assert_eq!(sink.text().lines().count(), 6);
    }

    #[test]
    fn the_next_line_let_through_is_preceded_by_the_summary() {
        let sink = Sink::default();
        let log = Limited::new(sink.clone(), 1, 20);
        log.line(b"first\n").unwrap();
        log.line(b"dropped\n").unwrap();
        log.line(b"dropped\n").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(120));
        log.line(b"second\n").unwrap();
        let text = sink.text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert_eq!(lines[0], "first");
        assert!(lines[1].contains("WARN suppressed 2 lines"), "{}", lines[1]);
        assert_eq!(lines[2], "second");
    }

    #[test]
    fn long_lines_are_cut() {
        let sink = Sink::default();
        let log = Limited::new(sink.clone(), 5, 1);
        log.line(&vec![b'x'; 1 << 20]).unwrap();
        assert!(sink.text().len() < MAX_LINE + 64);
        assert!(sink.text().ends_with("(line cut)\n"));
    }
}
