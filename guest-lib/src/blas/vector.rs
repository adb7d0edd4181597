//! `cublasSet/GetVector[Async]` and `cublasSet/GetMatrix[Async]`: strided copies
//! between host and device memory, which are 2D copies (a vector is `n` rows of one
//! element, `inc` elements apart; a matrix `cols` columns of `rows` elements, `ld`
//! apart) through this library's own `cudaMemcpy2D[Async]`, in stream order like
//! every other copy, and by the same route ([`crate::copy_route`]). cuBLAS reports a
//! failed copy as `CUBLAS_STATUS_MAPPING_ERROR`.

use std::ffi::{c_int, c_void};

use super::{cublasStatus_t, guard, status, Result};
use crate::api::memory::{cudaMemcpy2D, cudaMemcpy2DAsync};
use crate::copy_route::{DEVICE_TO_HOST, HOST_TO_DEVICE};

/// One strided copy: `count` pieces of `width` bytes, `src_pitch` and `dst_pitch`
/// bytes apart; `stream` None: the synchronous copy.
struct Strided {
    dst: *mut c_void,
    dst_pitch: usize,
    src: *const c_void,
    src_pitch: usize,
    width: usize,
    count: usize,
    kind: u32,
}

fn copy(c: Strided, stream: Option<*mut c_void>) -> Result<()> {
    if c.width == 0 || c.count == 0 {
        return Ok(());
    }
    let e = match stream {
        Some(s) => cudaMemcpy2DAsync(
            c.dst,
            c.dst_pitch,
            c.src,
            c.src_pitch,
            c.width,
            c.count,
            c.kind,
            s,
        ),
        None => cudaMemcpy2D(
            c.dst,
            c.dst_pitch,
            c.src,
            c.src_pitch,
            c.width,
            c.count,
            c.kind,
        ),
    };
    if e == 0 {
        Ok(())
    } else {
        Err(status::MAPPING_ERROR)
    }
}

/// A vector copy: `n` elements of `elem` bytes, `incx` apart at `x`, to `incy` apart
/// at `y`: a one-row matrix copy (with cuBLAS's checks: `incx`, `incy` and `elem`
/// positive, `n` not negative).
#[allow(clippy::too_many_arguments)]
fn vector(
    n: c_int,
    elem: c_int,
    x: *const c_void,
    incx: c_int,
    y: *mut c_void,
    incy: c_int,
    kind: u32,
    stream: Option<*mut c_void>,
) -> Result<()> {
    matrix(1, n, elem, x, incx, y, incy, kind, stream)
}

/// A matrix copy: `rows x cols` elements of `elem` bytes, column-major, from `a`
/// (leading dimension `lda`) to `b` (`ldb`).
#[allow(clippy::too_many_arguments)]
fn matrix(
    rows: c_int,
    cols: c_int,
    elem: c_int,
    a: *const c_void,
    lda: c_int,
    b: *mut c_void,
    ldb: c_int,
    kind: u32,
    stream: Option<*mut c_void>,
) -> Result<()> {
    if rows < 0 || cols < 0 || elem <= 0 || lda < rows.max(1) || ldb < rows.max(1) {
        return Err(status::INVALID_VALUE);
    }
    let e = elem as usize;
    copy(
        Strided {
            dst: b,
            dst_pitch: ldb as usize * e,
            src: a,
            src_pitch: lda as usize * e,
            width: rows as usize * e,
            count: cols as usize,
            kind,
        },
        stream,
    )
}

macro_rules! vector_export {
    ($name:ident, $kind:expr, $($stream:ident)?) => {
        #[export_name = concat!("__vmcuda_", stringify!($name))]
        #[allow(non_snake_case)]
        pub extern "C" fn $name(
            n: c_int, elem: c_int, x: *const c_void, incx: c_int, y: *mut c_void, incy: c_int,
            $($stream: *mut c_void)?
        ) -> cublasStatus_t {
            guard(stringify!($name), || vector(n, elem, x, incx, y, incy, $kind, None $(.or(Some($stream)))?))
        }
    };
}

macro_rules! matrix_export {
    ($name:ident, $kind:expr, $($stream:ident)?) => {
        #[export_name = concat!("__vmcuda_", stringify!($name))]
        #[allow(non_snake_case, clippy::too_many_arguments)]
        pub extern "C" fn $name(
            rows: c_int, cols: c_int, elem: c_int, a: *const c_void, lda: c_int, b: *mut c_void,
            ldb: c_int, $($stream: *mut c_void)?
        ) -> cublasStatus_t {
            guard(stringify!($name), || {
                matrix(rows, cols, elem, a, lda, b, ldb, $kind, None $(.or(Some($stream)))?)
            })
        }
    };
}

vector_export!(cublasSetVector, HOST_TO_DEVICE,);
vector_export!(cublasGetVector, DEVICE_TO_HOST,);
vector_export!(cublasSetVectorAsync, HOST_TO_DEVICE, stream);
vector_export!(cublasGetVectorAsync, DEVICE_TO_HOST, stream);
matrix_export!(cublasSetMatrix, HOST_TO_DEVICE,);
matrix_export!(cublasGetMatrix, DEVICE_TO_HOST,);
matrix_export!(cublasSetMatrixAsync, HOST_TO_DEVICE, stream);
matrix_export!(cublasGetMatrixAsync, DEVICE_TO_HOST, stream);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_strides_and_sizes_are_refused_before_any_copy() {
        let p = std::ptr::null_mut();
        assert_eq!(cublasSetVector(4, 4, p, 0, p, 1), status::INVALID_VALUE);
        assert_eq!(
            cublasGetVectorAsync(4, 0, p, 1, p, 1, p),
            status::INVALID_VALUE
        );
        assert_eq!(
            cublasSetMatrix(4, 2, 8, p, 3, p, 4),
            status::INVALID_VALUE,
            "lda < rows"
        );
        assert_eq!(
            cublasGetMatrixAsync(-1, 2, 8, p, 3, p, 4, p),
            status::INVALID_VALUE
        );
        assert_eq!(
            cublasSetVector(0, 4, p, 1, p, 1),
            status::SUCCESS,
            "nothing to copy"
        );
    }
}
