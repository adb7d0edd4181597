//! The fatbinary and cubin parsers over arbitrary bytes: every public entry point must
//! return (an error is fine) without panicking, and the parsers must agree with each
//! other where their contracts overlap. Compressed entries are decompressed (LZ4
//! blocks and zstd frames, bounded), and the cubins that come out are queried too.
#![no_main]

use std::borrow::Cow;

use libfuzzer_sys::fuzz_target;
use vmcuda_wire::cubin::{self, Cubin};
use vmcuda_wire::fatbin::{self, EntryKind, CONTAINER_HEADER_LEN};

/// Device variables of wire/testdata/globals.cu, so mutated copies of its cubin are
/// asked for variables that exist.
const GLOBALS: &[&str] = &["g", "z", "c", "cz", "d2", "missing"];

fn query_cubin(elf: &[u8]) {
    let _ = cubin::parse_nv_info(elf, ".nv.info");
    let Ok(c) = Cubin::parse(elf) else {
        return;
    };
    let kernels = c.kernels();
    // Bounded, so a symbol table of a million kernels cannot stall the run.
    for k in kernels.iter().take(16) {
        if !k.contains('\u{FFFD}') {
            assert!(c.has_kernel(k), "listed kernel {k:?} is not found by name");
        }
        let _ = c.kernel_info(k);
        let _ = c.kernel_params(k);
        let _ = c.kernel_params_size(k);
        let _ = c.global(k);
    }
    for name in GLOBALS {
        if let Ok(Some(var)) = c.global(name) {
            assert!(var.init.len() as u64 <= var.size);
            assert!(var.size <= cubin::MAX_GLOBAL_LEN);
        }
    }
}

fuzz_target!(|input: &[u8]| {
    let _ = fatbin::parse_wrapper(input);
    if let Some(header) = input.first_chunk::<CONTAINER_HEADER_LEN>() {
        if let Ok(len) = fatbin::container_total_len(header) {
            assert!(len >= CONTAINER_HEADER_LEN as u64 && len <= fatbin::MAX_CONTAINER_LEN);
        }
    }
    let total = fatbin::containers_len(input);
    if let Ok(fb) = fatbin::parse(input) {
        // parse walks the same containers as containers_len, and checks more.
        assert_eq!(total, Ok(fb.len()));
        assert!(fb.len() <= input.len() && !fb.is_empty());
        for e in fb.entries() {
            assert!(e.compressed_data().len() <= e.payload.len());
            // Decompression is bounded and exact: what comes back has the declared
            // size (or is the payload itself when the entry is not compressed).
            let Ok(data) = e.payload_decompressed() else {
                continue;
            };
            match data {
                Cow::Borrowed(p) => assert!(!e.is_compressed() && p == e.payload),
                Cow::Owned(ref d) => {
                    assert_eq!(d.len() as u64, e.uncompressed_size);
                    assert!(e.uncompressed_size <= fatbin::MAX_UNCOMPRESSED_LEN);
                }
            }
            if e.kind == EntryKind::Cubin {
                query_cubin(&data);
            }
        }
        match cubin::find_cubin(&fb) {
            Ok(Cow::Borrowed(elf)) => {
                assert!(fb.entries().any(|e| e.payload.as_ptr() == elf.as_ptr()));
            }
            Ok(Cow::Owned(elf)) => {
                assert!(fb
                    .entries()
                    .any(|e| e.is_compressed() && e.uncompressed_size == elf.len() as u64));
            }
            Err(_) => {}
        }
        let _ = cubin::find_cubin_for(&fb, 90);
    }
    query_cubin(input);
});
