//! Matmul descriptors, matrix layouts and preferences: kept here, as the attribute bytes
//! the program set, named by ids made here.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, MutexGuard};

use vmcuda_wire::blaslt::{
    desc, layout, AttrSpec, Descriptor, LAYOUT_ATTRS, MATMUL_DESC_ATTRS, PREFERENCE_ATTRS,
};

use crate::blas::{export, status, Result};
use crate::{caller, state};

/// What a descriptor id names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Matmul,
    Layout,
    Preference,
}

impl Kind {
    fn table(self) -> &'static [AttrSpec] {
        match self {
            Kind::Matmul => MATMUL_DESC_ATTRS,
            Kind::Layout => LAYOUT_ATTRS,
            Kind::Preference => PREFERENCE_ATTRS,
        }
    }
}

type Registry = HashMap<u64, (Kind, Descriptor)>;

static DESCRIPTORS: Mutex<Option<Registry>> = Mutex::new(None);

fn registry() -> MutexGuard<'static, Option<Registry>> {
    DESCRIPTORS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The program's `cublasLtMatmulDesc_t`, `cublasLtMatrixLayout_t` or
/// `cublasLtMatmulPreference_t`: the id.
pub type Ptr = *mut c_void;

/// A copy of the descriptor `id` names, which must be of `kind`.
pub fn get(kind: Kind, id: Ptr) -> Result<Descriptor> {
    registry()
        .as_ref()
        .and_then(|m| m.get(&(id as u64)))
        .filter(|(k, _)| *k == kind)
        .map(|(_, d)| d.clone())
        .ok_or(status::INVALID_VALUE)
}

/// # Safety
/// `out` is NULL or writable.
unsafe fn create(kind: Kind, out: *mut Ptr, initial: &[(u32, Vec<u8>)]) -> Result<()> {
    if out.is_null() {
        return Err(status::INVALID_VALUE);
    }
    let mut d = Descriptor::default();
    for (id, bytes) in initial {
        d.set(kind.table(), *id, bytes).map_err(|e| e.status())?;
    }
    let id = state::fresh_id();
    registry()
        .get_or_insert_with(HashMap::new)
        .insert(id, (kind, d));
    // SAFETY: as `create`'s caller promised.
    unsafe { caller::write(out, id as Ptr) }.map_err(|_| status::INVALID_VALUE)
}

fn destroy(kind: Kind, id: Ptr) -> Result<()> {
    if id.is_null() {
        return Ok(());
    }
    let mut g = registry();
    let m = g.as_mut().ok_or(status::INVALID_VALUE)?;
    match m.get(&(id as u64)) {
        Some((k, _)) if *k == kind => {
            m.remove(&(id as u64));
            Ok(())
        }
        _ => Err(status::INVALID_VALUE),
    }
}

/// # Safety
/// `buf` is NULL or readable for `size` bytes.
unsafe fn set(kind: Kind, id: Ptr, attr: c_int, buf: *const c_void, size: usize) -> Result<()> {
    let attr = u32::try_from(attr).map_err(|_| status::INVALID_VALUE)?;
    if buf.is_null() {
        return Err(status::INVALID_VALUE);
    }
    // SAFETY: as `set`'s caller promised.
    let bytes = unsafe { caller::bytes(buf.cast(), size) }.map_err(|_| status::INVALID_VALUE)?;
    let mut g = registry();
    let (k, d) = g
        .as_mut()
        .and_then(|m| m.get_mut(&(id as u64)))
        .ok_or(status::INVALID_VALUE)?;
    if *k != kind {
        return Err(status::INVALID_VALUE);
    }
    d.set(kind.table(), attr, bytes).map_err(|e| e.status())
}

