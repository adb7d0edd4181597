use super::*;
use crate::fatbin::{self, Compression};
use proptest::prelude::*;

/// Test data produced by `testdata/regen.sh` with nvcc 13 (sources alongside).
const PARAMS: &[u8] = include_bytes!("../../testdata/params.cubin");
const BIGPARAM: &[u8] = include_bytes!("../../testdata/bigparam.cubin");
const GLOBALS: &[u8] = include_bytes!("../../testdata/globals.cubin");
const GLOBALS_RDC: &[u8] = include_bytes!("../../testdata/globals_rdc.cubin");
const PRINTS: &[u8] = include_bytes!("../../testdata/prints.cubin");
const TINY: &[u8] = include_bytes!("../../testdata/tiny.fatbin");
const TINY_MULTI: &[u8] = include_bytes!("../../testdata/tiny_multi.fatbin");
const TINY_LZ4: &[u8] = include_bytes!("../../testdata/tiny_lz4.fatbin");
const TINY_DEBUG: &[u8] = include_bytes!("../../testdata/tiny_debug.fatbin");
const BIGGLOBALS: &[u8] = include_bytes!("../../testdata/bigglobals.fatbin");
const BIGGLOBALS_LZ4: &[u8] = include_bytes!("../../testdata/bigglobals_lz4.fatbin");
const BIGGLOBALS_ZSTD: &[u8] = include_bytes!("../../testdata/bigglobals_zstd.fatbin");

fn layout(elf: &[u8], kernel: &str) -> Vec<(u32, u32)> {
    kernel_params(elf, kernel)
        .unwrap()
        .iter()
        .map(|p| (p.offset, p.size))
        .collect()
}

#[test]
fn measured_layout() {
    // __global__ void k(int, float*, struct{double;int;char[12]}, char, double)
    assert_eq!(
        layout(PARAMS, "_Z1kiPf1Scd"),
        [(0, 4), (8, 8), (16, 24), (40, 1), (48, 8)]
    );
    let cubin = Cubin::parse(PARAMS).unwrap();
    assert_eq!(cubin.kernel_params_size("_Z1kiPf1Scd").unwrap(), 56);
}

#[test]
fn no_params() {
    assert_eq!(layout(PARAMS, "_Z8noparamsv"), []);
    let cubin = Cubin::parse(PARAMS).unwrap();
    assert_eq!(cubin.kernel_params_size("_Z8noparamsv").unwrap(), 0);
}

#[test]
fn many_params() {
    let name = "_Z4manyiiiiiiiiiiffddcsxPiPfPdci";
    let mut want: Vec<(u32, u32)> = (0..12).map(|i| (4 * i, 4)).collect();
    want.extend([
        (48, 8),  // double a12
        (56, 8),  // double a13
        (64, 1),  // char a14
        (66, 2),  // short a15
        (72, 8),  // long long a16
        (80, 8),  // int *a17
        (88, 8),  // float *a18
        (96, 8),  // double *a19
        (104, 1), // char a20
        (108, 4), // int a21
    ]);
    assert_eq!(layout(PARAMS, name), want);
    let cubin = Cubin::parse(PARAMS).unwrap();
    assert_eq!(cubin.kernel_params_size(name).unwrap(), 112);
}

#[test]
fn template_and_unused_params() {
    assert_eq!(
        layout(PARAMS, "_Z4tmplIfEvPT_S0_i"),
        [(0, 8), (8, 4), (12, 4)]
    );
    assert_eq!(
        layout(PARAMS, "_Z4tmplIdEvPT_S0_i"),
        [(0, 8), (8, 8), (16, 4)]
    );
    assert_eq!(
        layout(PARAMS, "_Z6unusedidcPi"),
        [(0, 4), (8, 8), (16, 1), (24, 8)]
    );
}

#[test]
fn big_params_use_v2_records() {
    let cubin = Cubin::parse(BIGPARAM).unwrap();
    let kernel = "_Z3bigi3BigPi";
    assert!(cubin
        .kernel_info(kernel)
        .unwrap()
        .iter()
        .any(|a| a.attr == EIATTR_KPARAM_INFO_V2));
    assert_eq!(layout(BIGPARAM, kernel), [(0, 4), (4, 5000), (5008, 8)]);
    assert_eq!(cubin.kernel_params_size(kernel).unwrap(), 5016);
}

