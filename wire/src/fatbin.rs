//! Parsing of nvcc fatbinaries: the 24-byte wrapper, the containers and their entries.
//!
//! A CUDA program hands `__cudaRegisterFatBinary` a pointer to a [`Wrapper`]; its data
//! pointer leads to one or more *containers* laid back to back (an executable built by
//! nvcc 13 has two in `.nv_fatbin`: a linker stub and the user's code), each holding
//! *entries*: ELF cubins for given SM architectures and PTX text, possibly compressed.
//!
//! The guest only knows a pointer, so it needs the byte length before it can ship
//! anything: [`container_total_len`] reads one 16-byte container header at a time
//! and [`containers_len`] does the same walk over a slice. The host then uses
//! [`parse`] to look inside. [`parse`] hands payloads out as borrowed slices,
//! compressed or not: the CUDA driver takes the container as it is, so what is
//! loaded is never rebuilt from decompressed bytes.
//!
//! The one exception is [`Entry::payload_decompressed`]. The host must know how much
//! device memory a module's globals and constant banks take before the driver loads
//! it (to keep the session's quota), and that is only in the cubin's section headers:
//! a zero-initialised `.nv.global` has a size but no bytes in the file, so the
//! compressed size says nothing about it. nvcc compresses cubins with `-G`,
//! `-Xfatbin -compress-all` (stock PyTorch builds do), so such a cubin is decompressed
//! into a private buffer, for reading only. LZ4 entries are raw LZ4 *blocks* (no
//! frame header; nvcc 13 `--compress-mode=speed`), zstd entries are zstd frames
//! (the other modes). Decompression is bounded: an entry that declares more than
//! [`MAX_UNCOMPRESSED_LEN`] bytes, or more than its compressed data could encode, is
//! refused before anything is allocated, and one that does not decode to exactly its
//! declared size is refused.
//!
//! Everything is plain safe code over `&[u8]`: every size read from the input is
//! checked with checked arithmetic and `get()`, so no input makes these functions
//! panic; inconsistent or absurd sizes come back as [`FatbinError`]. zstd frames are
//! decoded by libzstd (through the `zstd` crate, 4x faster than a decoder in Rust on
//! cuDNN's cubins), into a buffer of the declared size that it cannot write past.
//!
//! Layouts (little endian), as measured on nvcc 13.0 output:
//!
//! ```text
//! wrapper   (24 B): u32 magic 0x466243B1, u32 version (1|2), u64 data, u64 prelinked
//! container (16 B): u32 magic 0xBA55ED50, u16 version (1), u16 header size (16),
//!                   u64 size of what follows the header
//! entry header:     0x00 u16 kind (1 PTX, 2 ELF)  0x02 u16 version  0x04 u32 header size
//!                   0x08 u64 payload size  0x10 u32 compressed size  0x14 u32 options offset
//!                   0x18 u16 minor  0x1A u16 major  0x1C u32 sm arch
//!                   0x20 u32 name offset  0x24 u32 name length  0x28 u64 flags
//!                   0x38 u64 uncompressed size
//! ```
//!
//! An entry's payload starts right after its own header (`header size` bytes from its
//! start) and the next entry right after the payload. nvcc pads payloads to 8 bytes,
//! so `compressed size` may be a little below `payload size`.

use std::borrow::Cow;

use thiserror::Error;

