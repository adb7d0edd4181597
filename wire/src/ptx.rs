//! What a PTX text sets aside in device memory, read from the text itself, for PTX the
//! driver's linker cannot take.
//!
//! The host measures a module's globals (to charge them to the VM's quota) in the
//! cubin it gets by linking the image. NVIDIA's linker compiles each input in
//! compile-only mode, which needs PTX ISA 3.1 or later (its answer on the H200:
//! "'Compile only(-c)' requires PTX ISA .version 3.1 or later"), while the module
//! loader still compiles older PTX whole (cuda-samples' matrixMulDynlinkJIT loads a
//! PTX 1.4 text). Older PTX has no separate compilation, so every byte of module-scope
//! data it has is declared in it: [`module_data_len`] adds up those declarations, and
//! refuses what it cannot size, so a guest cannot slip data past its quota.

use thiserror::Error;

use crate::cubin::MAX_GLOBAL_LEN;

/// The compiler's own constant bank (`.nv.constant2`, literals and addresses) that a
/// compiled module may also hold, besides what the text declares: at most one bank.
pub const COMPILER_CONSTANTS_LEN: u64 = 64 * 1024;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum PtxError {
    #[error("no .version directive")]
    NoVersion,
    #[error("declaration `{0}` cannot be sized")]
    Unsized(String),
    #[error("a {0} declaration inside a function")]
    InFunction(&'static str),
    #[error("a declaration of {0} bytes, past MAX_GLOBAL_LEN")]
    TooLarge(u64),
    #[error("unbalanced braces")]
    Unbalanced,
}

/// A PTX text with its comments blanked out, read once for every question below.
pub struct Code(String);

impl Code {
    pub fn of(text: &[u8]) -> Code {
        Code(without_comments(text))
    }

    /// The text's `.version` (major, minor), the first directive of a PTX module.
    pub fn version(&self) -> Result<(u32, u32), PtxError> {
        let mut words = self.0.split_whitespace();
        while let Some(w) = words.next() {
            if w == ".version" {
                let v = words.next().ok_or(PtxError::NoVersion)?;
                let (major, minor) = v.split_once('.').ok_or(PtxError::NoVersion)?;
                return Ok((
                    major.parse().map_err(|_| PtxError::NoVersion)?,
                    minor.parse().map_err(|_| PtxError::NoVersion)?,
                ));
            }
        }
        Err(PtxError::NoVersion)
    }

    /// Whether NVIDIA's linker compiles this PTX (ISA 3.1 or later).
    pub fn linker_takes(&self) -> bool {
        self.version().is_ok_and(|v| v >= (3, 1))
    }

    /// Whether the text calls `vprintf` (device `printf`).
    pub fn prints(&self) -> bool {
        self.0
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$'))
            .any(|w| w == "vprintf")
    }

    /// Bytes of device memory the module-scope `.global` and `.const` declarations of
    /// the text take (each rounded up to its alignment), plus [`COMPILER_CONSTANTS_LEN`].
    /// `.extern` declarations take nothing (another module defines them).
    pub fn module_data_len(&self) -> Result<u64, PtxError> {
        let mut total = COMPILER_CONSTANTS_LEN;
        for statement in statements(&self.0)? {
            let words: Vec<&str> = statement.text.split_whitespace().collect();
            let space = words.iter().find_map(|w| match *w {
                ".global" => Some(".global"),
                ".const" => Some(".const"),
                _ => None,
            });
            let Some(space) = space else { continue };
            if statement.in_function {
                return Err(PtxError::InFunction(space));
            }
            if words.contains(&".extern") {
                continue;
            }
            total = total.saturating_add(declaration_len(statement.text)?);
        }
        Ok(total)
    }
}

/// One statement: its text up to `;` (or up to a function body's `{`), and whether it
/// sits in a function body.
struct Statement<'a> {
    text: &'a str,
    in_function: bool,
}

/// The text's statements. A `{` after `=` opens an initializer, which belongs to its
/// statement; any other `{` opens a body (or a block in one).
fn statements(text: &str) -> Result<Vec<Statement<'_>>, PtxError> {
    let mut out = Vec::new();
    let (mut depth, mut init_depth, mut start) = (0usize, 0usize, 0usize);
    let mut has_equals = false;
    for (i, c) in text.char_indices() {
        match c {
            '=' => has_equals = true,
            '{' if has_equals => init_depth += 1,
            '}' if init_depth > 0 => init_depth -= 1,
            '{' | '}' | ';' if init_depth == 0 => {
                out.push(Statement {
                    text: &text[start..i],
                    in_function: depth > 0,
                });
                start = i + 1;
                has_equals = false;
                match c {
                    '{' => depth += 1,
                    '}' => depth = depth.checked_sub(1).ok_or(PtxError::Unbalanced)?,
                    _ => {}
                }
            }
            _ => {}
        }
    }
    if depth != 0 || init_depth != 0 {
        return Err(PtxError::Unbalanced);
    }
    Ok(out)
}