#[test]
fn kernel_list() {
    let mut names = kernels(PARAMS).unwrap();
    names.sort();
    assert_eq!(
        names,
        [
            "_Z1kiPf1Scd",
            "_Z4manyiiiiiiiiiiffddcsxPiPfPdci",
            "_Z4tmplIdEvPT_S0_i",
            "_Z4tmplIfEvPT_S0_i",
            "_Z6unusedidcPi",
            "_Z8noparamsv",
        ]
    );
    assert_eq!(kernels(GLOBALS).unwrap(), ["_Z11use_globalsPf"]);
    assert_eq!(kernels(GLOBALS_RDC).unwrap(), ["_Z11use_globalsPf"]);
    assert_eq!(
        kernel_params(PARAMS, "nope"),
        Err(CubinError::KernelNotFound("nope".into()))
    );
    // The module-wide .nv.info is not a kernel.
    assert!(matches!(
        kernel_params(PARAMS, ""),
        Err(CubinError::KernelNotFound(_))
    ));
}

#[test]
fn kernel_table_agrees_with_lookups_by_name() {
    for elf in [PARAMS, BIGPARAM, GLOBALS, GLOBALS_RDC] {
        let cubin = Cubin::parse(elf).unwrap();
        let table = cubin.kernel_table();
        let mut names: Vec<&String> = table.keys().collect();
        names.sort();
        let mut listed = cubin.kernels();
        listed.sort();
        assert_eq!(names, listed.iter().collect::<Vec<_>>());
        for name in &listed {
            assert_eq!(table[name], cubin.kernel_params(name), "{name}");
        }
    }
}

#[test]
fn nv_info_formats() {
    let section = [
        0x01, 0x3e, 0x00, 0x00, // NVAL
        0x02, 0x4c, 0x07, 0x00, // BVAL 7 + pad
        0x03, 0x19, 0x38, 0x00, // HVAL 56
        0x04, 0x0a, 0x02, 0x00, 0xaa, 0xbb, // SVAL of 2 bytes
    ];
    assert_eq!(
        parse_nv_info(&section, "s").unwrap(),
        [
            NvInfoAttr {
                attr: 0x3e,
                value: NvInfoValue::None
            },
            NvInfoAttr {
                attr: 0x4c,
                value: NvInfoValue::Byte(7)
            },
            NvInfoAttr {
                attr: 0x19,
                value: NvInfoValue::Half(56)
            },
            NvInfoAttr {
                attr: 0x0a,
                value: NvInfoValue::Sized(&[0xaa, 0xbb])
            },
        ]
    );
    assert!(parse_nv_info(&section[..section.len() - 1], "s").is_err());
    assert!(parse_nv_info(&section[..2], "s").is_err());
    assert!(parse_nv_info(&[0x05, 0, 0, 0], "s").is_err());
}

fn check_globals(elf: &[u8]) {
    let g = global(elf, "g").unwrap().unwrap();
    assert_eq!(
        g,
        GlobalVar {
            size: 4,
            init: vec![5, 0, 0, 0],
            constant: false,
            managed: false
        }
    );
    let z = global(elf, "z").unwrap().unwrap();
    assert_eq!(
        z,
        GlobalVar {
            size: 12,
            init: vec![],
            constant: false,
            managed: false
        }
    );
    let c = global(elf, "c").unwrap().unwrap();
    let floats: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect();
    assert_eq!(
        c,
        GlobalVar {
            size: 16,
            init: floats,
            constant: true,
            managed: false
        }
    );
    let cz = global(elf, "cz").unwrap().unwrap();
    assert_eq!(
        cz,
        GlobalVar {
            size: 8,
            init: vec![0; 8],
            constant: true,
            managed: false
        }
    );
    let d2 = global(elf, "d2").unwrap().unwrap();
    let doubles: Vec<u8> = [1.5f64, -2.0]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect();
    assert_eq!(d2.init, doubles);
    assert!(!d2.constant);
    assert_eq!(global(elf, "nope").unwrap(), None);
    // Kernels are not variables.
    assert_eq!(global(elf, "_Z11use_globalsPf").unwrap(), None);
}