/// `cublasLt*GetAttribute`: with `size` 0, only the size needed goes to `written`.
///
/// # Safety
/// `buf` is NULL or writable for `size` bytes; `written` is NULL or writable.
unsafe fn get_attr(
    kind: Kind,
    id: Ptr,
    attr: c_int,
    buf: *mut c_void,
    size: usize,
    written: *mut usize,
) -> Result<()> {
    let attr = u32::try_from(attr).map_err(|_| status::INVALID_VALUE)?;
    let d = get(kind, id)?;
    let value = d.get(kind.table(), attr).ok_or(status::INVALID_VALUE)?;
    if size == 0 {
        // SAFETY: as `get_attr`'s caller promised.
        return unsafe { caller::write(written, value.len()) }.map_err(|_| status::INVALID_VALUE);
    }
    if size != value.len() || buf.is_null() {
        return Err(status::INVALID_VALUE);
    }
    // SAFETY: as `get_attr`'s caller promised.
    let out = unsafe { caller::bytes_mut(buf.cast(), size) }.map_err(|_| status::INVALID_VALUE)?;
    out.copy_from_slice(&value);
    // SAFETY: as `get_attr`'s caller promised.
    unsafe { caller::write_opt(written, value.len()) };
    Ok(())
}

fn le4(v: i32) -> Vec<u8> {
    v.to_le_bytes().to_vec()
}

export! {
    fn cublasLtMatmulDescCreate(out: *mut Ptr, compute: c_int, scale: c_int) {
        // SAFETY: by cublasLtMatmulDescCreate's contract its pointer arguments are as
        // `create` requires.
        unsafe { create(
            Kind::Matmul,
            out,
            &[(desc::COMPUTE_TYPE, le4(compute)), (desc::SCALE_TYPE, le4(scale))],
        ) }
    }
}
export! { fn cublasLtMatmulDescDestroy(d: Ptr) { destroy(Kind::Matmul, d) } }
export! {
    fn cublasLtMatmulDescSetAttribute(d: Ptr, attr: c_int, buf: *const c_void, size: usize) {
        // SAFETY: by cublasLtMatmulDescSetAttribute's contract its pointer arguments are as
        // `set` requires.
        unsafe { set(Kind::Matmul, d, attr, buf, size) }
    }
}
export! {
    fn cublasLtMatmulDescGetAttribute(
        d: Ptr, attr: c_int, buf: *mut c_void, size: usize, written: *mut usize,
    ) {
        // SAFETY: by cublasLtMatmulDescGetAttribute's contract its pointer arguments are as
        // `get_attr` requires.
        unsafe { get_attr(Kind::Matmul, d, attr, buf, size, written) }
    }
}

export! {
    fn cublasLtMatrixLayoutCreate(out: *mut Ptr, t: c_int, rows: u64, cols: u64, ld: i64) {
        // SAFETY: by cublasLtMatrixLayoutCreate's contract its pointer arguments are as
        // `create` requires.
        unsafe { create(
            Kind::Layout,
            out,
            &[
                (layout::TYPE, le4(t)),
                (layout::ROWS, rows.to_le_bytes().to_vec()),
                (layout::COLS, cols.to_le_bytes().to_vec()),
                (layout::LD, ld.to_le_bytes().to_vec()),
            ],
        ) }
    }
}
export! { fn cublasLtMatrixLayoutDestroy(l: Ptr) { destroy(Kind::Layout, l) } }
export! {
    fn cublasLtMatrixLayoutSetAttribute(l: Ptr, attr: c_int, buf: *const c_void, size: usize) {
        // SAFETY: by cublasLtMatrixLayoutSetAttribute's contract its pointer arguments are
        // as `set` requires.
        unsafe { set(Kind::Layout, l, attr, buf, size) }
    }
}
export! {
    fn cublasLtMatrixLayoutGetAttribute(
        l: Ptr, attr: c_int, buf: *mut c_void, size: usize, written: *mut usize,
    ) {
        // SAFETY: by cublasLtMatrixLayoutGetAttribute's contract its pointer arguments are
        // as `get_attr` requires.
        unsafe { get_attr(Kind::Layout, l, attr, buf, size, written) }
    }
}