/// The bytes one `.global`/`.const` declaration statement (one or more names) takes.
fn declaration_len(statement: &str) -> Result<u64, PtxError> {
    let unsized_ = || PtxError::Unsized(statement.trim().to_string());
    let (decl, init) = match statement.split_once('=') {
        Some((d, i)) => (d, Some(i)),
        None => (statement, None),
    };
    let mut align = 0u64;
    let (mut elem, mut lanes) = (0u64, 1u64);
    let mut words = decl.split_whitespace();
    let mut names = String::new();
    while let Some(w) = words.next() {
        if w == ".align" {
            align = words
                .next()
                .and_then(|a| a.parse().ok())
                .ok_or_else(unsized_)?;
        } else if let Some(n) = w.strip_prefix(".v").and_then(|n| n.parse::<u64>().ok()) {
            lanes = n;
        } else if let Some(size) = type_len(w) {
            elem = size;
        } else if w.starts_with('.') {
            // .visible, .weak, .global, .const, .attribute(...), ...
            continue;
        } else {
            names.push_str(w);
            names.push(' ');
        }
    }
    if elem == 0 {
        return Err(unsized_());
    }
    let item = elem * lanes;
    let align = align.max(item).max(1);
    let mut total = 0u64;
    let names: Vec<&str> = names
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    if names.is_empty() {
        return Err(unsized_());
    }
    for name in &names {
        let mut count = 1u64;
        let dims = name.split('[').skip(1);
        let mut first = true;
        for dim in dims {
            let dim = dim.trim().strip_suffix(']').ok_or_else(unsized_)?.trim();
            let n = if dim.is_empty() {
                // An unsized outer dimension takes its initializer's length.
                if !first || names.len() != 1 {
                    return Err(unsized_());
                }
                outer_len(init.ok_or_else(unsized_)?).ok_or_else(unsized_)?
            } else {
                dim.parse::<u64>().map_err(|_| unsized_())?
            };
            count = count.checked_mul(n).ok_or_else(unsized_)?;
            first = false;
        }
        let len = count
            .checked_mul(item)
            .ok_or(PtxError::TooLarge(u64::MAX))?;
        if len > MAX_GLOBAL_LEN {
            return Err(PtxError::TooLarge(len));
        }
        total = total.saturating_add(len.next_multiple_of(align));
    }
    Ok(total)
}

/// The number of elements at the outer level of an initializer `{a, b, {c, d}}`.
fn outer_len(init: &str) -> Option<u64> {
    let inner = init.trim().strip_prefix('{')?.strip_suffix('}')?;
    if inner.trim().is_empty() {
        return Some(0);
    }
    let mut depth = 0usize;
    let mut n = 1u64;
    for c in inner.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.checked_sub(1)?,
            ',' if depth == 0 => n += 1,
            _ => {}
        }
    }
    Some(n)
}

/// Bytes of one element of a PTX fundamental type (`.u32`: 4), or of an opaque
/// handle type (`.texref`, `.samplerref`, `.surfref`: 8).
fn type_len(word: &str) -> Option<u64> {
    Some(match word {
        ".b8" | ".u8" | ".s8" | ".pred" => 1,
        ".b16" | ".u16" | ".s16" | ".f16" | ".bf16" => 2,
        ".b32" | ".u32" | ".s32" | ".f32" | ".f16x2" | ".bf16x2" | ".tf32" => 4,
        ".b64" | ".u64" | ".s64" | ".f64" => 8,
        ".b128" => 16,
        ".texref" | ".samplerref" | ".surfref" => 8,
        _ => return None,
    })
}

