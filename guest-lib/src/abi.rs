//! The C types that cross the library's C boundary: the structs and unions of CUDA's
//! headers that programs hand the driver by pointer or by value (copies, arrays and
//! textures, launches, graph nodes, memory pools, IPC handles, device properties), and
//! NVML's. Each is laid out as its header lays it out, and the tests beside each module
//! check it against the bindings of those headers (cudarc's `sys` modules for CUDA 13,
//! nvml-wrapper-sys for NVML): size, alignment and every field's offset.
//!
//! The copies keep enums as plain integers: a program may pass a value this build does
//! not name, which a Rust enum cannot hold. A binding's own type is used as it is
//! where it holds no enum and the code only reads its fields.
//!
//! Not here: the driver's private export tables (`driver/export_table.rs`), which are
//! tables of the guest's own functions with no header to follow
//! (docs/driver-export-tables.md). This module imports nothing from the rest of the
//! crate.
//!
//! - [`driver`]: the structs of `cuda.h` (the driver API).
//! - [`runtime`]: the structs of `driver_types.h` and `vector_types.h` (the runtime API,
//!   whose code the driver's is built on).
//! - [`nvml`]: the structs of `nvml.h`.

/// Check a copy against its binding: the size, the alignment, and each field's offset
/// against the binding's field of the same meaning (`ours => theirs`, nested fields
/// with dots).
#[cfg(test)]
macro_rules! same_layout {
    ($ours:ty, $theirs:ty $(, $a:ident $(. $an:ident)* => $b:ident $(. $bn:ident)*)* $(,)?) => {{
        assert_eq!(
            std::mem::size_of::<$ours>(),
            std::mem::size_of::<$theirs>(),
            "size of {}",
            stringify!($ours)
        );
        assert_eq!(
            std::mem::align_of::<$ours>(),
            std::mem::align_of::<$theirs>(),
            "alignment of {}",
            stringify!($ours)
        );
        $(assert_eq!(
            std::mem::offset_of!($ours, $a $(. $an)*),
            std::mem::offset_of!($theirs, $b $(. $bn)*),
            "{}.{}",
            stringify!($ours),
            stringify!($a $(. $an)*)
        );)*
    }};
}

pub mod driver;
pub mod nvml;
pub mod runtime;
