//! Reading kernel parameter layouts and global variables out of ELF cubins.
//!
//! `cudaLaunchKernel` hands the runtime an array of pointers, one per parameter, but
//! not their sizes: those live only in the cubin. To marshal a launch, the guest (or
//! the host) looks the kernel's layout up with [`kernel_params`]. Likewise
//! `__cudaRegisterVar` names a device variable whose size and initial value a host-
//! side emulation needs: [`global`].
//!
//! What a cubin holds (nvcc 13, `sm_90`, checked against real output under
//! `testdata/`):
//!
//! - Each kernel is a `FUNC` symbol defined in section `.text.<mangled name>` and
//!   marked as an entry point with `STO_CUDA_ENTRY` (0x10) in `st_other`;
//!   non-inlined `__device__` functions are `FUNC` symbols too, but unmarked.
//! - Section `.nv.info.<mangled name>` holds that kernel's attributes, a sequence of
//!   records `u8 format, u8 attribute, value`: formats 1 (`EIFMT_NVAL`), 2
//!   (`EIFMT_BVAL`) and 3 (`EIFMT_HVAL`) take exactly four bytes (no value, a u8 plus
//!   a pad byte, a u16); format 4 (`EIFMT_SVAL`) is followed by a u16 size and that
//!   many bytes. Section `.nv.info` (no suffix) holds attributes of the whole module.
//! - `EIATTR_KPARAM_INFO` (0x17) describes one parameter in a 12-byte SVAL:
//!   `u32 index, u16 ordinal, u16 offset, u32 word` with the size in bits 18..32 of
//!   the word. Kernels with more than 4 KiB of parameters get
//!   `EIATTR_KPARAM_INFO_V2` (0x45) instead, the same but with a plain u16 size at
//!   byte 8. `EIATTR_CBANK_PARAM_SIZE` (0x19, HVAL) and `EIATTR_PARAM_CBANK` (0x0a,
//!   SVAL `u32 symbol, u16 offset, u16 size`) give the total.
//! - Device variables are `OBJECT` symbols (type 13, `STT_CUDA_OBJECT`, with `-rdc`)
//!   in `.nv.global` (zero-initialised; `NOBITS`, or a processor-specific type with
//!   no file data under `-rdc`), `.nv.global.init` (initialised) and
//!   `.nv.constant<N>` (`__constant__`, initialised or zero-filled).
//!
//! ELF headers and tables are read with the `object` crate, which bounds-checks them;
//! everything read from section contents here is bounds-checked too, so no input makes
//! these functions panic.

use crate::fatbin::{Entry, EntryKind, Fatbin, FatbinError};
use std::borrow::Cow;
use std::collections::HashMap;

use object::elf;
use object::read::elf::{FileHeader, SectionHeader, SectionTable, Sym, SymbolTable};
use object::read::SectionIndex;
use object::Endianness;
use thiserror::Error;

/// `e_machine` of CUDA cubins.
pub const EM_CUDA: u16 = 190;
/// `st_other` bit marking a kernel entry point.
pub const STO_CUDA_ENTRY: u8 = 0x10;
/// Symbol type of device variables in relocatable (`-rdc`) cubins.
pub const STT_CUDA_OBJECT: u8 = 13;
/// Symbol types of texture and surface references (PTX `.texref`, `.surfref`).
pub const STT_CUDA_TEXTURE: u8 = 10;
pub const STT_CUDA_SURFACE: u8 = 12;
/// `st_other` bit nvcc sets on a `__managed__` variable's symbol (measured: a
/// `__device__` variable beside it has 0).
pub const STO_CUDA_MANAGED: u8 = 4;
/// Section type of `.nv.global` in relocatable cubins: no file data, like `NOBITS`.
pub const SHT_CUDA_GLOBAL: u32 = 0x7000_0007;