/// Magic of the 24-byte wrapper passed to `__cudaRegisterFatBinary`.
pub const WRAPPER_MAGIC: u32 = 0x4662_43B1;
/// Size of the wrapper in bytes.
pub const WRAPPER_LEN: usize = 24;
/// Magic at the start of every container.
pub const CONTAINER_MAGIC: u32 = 0xBA55_ED50;
/// Size of the fixed part of a container header; read this many bytes, then call
/// [`container_total_len`] to learn how many bytes the whole container takes.
pub const CONTAINER_HEADER_LEN: usize = 16;
/// Smallest entry header accepted: it must hold every field up to and including the
/// uncompressed size at 0x38. nvcc 13 writes 64 (ELF) and 80 (PTX) or more.
pub const ENTRY_MIN_HEADER_LEN: usize = 0x40;
/// Largest container accepted, header included. Containers are one translation unit's
/// device code; anything above this is a corrupt header, and refusing it keeps a guest
/// from trying to copy gigabytes from a bad pointer.
pub const MAX_CONTAINER_LEN: u64 = 1 << 31;
/// Largest uncompressed size [`Entry::payload_decompressed`] accepts. A cubin's
/// zero-initialised globals take no file space, so even large modules stay far below.
pub const MAX_UNCOMPRESSED_LEN: u64 = 256 << 20;
/// LZ4 cannot expand its input by more than this factor (a match of length 255·k
/// costs at least k bytes), so a larger declared size is a lie, found before
/// allocating for it.
const LZ4_MAX_RATIO: u64 = 255;
/// A zstd decoder holds back a whole window of output before any of it can be read,
/// so the window a frame asks for is memory spent before the declared size can be
/// checked. nvcc writes single-segment frames (window = content size); an encoder
/// without the size at hand uses at most 8 MiB up to level 19. A frame may ask for
/// the declared size rounded up to a power of two, or this, whichever is larger.
const ZSTD_MIN_WINDOW_ALLOWED: u64 = 8 << 20;

/// Entry flag: 64-bit code.
pub const FLAG_64BIT: u64 = 0x1;
/// Entry flag: compiled with debug information (`-G`).
pub const FLAG_DEBUG: u64 = 0x2;
/// Entry flag: Linux host.
pub const FLAG_LINUX: u64 = 0x10;
/// Entry flag: payload is LZ4-compressed (`--compress-mode=speed`).
pub const FLAG_COMPRESSED_LZ4: u64 = 0x2000;
/// Entry flag: payload is zstd-compressed (nvcc 13's default for PTX).
pub const FLAG_COMPRESSED_ZSTD: u64 = 0x8000;

/// Everything that can be wrong with a fatbinary. Offsets are relative to the start
/// of the slice handed to the failing function.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum FatbinError {
    /// Fewer bytes than a structure needs.
    #[error("truncated {what} at offset {offset}: need {need} bytes, have {have}")]
    Truncated {
        /// Which structure was being read.
        what: &'static str,
        /// Where it starts.
        offset: usize,
        /// Bytes it needs from `offset`.
        need: u64,
        /// Bytes available from `offset`.
        have: usize,
    },
    /// The wrapper does not start with [`WRAPPER_MAGIC`].
    #[error("bad fatbin wrapper magic {0:#010x} (want {WRAPPER_MAGIC:#010x})")]
    BadWrapperMagic(u32),
    /// The wrapper version is neither 1 nor 2.
    #[error("unsupported fatbin wrapper version {0}")]
    BadWrapperVersion(u32),
    /// No container magic where a container must start.
    #[error("bad fatbin container magic {found:#010x} at offset {offset} (want {CONTAINER_MAGIC:#010x})")]
    BadContainerMagic {
        /// Where the container should start.
        offset: usize,
        /// The four bytes found there, as a little-endian u32.
        found: u32,
    },
    /// A header declares a size smaller than its fixed fields.
    #[error("{what} at offset {offset} declares header size {size}, below the minimum {min}")]
    BadHeaderSize {
        /// Which header.
        what: &'static str,
        /// Where it starts.
        offset: usize,
        /// Declared header size.
        size: u64,
        /// Smallest acceptable size.
        min: u64,
    },
    /// A container declares more than [`MAX_CONTAINER_LEN`] bytes.
    #[error("fatbin container at offset {offset} declares {len} bytes, above the {MAX_CONTAINER_LEN} limit")]
    ContainerTooLarge {
        /// Where the container starts.
        offset: usize,
        /// Total length it declares, header included (saturated at `u64::MAX`).
        len: u64,
    },
    /// A compressed entry declares an uncompressed size above
    /// [`MAX_UNCOMPRESSED_LEN`], or above what its compressed data could encode.
    #[error("fatbin entry at offset {offset} declares {size} uncompressed bytes from {compressed} compressed ones: refused")]
    UncompressedTooLarge {
        /// Where the entry header starts.
        offset: usize,
        /// Declared uncompressed size.
        size: u64,
        /// Length of the compressed data.
        compressed: usize,
    },
    /// A compressed entry does not decode, or not to its declared size.
    #[error("fatbin entry at offset {offset} ({compression:?}) does not decompress: {reason}")]
    Decompress {
        /// Where the entry header starts.
        offset: usize,
        /// The compression it claims.
        compression: Compression,
        /// What went wrong.
        reason: String,
    },
}

