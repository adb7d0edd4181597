use super::*;

fn words(p: *const c_void, n: usize) -> Vec<usize> {
    // SAFETY: `p` is one of the statics above, at least `n` words long.
    unsafe { std::slice::from_raw_parts(p.cast::<usize>(), n).to_vec() }
}

fn get(id: &Id) -> (CUresult, *const c_void) {
    let mut p: *const c_void = std::ptr::dangling();
    let r = cuGetExportTable(&mut p, id);
    (r, p)
}

#[test]
fn tables_have_their_sizes_and_stable_addresses() {
    for (id, size) in [
        (CUDART_INTERFACE, 104),
        (TOOLS_CALLBACK_HOOKS, 56),
        (TOOLS_TLS, 24),
        (CONTEXT_CHECKS, 120),
        (INTEGRITY_CHECK, 24),
        (CONTEXT_IDENTITY, 744),
        (FUNCTION_INTROSPECTION, 792),
        (LIBRARY_TABLE_7, 56),
        (LIBRARY_TABLE_34, 272),
        (LIBRARY_TABLE_17, 136),
    ] {
        let (r, p) = get(&id);
        assert_eq!(r, CUDA_SUCCESS, "{}", hex(&id));
        assert_eq!(words(p, 1)[0], size, "{}", hex(&id));
        assert_eq!(std::mem::size_of_val(&size), 8);
        // Every slot within the size is callable (no NULL).
        assert!(words(p, size / 8).iter().all(|&w| w != 0), "{}", hex(&id));
        assert_eq!(get(&id).1, p, "the same address every time");
    }
    assert_eq!(std::mem::size_of::<CudartInterface>(), 104);
    assert_eq!(std::mem::size_of::<FunctionIntrospection>(), 792);
    assert_eq!(std::mem::size_of::<ContextChecks>(), 120);
    // Context-local storage: three functions, then NULL, no size word.
    let (r, p) = get(&CONTEXT_LOCAL_STORAGE);
    assert_eq!(r, CUDA_SUCCESS);
    let w = words(p, 4);
    assert!(w[..3].iter().all(|&x| x != 0) && w[3] == 0);
}

#[test]
fn unknown_ids_get_not_found_and_null() {
    let unknown = id("00112233445566778899aabbccddeeff");
    let (r, p) = get(&unknown);
    assert_eq!(r, CUDA_ERROR_NOT_FOUND);
    assert!(p.is_null());
    let (r, p) = get(&REFUSED_QUIETLY);
    assert_eq!(r, CUDA_ERROR_NOT_FOUND);
    assert!(p.is_null());
    assert!(REPORTED
        .lock()
        .unwrap()
        .as_ref()
        .unwrap()
        .iter()
        .any(|l| l.contains("00112233445566778899aabbccddeeff")));
    // A NULL id is the caller's error.
    let mut p: *const c_void = std::ptr::null();
    assert_ne!(cuGetExportTable(&mut p, std::ptr::null()), CUDA_SUCCESS);
}

#[test]
fn tools_hooks_hand_out_stable_buffers() {
    let (mut b1, mut n1) = (std::ptr::null_mut(), 0usize);
    (HOOKS.buffer)(&mut b1, &mut n1);
    let (mut b2, mut n2) = (std::ptr::null_mut(), 0usize);
    (HOOKS.small_buffer)(&mut b2, &mut n2);
    assert_eq!((n1, n2), (1024, 14));
    assert!(!b1.is_null() && !b2.is_null() && b1 != b2);
    let mut again = std::ptr::null_mut();
    (HOOKS.buffer)(&mut again, std::ptr::null_mut());
    assert_eq!(again, b1);
    assert_eq!((HOOKS.slot1)(), CUDA_SUCCESS);
    assert_eq!((HOOKS.slot4)(), CUDA_SUCCESS);
}

#[test]
fn context_checks_say_no_context_is_wrapped() {
    let mut wrapped = 7u32;
    let mut inner: CUcontext = std::ptr::dangling_mut();
    let r = (CHECKS.is_wrapped)(std::ptr::null_mut(), &mut wrapped, &mut inner);
    assert_eq!((r, wrapped), (CUDA_SUCCESS, 0));
    assert_eq!(inner, std::ptr::dangling_mut(), "left alone");
    assert_eq!((CHECKS.slot3)(), 0);
    assert_eq!((CHECKS.rest[0])(), CUDA_ERROR_NOT_SUPPORTED);
}

extern "C" fn no_dtor(_: CUcontext, _: *mut c_void, _: *mut c_void) {}

#[test]
fn context_local_storage_keeps_values_per_context_and_key() {
    let ctx = 0x5000 as CUcontext;
    let key = 0x10 as *mut c_void;
    let mut v: *mut c_void = std::ptr::null_mut();
    assert_eq!(
        (STORAGE_TABLE.get)(&mut v, ctx, key),
        CUDA_ERROR_INVALID_HANDLE
    );
    let value = 0xabc as *mut c_void;
    assert_eq!(
        (STORAGE_TABLE.put)(ctx, key, value, Some(no_dtor)),
        CUDA_SUCCESS
    );
    assert_eq!((STORAGE_TABLE.get)(&mut v, ctx, key), CUDA_SUCCESS);
    assert_eq!(v, value);
    // Another context does not see it.
    let other = 0x6000 as CUcontext;
    assert_eq!(
        (STORAGE_TABLE.get)(&mut v, other, key),
        CUDA_ERROR_INVALID_HANDLE
    );
    assert_eq!((STORAGE_TABLE.remove)(ctx, key), CUDA_SUCCESS);
    assert_eq!((STORAGE_TABLE.remove)(ctx, key), CUDA_ERROR_INVALID_HANDLE);
    assert_eq!(
        (STORAGE_TABLE.get)(&mut v, ctx, key),
        CUDA_ERROR_INVALID_HANDLE
    );
}

#[test]
fn loading_slots_refuse_what_they_do_not_understand() {
    let mut m: *mut c_void = std::ptr::null_mut();
    assert_eq!(
        (CUDART.load_wrapper_ext)(&mut m, std::ptr::null(), 1, 0, 0),
        CUDA_ERROR_NOT_SUPPORTED
    );
    assert_eq!(
        (CUDART.load_container)(std::ptr::null(), &mut m, 0, 0, 3),
        CUDA_ERROR_NOT_SUPPORTED
    );
    assert_eq!((CUDART.initialize)(), CUDA_SUCCESS);
    assert_eq!((CUDART.slot3)(), CUDA_ERROR_NOT_SUPPORTED);
    assert_eq!((TLS.slot1)(), CUDA_ERROR_NOT_SUPPORTED);
}
