use super::*;
use proptest::prelude::*;

/// Test data produced by `testdata/regen.sh` with nvcc 13.
const TINY: &[u8] = include_bytes!("../../testdata/tiny.fatbin");
const TINY_MULTI: &[u8] = include_bytes!("../../testdata/tiny_multi.fatbin");
const TINY_LZ4: &[u8] = include_bytes!("../../testdata/tiny_lz4.fatbin");
const TINY_DEBUG: &[u8] = include_bytes!("../../testdata/tiny_debug.fatbin");
const BIGGLOBALS_LZ4: &[u8] = include_bytes!("../../testdata/bigglobals_lz4.fatbin");
const BIGGLOBALS_ZSTD: &[u8] = include_bytes!("../../testdata/bigglobals_zstd.fatbin");
const EXE_FATBIN: &[u8] = include_bytes!("../../testdata/tiny_exe.nv_fatbin");
const EXE_SEGMENT: &[u8] = include_bytes!("../../testdata/tiny_exe.nvFatBinSegment");
const EXE_ADDRS: &str = include_str!("../../testdata/tiny_exe.txt");

/// Description of one entry for [`build`].
#[derive(Debug, Clone)]
pub(crate) struct EntrySpec {
    pub kind: u16,
    pub sm_arch: u32,
    pub flags: u64,
    /// Header size; at least 64, and room for the name after byte 64.
    pub header_size: u32,
    pub payload: Vec<u8>,
    pub name: Option<String>,
}

/// Test-only fatbin builder: one container per inner vector, back to back.
/// Names are stored at entry offset 64 with a NUL, as nvcc does with `-G`.
pub(crate) fn build(containers: &[Vec<EntrySpec>]) -> Vec<u8> {
    let mut out = Vec::new();
    for entries in containers {
        let mut body = Vec::new();
        for e in entries {
            let start = body.len();
            let mut header = vec![0u8; e.header_size as usize];
            header[0..2].copy_from_slice(&e.kind.to_le_bytes());
            header[2..4].copy_from_slice(&0x0101u16.to_le_bytes());
            header[4..8].copy_from_slice(&e.header_size.to_le_bytes());
            header[8..16].copy_from_slice(&(e.payload.len() as u64).to_le_bytes());
            let compressed = e.flags & (FLAG_COMPRESSED_LZ4 | FLAG_COMPRESSED_ZSTD) != 0;
            if compressed {
                header[0x10..0x14].copy_from_slice(&(e.payload.len() as u32).to_le_bytes());
                header[0x38..0x40].copy_from_slice(&(e.payload.len() as u64 * 3).to_le_bytes());
            }
            header[0x18..0x1A].copy_from_slice(&8u16.to_le_bytes());
            header[0x1A..0x1C].copy_from_slice(&1u16.to_le_bytes());
            header[0x1C..0x20].copy_from_slice(&e.sm_arch.to_le_bytes());
            header[0x28..0x30].copy_from_slice(&e.flags.to_le_bytes());
            if let Some(name) = &e.name {
                header[0x20..0x24].copy_from_slice(&64u32.to_le_bytes());
                header[0x24..0x28].copy_from_slice(&(name.len() as u32).to_le_bytes());
                header[64..64 + name.len()].copy_from_slice(name.as_bytes());
            }
            body.extend_from_slice(&header);
            body.extend_from_slice(&e.payload);
            assert_eq!(body.len() - start, e.header_size as usize + e.payload.len());
        }
        out.extend_from_slice(&CONTAINER_MAGIC.to_le_bytes());
        out.extend_from_slice(&1u16.to_le_bytes());
        out.extend_from_slice(&16u16.to_le_bytes());
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&body);
    }
    out
}

fn spec(kind: u16, sm_arch: u32, flags: u64, payload: &[u8]) -> EntrySpec {
    EntrySpec {
        kind,
        sm_arch,
        flags,
        header_size: 64,
        payload: payload.to_vec(),
        name: None,
    }
}