/// The text with `//` and `/* */` comments blanked out (lossy for bytes that are not
/// UTF-8, which PTX does not have outside comments).
fn without_comments(text: &[u8]) -> String {
    let text = String::from_utf8_lossy(text);
    let mut out = String::with_capacity(text.len());
    let mut rest = &*text;
    while !rest.is_empty() {
        match (rest.find("//"), rest.find("/*")) {
            (Some(line), block) if block.is_none_or(|b| line < b) => {
                out.push_str(&rest[..line]);
                rest = rest[line..].find('\n').map_or("", |e| &rest[line + e..]);
            }
            (_, Some(block)) => {
                out.push_str(&rest[..block]);
                out.push(' ');
                rest = rest[block + 2..]
                    .find("*/")
                    .map_or("", |e| &rest[block + 2 + e + 2..]);
            }
            _ => {
                out.push_str(rest);
                rest = "";
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = "\t.version 1.4\n\t.target sm_10, map_f64_to_f32\n\
        // a comment with .global .u32 fake[1000];\n\
        .shared .align 4 .b8 As[1024];\n\
        .const .align 4 .b8 table[256] = {1, 2, 3};\n\
        .global .u32 counter;\n\
        .global .f64 pair[2], single;\n\
        .entry k (\n\t.param .u64 __cudaparm_k_A)\n{\n\
        .reg .u32 %r<4>;\n\tld.global.u32 %r1, [counter];\n\
        { ld.const.u32 %r2, [table]; }\n\texit;\n}\n";

    #[test]
    fn old_ptx_is_measured_from_its_declarations() {
        assert_eq!(Code::of(OLD.as_bytes()).version(), Ok((1, 4)));
        assert!(!Code::of(OLD.as_bytes()).linker_takes());
        // 256 (table) + 4 (counter) + 16 + 8 (two f64 names); .shared is not device
        // memory of the module, the comment is not a declaration.
        assert_eq!(
            Code::of(OLD.as_bytes()).module_data_len(),
            Ok(COMPILER_CONSTANTS_LEN + 256 + 4 + 16 + 8)
        );
        assert!(!Code::of(OLD.as_bytes()).prints());
    }

    #[test]
    fn newer_ptx_goes_to_the_linker() {
        assert!(Code::of(b"//\n// Generated\n.version 3.1\n.target sm_35\n").linker_takes());
        assert!(Code::of(b".version 9.0\n.target sm_90\n").linker_takes());
        assert!(!Code::of(b".version 2.3\n").linker_takes());
        assert!(!Code::of(b".target sm_90\n").linker_takes());
    }

    #[test]
    fn vectors_alignment_unsized_arrays_and_externs() {
        let t = ".version 2.0\n.global .align 16 .v4 .f32 v[3];\n\
            .const .u8 bytes[] = {1, 2, 3, 4, 5};\n\
            .global .u16 grid[][2] = {{1, 2}, {3, 4}, {5, 6}};\n\
            .extern .global .u32 elsewhere[1000000];\n\
            .visible .global .align 8 .b8 one;\n";
        // 48 + 5 + 12 + 0 + 8 (one byte, aligned to 8).
        assert_eq!(
            Code::of(t.as_bytes()).module_data_len(),
            Ok(COMPILER_CONSTANTS_LEN + 48 + 5 + 12 + 8)
        );
    }

    #[test]
    fn what_cannot_be_sized_is_refused() {
        let refused = |t: &str| Code::of(t.as_bytes()).module_data_len().unwrap_err();
        assert!(matches!(
            refused(".version 1.4\n.global .u32 x[];\n"),
            PtxError::Unsized(_)
        ));
        assert!(matches!(
            refused(".version 1.4\n.global .u32 x[n];\n"),
            PtxError::Unsized(_)
        ));
        assert!(matches!(
            refused(".version 1.4\n.global .weird x;\n"),
            PtxError::Unsized(_)
        ));
        assert_eq!(
            refused(".version 1.4\n.entry k\n{\n.global .u32 inside;\n}\n"),
            PtxError::InFunction(".global")
        );
        assert!(matches!(
            refused(".version 1.4\n.global .b8 big[4294967297];\n"),
            PtxError::TooLarge(_)
        ));
        assert!(matches!(
            refused(".version 1.4\n.global .b64 big[4294967296][4294967296];\n"),
            PtxError::Unsized(_) | PtxError::TooLarge(_)
        ));
        assert_eq!(refused(".version 1.4\n.entry k\n{\n"), PtxError::Unbalanced);
        assert_eq!(refused(".version 1.4\n}\n"), PtxError::Unbalanced);
    }

    #[test]
    fn printf_is_seen_outside_comments() {
        let declared = b".extern .func (.param .b32 r) vprintf (.param .b64 f, .param .b64 a);";
        assert!(Code::of(declared).prints());
        assert!(!Code::of(b"// vprintf\n.version 1.4\n").prints());
    }
}