/// Result alias for this module.
pub type Result<T, E = FatbinError> = std::result::Result<T, E>;

/// The 24-byte structure whose address a program passes to `__cudaRegisterFatBinary`.
///
/// The pointers are guest addresses, meaningless on the host: the guest follows
/// `data` itself and ships the container bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wrapper {
    /// 1 or 2.
    pub version: u32,
    /// Address of the first container.
    pub data: u64,
    /// Version 2 (`-rdc`/prelinked code): address of a NULL-terminated array of
    /// pointers to further fatbinaries linked into this one. Version 1 leaves the
    /// field unused (nvcc writes 0). See [`Wrapper::prelinked_list`].
    pub prelinked: u64,
}

impl Wrapper {
    /// Address of the NULL-terminated list of prelinked fatbinaries, if this wrapper
    /// has one (version 2 and a non-null pointer).
    pub fn prelinked_list(&self) -> Option<u64> {
        (self.version >= 2 && self.prelinked != 0).then_some(self.prelinked)
    }
}

/// Parses the wrapper at the start of `bytes` (extra bytes after it are ignored).
pub fn parse_wrapper(bytes: &[u8]) -> Result<Wrapper> {
    let magic = read_u32(bytes, 0, "wrapper", 0, WRAPPER_LEN)?;
    if magic != WRAPPER_MAGIC {
        return Err(FatbinError::BadWrapperMagic(magic));
    }
    let version = read_u32(bytes, 4, "wrapper", 0, WRAPPER_LEN)?;
    if !(1..=2).contains(&version) {
        return Err(FatbinError::BadWrapperVersion(version));
    }
    Ok(Wrapper {
        version,
        data: read_u64(bytes, 8, "wrapper", 0, WRAPPER_LEN)?,
        prelinked: read_u64(bytes, 16, "wrapper", 0, WRAPPER_LEN)?,
    })
}

/// Total length in bytes (header included) of the container whose 16-byte header is
/// given. The guest, holding only a pointer, reads 16 bytes, calls this, skips that
/// many bytes and repeats while the next header still has the container magic
/// ([`FatbinError::BadContainerMagic`] means "no further container").
///
/// Fails on a bad magic, a header size below 16, or a total above
/// [`MAX_CONTAINER_LEN`].
pub fn container_total_len(header: &[u8; CONTAINER_HEADER_LEN]) -> Result<u64> {
    container_len_at(header, 0)
}

/// Like [`container_total_len`], for the header starting at `offset` in `bytes`;
/// errors report `offset`.
fn container_len_at(bytes: &[u8], offset: usize) -> Result<u64> {
    let magic = read_u32(
        bytes,
        offset,
        "container header",
        offset,
        CONTAINER_HEADER_LEN,
    )?;
    if magic != CONTAINER_MAGIC {
        return Err(FatbinError::BadContainerMagic {
            offset,
            found: magic,
        });
    }
    let header_size = u64::from(read_u16(
        bytes,
        offset + 6,
        "container header",
        offset,
        CONTAINER_HEADER_LEN,
    )?);
    if header_size < CONTAINER_HEADER_LEN as u64 {
        return Err(FatbinError::BadHeaderSize {
            what: "container",
            offset,
            size: header_size,
            min: CONTAINER_HEADER_LEN as u64,
        });
    }
    let body = read_u64(
        bytes,
        offset + 8,
        "container header",
        offset,
        CONTAINER_HEADER_LEN,
    )?;
    match header_size.checked_add(body) {
        Some(len) if len <= MAX_CONTAINER_LEN => Ok(len),
        len => Err(FatbinError::ContainerTooLarge {
            offset,
            len: len.unwrap_or(u64::MAX),
        }),
    }
}