/// `.nv.info` record format: no value.
pub const EIFMT_NVAL: u8 = 0x01;
/// `.nv.info` record format: one byte value.
pub const EIFMT_BVAL: u8 = 0x02;
/// `.nv.info` record format: u16 value.
pub const EIFMT_HVAL: u8 = 0x03;
/// `.nv.info` record format: sized value.
pub const EIFMT_SVAL: u8 = 0x04;
/// Attribute: the parameter constant bank (`u32 symbol, u16 offset, u16 size`).
pub const EIATTR_PARAM_CBANK: u8 = 0x0a;
/// Attribute: one parameter's layout.
pub const EIATTR_KPARAM_INFO: u8 = 0x17;
/// Attribute: total parameter size (HVAL).
pub const EIATTR_CBANK_PARAM_SIZE: u8 = 0x19;
/// Attribute: one parameter's layout, for kernels with more than 4 KiB of parameters.
pub const EIATTR_KPARAM_INFO_V2: u8 = 0x45;

/// Largest variable [`global`] materialises: a bigger size is a corrupt symbol.
pub const MAX_GLOBAL_LEN: u64 = 1 << 32;

/// Everything that can go wrong reading a cubin.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CubinError {
    /// The ELF structure itself is malformed (or not 64-bit).
    #[error("malformed ELF cubin: {0}")]
    Elf(#[from] object::read::Error),
    /// A valid ELF, but not for the CUDA machine.
    #[error("ELF e_machine is {0}, not CUDA ({EM_CUDA})")]
    NotCuda(u16),
    /// No kernel of that name.
    #[error("no kernel named {0:?} in the cubin")]
    KernelNotFound(String),
    /// The kernel exists but has no `.nv.info.<name>` section.
    #[error("kernel {0:?} has no .nv.info section")]
    MissingInfo(String),
    /// A `.nv.info` section does not decode.
    #[error("bad .nv.info record at offset {offset} in {section}: {reason}")]
    BadNvInfo {
        /// The section name.
        section: String,
        /// Byte offset of the record within the section.
        offset: usize,
        /// What is wrong.
        reason: &'static str,
    },
    /// Parameter records that do not describe parameters 0..n exactly once each.
    #[error("inconsistent parameter info for kernel {kernel:?}: {reason}")]
    BadParamInfo {
        /// The kernel.
        kernel: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// A variable's symbol points outside its section or is absurdly large.
    #[error("device variable {name:?} has bad bounds: {reason}")]
    BadGlobal {
        /// The variable.
        name: String,
        /// What is wrong.
        reason: &'static str,
    },
    /// The fatbinary holds no ELF cubin (suitable for the requested architecture).
    #[error("no suitable cubin in the fatbinary")]
    NoCubin,
    /// The chosen cubin is compressed and does not decompress within bounds.
    #[error("the sm_{sm_arch} cubin cannot be decompressed: {source}")]
    BadCompressedCubin {
        /// Its architecture.
        sm_arch: u32,
        /// Why.
        #[source]
        source: FatbinError,
    },
}

/// Result alias for this module.
pub type Result<T, E = CubinError> = std::result::Result<T, E>;

/// Where one kernel parameter lives in the parameter buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ParamInfo {
    /// Byte offset from the start of the parameters.
    pub offset: u32,
    /// Size in bytes.
    pub size: u32,
}

/// A device variable's size and initial contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalVar {
    /// Size in bytes.
    pub size: u64,
    /// Initial contents: `size` bytes for a variable the file initialises; empty for a
    /// zero-initialised one (it has no bytes in the file, and its size is only a header
    /// field, so nothing is allocated for it here). Pointers initialised with another
    /// variable's address are resolved by relocations that are not applied here, so
    /// they read as zero.
    pub init: Vec<u8>,
    /// Whether it lives in constant memory (`__constant__`).
    pub constant: bool,
    /// Whether it is a `__managed__` variable (marked in the symbol's `st_other`).
    pub managed: bool,
}

