//! The call log (`cuLogs*`): an entry for every inner call that fails (its name and
//! error) and every notice vmcuda prints once (what it does not do), in at most 25600
//! bytes, the oldest dropped first, as NVIDIA's driver keeps its own. Callbacks get
//! each entry as it is made; the driver's `cuLogs*` functions register them and read
//! the entries (`driver::inner::logs`).

use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_void};
use std::sync::Mutex;

/// The most bytes of entries kept (NVIDIA's driver keeps as much).
const LOG_LIMIT: usize = 25_600;

pub type LogCallback = unsafe extern "C" fn(*mut c_void, u32, *mut c_char, usize);

#[derive(Default)]
pub(crate) struct Log {
    /// (sequence number, text) of the entries kept.
    entries: VecDeque<(u32, String)>,
    bytes: usize,
    pub(crate) next: u32,
    pub(crate) callbacks: HashMap<u64, (LogCallback, usize)>,
    pub(crate) next_callback: u64,
}

static LOG: Mutex<Option<Log>> = Mutex::new(None);

pub(crate) fn with_log<T>(f: impl FnOnce(&mut Log) -> T) -> T {
    f(LOG
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(Log::default))
}

/// `cudaLogLevelError`, `cudaLogLevelWarning`.
const LEVEL_ERROR: u32 = 0;
const LEVEL_WARNING: u32 = 1;

/// Add an entry (an error, or with `warning` a notice) and tell the callbacks.
pub fn record(text: String, warning: bool) {
    let callbacks: Vec<(LogCallback, usize)> = with_log(|l| {
        l.bytes += text.len() + 1;
        l.entries.push_back((l.next, text.clone()));
        l.next = l.next.wrapping_add(1);
        while l.bytes > LOG_LIMIT {
            match l.entries.pop_front() {
                Some((_, t)) => l.bytes -= t.len() + 1,
                None => break,
            }
        }
        l.callbacks.values().copied().collect()
    });
    let level = if warning { LEVEL_WARNING } else { LEVEL_ERROR };
    for (f, data) in callbacks {
        let mut message = text.clone().into_bytes();
        let length = message.len();
        message.push(0);
        // SAFETY: the program's callback and its data, called as cudaLogsCallback_t is;
        // the message is NUL-terminated and lives for the call.
        unsafe {
            f(
                data as *mut c_void,
                level,
                message.as_mut_ptr().cast(),
                length,
            )
        };
    }
}

/// Entries from sequence number `from` on (all kept, if older), one per line.
pub(crate) fn entries_from(from: Option<u32>) -> (Vec<String>, u32, bool) {
    with_log(|l| {
        let first = l.entries.front().map_or(l.next, |e| e.0);
        let truncated = from.is_some_and(|f| f < first);
        let texts = l
            .entries
            .iter()
            .filter(|(n, _)| from.is_none_or(|f| *n >= f))
            .map(|(_, t)| t.clone())
            .collect();
        (texts, l.next, truncated)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_keeps_its_newest_entries_within_its_limit() {
        let start = with_log(|l| l.next);
        for i in 0..2000 {
            record(format!("entry {i:04} failed: an error"), false);
        }
        let (texts, next, truncated) = entries_from(Some(start));
        assert!(truncated, "old entries dropped");
        assert_eq!(next, start + 2000);
        assert!(texts.last().unwrap().starts_with("entry 1999"));
        assert!(texts.iter().map(|t| t.len() + 1).sum::<usize>() <= LOG_LIMIT);
    }
}
