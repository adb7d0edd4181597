//! The guest library's layers, checked against its source.
//!
//! - **Connection, data paths and guest state** (the bottom): the connection to the host
//!   and the request functions on it, shared and staged memory, managed memory, guest
//!   RAM, what the guest keeps (devices, streams, allocations, captures), the notices
//!   and the call log, the profile.
//! - **The driver** (`driver/`, the middle): the CUDA driver API, with its internals
//!   (`driver::inner`: the families' implementations, once the retired runtime's).
//! - **Above the driver** (the top): the guest's NVML and the `vmcuda` command.
//!
//! A module may use its own layer and the layers below it, never one above: the bottom
//! uses neither the driver nor NVML, and the driver does not use NVML. The test below
//! reads every `.rs` file under `src/`, finds each path through `crate::` (and
//! `$crate::`, `vmcuda_guest::`) and each `super::` path that climbs out of its top
//! module, and fails naming the file and the path where a layer reaches above itself.
//! Comments and strings are left out: only code is an import.

#![cfg(test)]

use std::path::{Path, PathBuf};

/// A layer, lowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Layer {
    /// Connection, data paths and guest state.
    Bottom,
    /// The driver.
    Driver,
    /// NVML and the `vmcuda` command.
    Top,
}

/// Every top module of the crate (a file `src/NAME.rs` or a folder `src/NAME/`) and
/// every item of the crate root that code names, with its layer. A module missing here
/// fails the test: a new one is given its layer when it is made.
const LAYERS: &[(&str, Layer)] = &[
    ("abi", Layer::Bottom),
    ("call_log", Layer::Bottom),
    ("caller", Layer::Bottom),
    ("capture", Layer::Bottom),
    ("client", Layer::Bottom),
    ("copy_route", Layer::Bottom),
    ("cudaError_t", Layer::Bottom),
    ("device_addresses", Layer::Bottom),
    ("done_word", Layer::Bottom),
    ("function_facts", Layer::Bottom),
    ("gate", Layer::Bottom),
    ("guest_pages", Layer::Bottom),
    ("guest_ram", Layer::Bottom),
    ("host_functions", Layer::Bottom),
    ("layers", Layer::Bottom),
    ("managed", Layer::Bottom),
    ("notice", Layer::Bottom),
    ("pages", Layer::Bottom),
    ("pci_place", Layer::Bottom),
    ("pinned", Layer::Bottom),
    ("posted", Layer::Bottom),
    ("profile", Layer::Bottom),
    ("request", Layer::Bottom),
    ("shared", Layer::Bottom),
    ("sizes", Layer::Bottom),
    ("staging", Layer::Bottom),
    ("state", Layer::Bottom),
    ("driver", Layer::Driver),
    ("nvml", Layer::Top),
    ("bin", Layer::Top),
];

fn layer_of(module: &str) -> Option<Layer> {
    LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
}

