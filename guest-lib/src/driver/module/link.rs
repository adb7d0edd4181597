//! The linker: `cuLink*`, the inputs gathered here, the link done by the host at
//! `cuLinkComplete`.

use super::*;

/// `CUjit_option`s the link state keeps: where the logs and the wall time go.
pub(super) const JIT_WALL_TIME: u32 = 2;
pub(super) const JIT_INFO_LOG_BUFFER: u32 = 3;
pub(super) const JIT_INFO_LOG_BUFFER_SIZE_BYTES: u32 = 4;
pub(super) const JIT_ERROR_LOG_BUFFER: u32 = 5;
pub(super) const JIT_ERROR_LOG_BUFFER_SIZE_BYTES: u32 = 6;

export! {
    /// The log buffers and the wall time are kept here; the numeric options of
    /// `LINK_OPTIONS` go to the host's linker; others are the host linker's defaults.
    fn cuLinkCreate_v2(num_options: u32, options: *const u32, values: *const *mut c_void, out: *mut *mut c_void) {
        check_initialized()?;
        let mut numeric: Vec<(u32, u32)> = Vec::new();
        // SAFETY: by cuLinkCreate_v2's contract `options` and `values` hold `num_options`
        // entries each.
        let outputs = unsafe {
            JitOutputs::read(num_options, options, values, |o, value| {
                if LINK_OPTIONS.contains(&o) {
                    numeric.retain(|(known, _)| *known != o);
                    numeric.push((o, value as u32));
                }
            })
        }?;
        let link = LinkState {
            info_log: outputs.info_log,
            error_log: outputs.error_log,
            wall_time: outputs.wall_time,
            options: numeric,
            ..LinkState::default()
        };
        if out.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let id = state::fresh_id();
        modules().links.insert(id, link);
        // SAFETY: by cuLinkCreate_v2's contract `out` is NULL or writable.
        unsafe { caller::write(out, id as *mut c_void) }
    }
}

fn add_input(state_id: *mut c_void, kind: u32, name: String, bytes: Vec<u8>) -> Result<()> {
    let mut m = modules();
    let link = m
        .links
        .get_mut(&(state_id as u64))
        .ok_or_else(|| stale("link state", &STALE_LINK))?;
    let input = LinkInput {
        kind,
        name,
        len: bytes.len() as u64,
    };
    link.inputs.push((input, bytes));
    Ok(())
}

export! {
    fn cuLinkAddData_v2(
        link: *mut c_void,
        kind: u32,
        data: *const c_void,
        size: usize,
        name: *const c_char,
        _num_options: u32,
        _options: *const u32,
        _values: *const *mut c_void,
    ) {
        // SAFETY: by cuLinkAddData_v2's contract `data.cast()` is NULL or holds `size`
        // readable bytes.
        let bytes = unsafe { caller::bytes(data.cast(), size) }?.to_vec();
        // SAFETY: by cuLinkAddData_v2's contract `name` is NULL or a NUL-terminated string.
        let name = if name.is_null() { String::new() } else { unsafe { caller::string(name) }? };
        add_input(link, kind, name, bytes)
    }
}

export! {
    fn cuLinkAddFile_v2(
        link: *mut c_void,
        kind: u32,
        path: *const c_char,
        _num_options: u32,
        _options: *const u32,
        _values: *const *mut c_void,
    ) {
        // SAFETY: by cuLinkAddFile_v2's contract `path` is NULL or a NUL-terminated string.
        let path = unsafe { caller::string(path) }?;
        let bytes = std::fs::read(&path).map_err(|_| status(CUDA_ERROR_FILE_NOT_FOUND))?;
        add_input(link, kind, path, bytes)
    }
}

/// Copy a log into the program's buffer, cut to fit, NUL-terminated.
///
/// # Safety
/// `buffer`, when given, is the address and length of writable program memory.
pub(super) unsafe fn write_log(buffer: Option<(usize, usize)>, text: &str) -> Result<()> {
    if let Some((ptr, len)) = buffer {
        // SAFETY: as `write_log`'s caller promised.
        let out = unsafe { caller::bytes_mut(ptr as *mut u8, len) }?;
        let n = text.len().min(len - 1);
        out[..n].copy_from_slice(&text.as_bytes()[..n]);
        out[n] = 0;
    }
    Ok(())
}

export! {
    fn cuLinkComplete(link: *mut c_void, cubin_out: *mut *const c_void, size_out: *mut usize) {
        let (inputs, data, logs, options, wall_time) = {
            let m = modules();
            let l = m.links.get(&(link as u64)).ok_or_else(|| stale("link state", &STALE_LINK))?;
            let inputs: Vec<LinkInput> = l.inputs.iter().map(|(i, _)| i.clone()).collect();
            let data: Vec<u8> = l.inputs.iter().flat_map(|(_, b)| b.iter().copied()).collect();
            (inputs, data, (l.info_log, l.error_log), l.options.clone(), l.wall_time)
        };
        let mut cubin = Vec::new();
        let linked = call_with(&Link { inputs, options }, &data, Sink::Grow(&mut cubin))?;
        if let Some(slot) = wall_time {
            // SAFETY: by cuLinkCreate_v2's contract the option values array stays valid
            // for the life of the link state when an output option is used; the driver
            // writes the time as a float at the start of its slot.
            unsafe { caller::write(slot as *mut f32, linked.wall_time_ms) }?;
        }
        // SAFETY: by cuLinkComplete's contract its pointer arguments are as `write_log`
        // requires.
        unsafe { write_log(logs.0, &linked.info_log) }?;
        // SAFETY: by cuLinkComplete's contract its pointer arguments are as `write_log`
        // requires.
        unsafe { write_log(logs.1, &linked.error_log) }?;
        let mut m = modules();
        let l = m.links.get_mut(&(link as u64)).ok_or_else(|| stale("link state", &STALE_LINK))?;
        l.cubin = cubin;
        // SAFETY: by cuLinkComplete's contract `cubin_out` is NULL or writable.
        unsafe { caller::write(cubin_out, l.cubin.as_ptr().cast()) }?;
        // SAFETY: by cuLinkComplete's contract `size_out` is NULL or writable.
        unsafe { caller::write(size_out, l.cubin.len()) }
    }
}

export! {
    fn cuLinkDestroy(link: *mut c_void) {
        modules()
            .links
            .remove(&(link as u64))
            .map(|_| ())
            .ok_or_else(|| stale("link state", &STALE_LINK))
    }
}
