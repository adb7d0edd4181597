//! Lines for the program's stderr that say once what vmcuda does not do, however
//! often the program asks (each also an entry of the call log), and the refusals
//! that say so.

use std::collections::HashSet;
use std::io::Write;
use std::sync::Mutex;

static SAID: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// The function names of an export list (guest-lib/exports/*.txt: a name, or
/// `name@@version-node`, a line; `#` lines are comments), in the order build-libs.sh
/// numbers the stubs of the functions vmcuda does not implement.
pub fn listed_names(list: &'static str) -> impl Iterator<Item = &'static str> {
    list.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_once("@@").map_or(l, |(name, _)| name))
}

/// Print `line` to stderr unless it was printed before.
pub fn say_once(line: &str) {
    let first = SAID
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(HashSet::new)
        .insert(line.to_owned());
    if first {
        // A closed stderr is no reason to fail differently.
        let _ = writeln!(std::io::stderr(), "{line}");
        crate::call_log::record(line.to_owned(), true);
    }
}

/// Refuse what vmcuda does not do, saying once on stderr what and why: `what` names
/// the call (and the case), `why` completes the sentence.
pub fn refuse(what: &str, why: &str) -> vmcuda_wire::CudaStatus {
    say_once(&format!(
        "vmcuda: {what} {why}; it returns cudaErrorNotSupported"
    ));
    vmcuda_wire::CudaStatus::ErrorNotSupported
}

/// Whether `line` was said.
#[cfg(test)]
pub fn said(line: &str) -> bool {
    SAID.lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .is_some_and(|s| s.contains(line))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_line_is_said_once() {
        assert!(!super::said("vmcuda: test line"));
        super::say_once("vmcuda: test line");
        assert!(super::said("vmcuda: test line"));
    }
}
