//! `vmcuda doctor PROGRAM`: how does this program reach the bridge?
//!
//! Every way goes through vmcuda's `libcuda.so.1`: NVIDIA's runtime loaded at run time
//! (`libcudart.so.13`: `nvcc -cudart shared`, PyTorch), linked in (nvcc's default,
//! `-cudart static`), or a program of the driver API.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use object::read::elf::{Dyn, ElfFile, FileHeader};
use object::{elf, Endianness, FileKind, Object, ObjectSymbol};
use thiserror::Error;

/// The runtime soname of CUDA 13 (NVIDIA's, run on vmcuda's driver).
pub const CUDART: &str = "libcudart.so.13";

/// Runtime entry points: defined inside a program only when the runtime is linked in.
const RUNTIME_SYMBOLS: &[&str] = &[
    "cudaGetDeviceCount",
    "cudaMalloc",
    "cudaLaunchKernel",
    "__cudaRegisterFatBinary",
];

/// The static runtime carries its own table of error names; a program linked against
/// the shared one asks `cudaGetErrorName` instead. Survives `strip`.
const RUNTIME_MARKER: &[u8] = b"cudaErrorCudartUnloading\0";

#[derive(Debug, Error)]
pub enum ProgramError {
    #[error("`{0}` is not a file here and not a command on PATH")]
    NotFound(String),
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("{path} is neither an ELF program nor a script ({reason})")]
    NotElf { path: PathBuf, reason: String },
}