/// Total byte length of the containers laid back to back from `bytes[0]`: the walk
/// stops at the end of `bytes` or at the first position that does not start with the
/// container magic. nvcc places containers without padding (their sizes are
/// multiples of 8), so the next one starts right where the previous ends.
///
/// The walk does not know which wrapper owns which container: in an nvcc 13
/// executable the first wrapper points at a linker stub's container, which is
/// directly followed by the user's (pointed at by a second wrapper), so the length
/// from the first pointer covers both. Shipping the extra bytes is harmless; the host
/// must just not assume one container per registration.
///
/// Fails if `bytes` does not start with a container, or if a container runs past the
/// end of `bytes`.
pub fn containers_len(bytes: &[u8]) -> Result<usize> {
    let mut offset = 0usize;
    loop {
        let len = container_len_at(bytes, offset)?;
        offset = checked_end(bytes, offset, len, "container")?;
        // Another container follows only if its magic is there.
        match bytes.get(offset..offset.saturating_add(4)) {
            Some(m) if u32::from_le_bytes([m[0], m[1], m[2], m[3]]) == CONTAINER_MAGIC => {}
            _ => return Ok(offset),
        }
    }
}

/// What of a fatbinary a device can load (see [`for_device`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForDevice {
    /// Everything in it: nothing to drop.
    All,
    /// These containers, holding only what the device can load.
    Some(Vec<u8>),
    /// Nothing: no cubin of the device's architecture and no PTX it can compile (the
    /// driver answers `CUDA_ERROR_NO_BINARY_FOR_GPU`).
    Nothing,
}

/// The containers of a fatbinary keeping only what a device of architecture `sm`
/// (`major * 10 + minor`, e.g. 90) can load: the cubins of its major architecture with
/// a minor version up to its own, or, in a container without such a cubin, the newest
/// PTX it can compile. Libraries ship code for every architecture (cuBLASLt: hundreds
/// of MiB; torch: kernels built for other GPUs only); a device loads one, so only that
/// one needs to cross to the host. Entries are copied byte for byte.
pub fn for_device(bytes: &[u8], sm: u32) -> Result<ForDevice> {
    let fatbin = parse(bytes)?;
    let base = bytes.as_ptr() as usize;
    let mut out = Vec::new();
    let mut dropped = false;
    for container in &fatbin.containers {
        let runs = |e: &Entry<'_>| {
            e.kind == EntryKind::Cubin && e.sm_arch / 10 == sm / 10 && e.sm_arch % 10 <= sm % 10
        };
        let has_cubin = container.entries.iter().any(runs);
        let ptx = container
            .entries
            .iter()
            .filter(|e| e.kind == EntryKind::Ptx && e.sm_arch <= sm)
            .map(|e| e.sm_arch)
            .max();
        let keep = |e: &Entry<'_>| {
            if has_cubin {
                runs(e)
            } else {
                e.kind == EntryKind::Ptx && Some(e.sm_arch) == ptx
            }
        };
        let mut body = Vec::new();
        for e in &container.entries {
            if !keep(e) {
                dropped = true;
                continue;
            }
            // The entry's header and payload, as stored.
            let start = e.payload.as_ptr() as usize - base - e.header_size as usize;
            body.extend_from_slice(&bytes[start..start + e.header_size as usize + e.payload.len()]);
        }
        if body.is_empty() {
            continue;
        }
        // The container header with the new body size; its other fields as they were.
        let header_size = usize::from(read_u16(
            container.bytes,
            6,
            "container header",
            container.offset,
            CONTAINER_HEADER_LEN,
        )?);
        out.extend_from_slice(&container.bytes[..8]);
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&container.bytes[16..header_size]);
        out.extend_from_slice(&body);
    }
    Ok(if out.is_empty() {
        ForDevice::Nothing
    } else if dropped {
        ForDevice::Some(out)
    } else {
        ForDevice::All
    })
}

/// What an entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// PTX text (kind 1), for JIT compilation.
    Ptx,
    /// An ELF cubin (kind 2): machine code for one SM architecture.
    Cubin,
    /// Anything else (e.g. LTO IR), kept so that callers can report it.
    Unknown(u16),
}