fn header16(bytes: &[u8]) -> [u8; 16] {
    bytes[..16].try_into().unwrap()
}

#[test]
fn hand_built_round_trip() {
    let mut named = spec(1, 80, FLAG_LINUX | FLAG_COMPRESSED_ZSTD, b"zstd!!!\0");
    named.header_size = 80;
    named.name = Some("a.cu".into());
    let bytes = build(&[
        vec![spec(2, 90, 0x11, b"\x7fELF1234"), named],
        vec![spec(7, 0, 0, b"")],
    ]);
    let fb = parse(&bytes).unwrap();
    assert_eq!(fb.containers.len(), 2);
    assert_eq!(fb.len(), bytes.len());
    assert_eq!(containers_len(&bytes).unwrap(), bytes.len());
    let e: Vec<_> = fb.entries().collect();
    assert_eq!(e.len(), 3);
    assert_eq!(e[0].kind, EntryKind::Cubin);
    assert_eq!(e[0].payload, b"\x7fELF1234");
    assert_eq!(e[0].compression(), Compression::None);
    assert_eq!(e[0].offset, 16);
    assert_eq!(e[1].kind, EntryKind::Ptx);
    assert_eq!(e[1].compression(), Compression::Zstd);
    assert_eq!(e[1].name, Some("a.cu"));
    assert_eq!(e[1].sm_arch, 80);
    assert_eq!(e[1].uncompressed_size, 24);
    assert_eq!(e[2].kind, EntryKind::Unknown(7));
    assert_eq!(e[2].kind.raw(), 7);
    assert!(e[2].payload.is_empty());
    // The guest's header-by-header walk agrees.
    let first = container_total_len(&header16(&bytes)).unwrap() as usize;
    let second = container_total_len(&header16(&bytes[first..])).unwrap() as usize;
    assert_eq!(first + second, bytes.len());
}

#[test]
fn trailing_garbage_is_ignored() {
    let mut bytes = build(&[vec![spec(2, 90, 0x11, b"abcdefgh")]]);
    let len = bytes.len();
    bytes.extend_from_slice(b"\0\0\0\0not a container");
    assert_eq!(containers_len(&bytes).unwrap(), len);
    assert_eq!(parse(&bytes).unwrap().len(), len);
    // Fewer than four trailing bytes: also the end.
    bytes.truncate(len + 3);
    assert_eq!(containers_len(&bytes).unwrap(), len);
}

#[test]
fn errors() {
    let good = build(&[vec![spec(2, 90, 0x11, b"abcdefgh")]]);
    assert!(matches!(
        containers_len(b""),
        Err(FatbinError::Truncated { .. })
    ));
    assert_eq!(
        parse(&[0u8; 32]),
        Err(FatbinError::BadContainerMagic {
            offset: 0,
            found: 0
        })
    );
    // Container running past the end of the slice.
    assert!(matches!(
        parse(&good[..good.len() - 1]),
        Err(FatbinError::Truncated {
            what: "container",
            ..
        })
    ));
    // Absurd container size.
    let mut huge = good.clone();
    huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        container_total_len(&header16(&huge)),
        Err(FatbinError::ContainerTooLarge { len: u64::MAX, .. })
    ));
    assert!(matches!(
        containers_len(&huge),
        Err(FatbinError::ContainerTooLarge { .. })
    ));
    // Container header size below 16.
    let mut small = good.clone();
    small[6] = 8;
    assert!(matches!(
        parse(&small),
        Err(FatbinError::BadHeaderSize {
            what: "container",
            ..
        })
    ));
    // Entry header size below the minimum, and absurd payload size.
    let mut bad_hs = good.clone();
    bad_hs[16 + 4..16 + 8].copy_from_slice(&8u32.to_le_bytes());
    assert!(matches!(
        parse(&bad_hs),
        Err(FatbinError::BadHeaderSize { what: "entry", .. })
    ));
    let mut bad_ps = good.clone();
    bad_ps[16 + 8..16 + 16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        parse(&bad_ps),
        Err(FatbinError::Truncated {
            what: "entry payload",
            ..
        })
    ));
    // A container whose body ends in the middle of an entry header.
    let mut short_body = build(&[vec![]]);
    short_body[8..16].copy_from_slice(&8u64.to_le_bytes());
    short_body.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
    assert!(matches!(
        parse(&short_body),
        Err(FatbinError::Truncated {
            what: "entry header",
            ..
        })
    ));
    // An entry may not take bytes beyond its container, even if the slice has them.
    let mut two = build(&[vec![spec(2, 90, 0x11, b"abcdefgh")], vec![]]);
    two[16 + 8..16 + 16].copy_from_slice(&16u64.to_le_bytes());
    assert!(parse(&two).is_err());
}

