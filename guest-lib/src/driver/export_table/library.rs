//! The export tables NVIDIA's libraries ask for (beyond the runtime's): context
//! identity, function introspection and the tables answered with stubs.

use super::*;

// ---- library tables -----------------------------------------------------------------

/// A table of stubs: the size word, then `N` slots.
#[repr(C)]
pub struct StubTable<const N: usize> {
    size: usize,
    slots: [Unknown; N],
}

/// An opaque per-stream object for slot 51: NVIDIA's libraries only hand it back to
/// slot 39. Zeroed, so that any field read from it says "nothing special".
static STREAM_OBJECT: Buffer<512> = Buffer(std::cell::UnsafeCell::new([0; 512]));

/// 21318c60 slot 51: `(context, stream, *object)`. cuBLAS calls it for the stream of a
/// call before its first kernel (measured), and gives the object to slot 39. A stream
/// this process does not hold is `CUDA_ERROR_INVALID_HANDLE`.
extern "C" fn stream_object(_ctx: CUcontext, stream: RawHandle, out: *mut *mut c_void) -> CUresult {
    guard("export table 21318c60 slot 51", || {
        if out.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        if !crate::driver::inner::known_stream(crate::driver::inner::stream_handle(stream, false)) {
            return Err(status(CUDA_ERROR_INVALID_HANDLE));
        }
        // SAFETY: checked non-NULL; the caller passes a writable pointer slot.
        unsafe { caller::write(out, STREAM_OBJECT.0.get().cast::<c_void>()) }
    })
}

/// 21318c60 slot 39: `(context, object from slot 51, *value)`: 0 (what drivers answer
/// for a stream with nothing attached).
extern "C" fn stream_object_value(_ctx: CUcontext, object: *mut c_void, out: *mut u64) -> CUresult {
    guard("export table 21318c60 slot 39", || {
        if object.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: the caller passes a writable value (NULL is refused).
        unsafe { caller::write(out, 0) }
    })
}

#[repr(C)]
pub struct ContextIdentity {
    size: usize,
    slots_1_3: [Unknown; 3],
    /// Slot 4: the context's unique id: `cuCtxGetId`.
    context_number: extern "C" fn(CUcontext, *mut u64) -> CUresult,
    slots_5_38: [Unknown; 34],
    stream_object_value: extern "C" fn(CUcontext, *mut c_void, *mut u64) -> CUresult,
    slots_40_50: [Unknown; 11],
    stream_object: extern "C" fn(CUcontext, RawHandle, *mut *mut c_void) -> CUresult,
    slots_52_92: [Unknown; 41],
}