impl EntryKind {
    fn from_raw(raw: u16) -> Self {
        match raw {
            1 => Self::Ptx,
            2 => Self::Cubin,
            other => Self::Unknown(other),
        }
    }

    /// The raw kind value as stored in the entry header.
    pub fn raw(self) -> u16 {
        match self {
            Self::Ptx => 1,
            Self::Cubin => 2,
            Self::Unknown(raw) => raw,
        }
    }
}

/// How an entry's payload is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Compression {
    /// Stored as is.
    None,
    /// LZ4 ([`FLAG_COMPRESSED_LZ4`]).
    Lz4,
    /// zstd ([`FLAG_COMPRESSED_ZSTD`]).
    Zstd,
}

/// An entry's flag word, with helpers for the bits that matter here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EntryFlags(pub u64);

impl EntryFlags {
    /// How the payload is compressed. Should both bits ever be set, zstd wins (it is
    /// the one nvcc 13 uses by default).
    pub fn compression(self) -> Compression {
        if self.0 & FLAG_COMPRESSED_ZSTD != 0 {
            Compression::Zstd
        } else if self.0 & FLAG_COMPRESSED_LZ4 != 0 {
            Compression::Lz4
        } else {
            Compression::None
        }
    }

    /// Whether the payload is compressed (then it is not a usable ELF or PTX as is).
    pub fn is_compressed(self) -> bool {
        self.compression() != Compression::None
    }

    /// Whether the code was built with debug information.
    pub fn is_debug(self) -> bool {
        self.0 & FLAG_DEBUG != 0
    }

    /// Whether the code is 64-bit.
    pub fn is_64bit(self) -> bool {
        self.0 & FLAG_64BIT != 0
    }
}

/// One entry of a container. `payload` borrows from the parsed bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// Offset of the entry header from the start of the slice given to [`parse`].
    pub offset: usize,
    /// What the payload is.
    pub kind: EntryKind,
    /// Entry format version (nvcc 13 writes 0x0101).
    pub version: u16,
    /// Size of the entry header, where the payload starts.
    pub header_size: u32,
    /// Major version: of PTX for PTX entries (9 for nvcc 13), of the ELF layout for
    /// cubins (1).
    pub major: u16,
    /// Minor version, as `major`.
    pub minor: u16,
    /// SM architecture times ten plus minor, e.g. 90 for `sm_90`/`compute_90`.
    pub sm_arch: u32,
    /// Flag word.
    pub flags: EntryFlags,
    /// Compressed length within `payload` (0 when not compressed): the payload itself
    /// is padded to 8 bytes.
    pub compressed_size: u32,
    /// Size after decompression (0 when not compressed).
    pub uncompressed_size: u64,
    /// The payload bytes exactly as stored (compressed or not, padding included).
    pub payload: &'a [u8],
    /// Source file name, when nvcc recorded one (it does with `-G`). `None` as well
    /// when the recorded name is out of the header's bounds or not UTF-8: it is
    /// metadata, never a reason to refuse the code.
    pub name: Option<&'a str>,
    /// Compiler options recorded for the entry (`-G` records e.g. `" -g
    /// --dont-merge-basicblocks --return-at-end "`); `None` when absent, empty, or
    /// malformed, for the same reason as `name`.
    pub options: Option<&'a str>,
}

impl<'a> Entry<'a> {
    /// Shorthand for `self.flags.is_compressed()`.
    pub fn is_compressed(&self) -> bool {
        self.flags.is_compressed()
    }

    /// Shorthand for `self.flags.compression()`.
    pub fn compression(&self) -> Compression {
        self.flags.compression()
    }

