//! Log lines about connections that anyone who can reach a port can cause, under a
//! rate limit for each source ([`Source`]: a vsock CID, an IPv4 address, an IPv6 /64,
//! a Unix peer's uid) and one more for all sources together: one source that floods a
//! port cannot fill the disk, nor crowd the lines about other sources out of the log,
//! and many sources together get no more than the whole limit. The peer port's lines
//! (refused, timed-out handshakes, bad headers) are under [`PEER_PORT`]; the daemon's
//! lines about guest connections not admitted yet, and what their workers log before
//! naming their VM, under [`PRE_ADMISSION`] (`admission.rs`, `spawn.rs`).
//!
//! Each source may write `per_source_burst` lines at once, then
//! `per_source_per_second`; all sources together `all_burst`, then `all_per_second`
//! ([`Limits`]); a line needs a place in both. What is dropped is counted per source
//! and said in one line, "suppressed N lines about ... from SOURCE in the last S s":
//! before that source's next line let through, or by [`SourceLog::summarize`] (called
//! every [`SUMMARY_EVERY`] by the listener), where a summary takes a place in both
//! limits like any line. [`MAX_SOURCES`] sources are followed at once; when that many
//! have written lately, the others share one more limit.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where a connection comes from, as its transport tells it (never as the guest says):
/// what a listener's pending places are shared by, so one caller cannot take them all.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// A vsock context id: one VM.
    Cid(u32),
    /// A TCP peer's IPv4 address, or the /64 network of an IPv6 one (a host is
    /// commonly given a whole /64, so one address each would be no limit).
    Ip(std::net::IpAddr),
    /// A Unix socket peer's user id (`SO_PEERCRED`).
    Uid(u32),
    /// The transport could not tell: all such connections share one source.
    Unknown,
}

impl Source {
    pub fn of_ip(ip: std::net::IpAddr) -> Source {
        use std::net::IpAddr;
        match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source::Ip(IpAddr::V4(v4)),
                None => Source::Ip(IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into())),
            },
            v4 => Source::Ip(v4),
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Cid(cid) => write!(f, "vsock cid {cid}"),
            Source::Ip(std::net::IpAddr::V6(net)) => write!(f, "{net}/64"),
            Source::Ip(ip) => write!(f, "{ip}"),
            Source::Uid(uid) => write!(f, "uid {uid}"),
            Source::Unknown => f.write_str("an unknown source"),
        }
    }
}

/// A token bucket for log lines: `burst` at once, then `per_second`. Lines over it are
/// counted, and the count is logged with the next line let through.
pub struct RateLimit {
    state: Mutex<Bucket>,
    burst: u32,
    per_second: u32,
}

/// A token bucket's state: the lines it has left, when it last looked, and the lines
/// dropped since the last one let through.
pub(crate) struct Bucket {
    pub(crate) tokens: f64,
    at: Option<Instant>,
    pub(crate) suppressed: u64,
}

impl Bucket {
    pub(crate) const fn full(burst: u32) -> Bucket {
        Bucket {
            tokens: burst as f64,
            at: None,
            suppressed: 0,
        }
    }

    /// Add what `per_second` gave back since the last look, up to `burst`.
    pub(crate) fn refill(&mut self, burst: u32, per_second: u32, now: Instant) {
        if let Some(at) = self.at {
            let refill = now.saturating_duration_since(at).as_secs_f64() * f64::from(per_second);
            self.tokens = (self.tokens + refill).min(f64::from(burst));
        }
        self.at = Some(now);
    }
}

impl RateLimit {
    pub const fn new(burst: u32, per_second: u32) -> RateLimit {
        RateLimit {
            state: Mutex::new(Bucket::full(burst)),
            burst,
            per_second,
        }
    }

    /// Whether a line may be logged now: `Some(lines suppressed since the last one)`.
    pub fn allow(&self) -> Option<u64> {
        let mut b = self.state.lock().unwrap_or_else(|p| p.into_inner());
        b.refill(self.burst, self.per_second, Instant::now());
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Some(std::mem::take(&mut b.suppressed))
        } else {
            b.suppressed += 1;
            None
        }
    }
}

impl RateLimit {
    /// The count of lines dropped since the last one let through, now zero.
    pub fn take_suppressed(&self) -> u64 {
        let mut b = self.state.lock().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut b.suppressed)
    }
}

/// Lines one source may cause at once, and a second after.
pub const PER_SOURCE_BURST: u32 = 10;
pub const PER_SOURCE_PER_SECOND: u32 = 1;
/// Lines all sources together may cause at once, and a second after.
pub const ALL_BURST: u32 = 50;
pub const ALL_PER_SECOND: u32 = 5;