/// How an ELF program gets its CUDA runtime.
#[derive(Debug, PartialEq, Eq)]
pub enum Linkage {
    /// `DT_NEEDED libcudart.so.13`: NVIDIA's runtime, on vmcuda's driver.
    Dynamic,
    /// Another CUDA version's shared runtime (the soname).
    OtherRuntime(String),
    /// The runtime is inside the program; `evidence` says how that was seen.
    Static { evidence: String },
    /// Only the driver library (`libcuda.so.1`): driver API calls, served by vmcuda's.
    DriverOnly,
    /// Device code (`.nv_fatbin`) but no runtime in sight: it may load one itself.
    DeviceCodeOnly,
    /// Nothing CUDA at all; it may still open the runtime at run time.
    NoCuda,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Kind {
    Elf(Linkage),
    /// A Python interpreter, or a script run by one (the interpreter named).
    Python {
        interpreter: PathBuf,
    },
    /// A script for another interpreter.
    Script {
        interpreter: String,
    },
}

/// `program` as given when it names a path; a bare name is looked up on PATH (as the
/// shell would), then in the current directory.
pub fn resolve(program: &Path) -> Result<PathBuf, ProgramError> {
    let not_found = || ProgramError::NotFound(program.display().to_string());
    if program.components().count() > 1 {
        return program
            .exists()
            .then(|| program.to_path_buf())
            .ok_or_else(not_found);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .or_else(|| program.is_file().then(|| program.to_path_buf()))
        .ok_or_else(not_found)
}

pub fn inspect(path: &Path) -> Result<Kind, ProgramError> {
    let data = std::fs::read(path).map_err(|source| ProgramError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    // By name first: `python3` is often a wrapper script (pyenv, conda shims).
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    if name.as_deref().is_some_and(is_python) {
        return Ok(Kind::Python {
            interpreter: path.to_path_buf(),
        });
    }
    if let Some(line) = data.strip_prefix(b"#!") {
        let line = line.split(|&b| b == b'\n').next().unwrap_or_default();
        let interpreter = shebang_interpreter(&String::from_utf8_lossy(line));
        return Ok(if is_python(&interpreter) {
            Kind::Python {
                interpreter: PathBuf::from(interpreter),
            }
        } else {
            Kind::Script { interpreter }
        });
    }
    if path.extension().is_some_and(|e| e == "py") {
        return Ok(Kind::Python {
            interpreter: "python3".into(),
        });
    }
    let linkage = classify_elf(&data).map_err(|reason| ProgramError::NotElf {
        path: path.to_path_buf(),
        reason,
    })?;
    Ok(Kind::Elf(linkage))
}

/// The program a `#!` line runs: its first word, or for `/usr/bin/env [-S] NAME` the
/// name `env` looks up.
fn shebang_interpreter(line: &str) -> String {
    let mut words = line.split_whitespace();
    let first = words.next().unwrap_or_default();
    if first.rsplit('/').next() == Some("env") {
        if let Some(name) = words.find(|w| !w.starts_with('-')) {
            return name.to_string();
        }
    }
    first.to_string()
}

fn is_python(interpreter: &str) -> bool {
    let base = interpreter.rsplit('/').next().unwrap_or(interpreter);
    base.starts_with("python")
}

/// How an ELF image gets its CUDA runtime.
pub fn classify_elf(data: &[u8]) -> Result<Linkage, String> {
    let facts = match FileKind::parse(data).map_err(|e| e.to_string())? {
        FileKind::Elf64 => elf_facts::<elf::FileHeader64<Endianness>>(data),
        FileKind::Elf32 => elf_facts::<elf::FileHeader32<Endianness>>(data),
        other => return Err(format!("a {other:?} file, not ELF")),
    }
    .map_err(|e| e.to_string())?;
    Ok(facts.linkage(contains(data, RUNTIME_MARKER)))
}

struct ElfFacts {
    needed: Vec<String>,
    runtime_symbols: Vec<String>,
    device_code: bool,
}

impl ElfFacts {
    fn linkage(self, runtime_marker: bool) -> Linkage {
        if self.needed.iter().any(|n| n == CUDART) {
            return Linkage::Dynamic;
        }
        if let Some(other) = self.needed.iter().find(|n| n.starts_with("libcudart.so")) {
            return Linkage::OtherRuntime(other.clone());
        }
        if !self.runtime_symbols.is_empty() {
            return Linkage::Static {
                evidence: format!("it defines {}", self.runtime_symbols.join(", ")),
            };
        }
        if runtime_marker {
            return Linkage::Static {
                evidence: "it carries the static runtime's own error-name table".into(),
            };
        }
        if self.needed.iter().any(|n| n.starts_with("libcuda.so")) {
            return Linkage::DriverOnly;
        }
        if self.device_code {
            return Linkage::DeviceCodeOnly;
        }
        Linkage::NoCuda
    }
}

fn elf_facts<Elf: FileHeader<Endian = Endianness>>(data: &[u8]) -> object::Result<ElfFacts> {
    let file = ElfFile::<Elf>::parse(data)?;
    let endian = file.endian();
    let sections = file.elf_section_table();
    let mut needed = Vec::new();
    if let Some((entries, link)) = sections.dynamic(endian, data)? {
        let strings = sections.strings(endian, data, link)?;
        for entry in entries {
            if entry.tag32(endian) == Some(elf::DT_NEEDED) {
                needed.push(String::from_utf8_lossy(entry.string(endian, strings)?).into_owned());
            }
        }
    }
    let mut runtime_symbols: Vec<String> = file
        .symbols()
        .chain(file.dynamic_symbols())
        .filter(|s| !s.is_undefined())
        .filter_map(|s| s.name().ok())
        .filter(|n| RUNTIME_SYMBOLS.contains(n))
        .map(str::to_string)
        .collect();
    runtime_symbols.sort();
    runtime_symbols.dedup();
    Ok(ElfFacts {
        needed,
        runtime_symbols,
        device_code: file.section_by_name(".nv_fatbin").is_some(),
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// Where `interpreter` finds PyTorch, if it does: `Ok(None)` when it is not installed.
/// Only the package's location is looked up (`find_spec`), nothing of it is imported.
pub fn find_torch(interpreter: &Path, timeout: Duration) -> Result<Option<String>, String> {
    let mut child = Command::new(interpreter)
        .args([
            "-c",
            "import importlib.util as u; s = u.find_spec('torch'); print(s.origin if s else '')",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", interpreter.display()))?;
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} did not answer within {} s",
                    interpreter.display(),
                    timeout.as_secs()
                ));
            }
            Err(e) => return Err(format!("waiting for {}: {e}", interpreter.display())),
        }
    }
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = io::Read::read_to_string(&mut stdout, &mut out);
    }
    let origin = out.trim();
    Ok((!origin.is_empty()).then(|| origin.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory for one test's compiled programs.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("vmcuda-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// `cc` with `args` in `dir` (a C compiler is needed to build the workspace at all).
    fn cc(dir: &Path, args: &[&str]) {
        let out = Command::new("cc")
            .current_dir(dir)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cc {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn linkage(path: &Path) -> Linkage {
        match inspect(path).unwrap() {
            Kind::Elf(l) => l,
            other => panic!("{}: {other:?}", path.display()),
        }
    }

    #[test]
    fn a_program_needing_libcudart_13_is_dynamic_and_other_versions_are_named() {
        let dir = scratch("dynamic");
        std::fs::write(
            dir.join("rt.c"),
            "int cudaGetDeviceCount(int *n) { *n = 1; return 0; }\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("main.c"),
            "int cudaGetDeviceCount(int *);\nint main(void) { int n; return cudaGetDeviceCount(&n); }\n",
        )
        .unwrap();
        for (soname, want) in [
            ("libcudart.so.13", Linkage::Dynamic),
            (
                "libcudart.so.12",
                Linkage::OtherRuntime("libcudart.so.12".into()),
            ),
        ] {
            cc(
                &dir,
                &[
                    "-shared",
                    "-fPIC",
                    "-o",
                    soname,
                    &format!("-Wl,-soname,{soname}"),
                    "rt.c",
                ],
            );
            cc(&dir, &["-o", "app", "main.c", soname]);
            assert_eq!(linkage(&dir.join("app")), want, "{soname}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_runtime_inside_the_program_is_static_even_when_stripped() {
        let dir = scratch("static");
        std::fs::write(
            dir.join("main.c"),
            "const char names[] = \"cudaErrorCudartUnloading\";\n\
             int cudaGetDeviceCount(int *n) { *n = (int)sizeof names; return 0; }\n\
             int main(void) { int n; return cudaGetDeviceCount(&n) + names[n % 4]; }\n",
        )
        .unwrap();
        cc(&dir, &["-o", "app", "main.c"]);
        assert_eq!(
            linkage(&dir.join("app")),
            Linkage::Static {
                evidence: "it defines cudaGetDeviceCount".into()
            }
        );
        cc(&dir, &["-s", "-o", "stripped", "main.c"]);
        assert!(
            matches!(linkage(&dir.join("stripped")), Linkage::Static { evidence } if evidence.contains("error-name table"))
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn programs_without_a_runtime_and_scripts_are_told_apart() {
        let dir = scratch("plain");
        std::fs::write(dir.join("main.c"), "int main(void) { return 0; }\n").unwrap();
        cc(&dir, &["-o", "app", "main.c"]);
        assert_eq!(linkage(&dir.join("app")), Linkage::NoCuda);

        std::fs::write(
            dir.join("train"),
            "#!/usr/bin/env -S python3 -u\nprint(1)\n",
        )
        .unwrap();
        assert_eq!(
            inspect(&dir.join("train")).unwrap(),
            Kind::Python {
                interpreter: "python3".into()
            }
        );
        // A shim named python3 is Python, whatever runs it.
        std::fs::write(
            dir.join("python3"),
            "#!/usr/bin/env bash\nexec python3 \"$@\"\n",
        )
        .unwrap();
        assert_eq!(
            inspect(&dir.join("python3")).unwrap(),
            Kind::Python {
                interpreter: dir.join("python3")
            }
        );
        std::fs::write(dir.join("run.sh"), "#!/bin/sh\necho\n").unwrap();
        assert_eq!(
            inspect(&dir.join("run.sh")).unwrap(),
            Kind::Script {
                interpreter: "/bin/sh".into()
            }
        );
        std::fs::write(dir.join("notes.txt"), "hello").unwrap();
        assert!(matches!(
            inspect(&dir.join("notes.txt")),
            Err(ProgramError::NotElf { .. })
        ));
        assert!(matches!(
            resolve(Path::new("no-such-command-vmcuda")),
            Err(ProgramError::NotFound(_))
        ));
        assert!(
            resolve(Path::new("sh")).is_ok(),
            "bare names are looked up on PATH"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
