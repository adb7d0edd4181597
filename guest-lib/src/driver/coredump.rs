//! GPU core dump settings (`cuCoredump*`), kept in the guest: process-wide ones and
//! each context's (per device here), read back as set. No core dump is made for a
//! guest: the GPU work runs in the host's worker, whose dump would be the host's, not
//! the program's. Types, sizes and defaults are the driver's (measured on driver 580):
//! booleans are one byte, the generation flags four, the file and pipe names strings.
//! A context's value is its own setting, else the process-wide one now (the driver
//! copies the process-wide settings into a context when it is made, so one set after
//! that does not reach it there; the guest does not see contexts being made).

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;

use vmcuda_wire::CudaStatus;

use super::{check_initialized, context, export, Result};
use crate::caller;

/// `CUcoredumpSettings`.
const ENABLE_ON_EXCEPTION: u32 = 1;
const TRIGGER_HOST: u32 = 2;
const LIGHTWEIGHT: u32 = 3;
const ENABLE_USER_TRIGGER: u32 = 4;
const FILE: u32 = 5;
const PIPE: u32 = 6;
const GENERATION_FLAGS: u32 = 7;

/// The longest file or pipe name kept (the driver's `PATH_MAX`).
const MAX_NAME: usize = 4096;

/// One scope's settings: those set, by attribute.
type Settings = HashMap<u32, Vec<u8>>;

/// The process-wide settings, and each device's context's.
static SETTINGS: Mutex<Option<(Settings, HashMap<i32, Settings>)>> = Mutex::new(None);

fn with_settings<T>(f: impl FnOnce(&mut Settings, &mut HashMap<i32, Settings>) -> T) -> T {
    let mut guard = SETTINGS.lock().unwrap_or_else(|e| e.into_inner());
    let (global, contexts) = guard.get_or_insert_with(Default::default);
    f(global, contexts)
}

/// An attribute's default value.
fn default_value(attribute: u32) -> Result<Vec<u8>> {
    Ok(match attribute {
        TRIGGER_HOST => vec![1],
        ENABLE_ON_EXCEPTION | LIGHTWEIGHT | ENABLE_USER_TRIGGER => vec![0],
        GENERATION_FLAGS => vec![0; 4],
        FILE | PIPE => Vec::new(),
        _ => return Err(CudaStatus::ErrorInvalidValue),
    })
}

/// Whether `size` bytes is the attribute's size (strings take any).
fn size_fits(attribute: u32, size: usize) -> bool {
    match attribute {
        FILE | PIPE => size > 0,
        GENERATION_FLAGS => size == 4,
        _ => size == 1,
    }
}

/// Write `value` into the caller's `size` bytes at `out` (a string NUL-terminated
/// and cut to fit).
///
/// # Safety
/// `out` is NULL or writable for `size` bytes.
unsafe fn write_value(attribute: u32, value: &[u8], out: *mut c_void, size: usize) -> Result<()> {
    if out.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let mut bytes = vec![0u8; size];
    let n = match attribute {
        FILE | PIPE => value.len().min(size - 1),
        _ => value.len().min(size),
    };
    bytes[..n].copy_from_slice(&value[..n]);
    for (i, b) in bytes.into_iter().enumerate() {
        // SAFETY: as the caller promised, `out` holds `size` writable bytes.
        unsafe { caller::write(out.cast::<u8>().add(i), b) }?;
    }
    Ok(())
}

/// The value the caller gives: `size` bytes (a string up to its NUL).
///
/// # Safety
/// `value` is NULL or readable for `size` bytes.
unsafe fn read_value(attribute: u32, value: *const c_void, size: usize) -> Result<Vec<u8>> {
    // SAFETY: as the caller promised.
    let bytes = unsafe { caller::bytes(value.cast(), size) }?.to_vec();
    Ok(match attribute {
        FILE | PIPE => {
            let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            if end > MAX_NAME {
                return Err(CudaStatus::ErrorInvalidValue);
            }
            bytes[..end].to_vec()
        }
        _ => bytes,
    })
}

