//! The results folders (`tests/gpu/results`, `bench/results`, `tests/frameworks/results`)
//! against their indexes (each folder's README.md): every file has a row and every row
//! a file, each row's date and commit are those of its file's header lines, each run's
//! file has its date, commit and command lines, and a row's status is `current`,
//! `superseded by` or `companion of` files the index lists. So the index can say which
//! run is current without going stale as runs are added.

use std::collections::BTreeSet;
use std::path::Path;

use vmcuda_tests::root;

const FOLDERS: [&str; 3] = [
    "tests/gpu/results",
    "bench/results",
    "tests/frameworks/results",
];

/// One row of an index's table.
#[derive(Debug)]
struct Row {
    file: String,
    date: String,
    commit: String,
    status: String,
}

/// The date, commit and command a run's file states in its header lines (`- date ...`,
/// `- commit: ...`; a run comparing two builds names them `- base: ...; new: ...`).
#[derive(Debug, Default, PartialEq)]
struct Header {
    date: Option<String>,
    commit: Option<String>,
    command: bool,
}

/// The link target of a cell written `[NAME](NAME)`, each link of `text` in turn.
fn link_targets(text: &str) -> Vec<&str> {
    let mut targets = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let Some(end) = after.find(')') else { break };
        targets.push(&after[..end]);
        rest = &after[end..];
    }
    targets
}

/// The index's rows: the table lines whose first cell is a link.
fn rows(index: &str) -> Result<Vec<Row>, String> {
    let mut rows = Vec::new();
    for line in index.lines().filter(|l| l.starts_with("| [")) {
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        let [file, _topic, _what, date, commit, status] = cells[..] else {
            return Err(format!("a row without its six cells: {line}"));
        };
        let Some(target) = link_targets(file).first().map(|t| t.to_string()) else {
            return Err(format!("a row whose file is not a link: {line}"));
        };
        rows.push(Row {
            file: target,
            date: date.to_string(),
            commit: commit.to_string(),
            status: status.to_string(),
        });
    }
    Ok(rows)
}

/// The first `YYYY-MM-DD` in `text`.
fn first_date(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    (0..bytes.len().saturating_sub(9)).find_map(|i| {
        let w = &bytes[i..i + 10];
        let digits = |r: std::ops::Range<usize>| w[r].iter().all(u8::is_ascii_digit);
        (digits(0..4) && w[4] == b'-' && digits(5..7) && w[7] == b'-' && digits(8..10))
            .then(|| text[i..i + 10].to_string())
    })
}

/// The abbreviated hash a commit is named by (7 hex digits), if `word` starts with one.
fn short_hash(word: &str) -> Option<&str> {
    let hex = word.len()
        - word
            .trim_start_matches(|c: char| c.is_ascii_hexdigit())
            .len();
    (hex >= 7).then(|| &word[..7])
}

fn header(text: &str) -> Header {
    let mut h = Header::default();
    for line in text.lines() {
        if h.date.is_none() && line.starts_with("- date") {
            h.date = first_date(line);
        }
        if h.commit.is_none() {
            // `- commit: X`, `- commits: X ...`, `- date: D commit: X ...`, `- base: X; new: Y`.
            let value = if line.starts_with("- commit") || line.starts_with("- date") {
                line.split_once("commit")
                    .and_then(|(_, v)| v.split_once(':'))
                    .map(|(_, v)| v)
            } else {
                line.strip_prefix("- base:")
            };
            h.commit = value.map(|v| {
                v.split_whitespace()
                    .next()
                    .unwrap_or("")
                    .trim_end_matches([';', ','])
                    .to_string()
            });
        }
        h.command |= line.starts_with("- command");
    }
    h
}

/// What is wrong in one folder: its file names (README.md left out) and the
/// text of each run's file, by name.
fn problems(index: &str, files: &[(String, Option<String>)]) -> Vec<String> {
    let rows = match rows(index) {
        Ok(rows) => rows,
        Err(e) => return vec![e],
    };
    let mut wrong = Vec::new();
    let listed: BTreeSet<&str> = rows.iter().map(|r| r.file.as_str()).collect();
    if listed.len() != rows.len() {
        wrong.push("a file has more than one row".to_string());
    }
    let present: BTreeSet<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
    for name in present.difference(&listed) {
        wrong.push(format!("{name}: no row in the index"));
    }
    for name in listed.difference(&present) {
        wrong.push(format!("{name}: a row for a file that is not there"));
    }
    for row in &rows {
        let name = &row.file;
        let status_ok = row.status.starts_with("current")
            || row.status.starts_with("superseded by [")
            || row.status.starts_with("companion of [");
        if !status_ok {
            wrong.push(format!(
                "{name}: status \"{}\" is not current, superseded by [FILE](FILE) or companion of [FILE](FILE)",
                row.status
            ));
        }
        for target in link_targets(&row.status) {
            if !listed.contains(target) {
                wrong.push(format!(
                    "{name}: its status names {target}, not in the index"
                ));
            }
        }
        let Some((_, text)) = files.iter().find(|(n, _)| n == name) else {
            continue;
        };
        let Some(text) = text else {
            // Not a run's Markdown (a plot, a diff): written by the run of another file.
            if !row.status.starts_with("companion of [") {
                wrong.push(format!(
                    "{name}: not a run's Markdown, so a companion of one"
                ));
            }
            continue;
        };
        let h = header(text);
        match &h.date {
            None => wrong.push(format!("{name}: no `- date` line with a YYYY-MM-DD")),
            Some(date) if *date != row.date => wrong.push(format!(
                "{name}: the index says {}, its header {date}",
                row.date
            )),
            Some(_) => {}
        }
        match h.commit.as_deref() {
            None => wrong.push(format!("{name}: no `- commit` line")),
            Some(commit) => match short_hash(commit) {
                Some(hash) if !row.commit.starts_with(hash) => wrong.push(format!(
                    "{name}: the index says commit {}, its header {hash}",
                    row.commit
                )),
                Some(_) => {}
                // "the one adding this file": the index names it.
                None if short_hash(&row.commit).is_none() => wrong.push(format!(
                    "{name}: its header names no hash, so the index must ({})",
                    row.commit
                )),
                None => {}
            },
        }
        if !h.command {
            wrong.push(format!("{name}: no `- command` line"));
        }
    }
    wrong
}