/// Decoded value of one `.nv.info` record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NvInfoValue<'a> {
    /// `EIFMT_NVAL`.
    None,
    /// `EIFMT_BVAL`.
    Byte(u8),
    /// `EIFMT_HVAL`.
    Half(u16),
    /// `EIFMT_SVAL`: the bytes after the size.
    Sized(&'a [u8]),
}

/// One `.nv.info` record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvInfoAttr<'a> {
    /// `EIATTR_*` code.
    pub attr: u8,
    /// Its value.
    pub value: NvInfoValue<'a>,
}

/// Decodes the records of a `.nv.info` or `.nv.info.<kernel>` section. `section` names
/// the section in errors.
pub fn parse_nv_info<'a>(data: &'a [u8], section: &str) -> Result<Vec<NvInfoAttr<'a>>> {
    let bad = |offset, reason| CubinError::BadNvInfo {
        section: section.to_owned(),
        offset,
        reason,
    };
    let mut attrs = Vec::new();
    let mut pos = 0usize;
    while pos < data.len() {
        // Every record starts with four bytes: format, attribute and a u16 that is the
        // value (BVAL/HVAL), padding (NVAL) or the value's size (SVAL).
        let head = pos
            .checked_add(4)
            .and_then(|end| data.get(pos..end))
            .ok_or_else(|| bad(pos, "truncated record header"))?;
        let (format, attr, half) = (head[0], head[1], u16::from_le_bytes([head[2], head[3]]));
        let (value, len) = match format {
            EIFMT_NVAL => (NvInfoValue::None, 4),
            EIFMT_BVAL => (NvInfoValue::Byte(head[2]), 4),
            EIFMT_HVAL => (NvInfoValue::Half(half), 4),
            EIFMT_SVAL => {
                let len = 4 + usize::from(half);
                let bytes = pos
                    .checked_add(len)
                    .and_then(|end| data.get(pos + 4..end))
                    .ok_or_else(|| bad(pos, "sized value runs past the section"))?;
                (NvInfoValue::Sized(bytes), len)
            }
            _ => return Err(bad(pos, "unknown record format")),
        };
        attrs.push(NvInfoAttr { attr, value });
        pos += len;
    }
    Ok(attrs)
}

/// A parsed cubin, for several queries over the same bytes.
#[derive(Debug)]
pub struct Cubin<'a> {
    data: &'a [u8],
    endian: Endianness,
    relocatable: bool,
    sections: SectionTable<'a, elf::FileHeader64<Endianness>>,
    symbols: SymbolTable<'a, elf::FileHeader64<Endianness>>,
}

impl<'a> Cubin<'a> {
    /// Parses the ELF headers, section table and symbol table of a 64-bit CUDA cubin.
    pub fn parse(data: &'a [u8]) -> Result<Self> {
        let header = elf::FileHeader64::<Endianness>::parse(data)?;
        let endian = header.endian()?;
        let machine = header.e_machine(endian);
        if machine != EM_CUDA {
            return Err(CubinError::NotCuda(machine));
        }
        let sections = header.sections(endian, data)?;
        let symbols = sections.symbols(endian, data, elf::SHT_SYMTAB)?;
        Ok(Self {
            data,
            endian,
            relocatable: header.e_type(endian) == elf::ET_REL,
            sections,
            symbols,
        })
    }