/// Get (`set` None) or set an attribute, of the current context's device or (None)
/// process-wide.
///
/// # Safety
/// `value` is NULL or valid for `*size` bytes; `size` is NULL or readable.
unsafe fn attribute(
    device: Option<i32>,
    attribute: u32,
    value: *mut c_void,
    size: *mut usize,
    set: bool,
) -> Result<()> {
    default_value(attribute)?;
    // SAFETY: as the caller promised.
    let n = unsafe { caller::read(size) }?;
    if !size_fits(attribute, n) {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    if set {
        // SAFETY: as the caller promised.
        let v = unsafe { read_value(attribute, value, n) }?;
        with_settings(|global, contexts| {
            let scope = match device {
                Some(d) => contexts.entry(d).or_default(),
                None => global,
            };
            scope.insert(attribute, v);
        });
        return Ok(());
    }
    let v = with_settings(|global, contexts| {
        device
            .and_then(|d| contexts.get(&d)?.get(&attribute).cloned())
            .or_else(|| global.get(&attribute).cloned())
    });
    let v = match v {
        Some(v) => v,
        None => default_value(attribute)?,
    };
    // SAFETY: as the caller promised.
    unsafe { write_value(attribute, &v, value, n) }
}

export! {
    fn cuCoredumpGetAttribute(attr: u32, value: *mut c_void, size: *mut usize) {
        let device = context::current_device()?;
        // SAFETY: by its contract `value` holds `*size` writable bytes.
        unsafe { attribute(Some(device), attr, value, size, false) }
    }
}

export! {
    fn cuCoredumpGetAttributeGlobal(attr: u32, value: *mut c_void, size: *mut usize) {
        check_initialized()?;
        // SAFETY: by its contract `value` holds `*size` writable bytes.
        unsafe { attribute(None, attr, value, size, false) }
    }
}

export! {
    fn cuCoredumpSetAttribute(attr: u32, value: *mut c_void, size: *mut usize) {
        let device = context::current_device()?;
        // SAFETY: by its contract `value` holds `*size` readable bytes.
        unsafe { attribute(Some(device), attr, value, size, true) }
    }
}

export! {
    fn cuCoredumpSetAttributeGlobal(attr: u32, value: *mut c_void, size: *mut usize) {
        check_initialized()?;
        // SAFETY: by its contract `value` holds `*size` readable bytes.
        unsafe { attribute(None, attr, value, size, true) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_read_back_as_set_with_the_drivers_sizes_and_defaults() {
        let mut b = [0xabu8; 8];
        let mut n = 1usize;
        // SAFETY: (every call) `b` holds 8 writable bytes, `n` is readable.
        unsafe {
            attribute(None, TRIGGER_HOST, b.as_mut_ptr().cast(), &mut n, false).unwrap();
            assert_eq!(b[..2], [1, 0xab], "the default, one byte");
            n = 4;
            let e = attribute(None, TRIGGER_HOST, b.as_mut_ptr().cast(), &mut n, false);
            assert_eq!(
                e.unwrap_err(),
                CudaStatus::ErrorInvalidValue,
                "a boolean is one byte"
            );
            let e = attribute(None, 8, b.as_mut_ptr().cast(), &mut n, false);
            assert_eq!(
                e.unwrap_err(),
                CudaStatus::ErrorInvalidValue,
                "no attribute 8"
            );
            let mut name = *b"dump\0xyz";
            n = 8;
            attribute(None, FILE, name.as_mut_ptr().cast(), &mut n, true).unwrap();
            n = 1;
            let mut one = [1u8];
            attribute(Some(3), LIGHTWEIGHT, one.as_mut_ptr().cast(), &mut n, true).unwrap();
            n = 8;
            attribute(Some(3), FILE, b.as_mut_ptr().cast(), &mut n, false).unwrap();
            assert_eq!(&b, b"dump\0\0\0\0", "a context falls back to the process's");
            n = 1;
            attribute(Some(3), LIGHTWEIGHT, b.as_mut_ptr().cast(), &mut n, false).unwrap();
            assert_eq!(b[0], 1);
            attribute(None, LIGHTWEIGHT, b.as_mut_ptr().cast(), &mut n, false).unwrap();
            assert_eq!(b[0], 0, "set for one context only");
        }
    }
}