#[test]
fn wrapper() {
    let mut w = Vec::new();
    w.extend_from_slice(&WRAPPER_MAGIC.to_le_bytes());
    w.extend_from_slice(&2u32.to_le_bytes());
    w.extend_from_slice(&0x1122_3344_5566_7788u64.to_le_bytes());
    w.extend_from_slice(&0x99u64.to_le_bytes());
    let parsed = parse_wrapper(&w).unwrap();
    assert_eq!(
        parsed,
        Wrapper {
            version: 2,
            data: 0x1122_3344_5566_7788,
            prelinked: 0x99
        }
    );
    assert_eq!(parsed.prelinked_list(), Some(0x99));
    assert!(matches!(
        parse_wrapper(&w[..23]),
        Err(FatbinError::Truncated { .. })
    ));
    w[4] = 3;
    assert_eq!(parse_wrapper(&w), Err(FatbinError::BadWrapperVersion(3)));
    w[4] = 1;
    assert_eq!(parse_wrapper(&w).unwrap().prelinked_list(), None);
    w[0] = 0;
    assert!(matches!(
        parse_wrapper(&w),
        Err(FatbinError::BadWrapperMagic(_))
    ));
}

#[test]
fn nvcc_default_fatbin() {
    // `nvcc -fatbin` writes the container directly, without a wrapper.
    let fb = parse(TINY).unwrap();
    assert_eq!(containers_len(TINY).unwrap(), TINY.len());
    assert_eq!(fb.containers.len(), 1);
    assert_eq!(fb.containers[0].version, 1);
    let e: Vec<_> = fb.entries().collect();
    assert_eq!(e.len(), 2);
    let (elf, ptx) = (e[0], e[1]);
    assert_eq!(elf.kind, EntryKind::Cubin);
    assert_eq!(elf.header_size, 64);
    assert_eq!(elf.flags, EntryFlags(0x11));
    assert!(elf.flags.is_64bit() && !elf.flags.is_debug());
    assert!(!elf.is_compressed());
    assert_eq!(elf.sm_arch, 90);
    assert_eq!(&elf.payload[..4], b"\x7fELF");
    assert_eq!(elf.compressed_data(), elf.payload);
    assert_eq!(elf.name, None);
    assert_eq!(elf.options, None);
    assert_eq!(ptx.kind, EntryKind::Ptx);
    assert_eq!(ptx.header_size, 80);
    assert_eq!(ptx.flags, EntryFlags(0x8011));
    assert_eq!(ptx.compression(), Compression::Zstd);
    assert_eq!((ptx.major, ptx.minor), (9, 0));
    assert!(ptx.uncompressed_size > ptx.payload.len() as u64);
    assert!(ptx.compressed_size as usize <= ptx.payload.len());
    assert_eq!(ptx.compressed_data().len(), ptx.compressed_size as usize);
    // zstd frame magic.
    assert_eq!(&ptx.payload[..4], &[0x28, 0xb5, 0x2f, 0xfd]);
}