    fn section_name(&self, index: SectionIndex) -> Option<&'a [u8]> {
        let section = self.sections.section(index).ok()?;
        self.sections.section_name(self.endian, section).ok()
    }

    /// Whether `sym` (named `name`) is a kernel entry point.
    fn is_kernel(&self, sym: &elf::Sym64<Endianness>, index: SectionIndex, name: &[u8]) -> bool {
        if sym.st_type() != elf::STT_FUNC || sym.st_other() & STO_CUDA_ENTRY == 0 {
            return false;
        }
        self.section_name(index)
            .and_then(|s| s.strip_prefix(b".text."))
            .is_some_and(|s| s == name)
    }

    /// Whether the code calls device `printf` (`vprintf`, which the cubin leaves to the
    /// driver): what it prints comes out when the host synchronizes.
    pub fn prints(&self) -> bool {
        self.symbols.iter().any(|sym| {
            sym.is_undefined(self.endian)
                && self.symbols.symbol_name(self.endian, sym).ok() == Some(b"vprintf".as_slice())
        })
    }

    /// Mangled names of all kernels, in symbol table order.
    pub fn kernels(&self) -> Vec<String> {
        self.symbols
            .enumerate()
            .filter_map(|(i, sym)| {
                let section = self.symbols.symbol_section(self.endian, sym, i).ok()??;
                let name = self.symbols.symbol_name(self.endian, sym).ok()?;
                self.is_kernel(sym, section, name)
                    .then(|| String::from_utf8_lossy(name).into_owned())
            })
            .collect()
    }

    /// Whether a kernel named `name` exists.
    pub fn has_kernel(&self, name: &str) -> bool {
        self.symbols.enumerate().any(|(i, sym)| {
            self.symbols.symbol_name(self.endian, sym).ok() == Some(name.as_bytes())
                && matches!(
                    self.symbols.symbol_section(self.endian, sym, i),
                    Ok(Some(section)) if self.is_kernel(sym, section, name.as_bytes())
                )
        })
    }

    /// The decoded `.nv.info.<kernel>` records of a kernel.
    pub fn kernel_info(&self, kernel: &str) -> Result<Vec<NvInfoAttr<'a>>> {
        if !self.has_kernel(kernel) {
            return Err(CubinError::KernelNotFound(kernel.to_owned()));
        }
        let section_name = format!(".nv.info.{kernel}");
        let (_, section) = self
            .sections
            .section_by_name(self.endian, section_name.as_bytes())
            .ok_or_else(|| CubinError::MissingInfo(kernel.to_owned()))?;
        parse_nv_info(section.data(self.endian, self.data)?, &section_name)
    }

    /// Parameter layout of `kernel` (mangled name), in declaration order.
    pub fn kernel_params(&self, kernel: &str) -> Result<Vec<ParamInfo>> {
        params_from_info(kernel, &self.kernel_info(kernel)?)
    }

    /// Every kernel with its parameter layout, found in one pass over the sections and
    /// one over the symbols: [`Cubin::kernel_params`] looks each kernel up by name, a
    /// scan of both tables per kernel, which for a framework's cubin of thousands of
    /// kernels costs that many times more. A kernel whose records are missing or bad
    /// has the error [`Cubin::kernel_params`] would give.
    pub fn kernel_table(&self) -> HashMap<String, Result<Vec<ParamInfo>>> {
        let mut info_sections = HashMap::new();
        for (index, section) in self.sections.enumerate() {
            let Ok(name) = self.sections.section_name(self.endian, section) else {
                continue;
            };
            if let Some(kernel) = name.strip_prefix(b".nv.info.") {
                info_sections.entry(kernel).or_insert((index, section));
            }
        }
        let mut table = HashMap::new();
        for (i, sym) in self.symbols.enumerate() {
            let (Ok(Some(section)), Ok(name)) = (
                self.symbols.symbol_section(self.endian, sym, i),
                self.symbols.symbol_name(self.endian, sym),
            ) else {
                continue;
            };
            if !self.is_kernel(sym, section, name) {
                continue;
            }
            let kernel = String::from_utf8_lossy(name).into_owned();
            let params = match info_sections.get(name) {
                None => Err(CubinError::MissingInfo(kernel.clone())),
                Some((_, info)) => {
                    let section_name = format!(".nv.info.{kernel}");
                    info.data(self.endian, self.data)
                        .map_err(CubinError::from)
                        .and_then(|data| parse_nv_info(data, &section_name))
                        .and_then(|attrs| params_from_info(&kernel, &attrs))
                }
            };
            table.entry(kernel).or_insert(params);
        }
        table
    }

    /// Total size in bytes of `kernel`'s parameters: `EIATTR_CBANK_PARAM_SIZE`, else
    /// the size in `EIATTR_PARAM_CBANK`, else the end of the last parameter (0 for a
    /// kernel without parameters).
    pub fn kernel_params_size(&self, kernel: &str) -> Result<u32> {
        let info = self.kernel_info(kernel)?;
        let from_attr = info.iter().find_map(|a| match (a.attr, a.value) {
            (EIATTR_CBANK_PARAM_SIZE, NvInfoValue::Half(size)) => Some(u32::from(size)),
            _ => None,
        });
        let from_cbank = || {
            info.iter().find_map(|a| match (a.attr, a.value) {
                (EIATTR_PARAM_CBANK, NvInfoValue::Sized(v)) if v.len() >= 8 => {
                    Some(u32::from(u16::from_le_bytes([v[6], v[7]])))
                }
                _ => None,
            })
        };
        match from_attr.or_else(from_cbank) {
            Some(size) => Ok(size),
            None => Ok(self
                .kernel_params(kernel)?
                .iter()
                .map(|p| p.offset.saturating_add(p.size))
                .max()
                .unwrap_or(0)),
        }
    }

    /// Bytes of device memory the driver sets aside for this cubin's module-scope data
    /// when it loads it: every `.nv.global*` section (initialised or zero-filled) and
    /// every `.nv.constant<N>` bank, each rounded up to its alignment. Kernel code and
    /// the kernels' parameter banks (`.nv.constant0.<kernel>`, filled at each launch)
    /// are not counted. Sections of a size past [`MAX_GLOBAL_LEN`] fail.
    pub fn module_data_len(&self) -> Result<u64> {
        let mut total: u64 = 0;
        for section in self.sections.iter() {
            let name = self.sections.section_name(self.endian, section)?;
            let data = name.starts_with(b".nv.global")
                || (name.starts_with(b".nv.constant") && !name.starts_with(b".nv.constant0."));
            if !data {
                continue;
            }
            let size = section.sh_size(self.endian);
            if size > MAX_GLOBAL_LEN {
                return Err(CubinError::BadGlobal {
                    name: String::from_utf8_lossy(name).into_owned(),
                    reason: "section size above MAX_GLOBAL_LEN",
                });
            }
            let align = section.sh_addralign(self.endian).max(1);
            // At most MAX_GLOBAL_LEN per section, over at most 65,535 sections: no
            // overflow, however the alignments are set.
            let size = size.checked_next_multiple_of(align).unwrap_or(u64::MAX);
            total = total.saturating_add(size);
        }
        Ok(total)
    }

    /// Whether the cubin declares a texture reference (`surface` false: a symbol of
    /// type 10, `STT_CUDA_TEXTURE`) or a surface reference (type 12,
    /// `STT_CUDA_SURFACE`) named `name`: PTX's `.texref` / `.surfref`.
    pub fn has_reference(&self, name: &str, surface: bool) -> bool {
        let wanted = if surface {
            STT_CUDA_SURFACE
        } else {
            STT_CUDA_TEXTURE
        };
        self.symbols.iter().any(|sym| {
            sym.st_type() == wanted
                && self.symbols.symbol_name(self.endian, sym).ok() == Some(name.as_bytes())
        })
    }

    /// Size and initial contents of the device variable `name` (as the symbol table
    /// spells it, i.e. mangled if it is in a namespace), or `None` if there is no such
    /// variable in `.nv.global*` or `.nv.constant*`.
    pub fn global(&self, name: &str) -> Result<Option<GlobalVar>> {
        let bad = |reason| CubinError::BadGlobal {
            name: name.to_owned(),
            reason,
        };
        for (i, sym) in self.symbols.enumerate() {
            let st_type = sym.st_type();
            if (st_type != elf::STT_OBJECT && st_type != STT_CUDA_OBJECT)
                || self.symbols.symbol_name(self.endian, sym).ok() != Some(name.as_bytes())
            {
                continue;
            }
            let Some(index) = self.symbols.symbol_section(self.endian, sym, i)? else {
                continue; // An undefined (extern) reference.
            };
            let section = self.sections.section(index)?;
            let section_name = self.sections.section_name(self.endian, section)?;
            let constant = section_name.starts_with(b".nv.constant");
            let zero_init = section_name == b".nv.global"
                || matches!(
                    section.sh_type(self.endian),
                    elf::SHT_NOBITS | SHT_CUDA_GLOBAL
                );
            if !(constant || zero_init || section_name == b".nv.global.init") {
                continue; // e.g. a __shared__ variable.
            }

            let size = sym.st_size(self.endian);
            if size > MAX_GLOBAL_LEN {
                return Err(bad("size above MAX_GLOBAL_LEN"));
            }
            // Executables hold addresses in st_value, relocatable files offsets.
            let value = sym.st_value(self.endian);
            let start = if self.relocatable {
                Some(value)
            } else {
                value.checked_sub(section.sh_addr(self.endian))
            }
            .ok_or_else(|| bad("value below its section's address"))?;
            let end = start
                .checked_add(size)
                .filter(|&end| end <= section.sh_size(self.endian))
                .ok_or_else(|| bad("extends past the end of its section"))?;

            let init = if zero_init {
                Vec::new()
            } else {
                let data = section.data(self.endian, self.data)?;
                usize::try_from(start)
                    .ok()
                    .zip(usize::try_from(end).ok())
                    .and_then(|(s, e)| data.get(s..e))
                    .ok_or_else(|| bad("initial data out of the file"))?
                    .to_vec()
            };
            return Ok(Some(GlobalVar {
                size,
                init,
                constant,
                managed: sym.st_other() & STO_CUDA_MANAGED != 0,
            }));
        }
        Ok(None)
    }
}

