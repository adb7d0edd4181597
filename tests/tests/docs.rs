//! The counts and versions that README.md and the docs state, checked against the tree:
//! the number of CUDA test programs (`tests/apps/*.cu`), of fuzz targets
//! (`tests/fuzz/Cargo.toml`'s `[[bin]]`s) and the seconds `tests/run.sh` fuzzes each,
//! the driver functions the guest exports (`guest-lib/exports/libcuda.so.1.txt`), the
//! load test's guests (`tests/tests/load.rs`), the wire protocol's version
//! (`vmcuda_wire::handshake::PROTOCOL_VERSION`), the packages' version (the workspace's),
//! and commands and statements that were once written wrong. A doc that states another
//! number fails here, naming the file and the words.

use std::path::PathBuf;

use vmcuda_tests::root;

/// The documents a user reads: README.md, docs/, and the READMEs beside the code.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut docs = vec![root.join("README.md"), root.join("images/README.md")];
    let mut in_docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    in_docs.sort();
    docs.extend(in_docs);
    docs
}

/// The text with every run of whitespace as one space: a phrase may wrap.
fn flowing(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn number_word(word: &str) -> Option<u64> {
    const WORDS: [&str; 21] = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
        "twenty",
    ];
    const ORDINALS: [&str; 21] = [
        "zeroth",
        "first",
        "second",
        "third",
        "fourth",
        "fifth",
        "sixth",
        "seventh",
        "eighth",
        "ninth",
        "tenth",
        "eleventh",
        "twelfth",
        "thirteenth",
        "fourteenth",
        "fifteenth",
        "sixteenth",
        "seventeenth",
        "eighteenth",
        "nineteenth",
        "twentieth",
    ];
    let w = word
        .trim_matches(|c: char| !c.is_alphanumeric())
        .to_lowercase();
    if let Ok(n) = w.parse() {
        return Some(n);
    }
    WORDS
        .iter()
        .position(|x| *x == w)
        .or_else(|| ORDINALS.iter().position(|x| *x == w))
        .map(|n| n as u64)
}

/// Every number (digits, a number word or an ordinal) written just before `phrase`
/// (as in "the 30 CUDA programs" or "a sixth fuzz target") that is not `want`, with
/// the words around it.
fn counts_before(text: &str, phrase: &str, want: u64) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(phrase) {
        let at = from + at;
        from = at + phrase.len();
        let Some(word) = text[..at].split(' ').rev().find(|w| !w.is_empty()) else {
            continue;
        };
        if let Some(n) = number_word(word) {
            if n != want {
                let start = text[..at].len().saturating_sub(40);
                let start = (0..=start)
                    .rev()
                    .find(|i| text.is_char_boundary(*i))
                    .unwrap_or(0);
                wrong.push(format!(
                    "\"...{} {phrase}\" ({n})",
                    &text[start..at].trim_end()
                ));
            }
        }
    }
    wrong
}

/// Every number right after `phrase` (as in "protocol 1") that is not `want`.
fn numbers_after(text: &str, phrase: &str, want: u64) -> Vec<String> {
    let mut wrong = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find(phrase) {
        let at = from + at;
        from = at + phrase.len();
        let digits: String = text[from..]
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        if let Ok(n) = digits.parse::<u64>() {
            if n != want {
                wrong.push(format!("\"{phrase}{digits}\""));
            }
        }
    }
    wrong
}

fn apps_count() -> u64 {
    std::fs::read_dir(root().join("tests/apps"))
        .expect("tests/apps")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "cu"))
        })
        .count() as u64
}

fn fuzz_targets_count() -> u64 {
    let manifest =
        std::fs::read_to_string(root().join("tests/fuzz/Cargo.toml")).expect("fuzz manifest");
    manifest.lines().filter(|l| l.trim() == "[[bin]]").count() as u64
}

/// The driver functions the guest's libcuda.so.1 exports: the real driver's list.
fn driver_exports_count() -> u64 {
    let list = std::fs::read_to_string(root().join("guest-lib/exports/libcuda.so.1.txt"))
        .expect("guest-lib/exports/libcuda.so.1.txt");
    list.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .count() as u64
}

/// The number in the first `marker` of `file` (as in `cfg.guests = 16;`).
fn number_in(file: &str, marker: &str) -> u64 {
    let text = std::fs::read_to_string(root().join(file)).expect("read a source");
    let at = text
        .find(marker)
        .unwrap_or_else(|| panic!("{file} has no `{marker}`"))
        + marker.len();
    let digits: String = text[at..]
        .chars()
        .skip_while(|c| c.is_whitespace())
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("{file}: no number after `{marker}`"))
}

/// The counts the docs may state, as the tree has them.
struct Counts {
    apps: u64,
    fuzz_targets: u64,
    /// `tests/run.sh`'s seconds per fuzz target.
    fuzz_seconds: u64,
    protocol: u64,
    driver_exports: u64,
    load_guests: u64,
}