#[test]
fn nvcc_multi_arch_lz4_and_debug() {
    let archs: Vec<_> = parse(TINY_MULTI)
        .unwrap()
        .entries()
        .map(|e| (e.kind, e.sm_arch))
        .collect();
    assert_eq!(
        archs,
        [
            (EntryKind::Cubin, 80),
            (EntryKind::Cubin, 90),
            (EntryKind::Ptx, 90)
        ]
    );

    let lz4 = parse(TINY_LZ4).unwrap();
    assert!(lz4.entries().all(|e| e.compression() == Compression::Lz4));

    let dbg = parse(TINY_DEBUG).unwrap();
    let e: Vec<_> = dbg.entries().collect();
    assert_eq!(e.len(), 2);
    assert!(e.iter().all(|e| e.flags.is_debug()));
    assert!(e.iter().all(|e| e.name == Some("tiny.cu")));
    assert_eq!(e[0].compression(), Compression::Zstd);
    assert_eq!(e[0].kind, EntryKind::Cubin);
    assert_eq!(
        e[1].options,
        Some(" -g --dont-merge-basicblocks --return-at-end ")
    );
}

/// Address of `section` as recorded by regen.sh.
fn exe_addr(section: &str) -> u64 {
    let line = EXE_ADDRS
        .lines()
        .find(|l| l.split_whitespace().next() == Some(section))
        .unwrap();
    let hex = line.split_whitespace().nth(1).unwrap();
    u64::from_str_radix(hex.trim_start_matches("0x"), 16).unwrap()
}

#[test]
fn nvcc_executable_sections() {
    // The executable's .nv_fatbin holds two containers back to back.
    let fb = parse(EXE_FATBIN).unwrap();
    assert_eq!(fb.containers.len(), 2);
    assert_eq!(containers_len(EXE_FATBIN).unwrap(), EXE_FATBIN.len());
    let first = container_total_len(&header16(EXE_FATBIN)).unwrap() as usize;
    assert_eq!(first, fb.containers[0].bytes.len());
    assert_eq!(fb.containers[1].offset, first);
    // The second container is tiny.cu's: the same as `nvcc -fatbin` produces.
    assert_eq!(fb.containers[1].bytes, TINY);

    // .nvFatBinSegment holds one wrapper per container, pointing into .nv_fatbin.
    let base = exe_addr(".nv_fatbin");
    let wrappers: Vec<_> = EXE_SEGMENT
        .chunks(WRAPPER_LEN)
        .map(|w| parse_wrapper(w).unwrap())
        .collect();
    assert_eq!(wrappers.len(), 2);
    assert_eq!(wrappers[0].version, 2);
    assert_eq!(wrappers[0].data, base);
    assert!(wrappers[0].prelinked_list().is_some());
    assert_eq!(wrappers[1].version, 1);
    assert_eq!(wrappers[1].data, base + first as u64);
    // From the second wrapper's pointer, one container remains.
    assert_eq!(containers_len(&EXE_FATBIN[first..]).unwrap(), TINY.len());
}

#[test]
fn decompressed_payloads() {
    // Every nvcc entry decodes to its declared size: cubins to ELF, PTX to text.
    for bytes in [TINY, TINY_LZ4, TINY_DEBUG, BIGGLOBALS_LZ4, BIGGLOBALS_ZSTD] {
        for e in parse(bytes).unwrap().entries() {
            let data = e.payload_decompressed().unwrap();
            if e.compression() == Compression::Zstd {
                // nvcc writes single-segment frames: the window is the content.
                assert_eq!(zstd_window(e.compressed_data()), Some(e.uncompressed_size));
            }
            if e.is_compressed() {
                assert!(matches!(data, Cow::Owned(_)));
                assert_eq!(data.len() as u64, e.uncompressed_size);
            } else {
                assert!(matches!(data, Cow::Borrowed(p) if std::ptr::eq(p, e.payload)));
            }
            match e.kind {
                EntryKind::Cubin => assert_eq!(&data[..4], b"\x7fELF"),
                _ => assert!(std::str::from_utf8(&data)
                    .unwrap()
                    .contains(".target sm_90")),
            }
        }
    }
    // nvcc's LZ4 is a raw block: no frame magic (04 22 4d 18), the first token
    // (literals, then a match) is followed directly by the ELF magic.
    let lz4 = parse(BIGGLOBALS_LZ4).unwrap();
    let cubin = lz4.entries().next().unwrap();
    assert_eq!(cubin.compression(), Compression::Lz4);
    assert_eq!(&cubin.payload[1..5], b"\x7fELF");
}