/// Parameter layout of `kernel_name` (mangled) in the cubin `elf`, in declaration
/// order. See [`Cubin::kernel_params`].
pub fn kernel_params(elf: &[u8], kernel_name: &str) -> Result<Vec<ParamInfo>> {
    Cubin::parse(elf)?.kernel_params(kernel_name)
}

/// Mangled names of all kernels in the cubin `elf`.
pub fn kernels(elf: &[u8]) -> Result<Vec<String>> {
    Ok(Cubin::parse(elf)?.kernels())
}

/// Size and initial contents of the device variable `name` in the cubin `elf`. See
/// [`Cubin::global`].
pub fn global(elf: &[u8], name: &str) -> Result<Option<GlobalVar>> {
    Cubin::parse(elf)?.global(name)
}

/// The parameter layout in a kernel's `.nv.info.<kernel>` records, in declaration
/// order.
fn params_from_info(kernel: &str, info: &[NvInfoAttr<'_>]) -> Result<Vec<ParamInfo>> {
    let bad = |reason| CubinError::BadParamInfo {
        kernel: kernel.to_owned(),
        reason,
    };
    let mut params: Vec<(u16, ParamInfo)> = Vec::new();
    for attr in info {
        let NvInfoValue::Sized(v) = attr.value else {
            continue;
        };
        let v1 = match attr.attr {
            EIATTR_KPARAM_INFO => true,
            EIATTR_KPARAM_INFO_V2 => false,
            _ => continue,
        };
        let v: &[u8; 12] = v
            .get(..12)
            .and_then(|v| v.try_into().ok())
            .ok_or_else(|| bad("parameter record shorter than 12 bytes"))?;
        let ordinal = u16::from_le_bytes([v[4], v[5]]);
        let offset = u16::from_le_bytes([v[6], v[7]]).into();
        let size = if v1 {
            u32::from_le_bytes([v[8], v[9], v[10], v[11]]) >> 18
        } else {
            u16::from_le_bytes([v[8], v[9]]).into()
        };
        params.push((ordinal, ParamInfo { offset, size }));
    }
    // nvcc lists parameters last to first; every ordinal must appear exactly once,
    // or a launch could not be marshalled.
    params.sort_by_key(|&(ordinal, _)| ordinal);
    for (i, &(ordinal, _)) in params.iter().enumerate() {
        if usize::from(ordinal) != i {
            return Err(bad("ordinals are not 0..n, each exactly once"));
        }
    }
    Ok(params.into_iter().map(|(_, p)| p).collect())
}

/// Bytes of module-scope data in the cubin `elf`. See [`Cubin::module_data_len`].
pub fn module_data_len(elf: &[u8]) -> Result<u64> {
    Cubin::parse(elf)?.module_data_len()
}

/// The ELF cubin with the highest SM architecture in `fatbin`, decompressed if it is
/// compressed (nvcc compresses cubins with `-G` or `-Xfatbin -compress-all`); of two
/// cubins for one architecture the uncompressed one is taken.
///
/// Fails with [`CubinError::NoCubin`] when there is none (PTX only), and with
/// [`CubinError::BadCompressedCubin`] when the chosen one does not decompress (see
/// [`crate::fatbin::Entry::payload_decompressed`] for the bounds).
pub fn find_cubin<'a>(fatbin: &Fatbin<'a>) -> Result<Cow<'a, [u8]>> {
    pick_cubin(fatbin, |_| true)
}