/// The limits of one [`SourceLog`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Lines one source may cause at once, and a second after.
    pub per_source_burst: u32,
    pub per_source_per_second: u32,
    /// Lines all sources together may cause at once, and a second after.
    pub all_burst: u32,
    pub all_per_second: u32,
}

/// The peer port's: [`PER_SOURCE_BURST`], [`PER_SOURCE_PER_SECOND`], [`ALL_BURST`],
/// [`ALL_PER_SECOND`].
pub const PEER_PORT: Limits = Limits {
    per_source_burst: PER_SOURCE_BURST,
    per_source_per_second: PER_SOURCE_PER_SECOND,
    all_burst: ALL_BURST,
    all_per_second: ALL_PER_SECOND,
};

/// Lines about guest connections not admitted yet: each source 25 at once, then 5 a
/// second, half the whole (one host's programs starting together are one source, and
/// no flood); all together 50 at once, then 10 a second (the single limit they all
/// shared before). A flooding source so leaves the other half to the others.
pub const PRE_ADMISSION: Limits = Limits {
    per_source_burst: 25,
    per_source_per_second: 5,
    all_burst: 50,
    all_per_second: 10,
};
/// Sources followed each with a limit of its own.
pub const MAX_SOURCES: usize = 256;
/// How often what was dropped is said, where the sources say nothing more.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(2);

/// The limits of one kind of lines (`what`, as the summaries name them).
pub struct SourceLog {
    what: &'static str,
    state: Mutex<State>,
    /// Where summaries are written: None, the host log (a `tracing` warning).
    say_to: Option<Say>,
}

/// Where a [`SourceLog`]'s summaries are written, when not to `tracing`.
type Say = Box<dyn Fn(&str) + Send + Sync>;

struct State {
    limits: Limits,
    all: Bucket,
    /// `None`: the sources past the [`MAX_SOURCES`] followed.
    sources: HashMap<Option<Source>, Followed>,
}

struct Followed {
    bucket: Bucket,
    /// When the first of the lines dropped since the last one let through was.
    dropping_since: Option<Instant>,
}

/// What was dropped of one source's lines, to be said.
struct Summary {
    source: Option<Source>,
    suppressed: u64,
    since: Option<Instant>,
}

impl State {
    /// The limit `source` counts under: its own, a new one while fewer than
    /// [`MAX_SOURCES`] are followed (after forgetting those with nothing to say and
    /// their bucket full again), else the shared one.
    fn key_for(&mut self, source: &Source, now: Instant) -> Option<Source> {
        let key = Some(source.clone());
        if self.sources.contains_key(&key) {
            return key;
        }
        if self.followed() >= MAX_SOURCES {
            let Limits {
                per_source_burst: burst,
                per_source_per_second: rate,
                ..
            } = self.limits;
            self.sources.retain(|k, f| {
                f.bucket.refill(burst, rate, now);
                k.is_none() || f.bucket.suppressed > 0 || f.bucket.tokens < f64::from(burst)
            });
        }
        let key = if self.followed() < MAX_SOURCES {
            key
        } else {
            None
        };
        self.sources.entry(key.clone()).or_insert(Followed {
            bucket: Bucket::full(self.limits.per_source_burst),
            dropping_since: None,
        });
        key
    }

    fn followed(&self) -> usize {
        self.sources.keys().filter(|k| k.is_some()).count()
    }