/// A copy of `bytes` whose first entry's u64 header field at `field` is `value`.
fn with_field(bytes: &[u8], field: usize, value: u64) -> Vec<u8> {
    let at = parse(bytes).unwrap().entries().next().unwrap().offset + field;
    let mut out = bytes.to_vec();
    out[at..at + 8].copy_from_slice(&value.to_le_bytes());
    out
}

/// What decompressing the first entry of `bytes` gives.
fn first_decompressed(bytes: &[u8]) -> Result<usize> {
    let fb = parse(bytes).unwrap();
    let e = fb.entries().next().unwrap();
    e.payload_decompressed().map(|d| d.len())
}

#[test]
fn decompression_is_bounded() {
    for bytes in [BIGGLOBALS_LZ4, BIGGLOBALS_ZSTD] {
        let declared = parse(bytes)
            .unwrap()
            .entries()
            .next()
            .unwrap()
            .uncompressed_size;
        let too_large = |r| matches!(r, Err(FatbinError::UncompressedTooLarge { .. }));
        let undecodable = |r| matches!(r, Err(FatbinError::Decompress { .. }));
        // Sizes refused before anything is allocated.
        for size in [MAX_UNCOMPRESSED_LEN + 1, u64::MAX] {
            assert!(too_large(first_decompressed(&with_field(
                bytes, 0x38, size
            ))));
        }
        // A size that is not the real one.
        for size in [declared - 1, declared + 1, 0] {
            let r = first_decompressed(&with_field(bytes, 0x38, size));
            assert!(undecodable(r.clone()), "{size}: {r:?}");
        }
        // A compressed stream cut short.
        let mut cut = bytes.to_vec();
        let at = parse(bytes).unwrap().entries().next().unwrap().offset + 0x10;
        cut[at..at + 4].copy_from_slice(&100u32.to_le_bytes());
        assert!(undecodable(first_decompressed(&cut)));
    }
    // LZ4 cannot expand 1.8 KB into 100 MB: refused without allocating for it.
    let r = first_decompressed(&with_field(BIGGLOBALS_LZ4, 0x38, 100 << 20));
    assert!(matches!(r, Err(FatbinError::UncompressedTooLarge { .. })));
    // zstd can (long runs); such a frame is refused once it decodes, not before. Here
    // the real frame is small, so only its own bytes are allocated.
    let r = first_decompressed(&with_field(BIGGLOBALS_ZSTD, 0x38, 100 << 20));
    assert!(matches!(r, Err(FatbinError::Decompress { .. })));
    // A frame whose window (held back in memory before any output can be read) is
    // far beyond its declared size: refused before decoding.
    let e = parse(BIGGLOBALS_ZSTD)
        .unwrap()
        .entries()
        .next()
        .unwrap()
        .clone();
    let frame = e.offset + e.header_size as usize;
    let mut wide = BIGGLOBALS_ZSTD.to_vec();
    // Not single-segment, no content size; window 2^(10+30) bytes.
    wide[frame + 4..frame + 6].copy_from_slice(&[0x00, 30 << 3]);
    assert_eq!(zstd_window(&wide[frame..]), Some(1 << 40));
    let r = first_decompressed(&wide);
    assert!(
        matches!(&r, Err(FatbinError::Decompress { reason, .. }) if reason.contains("window")),
        "{r:?}"
    );
    // Headers that end early, and other data, are no zstd frame.
    assert_eq!(zstd_window(&wide[frame..frame + 5]), None);
    assert_eq!(zstd_window(b"\x28\xb5\x2f\xfd\x60\x01"), None);
    assert_eq!(zstd_window(b"not zstd"), None);
}