#[test]
fn globals() {
    check_globals(GLOBALS);
}

#[test]
fn globals_relocatable() {
    // -rdc: symbols of type STT_CUDA_OBJECT, .nv.global without NOBITS.
    check_globals(GLOBALS_RDC);
}

/// `elf` with the size of variable `name`, and of the section holding it, patched.
fn with_global_size(elf: &[u8], name: &str, size: u64, section_size: u64) -> Vec<u8> {
    let c = Cubin::parse(elf).unwrap();
    let mut out = elf.to_vec();
    let file_offset = |p: *const u8| p as usize - elf.as_ptr() as usize;
    let (i, sym) = c
        .symbols
        .enumerate()
        .find(|(_, s)| c.symbols.symbol_name(c.endian, s).ok() == Some(name.as_bytes()))
        .unwrap();
    let st_size = file_offset((sym as *const elf::Sym64<Endianness>).cast()) + 16;
    out[st_size..st_size + 8].copy_from_slice(&size.to_le_bytes());
    let index = c.symbols.symbol_section(c.endian, sym, i).unwrap().unwrap();
    let header = c.sections.section(index).unwrap();
    let sh_size = file_offset((header as *const elf::SectionHeader64<Endianness>).cast()) + 32;
    out[sh_size..sh_size + 8].copy_from_slice(&section_size.to_le_bytes());
    out
}

#[test]
fn huge_zero_initialised_globals_are_not_materialised() {
    // Found by the fatbin fuzz target: a 4 GiB zero-initialised variable (two header
    // fields) made `global` allocate 4 GiB of zeros, in the worker, before the
    // executor could weigh the size against its memory.
    for elf in [GLOBALS, GLOBALS_RDC] {
        let big = with_global_size(elf, "z", MAX_GLOBAL_LEN, 1 << 40);
        let z = global(&big, "z").unwrap().unwrap();
        assert_eq!((z.size, z.init.len()), (MAX_GLOBAL_LEN, 0));
        let bigger = with_global_size(elf, "z", MAX_GLOBAL_LEN + 1, 1 << 40);
        assert!(matches!(
            global(&bigger, "z"),
            Err(CubinError::BadGlobal { .. })
        ));
    }
}

#[test]
fn cubins_from_fatbins() {
    let fb = fatbin::parse(TINY).unwrap();
    let elf = find_cubin(&fb).unwrap();
    assert_eq!(kernels(&elf).unwrap(), ["_Z4tinyPi"]);
    assert_eq!(layout(&elf, "_Z4tinyPi"), [(0, 8)]);
    assert_eq!(find_cubin_for(&fb, 90).unwrap(), elf);
    assert_eq!(find_cubin_for(&fb, 89), Err(CubinError::NoCubin));
    assert_eq!(find_cubin_for(&fb, 100), Err(CubinError::NoCubin));

    let multi = fatbin::parse(TINY_MULTI).unwrap();
    let arch_of = |payload: &[u8]| {
        multi
            .entries()
            .find(|e| std::ptr::eq(e.payload, payload))
            .unwrap()
            .sm_arch
    };
    assert_eq!(arch_of(&find_cubin(&multi).unwrap()), 90);
    assert_eq!(arch_of(&find_cubin_for(&multi, 86).unwrap()), 80);
    assert_eq!(arch_of(&find_cubin_for(&multi, 90).unwrap()), 90);

    // Compressed cubins are decompressed: the LZ4 one is the very cubin tiny.fatbin
    // stores plainly; the -G one (zstd) is a debug build of the same kernel.
    let lz4 = fatbin::parse(TINY_LZ4).unwrap();
    let lz4_elf = find_cubin_for(&lz4, 90).unwrap();
    assert!(matches!(lz4_elf, Cow::Owned(_)));
    assert_eq!(lz4_elf, elf);
    let dbg = fatbin::parse(TINY_DEBUG).unwrap();
    assert_eq!(kernels(&find_cubin(&dbg).unwrap()).unwrap(), ["_Z4tinyPi"]);
    assert_eq!(find_cubin_for(&dbg, 89), Err(CubinError::NoCubin));

    // PTX only.
    let spec = fatbin::tests::EntrySpec {
        kind: 1,
        sm_arch: 90,
        flags: 0x11,
        header_size: 64,
        payload: b".version 9.0\0\0\0\0".to_vec(),
        name: None,
    };
    let bytes = fatbin::tests::build(&[vec![spec]]);
    assert_eq!(
        find_cubin(&fatbin::parse(&bytes).unwrap()),
        Err(CubinError::NoCubin)
    );
}