/// Like [`find_cubin`], for a GPU of architecture `sm` (e.g. 90): SASS runs only on
/// the same major architecture with an equal or higher minor, so candidates are the
/// cubins with `sm_arch / 10 == sm / 10` and `sm_arch <= sm`; the highest wins, as
/// it does when the driver picks the code to load.
pub fn find_cubin_for<'a>(fatbin: &Fatbin<'a>, sm: u32) -> Result<Cow<'a, [u8]>> {
    pick_cubin(fatbin, |arch| arch / 10 == sm / 10 && arch <= sm)
}

fn pick_cubin<'a>(fatbin: &Fatbin<'a>, fits: impl Fn(u32) -> bool) -> Result<Cow<'a, [u8]>> {
    // Highest architecture first; at a tie, an uncompressed cubin (nothing to decode).
    let best: Option<&Entry<'a>> = fatbin
        .entries()
        .filter(|e| e.kind == EntryKind::Cubin && fits(e.sm_arch))
        .fold(None, |best, e| match best {
            Some(b) if (b.sm_arch, !b.is_compressed()) >= (e.sm_arch, !e.is_compressed()) => {
                Some(b)
            }
            _ => Some(e),
        });
    let best = best.ok_or(CubinError::NoCubin)?;
    best.payload_decompressed()
        .map_err(|source| CubinError::BadCompressedCubin {
            sm_arch: best.sm_arch,
            source,
        })
}

/// `elf`, a 64-bit ELF image, grown to `len` bytes and more: its section header table
/// moved past zero padding, the rest where it was (an image larger than
/// [`crate::module::INLINE_IMAGE_MAX`], for tests of the module cache; the guest sends
/// an ELF image up to its furthest header).
#[cfg(any(test, feature = "test-images"))]
pub fn grown(elf: &[u8], len: usize) -> Vec<u8> {
    let shoff = u64::from_le_bytes(elf[0x28..0x30].try_into().expect("8 bytes")) as usize;
    let shnum = u16::from_le_bytes([elf[0x3c], elf[0x3d]]) as usize;
    let table = elf[shoff..shoff + shnum * 64].to_vec();
    let at = elf.len().max(len);
    let mut out = elf.to_vec();
    out.resize(at, 0);
    out.extend_from_slice(&table);
    out[0x28..0x30].copy_from_slice(&(at as u64).to_le_bytes());
    out
}

#[cfg(test)]
mod tests;