    /// For a compressed entry, the compressed stream without the trailing padding
    /// (falling back to the whole payload if `compressed_size` is out of range); for
    /// an uncompressed one, the whole payload.
    pub fn compressed_data(&self) -> &'a [u8] {
        if !self.is_compressed() || self.compressed_size == 0 {
            return self.payload;
        }
        usize::try_from(self.compressed_size)
            .ok()
            .and_then(|n| self.payload.get(..n))
            .unwrap_or(self.payload)
    }

    /// The payload as the code it holds: borrowed as is when the entry is not
    /// compressed, else decompressed into a new buffer (see the module doc for the
    /// formats and bounds). For reading the code only; the driver gets the container.
    ///
    /// Fails with [`FatbinError::UncompressedTooLarge`] before allocating when the
    /// declared size is above [`MAX_UNCOMPRESSED_LEN`] (or impossible for LZ4), and
    /// with [`FatbinError::Decompress`] when the data does not decode to exactly the
    /// declared size.
    pub fn payload_decompressed(&self) -> Result<Cow<'a, [u8]>> {
        let compression = self.compression();
        if compression == Compression::None {
            return Ok(Cow::Borrowed(self.payload));
        }
        let input = self.compressed_data();
        let declared = self.uncompressed_size;
        let ratio_bound = match compression {
            Compression::Lz4 => (input.len() as u64).saturating_mul(LZ4_MAX_RATIO),
            _ => u64::MAX,
        };
        let size = usize::try_from(declared)
            .ok()
            .filter(|_| declared <= MAX_UNCOMPRESSED_LEN && declared <= ratio_bound)
            .ok_or(FatbinError::UncompressedTooLarge {
                offset: self.offset,
                size: declared,
                compressed: input.len(),
            })?;
        let fail = |reason: String| FatbinError::Decompress {
            offset: self.offset,
            compression,
            reason,
        };
        let out = match compression {
            Compression::Lz4 => {
                // A raw block: the size is known only from the header.
                let mut out = vec![0u8; size];
                let n = lz4_flex::block::decompress_into(input, &mut out)
                    .map_err(|e| fail(e.to_string()))?;
                if n != size {
                    return Err(fail(format!("{n} bytes, {size} declared")));
                }
                out
            }
            _ => {
                let window = zstd_window(input).ok_or_else(|| fail("bad frame header".into()))?;
                let allowed = declared
                    .checked_next_power_of_two()
                    .unwrap_or(u64::MAX)
                    .max(ZSTD_MIN_WINDOW_ALLOWED);
                if window > allowed {
                    return Err(fail(format!(
                        "window of {window} bytes for {declared} declared"
                    )));
                }
                // The output buffer is the declared size and decoding fails past it;
                // with the window bounded too, a lying frame costs at most the window
                // and the declared size.
                let mut out = vec![0u8; size];
                let n = zstd::bulk::decompress_to_buffer(input, &mut out[..])
                    .map_err(|e| fail(e.to_string()))?;
                if n != size {
                    return Err(fail(format!("{n} bytes, {size} declared")));
                }
                out
            }
        };
        Ok(Cow::Owned(out))
    }
}

/// The window size a zstd frame header asks for (RFC 8878 §3.1.1.1), or `None` if
/// `frame` does not start with a zstd frame header.
fn zstd_window(frame: &[u8]) -> Option<u64> {
    const MAGIC: u32 = 0xFD2F_B528;
    let magic = frame.get(..4)?;
    if u32::from_le_bytes([magic[0], magic[1], magic[2], magic[3]]) != MAGIC {
        return None;
    }
    let descriptor = *frame.get(4)?;
    let single_segment = descriptor & 0x20 != 0;
    if !single_segment {
        // Window descriptor: exponent in bits 3..8, mantissa (eighths) in bits 0..3.
        let wd = *frame.get(5)?;
        let base = 1u64 << (10 + u32::from(wd >> 3));
        return Some(base + base / 8 * u64::from(wd & 7));
    }
    // Single segment: the window is the frame content size, after the dictionary id.
    let dict_len = [0usize, 1, 2, 4][usize::from(descriptor & 3)];
    let at = 5 + dict_len;
    let field = |n: usize| frame.get(at..at + n);
    Some(match descriptor >> 6 {
        0 => u64::from(*field(1)?.first()?),
        1 => u64::from(u16::from_le_bytes(field(2)?.try_into().ok()?)) + 256,
        2 => u64::from(u32::from_le_bytes(field(4)?.try_into().ok()?)),
        _ => u64::from_le_bytes(field(8)?.try_into().ok()?),
    })
}