#[test]
fn unaligned_input() {
    // Cubins inside fatbins start at arbitrary offsets of arbitrary buffers.
    let mut buf = vec![0u8];
    buf.extend_from_slice(PARAMS);
    let elf = &buf[1..];
    assert_eq!(
        layout(elf, "_Z1kiPf1Scd"),
        [(0, 4), (8, 8), (16, 24), (40, 1), (48, 8)]
    );
}

#[test]
fn not_cubins() {
    assert!(matches!(kernels(b""), Err(CubinError::Elf(_))));
    assert!(matches!(kernels(TINY), Err(CubinError::Elf(_))));
    let mut x86 = GLOBALS.to_vec();
    x86[0x12..0x14].copy_from_slice(&62u16.to_le_bytes());
    assert_eq!(kernels(&x86), Err(CubinError::NotCuda(62)));
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
        let _ = kernels(&bytes);
        let _ = kernel_params(&bytes, "_Z1kiPf1Scd");
        let _ = global(&bytes, "g");
        let _ = parse_nv_info(&bytes, "s");
    }

    #[test]
    fn mutated_cubins_never_panic(
        which in 0usize..3,
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..16),
    ) {
        let mut bytes = [PARAMS, GLOBALS, GLOBALS_RDC][which].to_vec();
        for (i, b) in edits {
            let i = i.index(bytes.len());
            bytes[i] = b;
        }
        if let Ok(cubin) = Cubin::parse(&bytes) {
            let table = cubin.kernel_table();
            for k in cubin.kernels() {
                let params = cubin.kernel_params(&k);
                let _ = cubin.kernel_params_size(&k);
                // One kernel name twice in the symbols would list it twice; its
                // first entry answers in both.
                if let Some(from_table) = table.get(&k) {
                    prop_assert_eq!(from_table.is_ok(), params.is_ok());
                }
            }
            for name in ["g", "z", "c", "cz", "d2"] {
                let _ = cubin.global(name);
            }
        }
    }
}

#[test]
fn module_data_counts_globals_and_constant_banks() {
    // .nv.constant4 0x18, .nv.constant3 0x18, .nv.global.init 0x14 (8-aligned:
    // 0x18), .nv.global 0xc; not .nv.constant0.<kernel> (0x218) nor the code.
    assert_eq!(module_data_len(GLOBALS).unwrap(), 0x18 + 0x18 + 0x18 + 0xc);
    let big = with_global_size(GLOBALS, "z", 12, 1 << 30);
    assert_eq!(module_data_len(&big).unwrap(), 0x18 * 3 + (1 << 30));
    let huge = with_global_size(GLOBALS, "z", 12, MAX_GLOBAL_LEN + 1);
    assert!(matches!(
        module_data_len(&huge),
        Err(CubinError::BadGlobal { .. })
    ));
    assert!(module_data_len(GLOBALS_RDC).unwrap() >= 0x18 + 0x14 + 0xc);
}

/// The cubin entry's compression and the module data of the cubin chosen for sm_90.
fn measured(fatbin_bytes: &[u8]) -> (Compression, u64) {
    let fb = fatbin::parse(fatbin_bytes).unwrap();
    let entry = fb.entries().find(|e| e.kind == EntryKind::Cubin).unwrap();
    let elf = find_cubin_for(&fb, 90).unwrap();
    (entry.compression(), module_data_len(&elf).unwrap())
}