pub static CONTEXT_IDENTITY_TABLE: ContextIdentity = ContextIdentity {
    size: size_of_words(93),
    slots_1_3: [
        unknown_slot::<3, 1>,
        unknown_slot::<3, 2>,
        unknown_slot::<3, 3>,
    ],
    context_number: crate::driver::twins::cuCtxGetId,
    slots_5_38: [
        unknown_slot::<3, 5>,
        unknown_slot::<3, 6>,
        unknown_slot::<3, 7>,
        unknown_slot::<3, 8>,
        unknown_slot::<3, 9>,
        unknown_slot::<3, 10>,
        unknown_slot::<3, 11>,
        unknown_slot::<3, 12>,
        unknown_slot::<3, 13>,
        unknown_slot::<3, 14>,
        unknown_slot::<3, 15>,
        unknown_slot::<3, 16>,
        unknown_slot::<3, 17>,
        unknown_slot::<3, 18>,
        unknown_slot::<3, 19>,
        unknown_slot::<3, 20>,
        unknown_slot::<3, 21>,
        unknown_slot::<3, 22>,
        unknown_slot::<3, 23>,
        unknown_slot::<3, 24>,
        unknown_slot::<3, 25>,
        unknown_slot::<3, 26>,
        unknown_slot::<3, 27>,
        unknown_slot::<3, 28>,
        unknown_slot::<3, 29>,
        unknown_slot::<3, 30>,
        unknown_slot::<3, 31>,
        unknown_slot::<3, 32>,
        unknown_slot::<3, 33>,
        unknown_slot::<3, 34>,
        unknown_slot::<3, 35>,
        unknown_slot::<3, 36>,
        unknown_slot::<3, 37>,
        unknown_slot::<3, 38>,
    ],
    stream_object_value,
    slots_40_50: [
        unknown_slot::<3, 40>,
        unknown_slot::<3, 41>,
        unknown_slot::<3, 42>,
        unknown_slot::<3, 43>,
        unknown_slot::<3, 44>,
        unknown_slot::<3, 45>,
        unknown_slot::<3, 46>,
        unknown_slot::<3, 47>,
        unknown_slot::<3, 48>,
        unknown_slot::<3, 49>,
        unknown_slot::<3, 50>,
    ],
    stream_object,
    slots_52_92: [
        unknown_slot::<3, 52>,
        unknown_slot::<3, 53>,
        unknown_slot::<3, 54>,
        unknown_slot::<3, 55>,
        unknown_slot::<3, 56>,
        unknown_slot::<3, 57>,
        unknown_slot::<3, 58>,
        unknown_slot::<3, 59>,
        unknown_slot::<3, 60>,
        unknown_slot::<3, 61>,
        unknown_slot::<3, 62>,
        unknown_slot::<3, 63>,
        unknown_slot::<3, 64>,
        unknown_slot::<3, 65>,
        unknown_slot::<3, 66>,
        unknown_slot::<3, 67>,
        unknown_slot::<3, 68>,
        unknown_slot::<3, 69>,
        unknown_slot::<3, 70>,
        unknown_slot::<3, 71>,
        unknown_slot::<3, 72>,
        unknown_slot::<3, 73>,
        unknown_slot::<3, 74>,
        unknown_slot::<3, 75>,
        unknown_slot::<3, 76>,
        unknown_slot::<3, 77>,
        unknown_slot::<3, 78>,
        unknown_slot::<3, 79>,
        unknown_slot::<3, 80>,
        unknown_slot::<3, 81>,
        unknown_slot::<3, 82>,
        unknown_slot::<3, 83>,
        unknown_slot::<3, 84>,
        unknown_slot::<3, 85>,
        unknown_slot::<3, 86>,
        unknown_slot::<3, 87>,
        unknown_slot::<3, 88>,
        unknown_slot::<3, 89>,
        unknown_slot::<3, 90>,
        unknown_slot::<3, 91>,
        unknown_slot::<3, 92>,
    ],
};

// ---- 6e163fbe: function introspection ------------------------------------------------

/// What slot 7 calls for each of a module's functions: (the caller's value, the
/// function, its name, 0, 0, the module).
type FunctionVisitor =
    extern "C" fn(*mut c_void, *mut c_void, *const std::ffi::c_char, usize, usize, *mut c_void);

/// Slot 7: `(context, module, visitor, value, module, ...)`: calls `visitor` for each of
/// the module's functions and answers how many there were. cuFFT finds each kernel so
/// (its modules hold one each), then hands the function to `cuLaunchKernel`,
/// `cuFuncGetAttribute` and the occupancy calls, and reads nothing out of it (measured
/// against the real driver with tests/gpu/probe): an ordinary `CUfunction` serves. A
/// module the process does not hold has no functions (and a line says so).
extern "C" fn module_functions(
    _ctx: CUcontext,
    module: *mut c_void,
    visitor: Option<FunctionVisitor>,
    value: *mut c_void,
    _module_again: *mut c_void,
    _data: *mut c_void,
) -> usize {
    let found = catch_unwind(
        || -> Result<Vec<(*mut c_void, *const std::ffi::c_char)>, CudaStatus> {
            crate::driver::module::function_ids(module as u64)?
                .into_iter()
                .map(|id| {
                    let f = id as *mut c_void;
                    Ok((f, crate::driver::module::function_facts(f)?.1))
                })
                .collect()
        },
    );
    let functions = match found {
        Ok(Ok(functions)) => functions,
        Ok(Err(e)) => {
            say_once(format!(
                "vmcuda: export table 6e163fbe slot 7 cannot list the functions of module {module:p} ({e:?})"
            ));
            return 0;
        }
        Err(_) => return 0,
    };
    if crate::driver::trace_failures() {
        eprintln!(
            "vmcuda: export table 6e163fbe slot 7: module {module:p} has {} function(s)",
            functions.len()
        );
    }
    // The visitor is the caller's code: called with no lock held. The names stay
    // valid while the module is loaded.
    if let Some(visit) = visitor {
        for &(f, name) in &functions {
            visit(value, f, name, 0, 0, module);
        }
    }
    functions.len()
}