/// One container: its bytes and its entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container<'a> {
    /// Offset from the start of the slice given to [`parse`].
    pub offset: usize,
    /// Container format version (1).
    pub version: u16,
    /// The whole container, header included.
    pub bytes: &'a [u8],
    /// Its entries, in file order.
    pub entries: Vec<Entry<'a>>,
}

/// A parsed run of back-to-back containers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fatbin<'a> {
    /// The containers, in file order (at least one).
    pub containers: Vec<Container<'a>>,
}

impl<'a> Fatbin<'a> {
    /// All entries of all containers, in file order.
    pub fn entries(&self) -> impl Iterator<Item = &Entry<'a>> + '_ {
        self.containers.iter().flat_map(|c| c.entries.iter())
    }

    /// Bytes covered by the containers (what [`containers_len`] returns).
    pub fn len(&self) -> usize {
        self.containers
            .last()
            .map_or(0, |c| c.offset.saturating_add(c.bytes.len()))
    }

    /// Whether there are no containers (never true for a successful [`parse`]).
    pub fn is_empty(&self) -> bool {
        self.containers.is_empty()
    }
}

/// Parses the containers laid back to back from `bytes[0]`, with the same stopping
/// rule as [`containers_len`] (trailing bytes without the container magic are
/// ignored). Every entry must lie within its container and every payload within its
/// entry's bounds.
pub fn parse(bytes: &[u8]) -> Result<Fatbin<'_>> {
    let mut containers = Vec::new();
    let mut offset = 0usize;
    loop {
        let container = parse_container(bytes, offset)?;
        offset = offset.saturating_add(container.bytes.len());
        containers.push(container);
        match bytes.get(offset..offset.saturating_add(4)) {
            Some(m) if u32::from_le_bytes([m[0], m[1], m[2], m[3]]) == CONTAINER_MAGIC => {}
            _ => return Ok(Fatbin { containers }),
        }
    }
}

fn parse_container(bytes: &[u8], offset: usize) -> Result<Container<'_>> {
    let len = container_len_at(bytes, offset)?;
    let end = checked_end(bytes, offset, len, "container")?;
    let version = read_u16(
        bytes,
        offset + 4,
        "container header",
        offset,
        CONTAINER_HEADER_LEN,
    )?;
    // container_len_at validated the header size, so this cannot exceed `end`.
    let header_size = usize::from(read_u16(
        bytes,
        offset + 6,
        "container header",
        offset,
        CONTAINER_HEADER_LEN,
    )?);
    let mut pos = offset + header_size;
    let mut entries = Vec::new();
    while pos < end {
        let entry = parse_entry(bytes, pos, end)?;
        pos = entry.1;
        entries.push(entry.0);
    }
    Ok(Container {
        offset,
        version,
        bytes: &bytes[offset..end],
        entries,
    })
}

/// Parses the entry at `offset`, which must end by `end`; returns it and where the
/// next entry starts.
fn parse_entry(bytes: &[u8], offset: usize, end: usize) -> Result<(Entry<'_>, usize)> {
    // Only the container's bytes may be used.
    let within = &bytes[..end];
    let what = "entry header";
    let need = ENTRY_MIN_HEADER_LEN;
    let kind = read_u16(within, offset, what, offset, need)?;
    let version = read_u16(within, offset + 0x02, what, offset, need)?;
    let header_size = read_u32(within, offset + 0x04, what, offset, need)?;
    let payload_size = read_u64(within, offset + 0x08, what, offset, need)?;
    let compressed_size = read_u32(within, offset + 0x10, what, offset, need)?;
    let options_offset = read_u32(within, offset + 0x14, what, offset, need)?;
    let minor = read_u16(within, offset + 0x18, what, offset, need)?;
    let major = read_u16(within, offset + 0x1A, what, offset, need)?;
    let sm_arch = read_u32(within, offset + 0x1C, what, offset, need)?;
    let name_offset = read_u32(within, offset + 0x20, what, offset, need)?;
    let name_len = read_u32(within, offset + 0x24, what, offset, need)?;
    let flags = read_u64(within, offset + 0x28, what, offset, need)?;
    let uncompressed_size = read_u64(within, offset + 0x38, what, offset, need)?;

    if (header_size as usize) < ENTRY_MIN_HEADER_LEN {
        return Err(FatbinError::BadHeaderSize {
            what: "entry",
            offset,
            size: header_size.into(),
            min: ENTRY_MIN_HEADER_LEN as u64,
        });
    }
    let header_end = checked_end(within, offset, header_size.into(), "entry header")?;
    let header = &within[offset..header_end];
    let payload_end = checked_end(within, header_end, payload_size, "entry payload")?;

    Ok((
        Entry {
            offset,
            kind: EntryKind::from_raw(kind),
            version,
            header_size,
            major,
            minor,
            sm_arch,
            flags: EntryFlags(flags),
            compressed_size,
            uncompressed_size,
            payload: &within[header_end..payload_end],
            name: header_str(header, name_offset, name_len),
            options: entry_options(header, options_offset),
        },
        payload_end,
    ))
}