export! {
    fn cublasLtMatmulPreferenceCreate(out: *mut Ptr) {
        // SAFETY: by cublasLtMatmulPreferenceCreate's contract `out` is NULL or writable.
        unsafe { create(Kind::Preference, out, &[]) }
    }
}
export! { fn cublasLtMatmulPreferenceDestroy(p: Ptr) { destroy(Kind::Preference, p) } }
export! {
    fn cublasLtMatmulPreferenceSetAttribute(p: Ptr, attr: c_int, buf: *const c_void, size: usize) {
        // SAFETY: by cublasLtMatmulPreferenceSetAttribute's contract its pointer arguments
        // are as `set` requires.
        unsafe { set(Kind::Preference, p, attr, buf, size) }
    }
}
export! {
    fn cublasLtMatmulPreferenceGetAttribute(
        p: Ptr, attr: c_int, buf: *mut c_void, size: usize, written: *mut usize,
    ) {
        // SAFETY: by cublasLtMatmulPreferenceGetAttribute's contract its pointer arguments
        // are as `get_attr` requires.
        unsafe { get_attr(Kind::Preference, p, attr, buf, size, written) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr::null_mut;

    #[test]
    fn attributes_round_trip_with_cublaslt_sizes() {
        let mut d: Ptr = null_mut();
        assert_eq!(cublasLtMatmulDescCreate(&mut d, 68, 0), status::SUCCESS);
        let trans: i32 = 1;
        let p = (&trans as *const i32).cast();
        assert_eq!(cublasLtMatmulDescSetAttribute(d, 3, p, 4), status::SUCCESS);
        assert_eq!(
            cublasLtMatmulDescSetAttribute(d, 3, p, 8),
            status::INVALID_VALUE,
            "TRANSA is an int32_t"
        );
        assert_eq!(
            cublasLtMatmulDescSetAttribute(d, 3, std::ptr::null(), 4),
            status::INVALID_VALUE
        );
        let mut out: i32 = 0;
        let mut written = 0usize;
        let o = (&mut out as *mut i32).cast();
        assert_eq!(
            cublasLtMatmulDescGetAttribute(d, 3, o, 4, &mut written),
            status::SUCCESS
        );
        assert_eq!((out, written), (1, 4));
        // The compute type from create; the bias type's default (-1).
        assert_eq!(cublasLtMatmulDescGetAttribute(d, 0, o, 4, null_mut()), 0);
        assert_eq!(out, 68);
        assert_eq!(cublasLtMatmulDescGetAttribute(d, 26, o, 4, null_mut()), 0);
        assert_eq!(out, -1);
        // Size query.
        let mut need = 0usize;
        assert_eq!(
            cublasLtMatmulDescGetAttribute(d, 8, null_mut(), 0, &mut need),
            status::SUCCESS
        );
        assert_eq!(need, 8);
        // A descriptor is not a layout.
        assert_eq!(
            cublasLtMatrixLayoutSetAttribute(d, 0, p, 4),
            status::INVALID_VALUE
        );
        assert_eq!(cublasLtMatmulDescDestroy(d), status::SUCCESS);
        assert_eq!(cublasLtMatmulDescDestroy(d), status::INVALID_VALUE);

        let mut l: Ptr = null_mut();
        assert_eq!(cublasLtMatrixLayoutCreate(&mut l, 2, 4, 3, 4), 0);
        let mut rows = 0u64;
        let r = (&mut rows as *mut u64).cast();
        assert_eq!(cublasLtMatrixLayoutGetAttribute(l, 2, r, 8, null_mut()), 0);
        assert_eq!(rows, 4);
        let mut batch = 0i32;
        let b = (&mut batch as *mut i32).cast();
        assert_eq!(cublasLtMatrixLayoutGetAttribute(l, 5, b, 4, null_mut()), 0);
        assert_eq!(batch, 1, "default batch count");
        assert_eq!(cublasLtMatrixLayoutDestroy(l), 0);

        let mut pref: Ptr = null_mut();
        assert_eq!(cublasLtMatmulPreferenceCreate(&mut pref), 0);
        let ws = 1u64 << 20;
        let w = (&ws as *const u64).cast();
        assert_eq!(cublasLtMatmulPreferenceSetAttribute(pref, 1, w, 8), 0);
        assert_eq!(
            cublasLtMatmulPreferenceSetAttribute(pref, 1, w, 4),
            status::INVALID_VALUE
        );
        assert_eq!(cublasLtMatmulPreferenceDestroy(pref), 0);
    }
}