#[repr(C)]
pub struct FunctionIntrospection {
    size: usize,
    slots_1_6: [Unknown; 6],
    module_functions: extern "C" fn(
        CUcontext,
        *mut c_void,
        Option<FunctionVisitor>,
        *mut c_void,
        *mut c_void,
        *mut c_void,
    ) -> usize,
    slots_8_98: [Unknown; 91],
}

pub static FUNCTION_INTROSPECTION_TABLE: FunctionIntrospection = FunctionIntrospection {
    size: size_of_words(99),
    slots_1_6: [
        unknown_slot::<4, 1>,
        unknown_slot::<4, 2>,
        unknown_slot::<4, 3>,
        unknown_slot::<4, 4>,
        unknown_slot::<4, 5>,
        unknown_slot::<4, 6>,
    ],
    module_functions,
    slots_8_98: [
        unknown_slot::<4, 8>,
        unknown_slot::<4, 9>,
        unknown_slot::<4, 10>,
        unknown_slot::<4, 11>,
        unknown_slot::<4, 12>,
        unknown_slot::<4, 13>,
        unknown_slot::<4, 14>,
        unknown_slot::<4, 15>,
        unknown_slot::<4, 16>,
        unknown_slot::<4, 17>,
        unknown_slot::<4, 18>,
        unknown_slot::<4, 19>,
        unknown_slot::<4, 20>,
        unknown_slot::<4, 21>,
        unknown_slot::<4, 22>,
        unknown_slot::<4, 23>,
        unknown_slot::<4, 24>,
        unknown_slot::<4, 25>,
        unknown_slot::<4, 26>,
        unknown_slot::<4, 27>,
        unknown_slot::<4, 28>,
        unknown_slot::<4, 29>,
        unknown_slot::<4, 30>,
        unknown_slot::<4, 31>,
        unknown_slot::<4, 32>,
        unknown_slot::<4, 33>,
        unknown_slot::<4, 34>,
        unknown_slot::<4, 35>,
        unknown_slot::<4, 36>,
        unknown_slot::<4, 37>,
        unknown_slot::<4, 38>,
        unknown_slot::<4, 39>,
        unknown_slot::<4, 40>,
        unknown_slot::<4, 41>,
        unknown_slot::<4, 42>,
        unknown_slot::<4, 43>,
        unknown_slot::<4, 44>,
        unknown_slot::<4, 45>,
        unknown_slot::<4, 46>,
        unknown_slot::<4, 47>,
        unknown_slot::<4, 48>,
        unknown_slot::<4, 49>,
        unknown_slot::<4, 50>,
        unknown_slot::<4, 51>,
        unknown_slot::<4, 52>,
        unknown_slot::<4, 53>,
        unknown_slot::<4, 54>,
        unknown_slot::<4, 55>,
        unknown_slot::<4, 56>,
        unknown_slot::<4, 57>,
        unknown_slot::<4, 58>,
        unknown_slot::<4, 59>,
        unknown_slot::<4, 60>,
        unknown_slot::<4, 61>,
        unknown_slot::<4, 62>,
        unknown_slot::<4, 63>,
        unknown_slot::<4, 64>,
        unknown_slot::<4, 65>,
        unknown_slot::<4, 66>,
        unknown_slot::<4, 67>,
        unknown_slot::<4, 68>,
        unknown_slot::<4, 69>,
        unknown_slot::<4, 70>,
        unknown_slot::<4, 71>,
        unknown_slot::<4, 72>,
        unknown_slot::<4, 73>,
        unknown_slot::<4, 74>,
        unknown_slot::<4, 75>,
        unknown_slot::<4, 76>,
        unknown_slot::<4, 77>,
        unknown_slot::<4, 78>,
        unknown_slot::<4, 79>,
        unknown_slot::<4, 80>,
        unknown_slot::<4, 81>,
        unknown_slot::<4, 82>,
        unknown_slot::<4, 83>,
        unknown_slot::<4, 84>,
        unknown_slot::<4, 85>,
        unknown_slot::<4, 86>,
        unknown_slot::<4, 87>,
        unknown_slot::<4, 88>,
        unknown_slot::<4, 89>,
        unknown_slot::<4, 90>,
        unknown_slot::<4, 91>,
        unknown_slot::<4, 92>,
        unknown_slot::<4, 93>,
        unknown_slot::<4, 94>,
        unknown_slot::<4, 95>,
        unknown_slot::<4, 96>,
        unknown_slot::<4, 97>,
        unknown_slot::<4, 98>,
    ],
};