fn entry_spec() -> impl Strategy<Value = EntrySpec> {
    (
        prop_oneof![Just(1u16), Just(2u16), any::<u16>()],
        any::<u32>(),
        prop_oneof![
            Just(0x11u64),
            Just(0x8011u64),
            Just(0x2011u64),
            any::<u64>()
        ],
        0u32..4,
        proptest::collection::vec(any::<u8>(), 0..64),
        proptest::option::of("[a-z]{1,8}\\.cu"),
    )
        .prop_map(|(kind, sm_arch, flags, extra, payload, name)| EntrySpec {
            kind,
            sm_arch,
            flags,
            header_size: 64 + 8 * extra + if name.is_some() { 16 } else { 0 },
            payload,
            name,
        })
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse(&bytes);
        let _ = containers_len(&bytes);
        let _ = parse_wrapper(&bytes);
        if let Some(h) = bytes.get(..16) {
            let _ = container_total_len(h.try_into().unwrap());
        }
    }

    #[test]
    fn arbitrary_bytes_after_magic_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut bytes = CONTAINER_MAGIC.to_le_bytes().to_vec();
        bytes.extend_from_slice(&tail);
        let _ = parse(&bytes);
        let _ = containers_len(&bytes);
    }

    #[test]
    fn mutated_real_fatbin_never_panics(
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let mut bytes = TINY_DEBUG.to_vec();
        for (i, b) in edits {
            let i = i.index(bytes.len());
            bytes[i] = b;
        }
        if let Ok(fb) = parse(&bytes) {
            prop_assert!(fb.len() <= bytes.len());
        }
        let _ = containers_len(&bytes);
    }

    #[test]
    fn random_compressed_payloads_never_panic(
        zstd in any::<bool>(),
        magic in any::<bool>(),
        payload in proptest::collection::vec(any::<u8>(), 0..256),
        declared in prop_oneof![0u64..4096, 0u64..(1 << 20), any::<u64>()],
    ) {
        let mut payload = payload;
        if magic {
            // Get past the frame magic (zstd) into the frame header and blocks.
            payload.splice(0..0, [0x28, 0xb5, 0x2f, 0xfd]);
        }
        let flags = if zstd { 0x8011 } else { 0x2011 };
        let bytes = build(&[vec![spec(2, 90, flags, &payload)]]);
        let bytes = with_field(&bytes, 0x38, declared);
        let fb = parse(&bytes).unwrap();
        let e = fb.entries().next().unwrap();
        if let Ok(data) = e.payload_decompressed() {
            prop_assert_eq!(data.len() as u64, declared);
        }
    }

    #[test]
    fn mutated_compressed_payloads_never_panic(
        zstd in any::<bool>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let bytes = if zstd { BIGGLOBALS_ZSTD } else { BIGGLOBALS_LZ4 };
        let fb = parse(bytes).unwrap();
        let e = fb.entries().next().unwrap();
        let start = e.offset + e.header_size as usize;
        let len = e.compressed_data().len();
        let mut bytes = bytes.to_vec();
        for (i, b) in edits {
            bytes[start + i.index(len)] = b;
        }
        let fb = parse(&bytes).unwrap();
        let e = fb.entries().next().unwrap();
        if let Ok(data) = e.payload_decompressed() {
            prop_assert_eq!(data.len() as u64, e.uncompressed_size);
        }
    }

    #[test]
    fn generated_fatbin_round_trips(
        containers in proptest::collection::vec(proptest::collection::vec(entry_spec(), 0..4), 1..4),
    ) {
        let bytes = build(&containers);
        prop_assert_eq!(containers_len(&bytes).unwrap(), bytes.len());
        let fb = parse(&bytes).unwrap();
        prop_assert_eq!(fb.len(), bytes.len());
        prop_assert_eq!(fb.containers.len(), containers.len());
        for (got, want) in fb.containers.iter().zip(&containers) {
            prop_assert_eq!(got.entries.len(), want.len());
            for (g, w) in got.entries.iter().zip(want) {
                prop_assert_eq!(g.kind.raw(), w.kind);
                prop_assert_eq!(g.sm_arch, w.sm_arch);
                prop_assert_eq!(g.flags, EntryFlags(w.flags));
                prop_assert_eq!(g.header_size, w.header_size);
                prop_assert_eq!(g.payload, &w.payload[..]);
                prop_assert_eq!(g.name, w.name.as_deref());
            }
        }
        // Dropping any byte makes the last container truncated.
        prop_assert!(parse(&bytes[..bytes.len() - 1]).is_err());
    }
}