/// The string of `len` bytes at `offset` within the entry header, trailing NULs
/// removed; `None` if empty, out of the header's bounds or not UTF-8.
fn header_str(header: &[u8], offset: u32, len: u32) -> Option<&str> {
    if offset == 0 || len == 0 {
        return None;
    }
    let start = usize::try_from(offset).ok()?;
    let end = start.checked_add(usize::try_from(len).ok()?)?;
    let s = std::str::from_utf8(header.get(start..end)?).ok()?;
    let s = s.trim_end_matches('\0');
    (!s.is_empty()).then_some(s)
}

/// Options record, as nvcc 13 writes it: at `options_offset` within the entry header,
/// a u32 offset (from the entry start) and a u32 length of the options string.
fn entry_options(header: &[u8], options_offset: u32) -> Option<&str> {
    if options_offset == 0 {
        return None;
    }
    let at = usize::try_from(options_offset).ok()?;
    let rec = header.get(at..at.checked_add(8)?)?;
    let str_offset = u32::from_le_bytes([rec[0], rec[1], rec[2], rec[3]]);
    let str_len = u32::from_le_bytes([rec[4], rec[5], rec[6], rec[7]]);
    header_str(header, str_offset, str_len)
}

/// `offset + len`, if that lies within `bytes`; otherwise a `Truncated` error.
fn checked_end(bytes: &[u8], offset: usize, len: u64, what: &'static str) -> Result<usize> {
    let have = bytes.len().saturating_sub(offset);
    usize::try_from(len)
        .ok()
        .and_then(|l| offset.checked_add(l))
        .filter(|&end| end <= bytes.len())
        .ok_or(FatbinError::Truncated {
            what,
            offset,
            need: len,
            have,
        })
}

/// Reads `N` bytes at `at`; on failure reports a truncated `what` of `need` bytes
/// starting at `start`.
fn read_array<const N: usize>(
    bytes: &[u8],
    at: usize,
    what: &'static str,
    start: usize,
    need: usize,
) -> Result<[u8; N]> {
    at.checked_add(N)
        .and_then(|end| bytes.get(at..end))
        .and_then(|s| s.try_into().ok())
        .ok_or(FatbinError::Truncated {
            what,
            offset: start,
            need: need as u64,
            have: bytes.len().saturating_sub(start),
        })
}

fn read_u16(bytes: &[u8], at: usize, what: &'static str, start: usize, need: usize) -> Result<u16> {
    read_array(bytes, at, what, start, need).map(u16::from_le_bytes)
}

fn read_u32(bytes: &[u8], at: usize, what: &'static str, start: usize, need: usize) -> Result<u32> {
    read_array(bytes, at, what, start, need).map(u32::from_le_bytes)
}

fn read_u64(bytes: &[u8], at: usize, what: &'static str, start: usize, need: usize) -> Result<u64> {
    read_array(bytes, at, what, start, need).map(u64::from_le_bytes)
}

#[cfg(test)]
pub(crate) mod tests;