pub static LIBRARY_TABLE_7_TABLE: StubTable<6> = StubTable {
    size: size_of_words(7),
    slots: [
        unknown_slot::<5, 1>,
        unknown_slot::<5, 2>,
        unknown_slot::<5, 3>,
        unknown_slot::<5, 4>,
        unknown_slot::<5, 5>,
        unknown_slot::<5, 6>,
    ],
};

pub static LIBRARY_TABLE_34_TABLE: StubTable<33> = StubTable {
    size: size_of_words(34),
    slots: [
        unknown_slot::<6, 1>,
        unknown_slot::<6, 2>,
        unknown_slot::<6, 3>,
        unknown_slot::<6, 4>,
        unknown_slot::<6, 5>,
        unknown_slot::<6, 6>,
        unknown_slot::<6, 7>,
        unknown_slot::<6, 8>,
        unknown_slot::<6, 9>,
        unknown_slot::<6, 10>,
        unknown_slot::<6, 11>,
        unknown_slot::<6, 12>,
        unknown_slot::<6, 13>,
        unknown_slot::<6, 14>,
        unknown_slot::<6, 15>,
        unknown_slot::<6, 16>,
        unknown_slot::<6, 17>,
        unknown_slot::<6, 18>,
        unknown_slot::<6, 19>,
        unknown_slot::<6, 20>,
        unknown_slot::<6, 21>,
        unknown_slot::<6, 22>,
        unknown_slot::<6, 23>,
        unknown_slot::<6, 24>,
        unknown_slot::<6, 25>,
        unknown_slot::<6, 26>,
        unknown_slot::<6, 27>,
        unknown_slot::<6, 28>,
        unknown_slot::<6, 29>,
        unknown_slot::<6, 30>,
        unknown_slot::<6, 31>,
        unknown_slot::<6, 32>,
        unknown_slot::<6, 33>,
    ],
};

pub static LIBRARY_TABLE_17_TABLE: StubTable<16> = StubTable {
    size: size_of_words(17),
    slots: [
        unknown_slot::<7, 1>,
        unknown_slot::<7, 2>,
        unknown_slot::<7, 3>,
        unknown_slot::<7, 4>,
        unknown_slot::<7, 5>,
        unknown_slot::<7, 6>,
        unknown_slot::<7, 7>,
        unknown_slot::<7, 8>,
        unknown_slot::<7, 9>,
        unknown_slot::<7, 10>,
        unknown_slot::<7, 11>,
        unknown_slot::<7, 12>,
        unknown_slot::<7, 13>,
        unknown_slot::<7, 14>,
        unknown_slot::<7, 15>,
        unknown_slot::<7, 16>,
    ],
};