#[test]
fn for_device_keeps_what_the_device_loads() {
    // Container 1: cubins for sm_80, sm_90, sm_100 and PTX 80/90; container 2: PTX only.
    let bytes = build(&[
        vec![
            spec(2, 80, FLAG_64BIT, b"cubin80!"),
            spec(2, 90, FLAG_64BIT, b"cubin90!"),
            spec(2, 100, FLAG_64BIT, b"cubin100"),
            spec(1, 80, FLAG_64BIT, b"ptx80..."),
            spec(1, 90, FLAG_64BIT, b"ptx90..."),
        ],
        vec![
            spec(1, 70, FLAG_64BIT, b"ptx70..."),
            spec(1, 86, FLAG_64BIT, b"ptx86..."),
            spec(1, 120, FLAG_64BIT, b"ptx120.."),
        ],
    ]);
    let ForDevice::Some(kept) = for_device(&bytes, 90).unwrap() else {
        panic!("some entries dropped");
    };
    let f = parse(&kept).unwrap();
    let entries: Vec<_> = f
        .entries()
        .map(|e| (e.kind, e.sm_arch, e.payload))
        .collect();
    assert_eq!(
        entries,
        [
            (EntryKind::Cubin, 90, &b"cubin90!"[..]),
            (EntryKind::Ptx, 86, &b"ptx86..."[..]),
        ]
    );
    assert_eq!(f.containers.len(), 2);
    // An sm_86 device runs the sm_80 cubin and nothing newer.
    let ForDevice::Some(kept) = for_device(&bytes, 86).unwrap() else {
        panic!("some entries dropped");
    };
    let archs: Vec<_> = parse(&kept).unwrap().entries().map(|e| e.sm_arch).collect();
    assert_eq!(archs, [80, 86]);
    // Nothing to drop: no copy.
    let only90 = build(&[vec![spec(2, 90, FLAG_64BIT, b"cubin90!")]]);
    assert_eq!(for_device(&only90, 90).unwrap(), ForDevice::All);
    // Nothing this device can load: an sm_75 device, or code for newer GPUs only.
    assert_eq!(for_device(&only90, 75).unwrap(), ForDevice::Nothing);
    let newer = build(&[vec![
        spec(2, 100, FLAG_64BIT, b"cubin100"),
        spec(1, 100, FLAG_64BIT, b"ptx100.."),
    ]]);
    assert_eq!(for_device(&newer, 90).unwrap(), ForDevice::Nothing);
    // A real nvcc fatbinary keeps its sm_90 cubin and parses as before.
    let ForDevice::Some(kept) = for_device(TINY_MULTI, 90).unwrap() else {
        panic!("the sm_80 cubin and the PTX dropped");
    };
    let archs: Vec<_> = parse(&kept)
        .unwrap()
        .entries()
        .map(|e| (e.kind, e.sm_arch))
        .collect();
    assert_eq!(archs, [(EntryKind::Cubin, 90)]);
}