impl Counts {
    fn of_the_tree() -> Counts {
        Counts {
            apps: apps_count(),
            fuzz_targets: fuzz_targets_count(),
            fuzz_seconds: number_in("tests/run.sh", "VMCUDA_FUZZ_SECONDS:-"),
            protocol: u64::from(vmcuda_wire::handshake::PROTOCOL_VERSION),
            driver_exports: driver_exports_count(),
            load_guests: number_in("tests/tests/load.rs", "cfg.guests ="),
        }
    }
}

/// What is wrong in one document's text.
fn mismatches(text: &str, counts: &Counts) -> Vec<String> {
    let &Counts {
        apps,
        fuzz_targets,
        fuzz_seconds,
        protocol,
        driver_exports,
        load_guests,
    } = counts;
    let text = flowing(text);
    let mut wrong = Vec::new();
    for (phrase, want, tree) in [
        (
            "seconds each",
            fuzz_seconds,
            "tests/run.sh fuzzes each target for",
        ),
        (
            "functions of driver",
            driver_exports,
            "guest-lib/exports/libcuda.so.1.txt lists",
        ),
        (
            "self-checking guests",
            load_guests,
            "tests/tests/load.rs runs",
        ),
    ] {
        wrong.extend(
            counts_before(&text, phrase, want)
                .into_iter()
                .map(|w| format!("{w}: {tree} {want}")),
        );
    }
    for phrase in [
        "CUDA programs",
        "test programs",
        "test programs of `tests/apps",
        "programs in `tests/apps",
    ] {
        wrong.extend(
            counts_before(&text, phrase, apps)
                .into_iter()
                .map(|w| format!("{w}: tests/apps has {apps} programs")),
        );
    }
    for phrase in ["fuzz targets", "fuzz target", "cargo-fuzz targets"] {
        wrong.extend(
            counts_before(&text, phrase, fuzz_targets)
                .into_iter()
                .map(|w| format!("{w}: tests/fuzz has {fuzz_targets} targets")),
        );
    }
    for phrase in ["protocol ", "protocol version "] {
        wrong.extend(
            numbers_after(&text, phrase, protocol)
                .into_iter()
                .map(|w| format!("{w}: the wire protocol is version {protocol}")),
        );
    }
    // `vmcuda-host`'s options belong to a subcommand (`serve`, `status`, ...): only
    // --help and --version come right after the program's name.
    let mut from = 0;
    while let Some(at) = text[from..].find("vmcuda-host --") {
        let at = from + at;
        from = at + "vmcuda-host --".len();
        // Not the program run: the crate (`cargo test -p vmcuda-host --lib`) or the
        // binary named to another program (`vmcuda-vhost-vsock --host-bin PATH`).
        let mut before = text[..at].rsplit(' ');
        before.next(); // the path up to "vmcuda-host", if any
        let option = before.next().map(|w| w.trim_start_matches(['`', '(']));
        if matches!(option, Some("-p" | "--package" | "--host-bin")) {
            continue;
        }
        let option: String = text[from..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        if option != "help" && option != "version" {
            wrong.push(format!(
                "\"vmcuda-host --{option}\": its options follow a subcommand (vmcuda-host serve --{option})"
            ));
        }
    }
    // The guest's driver directory also holds NVML (images/guest-deb/build.sh;
    // tests/install/packages.sh checks its contents).
    for claim in [
        "holds only links to the driver",
        "holds the driver alone",
        "links to it, alone in their directory",
    ] {
        if text.contains(claim) {
            wrong.push(format!(
                "\"{claim}\": the driver directory holds libnvidia-ml.so.1 too"
            ));
        }
    }
    wrong
}

fn version_mismatches(text: &str, version: &str) -> Vec<String> {
    let text = flowing(text);
    let mut wrong = Vec::new();
    for (prefix, suffix) in [
        ("vmcuda-host_", "_amd64.deb"),
        ("vmcuda-guest_", "_amd64.deb"),
        ("vmcuda-guest-", ".tar.gz"),
    ] {
        let mut from = 0;
        while let Some(at) = text[from..].find(prefix) {
            let at = from + at;
            from = at + prefix.len();
            let Some(end) = text[from..].find(suffix) else {
                continue;
            };
            let written = &text[from..from + end];
            // Only a version: not "VERSION" or a glob, and nothing that runs on past
            // a word.
            if written.chars().all(|c| c.is_ascii_digit() || c == '.')
                && !written.is_empty()
                && written != version
            {
                wrong.push(format!(
                    "\"{prefix}{written}{suffix}\": the packages are version {version}"
                ));
            }
        }
    }
    wrong
}

#[test]
fn the_counts_and_versions_in_the_docs_are_the_trees() {
    let counts = Counts::of_the_tree();
    let version = env!("CARGO_PKG_VERSION");
    assert!(
        counts.apps > 0 && counts.fuzz_targets > 0 && counts.driver_exports > 0,
        "counted nothing in the tree"
    );
    let mut wrong = Vec::new();
    let docs = documents();
    for doc in &docs {
        let text = std::fs::read_to_string(doc).expect("read a document");
        let name = doc
            .strip_prefix(root())
            .unwrap_or(doc)
            .display()
            .to_string();
        for w in mismatches(&text, &counts)
            .into_iter()
            .chain(version_mismatches(&text, version))
        {
            wrong.push(format!("{name}: {w}"));
        }
    }
    assert!(docs.len() > 5, "found only {docs:?}");
    assert!(
        wrong.is_empty(),
        "documents disagree with the tree:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_check_finds_each_kind_of_stale_statement() {
    let stale = "builds the 30 CUDA programs in `tests/apps/`. A sixth\n fuzz target \
                 drives a session. host protocol 1, guest protocol 3. Run `vmcuda-host \
                 --executor host-memory`. The directory holds only links to the driver. \
                 `cargo test -p vmcuda-host --lib`, `--host-bin target/vmcuda-host --executor cuda`";
    let counts = Counts {
        apps: 49,
        fuzz_targets: 7,
        fuzz_seconds: 10,
        protocol: 3,
        driver_exports: 682,
        load_guests: 16,
    };
    let wrong = mismatches(stale, &counts);
    assert_eq!(wrong.len(), 5, "{wrong:#?}");
    assert!(wrong[0].contains("30 CUDA programs") && wrong[0].contains("49"));
    assert!(wrong[1].contains("sixth fuzz target"));
    assert!(wrong[2].contains("protocol 1"));
    assert!(wrong[3].contains("vmcuda-host serve --executor"));
    assert!(wrong[4].contains("NVML") || wrong[4].contains("libnvidia-ml"));
    // What is true passes, in words or digits, and other numbers nearby do not count.
    let true_text = "the forty-nine programs: 49 CUDA programs, seven fuzz targets, a \
                     seventh fuzz target, protocol 3, `vmcuda-host serve --executor cuda`, \
                     `vmcuda-host --version`, 8 programs copying at once";
    assert_eq!(mismatches(true_text, &counts), Vec::<String>::new());
    let stale = "fuzzed for 20 seconds each; the 680 functions of driver 580; keeps 8 \
                 self-checking guests";
    let wrong = mismatches(stale, &counts);
    assert_eq!(wrong.len(), 3, "{wrong:#?}");
    assert!(wrong[0].contains("20 seconds each") && wrong[0].ends_with(" 10"));
    assert!(wrong[1].contains("680 functions") && wrong[1].ends_with(" 682"));
    assert!(wrong[2].contains("8 self-checking") && wrong[2].ends_with(" 16"));
    let true_text =
        "for ten seconds each, the 682 functions of driver 580, 16 self-checking guests";
    assert_eq!(mismatches(true_text, &counts), Vec::<String>::new());
    assert_eq!(
        version_mismatches(
            "apt install ./vmcuda-host_0.0.9_amd64.deb vmcuda-guest-VERSION.tar.gz",
            "0.1.0"
        )
        .len(),
        1
    );
}

/// The newest `GLIBC_x.y` symbol version a library file asks for (`objdump -T`).
fn newest_glibc(lib: &std::path::Path) -> Option<(u32, u32)> {
    let out = std::process::Command::new("objdump")
        .arg("-T")
        .arg(lib)
        .output()
        .expect("objdump");
    String::from_utf8_lossy(&out.stdout)
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|w| w.strip_prefix("GLIBC_"))
        .filter_map(|v| {
            let (major, minor) = v.split_once('.')?;
            let minor = minor.split('.').next()?;
            Some((major.parse().ok()?, minor.parse().ok()?))
        })
        .max()
}

#[test]
#[ignore = "needs the built guest libraries: run tests/run.sh"]
fn the_guest_glibc_the_readme_names_is_the_newest_the_guest_libraries_need() {
    let dir = vmcuda_tests::guest_lib_dir();
    let mut newest = None;
    for entry in std::fs::read_dir(&dir).expect("the guest library directory") {
        let path = entry.expect("an entry").path();
        let is_library = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.contains(".so"));
        if is_library && !path.is_symlink() {
            newest = newest.max(newest_glibc(&path));
        }
    }
    let (major, minor) = newest.expect("no GLIBC_ symbol versions in the guest libraries");
    let readme = flowing(&std::fs::read_to_string(root().join("README.md")).unwrap());
    let want = format!("glibc {major}.{minor} or newer");
    assert!(
        readme.contains(&want),
        "the guest libraries in {} need {want}, which README.md does not say",
        dir.display()
    );
}
