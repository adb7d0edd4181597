//! Generates the list of CUDA driver entry points the CUDA executor calls, so that the
//! start-up check (`CudaExecutor::new`) cannot drift from the code: cudarc resolves
//! driver symbols lazily and panics on a missing one, so every one of them is looked up
//! before the first call.
//!
//! The list is every `sys::cuXxx` named in `src/executor/cuda/**/*.rs` (comments
//! aside), plus the driver symbols behind each cudarc `result::` function named there,
//! from [`RESULT_SYMBOLS`]. A `result::` function missing from that map fails the build.
//! Output: `$OUT_DIR/driver_symbols.rs`, one `const DRIVER_SYMBOLS: &[&str]`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// Each cudarc 0.19 `driver::result` function the executor may call, with the driver
/// entry points it calls (as its source reads with the `cuda-13000` feature).
const RESULT_SYMBOLS: &[(&str, &[&str])] = &[
    ("init", &["cuInit"]),
    ("device::get", &["cuDeviceGet"]),
    ("device::get_count", &["cuDeviceGetCount"]),
    ("device::get_uuid", &["cuDeviceGetUuid_v2"]),
    ("device::total_mem", &["cuDeviceTotalMem_v2"]),
    ("device::get_attribute", &["cuDeviceGetAttribute"]),
    (
        "device::get_default_mem_pool",
        &["cuDeviceGetDefaultMemPool"],
    ),
    ("primary_ctx::retain", &["cuDevicePrimaryCtxRetain"]),
    ("primary_ctx::release", &["cuDevicePrimaryCtxRelease_v2"]),
    ("ctx::get_current", &["cuCtxGetCurrent"]),
    ("ctx::set_current", &["cuCtxSetCurrent"]),
    ("ctx::synchronize", &["cuCtxSynchronize"]),
    ("ctx::get_limit", &["cuCtxGetLimit"]),
    ("ctx::set_limit", &["cuCtxSetLimit"]),
    ("ctx::set_cache_config", &["cuCtxSetCacheConfig"]),
    ("stream::create", &["cuStreamCreate"]),
    (
        "stream::get_priority_range",
        &["cuCtxGetStreamPriorityRange"],
    ),
    ("stream::synchronize", &["cuStreamSynchronize"]),
    ("stream::destroy", &["cuStreamDestroy_v2"]),
    ("stream::begin_capture", &["cuStreamBeginCapture_v2"]),
    ("stream::end_capture", &["cuStreamEndCapture"]),
    ("stream::is_capturing", &["cuStreamIsCapturing"]),
    ("event::create", &["cuEventCreate"]),
    ("event::record", &["cuEventRecord"]),
    ("event::elapsed", &["cuEventElapsedTime_v2"]),
    ("event::query", &["cuEventQuery"]),
    ("event::synchronize", &["cuEventSynchronize"]),
    ("event::destroy", &["cuEventDestroy_v2"]),
    ("mem_get_info", &["cuMemGetInfo_v2"]),
    ("malloc_sync", &["cuMemAlloc_v2"]),
    ("free_sync", &["cuMemFree_v2"]),
    ("malloc_async", &["cuMemAllocAsync"]),
    ("free_async", &["cuMemFreeAsync"]),
    ("malloc_host", &["cuMemHostAlloc"]),
    ("free_host", &["cuMemFreeHost"]),
    ("memset_d8_sync", &["cuMemsetD8_v2"]),
    ("memset_d8_async", &["cuMemsetD8Async"]),
    ("memcpy_htod_sync", &["cuMemcpyHtoD_v2"]),
    ("memcpy_htod_async", &["cuMemcpyHtoDAsync_v2"]),
    ("memcpy_dtoh_sync", &["cuMemcpyDtoH_v2"]),
    ("memcpy_dtoh_async", &["cuMemcpyDtoHAsync_v2"]),
    ("memcpy_dtod_sync", &["cuMemcpyDtoD_v2"]),
    ("memcpy_dtod_async", &["cuMemcpyDtoDAsync_v2"]),
    ("memcpy_peer_async", &["cuMemcpyPeerAsync"]),
    (
        "occupancy::max_active_block_per_multiprocessor_with_flags",
        &["cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"],
    ),
    (
        "occupancy::available_dynamic_shared_mem_per_block",
        &["cuOccupancyAvailableDynamicSMemPerBlock"],
    ),
    ("graph::instantiate", &["cuGraphInstantiateWithFlags"]),
    ("graph::launch", &["cuGraphLaunch"]),
    ("graph::destroy", &["cuGraphDestroy"]),
    ("graph::exec_destroy", &["cuGraphExecDestroy"]),
    ("mem_pool::get_attribute", &["cuMemPoolGetAttribute"]),
    ("mem_pool::set_attribute", &["cuMemPoolSetAttribute"]),
    ("mem_pool::trim_to", &["cuMemPoolTrimTo"]),
];

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The source without `//` comments (doc comments included), line by line.
fn code_of(text: &str) -> String {
    text.lines()
        .map(|line| line.find("//").map_or(line, |at| &line[..at]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path that follows `prefix` at a word boundary: `[A-Za-z0-9_:]*`, with
/// trailing `::` removed.
fn paths_after<'a>(code: &'a str, prefix: &str) -> Vec<&'a str> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        if code[..at].chars().next_back().is_some_and(is_ident) {
            continue; // e.g. `CUresult::` for `result::`
        }
        let rest = &code[at + prefix.len()..];
        let end = rest
            .find(|c: char| !(is_ident(c) || c == ':'))
            .unwrap_or(rest.len());
        found.push(rest[..end].trim_end_matches(':'));
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let dir = root.join("src/executor/cuda");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-changed={}", dir.display());

    let mut files = Vec::new();
    rust_files(&dir, &mut files);
    let mut symbols = BTreeSet::new();
    let mut unmapped = BTreeSet::new();
    for file in &files {
        let text =
            fs::read_to_string(file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
        let code = code_of(&text);
        for name in paths_after(&code, "sys::") {
            // Driver functions are `cu` + a capital; `sys::culib` and types are not.
            let mut chars = name.chars();
            if chars.next() == Some('c')
                && chars.next() == Some('u')
                && chars.next().is_some_and(|c| c.is_ascii_uppercase())
                && !name.contains(':')
            {
                symbols.insert(name.to_string());
            }
        }
        for path in paths_after(&code, "result::") {
            let last = path.rsplit("::").next().unwrap_or("");
            if path.is_empty() || last.starts_with(|c: char| c.is_ascii_uppercase()) {
                continue; // `result::{...}` imports, `result::DriverError`
            }
            match RESULT_SYMBOLS.iter().find(|(f, _)| *f == path) {
                Some((_, names)) => symbols.extend(names.iter().map(|n| n.to_string())),
                None => {
                    unmapped.insert(format!("{path} (in {})", file.display()));
                }
            }
        }
    }
    if !unmapped.is_empty() {
        panic!(
            "cudarc result functions without their driver symbols in build.rs \
             RESULT_SYMBOLS: {unmapped:?}"
        );
    }

    let mut out = String::from(
        "/// Every driver entry point the CUDA executor calls (generated by build.rs from\n\
         /// the sources of `executor/cuda`).\n\
         pub(super) const DRIVER_SYMBOLS: &[&str] = &[\n",
    );
    for s in &symbols {
        out.push_str(&format!("    {s:?},\n"));
    }
    out.push_str("];\n");
    let dest = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("driver_symbols.rs");
    fs::write(&dest, out).unwrap_or_else(|e| panic!("writing {}: {e}", dest.display()));
}