/// The source with comments, strings and character literals blanked (newlines kept),
/// so that what is left is code.
fn code_of(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && !chars[..i]
                .last()
                .is_some_and(|p| p.is_alphanumeric() || *p == '_')
        {
            // A raw string: r"...", r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            loop {
                if j >= chars.len() {
                    break;
                }
                if chars[j] == '"' && (1..=hashes).all(|h| chars.get(j + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            for &k in &chars[i..j.min(chars.len())] {
                out.push(blank(k));
            }
            i = j;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{..}'), or a lifetime (left as it is).
            if next == Some('\\') {
                let mut j = i + 3;
                while j < chars.len() && chars[j] != '\'' {
                    j += 1;
                }
                for _ in i..=j.min(chars.len() - 1) {
                    out.push(' ');
                }
                i = j + 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                out.push_str("   ");
                i += 3;
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The module path of a file under `src/` (`driver/inner.rs` or `driver/inner/mod.rs` -> driver, inner).
fn module_path(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let file = parts.pop().expect("a file name");
    let stem = file.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_owned());
    }
    parts
}

fn ident_at(code: &[u8], at: usize) -> &str {
    let end = code[at..]
        .iter()
        .position(|b| !(b.is_ascii_alphanumeric() || *b == b'_'))
        .map_or(code.len(), |n| at + n);
    std::str::from_utf8(&code[at..end]).expect("ASCII")
}

fn skip_space(code: &[u8], mut at: usize) -> usize {
    while at < code.len() && code[at].is_ascii_whitespace() {
        at += 1;
    }
    at
}

/// The first names of a path's rest at `at`: one name, or each of a `{a, b::c}` group.
fn first_names(code: &[u8], at: usize) -> Vec<String> {
    let at = skip_space(code, at);
    if code.get(at) != Some(&b'{') {
        return vec![ident_at(code, at).to_owned()];
    }
    let mut names = Vec::new();
    let mut depth = 0;
    let mut expect_name = true;
    let mut i = at;
    while i < code.len() {
        match code[i] {
            b'{' => {
                depth += 1;
                expect_name = depth == 1;
            }
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            b',' if depth == 1 => expect_name = true,
            b if expect_name && depth == 1 && (b.is_ascii_alphabetic() || b == b'_') => {
                names.push(ident_at(code, i).to_owned());
                expect_name = false;
            }
            _ => {}
        }
        i += 1;
    }
    names
}

/// One path a file names: (line, the path's text, the top module or root item it
/// reaches).
type Reference = (usize, String, String);

/// The crate-absolute paths a file's code names that leave its own top module.
fn references(relative: &Path, source: &str) -> Vec<Reference> {
    let code = code_of(source);
    let bytes = code.as_bytes();
    let file_module = module_path(relative);
    let in_bin = relative.starts_with("bin");
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let text_at = |at: usize| {
        let end = code[at..].find([';', '\n']).map_or(code.len(), |n| at + n);
        code[at..end].trim().to_owned()
    };
    // The inline modules open at each point: (name, brace depth inside it).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let starts_word = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if b == b'{' {
            depth += 1;
        } else if b == b'}' {
            if inline.last().is_some_and(|(_, d)| *d == depth) {
                inline.pop();
            }
            depth = depth.saturating_sub(1);
        } else if starts_word && code[i..].starts_with("mod ") {
            let name_at = skip_space(bytes, i + 4);
            let name = ident_at(bytes, name_at).to_owned();
            let after = skip_space(bytes, name_at + name.len());
            if bytes.get(after) == Some(&b'{') {
                depth += 1;
                inline.push((name, depth));
                i = after + 1;
                continue;
            }
        } else if starts_word && !in_bin && code[i..].starts_with("crate::") {
            // `crate::`, `$crate::` (a `$` before a word start is still a word start).
            for name in first_names(bytes, i + "crate::".len()) {
                found.push((line_of(i), text_at(i), name));
            }
            i += "crate::".len();
            continue;
        } else if starts_word && !in_bin && code[i..].starts_with("vmcuda_guest::") {
            for name in first_names(bytes, i + "vmcuda_guest::".len()) {
                found.push((line_of(i), text_at(i), name));
            }
            i += "vmcuda_guest::".len();
            continue;
        } else if starts_word && !in_bin && code[i..].starts_with("super::") {
            let start = i;
            let mut supers = 0;
            while code[i..].starts_with("super::") {
                supers += 1;
                i = skip_space(bytes, i + "super::".len());
            }
            let mut base: Vec<String> = file_module.clone();
            base.extend(inline.iter().map(|(n, _)| n.clone()));
            if supers > base.len() {
                found.push((line_of(start), text_at(start), "above the crate".to_owned()));
                continue;
            }
            base.truncate(base.len() - supers);
            // Within the file's own top module: not an import from elsewhere.
            if base.is_empty() {
                for name in first_names(bytes, i) {
                    found.push((line_of(start), text_at(start), name));
                }
            }
            continue;
        }
        i += 1;
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("a folder entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// No module of a lower layer imports one above it; every top module has its layer.
#[test]
fn no_layer_imports_one_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    assert!(
        files.len() > 50,
        "{} files under {}",
        files.len(),
        src.display()
    );
    let mut wrong = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src/");
        let module = module_path(relative);
        // The crate root declares every module; it is no layer's.
        let Some(top) = module.first() else { continue };
        let Some(own) = layer_of(top) else {
            wrong.push(format!(
                "src/{}: module `{top}` has no layer in LAYERS (guest-lib/src/layers.rs)",
                relative.display()
            ));
            continue;
        };
        let source = std::fs::read_to_string(file).expect("a source file");
        for (line, text, name) in references(relative, &source) {
            if name == *top || name == "self" {
                continue;
            }
            match layer_of(&name) {
                Some(theirs) if theirs <= own => {}
                Some(theirs) => wrong.push(format!(
                    "src/{}:{line}: `{text}`: the {own:?} layer imports `{name}` of the {theirs:?} layer above it",
                    relative.display()
                )),
                None => wrong.push(format!(
                    "src/{}:{line}: `{text}`: `{name}` has no layer in LAYERS (guest-lib/src/layers.rs)",
                    relative.display()
                )),
            }
        }
    }
    assert!(wrong.is_empty(), "\n{}\n", wrong.join("\n"));
}

/// The reading finds paths in groups and through `super::`, and not in comments or
/// strings.
#[test]
fn references_are_found_in_code_only() {
    let source = r#"
//! See [`crate::nvml`].
use crate::{caller, driver::inner::{call, post}};
use super::super::nvml::x;
fn f() { let s = "crate::nvml"; let c = '{'; $crate::driver::guard(); }
#[cfg(test)]
mod tests {
    use super::*;
    use super::super::state;
}
"#;
    let found: Vec<(usize, String)> = references(Path::new("driver/memory.rs"), source)
        .into_iter()
        .map(|(line, _, name)| (line, name))
        .collect();
    assert_eq!(
        found,
        [
            (3, "caller".to_owned()),
            (3, "driver".to_owned()),
            (4, "nvml".to_owned()),
            (5, "driver".to_owned()),
        ]
    );
    let found: Vec<String> = references(Path::new("nvml.rs"), source)
        .into_iter()
        .map(|(_, _, name)| name)
        .collect();
    assert_eq!(
        found,
        ["caller", "driver", "above the crate", "driver", "state"]
    );
}