#[test]
fn compressed_cubins_measure_like_uncompressed_ones() {
    // testdata/bigglobals.cu built three ways by regen.sh.
    let (none, plain) = measured(BIGGLOBALS);
    assert_eq!(none, Compression::None);
    // 64 MiB zero-initialised (NOBITS: not in the file), 16 B initialised, 32 B
    // constant, each padded to its alignment.
    assert!(plain >= (64 << 20) + 16 + 32, "{plain}");
    assert!(plain < (64 << 20) + 4096, "{plain}");
    assert_eq!(measured(BIGGLOBALS_LZ4), (Compression::Lz4, plain));
    assert_eq!(measured(BIGGLOBALS_ZSTD), (Compression::Zstd, plain));
    // And the decompressed cubins are the same code.
    let elf = |b| find_cubin(&fatbin::parse(b).unwrap()).unwrap().into_owned();
    let plain_elf = elf(BIGGLOBALS);
    assert_eq!(elf(BIGGLOBALS_LZ4), plain_elf);
    assert_eq!(kernels(&elf(BIGGLOBALS_ZSTD)).unwrap(), ["_Z5touchPfi"]);
}

#[test]
fn compressed_and_plain_cubins_together() {
    // Back-to-back containers: sm_80 and sm_90 plain (tiny_multi) then sm_90 LZ4
    // (bigglobals). At a tie the plain cubin wins; a higher or only fitting
    // architecture wins whether compressed or not.
    let mut bytes = TINY_MULTI.to_vec();
    bytes.extend_from_slice(BIGGLOBALS_LZ4);
    let fb = fatbin::parse(&bytes).unwrap();
    assert!(matches!(find_cubin_for(&fb, 90).unwrap(), Cow::Borrowed(_)));
    assert_eq!(
        kernels(&find_cubin_for(&fb, 90).unwrap()).unwrap(),
        ["_Z4tinyPi"]
    );
    assert_eq!(
        kernels(&find_cubin_for(&fb, 86).unwrap()).unwrap(),
        ["_Z4tinyPi"]
    );

    let mut bytes = BIGGLOBALS_LZ4.to_vec();
    bytes.extend_from_slice(TINY_MULTI);
    let fb = fatbin::parse(&bytes).unwrap();
    assert!(matches!(find_cubin_for(&fb, 90).unwrap(), Cow::Borrowed(_)));
    // A plain sm_80 cubin (globals.cubin) and the LZ4 sm_90 one: sm_90 wins where it
    // fits, compressed or not.
    let mut bytes = fatbin::tests::build(&[vec![fatbin::tests::EntrySpec {
        kind: 2,
        sm_arch: 80,
        flags: 0x11,
        header_size: 64,
        payload: GLOBALS.to_vec(),
        name: None,
    }]]);
    bytes.extend_from_slice(BIGGLOBALS_LZ4);
    let fb = fatbin::parse(&bytes).unwrap();
    assert_eq!(kernels(&find_cubin(&fb).unwrap()).unwrap(), ["_Z5touchPfi"]);
    assert_eq!(
        kernels(&find_cubin_for(&fb, 86).unwrap()).unwrap(),
        ["_Z11use_globalsPf"]
    );
}

#[test]
fn undecodable_compressed_cubin_is_refused() {
    for bytes in [BIGGLOBALS_LZ4, BIGGLOBALS_ZSTD] {
        let fb = fatbin::parse(bytes).unwrap();
        let at = fb
            .entries()
            .find(|e| e.kind == EntryKind::Cubin)
            .unwrap()
            .offset
            + 0x38;
        let mut bad = bytes.to_vec();
        bad[at..at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            find_cubin(&fatbin::parse(&bad).unwrap()),
            Err(CubinError::BadCompressedCubin {
                sm_arch: 90,
                source: FatbinError::UncompressedTooLarge { .. }
            })
        ));
    }
}

#[test]
fn a_grown_cubin_is_the_same_module_and_at_least_as_long_as_asked() {
    let elf = include_bytes!("../../testdata/params.cubin");
    let big = grown(elf, 1 << 20);
    assert!(big.len() > 1 << 20);
    assert_eq!(kernels(&big).unwrap(), kernels(elf).unwrap());
    assert_eq!(
        module_data_len(&big).unwrap(),
        module_data_len(elf).unwrap()
    );
}

/// A kernel that calls `printf` leaves `vprintf` to the driver; others do not.
#[test]
fn a_cubin_that_calls_printf_says_so() {
    assert!(Cubin::parse(PRINTS).unwrap().prints());
    for quiet in [PARAMS, GLOBALS, GLOBALS_RDC] {
        assert!(!Cubin::parse(quiet).unwrap().prints());
    }
}
