//! The table functions (`vmcuda_wire::blas_table`) on real GPUs: each is called
//! through its own cuBLAS entry point, looked up by name in the library cudarc loads
//! and typed from its table line, every `int` a C `int`, every `long` an `int64_t` and
//! everything else a pointer
//! (the table's test compares each line with its prototype in cublas_api.h), so a
//! guest's enum values reach cuBLAS as plain numbers for it to judge.
//!
//! Before the call the handle gets the request's stream, math mode and pointer mode.
//! Host values point into the call's own buffers; pointer arrays are device copies of
//! the arrays the session checked, freed in stream order after the call.

use std::ffi::{c_int, c_void};

use vmcuda_wire::blas_table::BlasFn;

use super::super::blas::ExecBlas;
use super::super::blas_table::{ExecArg, TableCall};
use super::super::ExecResult;
use super::blas::{cublas, Handle, Ptr, Status};
use super::CudaExecutor;

/// One C argument after the handle.
#[derive(Clone, Copy)]
enum CArg {
    Int(i64),
    Ptr(*mut c_void),
}

/// The C type a parameter of the entry point has, picked by inference at the call.
trait FromCArg {
    fn from_carg(a: CArg) -> Self;
}

impl FromCArg for c_int {
    fn from_carg(a: CArg) -> Self {
        match a {
            // An `int` argument travels as an i32 on the wire: nothing is cut.
            CArg::Int(v) => v as c_int,
            CArg::Ptr(_) => 0,
        }
    }
}

impl FromCArg for i64 {
    fn from_carg(a: CArg) -> Self {
        match a {
            CArg::Int(v) => v,
            CArg::Ptr(_) => 0,
        }
    }
}

impl FromCArg for *mut c_void {
    fn from_carg(a: CArg) -> Self {
        match a {
            CArg::Ptr(p) => p,
            CArg::Int(_) => std::ptr::null_mut(),
        }
    }
}

/// The host side of the table: a call of each entry point with its C signature.
macro_rules! host_dispatch {
    ($(
        $id:literal $name:ident [$p:ident $family:ident] (
            $( $arg:ident : $kind:ident $( ( $($spec:tt)* ) )? $( if ( $($cond:tt)* ) )? ),* $(,)?
        );
    )*) => {
        /// Call `f`'s entry point at `addr` with `args` (as many as its line has,
        /// checked by the session's validation).
        ///
        /// # Safety
        /// `addr` is cuBLAS's entry point named `f.name()`; every pointer in `args`
        /// is valid for what cuBLAS does with it (checked device ranges, host buffers
        /// of the validated sizes).
        unsafe fn call_entry_point(f: BlasFn, addr: *const c_void, h: Handle, args: &[CArg]) -> Status {
            match f { $( BlasFn::$name => {
                type Entry = unsafe extern "C" fn(Handle, $( vmcuda_wire::blas_c_type!($kind) ),*) -> Status;
                let [$( $arg, )*] = args else {
                    return vmcuda_wire::blas::status::INVALID_VALUE as Status;
                };
                // SAFETY: the caller's; the table line gives the C signature.
                unsafe {
                    let entry: Entry = std::mem::transmute::<*const c_void, Entry>(addr);
                    entry(h, $( FromCArg::from_carg(*$arg) ),*)
                }
            } )* }
        }
    };
}

vmcuda_wire::blas_table!(host_dispatch);

impl CudaExecutor {
    /// The address of `f`'s entry point, looked up once.
    fn blas_entry_point(&mut self, f: BlasFn) -> ExecResult<*const c_void> {
        if let Some(addr) = self.blas.table.get(&f.id()) {
            return Ok(*addr as *const c_void);
        }
        // SAFETY: the cuBLAS library was found when the handle was made (blas_api);
        // cudarc keeps it loaded for the process.
        let lib = unsafe { cudarc::cublas::sys::culib() };
        // SAFETY: only looks the address up; it is called with its table signature.
        let addr: *const c_void = unsafe { super::entry_point(lib, "libcublas", f.name())? };
        self.blas.table.insert(f.id(), addr as usize);
        Ok(addr)
    }

    pub(super) fn blas_table_call(&mut self, id: ExecBlas, call: &mut TableCall) -> ExecResult<()> {
        let (h, stream) = self.blas_prepare(id, call.stream, call.math_mode, call.pointer_mode)?;
        let addr = self.blas_entry_point(call.function)?;
        let arrays: Vec<Vec<u64>> = call
            .args
            .iter()
            .filter_map(|a| match a {
                ExecArg::Pointers(p) => Some(p.clone()),
                _ => None,
            })
            .collect();
        let arrays: Vec<&[u64]> = arrays.iter().map(Vec::as_slice).collect();
        let function = call.function;
        let mut run = |device_arrays: &[Ptr]| {
            let mut next_array = device_arrays.iter();
            let args: Vec<CArg> = call
                .args
                .iter_mut()
                .map(|a| match a {
                    ExecArg::Int(v) => CArg::Int(*v),
                    ExecArg::Device(p) => CArg::Ptr(*p as usize as *mut c_void),
                    ExecArg::Host(buf) => CArg::Ptr(buf.as_mut_ptr().cast()),
                    ExecArg::Pointers(_) => {
                        CArg::Ptr(next_array.next().map_or(std::ptr::null(), |p| *p) as *mut c_void)
                    }
                })
                .collect();
            // SAFETY: `addr` is the entry point of that name; the session validated the
            // call and checked every device range and array pointer against the guest's
            // memory; host values point into `call.args`, alive and sized as validated.
            cublas(unsafe { call_entry_point(function, addr, h, &args) })
        };
        if arrays.is_empty() {
            run(&[])
        } else {
            self.with_device_arrays(stream, &arrays, run)
        }
    }
}