fn folder_files(dir: &Path) -> Vec<(String, Option<String>)> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("an entry").path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if name == "README.md" {
            continue;
        }
        let text = (path.extension().is_some_and(|x| x == "md"))
            .then(|| std::fs::read_to_string(&path).expect("read a results file"));
        files.push((name, text));
    }
    files
}

#[test]
fn every_results_file_is_in_its_index_with_its_date_and_commit() {
    let mut wrong = Vec::new();
    for folder in FOLDERS {
        let dir = root().join(folder);
        let index = std::fs::read_to_string(dir.join("README.md"))
            .unwrap_or_else(|e| panic!("{folder}/README.md, the index: {e}"));
        let files = folder_files(&dir);
        assert!(!files.is_empty(), "{folder} holds no results");
        wrong.extend(
            problems(&index, &files)
                .into_iter()
                .map(|w| format!("{folder}/{w}")),
        );
    }
    assert!(
        wrong.is_empty(),
        "results and their indexes disagree:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_results_file_sits_outside_a_results_folder() {
    // Results went to their own folders (issue 41): a run copied in beside the scripts
    // is a file the index cannot list.
    let mut stray = Vec::new();
    for dir in ["tests/gpu", "bench", "tests/frameworks"] {
        for entry in std::fs::read_dir(root().join(dir)).expect("a folder") {
            let name = entry.expect("an entry").file_name();
            let name = name.to_string_lossy();
            if name.starts_with("RESULTS") || name == "COMPARE.md" {
                stray.push(format!("{dir}/{name}"));
            }
        }
    }
    assert!(stray.is_empty(), "move these into DIR/results/: {stray:?}");
}

#[test]
fn the_check_finds_each_kind_of_mismatch() {
    let index = "\
| file | topic | what | date | commit | status |
| --- | --- | --- | --- | --- | --- |
| [A.md](A.md) | t | w | 2026-12-02 | ce1cbb7 | current |
| [B.md](B.md) | t | w | 2026-12-01 | 1234567 | superseded by [A.md](A.md) |
| [C.md](C.md) | t | w | 2026-12-02 | abcdef0 | superseded by [Z.md](Z.md) |
| [D.md](D.md) | t | w | 2026-12-02 | 45e7fb6 (the commit adding it) | current |
| [plot.png](plot.png) | t | w | - | - | companion of [A.md](A.md) |
| [gone.md](gone.md) | t | w | 2026-12-02 | abcdef0 | old |
";
    let md = |s: &str| Some(s.to_string());
    let files = vec![
        (
            "A.md".to_string(),
            md("# A\n\n- date: 2026-12-02 commit: ce1cbb7 a subject\n- command: x\n"),
        ),
        (
            "B.md".to_string(),
            md("- date (UTC): 2026-11-30 01:00\n- commit: 1234567abc\n- command: y\n"),
        ),
        (
            "C.md".to_string(),
            md("- date (UTC): 2026-12-02\n- base: 9999999; new: abcdef0\n"),
        ),
        (
            "D.md".to_string(),
            md("- date (UTC): 2026-12-02\n- commit: the one adding this file\n- command: z\n"),
        ),
        ("plot.png".to_string(), None),
        ("new.md".to_string(), md("")),
    ];
    let wrong = problems(index, &files);
    let expect = [
        "new.md: no row",
        "gone.md: a row for a file that is not there",
        "B.md: the index says 2026-12-01, its header 2026-11-30",
        "C.md: its status names Z.md",
        "C.md: the index says commit abcdef0, its header 9999999",
        "C.md: no `- command` line",
        "gone.md: status \"old\"",
    ];
    for e in expect {
        assert!(
            wrong.iter().any(|w| w.starts_with(e)),
            "missed {e:?} in {wrong:#?}"
        );
    }
    assert_eq!(wrong.len(), expect.len(), "{wrong:#?}");
    assert_eq!(
        header("- date: 2026-12-02 commit: d88900b subject\n- command: bash x\n"),
        Header {
            date: Some("2026-12-02".into()),
            commit: Some("d88900b".into()),
            command: true
        }
    );
}