    /// Take a place in `key`'s limit and in the whole one, if both have one.
    fn take(&mut self, key: &Option<Source>, now: Instant) -> bool {
        let l = self.limits;
        self.all.refill(l.all_burst, l.all_per_second, now);
        let Some(f) = self.sources.get_mut(key) else {
            return false;
        };
        f.bucket
            .refill(l.per_source_burst, l.per_source_per_second, now);
        if f.bucket.tokens >= 1.0 && self.all.tokens >= 1.0 {
            f.bucket.tokens -= 1.0;
            self.all.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// What `key` dropped since its last line, now said.
    fn summary(&mut self, key: &Option<Source>) -> Option<Summary> {
        let f = self.sources.get_mut(key)?;
        let suppressed = std::mem::take(&mut f.bucket.suppressed);
        let since = f.dropping_since.take();
        (suppressed > 0).then(|| Summary {
            source: key.clone(),
            suppressed,
            since,
        })
    }
}

impl SourceLog {
    /// Lines of `what` under the peer port's limits ([`PEER_PORT`]).
    pub fn new(what: &'static str) -> SourceLog {
        SourceLog::with_limits(what, PEER_PORT)
    }

    /// Lines of `what` under `limits`, summaries written to the host log.
    pub fn with_limits(what: &'static str, limits: Limits) -> SourceLog {
        SourceLog {
            what,
            state: Mutex::new(State {
                limits,
                all: Bucket::full(limits.all_burst),
                sources: HashMap::new(),
            }),
            say_to: None,
        }
    }

    /// Summaries written by `say` (a line, without its newline), not to the host log
    /// through `tracing`: where the lines limited are not `tracing`'s either.
    pub fn saying_to(mut self, say: impl Fn(&str) + Send + Sync + 'static) -> SourceLog {
        self.say_to = Some(Box::new(say));
        self
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a line about a connection from `source` may be written now; if so, the
    /// summary of what was dropped of that source's lines is written first.
    pub fn allow(&self, source: &Source) -> bool {
        self.allow_at(source, Instant::now())
    }

    fn allow_at(&self, source: &Source, now: Instant) -> bool {
        let mut state = self.state();
        let key = state.key_for(source, now);
        if state.take(&key, now) {
            let summary = state.summary(&key);
            drop(state);
            if let Some(s) = summary {
                self.say(&s);
            }
            return true;
        }
        if let Some(f) = state.sources.get_mut(&key) {
            f.bucket.suppressed += 1;
            f.dropping_since.get_or_insert(now);
        }
        false
    }

    /// Say what every source's limit dropped since its last line, where both limits
    /// have a line for it.
    pub fn summarize(&self) {
        let now = Instant::now();
        let mut state = self.state();
        let waiting: Vec<Option<Source>> = state
            .sources
            .iter()
            .filter(|(_, f)| f.bucket.suppressed > 0)
            .map(|(k, _)| k.clone())
            .collect();
        let mut said = Vec::new();
        for key in waiting {
            if state.take(&key, now) {
                said.extend(state.summary(&key));
            }
        }
        drop(state);
        for s in &said {
            self.say(s);
        }
    }

    fn say(&self, s: &Summary) {
        let secs = s.since.map_or(0, |t| t.elapsed().as_secs().max(1));
        let from = match &s.source {
            Some(source) => source.to_string(),
            None => format!("sources past the first {MAX_SOURCES}"),
        };
        let l = self.state().limits;
        let text = format!(
            "suppressed {} lines about {} from {from} in the last {secs} s (rate limit: \
             {} at once, then {} a second, each source; {} at once, then {} a second, all \
             together)",
            s.suppressed,
            self.what,
            l.per_source_burst,
            l.per_source_per_second,
            l.all_burst,
            l.all_per_second,
        );
        match &self.say_to {
            Some(say) => say(&text),
            None => tracing::warn!(suppressed = s.suppressed, "{text}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    use std::net::{IpAddr, Ipv4Addr};

    fn ip(last: u8) -> Source {
        Source::Ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, last)))
    }

    /// One source's flood takes its own share only: another source still gets its
    /// lines, and many sources together no more than the whole limit.
    #[test]
    fn each_source_has_its_share_and_all_together_the_whole() {
        let log = SourceLog::new("test lines");
        // One instant: no place comes back meanwhile.
        let now = Instant::now();
        let flooder = (0..1000).filter(|_| log.allow_at(&ip(1), now)).count();
        assert_eq!(flooder, PER_SOURCE_BURST as usize);
        assert!(
            log.allow_at(&ip(2), now),
            "another source is not crowded out"
        );
        let many: usize = (3..=200)
            .map(|n| (0..20).filter(|_| log.allow_at(&ip(n), now)).count())
            .sum();
        assert_eq!(flooder + 1 + many, ALL_BURST as usize);
        // A second later, the flooder has one more, and its summary goes with it.
        let later = now + Duration::from_secs(1);
        assert!(log.allow_at(&ip(1), later));
        assert!(!log.allow_at(&ip(1), later));
    }

    /// Past [`MAX_SOURCES`] busy sources, the rest share one limit; sources with
    /// nothing left to say are forgotten to make room.
    #[test]
    fn the_sources_followed_are_bounded() {
        let log = SourceLog::new("test lines");
        let now = Instant::now();
        for n in 0..MAX_SOURCES as u32 + 10 {
            let source = Source::Uid(n);
            // Dropped lines keep a source followed.
            while log.allow_at(&source, now) {}
        }
        let state = log.state();
        assert_eq!(state.followed(), MAX_SOURCES);
        assert!(state.sources[&None].bucket.suppressed > 0);
    }
}
