//! The logs' calls (`cudaLogs*`, over the call log of [`crate::call_log`]), user
//! objects (`cudaUserObject*`, `cudaGraphRetainUserObject`), asynchronous
//! notifications, and a few small calls that need nothing of the host.
//!
//! User objects are counted here: a graph holds its references, an
//! executable graph made of it holds them again, and the destructor runs when the last
//! goes. vmcuda emits no asynchronous notifications (the host enforces a VM's memory
//! budget by refusing allocations, which programs see at once); registrations are kept
//! and answered as CUDA does.

use std::collections::HashMap;
use std::ffi::{c_char, c_void};
use std::sync::Mutex;

use vmcuda_wire::CudaStatus;

use super::{guard, RawHandle, Result};
use crate::call_log::{entries_from, with_log, LogCallback};
use crate::{caller, cudaError_t};

pub extern "C" fn cudaLogsRegisterCallback(
    callback: Option<LogCallback>,
    data: *mut c_void,
    handle: *mut RawHandle,
) -> cudaError_t {
    guard("cudaLogsRegisterCallback", || {
        let f = callback.ok_or(CudaStatus::ErrorInvalidValue)?;
        let id = with_log(|l| {
            l.next_callback += 1;
            l.callbacks.insert(l.next_callback, (f, data as usize));
            l.next_callback
        });
        // SAFETY: by its contract `handle` is NULL or writable.
        unsafe { caller::write_opt(handle, id as RawHandle) };
        Ok(())
    })
}

pub extern "C" fn cudaLogsUnregisterCallback(handle: RawHandle) -> cudaError_t {
    guard("cudaLogsUnregisterCallback", || {
        match with_log(|l| l.callbacks.remove(&(handle as u64))) {
            Some(_) => Ok(()),
            None => Err(CudaStatus::ErrorInvalidValue),
        }
    })
}

pub extern "C" fn cudaLogsCurrent(iterator: *mut u32, flags: u32) -> cudaError_t {
    guard("cudaLogsCurrent", || {
        if flags != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let next = with_log(|l| l.next);
        // SAFETY: by its contract `iterator` is writable.
        unsafe { caller::write(iterator, next) }
    })
}

/// The text a dump writes from `iterator` (NULL: everything kept), advancing it.
///
/// # Safety
/// `iterator` is NULL or readable and writable.
unsafe fn dump(iterator: *mut u32) -> Result<String> {
    let from = if iterator.is_null() {
        None
    } else {
        // SAFETY: as the caller promised.
        Some(unsafe { caller::read(iterator) }?)
    };
    let (texts, next, truncated) = entries_from(from);
    let mut text = String::new();
    if truncated {
        text.push_str("[vmcuda] older log entries were dropped\n");
    }
    for t in texts {
        text.push_str(&t);
        text.push('\n');
    }
    // SAFETY: as the caller promised.
    unsafe { caller::write_opt(iterator, next) };
    Ok(text)
}

pub extern "C" fn cudaLogsDumpToFile(
    iterator: *mut u32,
    path: *const c_char,
    flags: u32,
) -> cudaError_t {
    guard("cudaLogsDumpToFile", || {
        if flags != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by its contract `path` is a NUL-terminated string and `iterator` NULL
        // or readable and writable.
        let (path, text) = unsafe { (caller::string(path)?, dump(iterator)?) };
        use std::io::Write;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|_| CudaStatus::ErrorInvalidValue)
    })
}

pub extern "C" fn cudaLogsDumpToMemory(
    iterator: *mut u32,
    buffer: *mut c_char,
    size: *mut usize,
    flags: u32,
) -> cudaError_t {
    guard("cudaLogsDumpToMemory", || {
        if flags != 0 || buffer.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by its contract `size` is readable and writable, `iterator` NULL or
        // readable and writable, `buffer` writable for `*size` bytes.
        unsafe {
            let room = caller::read(size)?;
            let text = dump(iterator)?;
            if text.is_empty() {
                caller::write(size, 0)?;
                return Ok(());
            }
            // The most recent entries that fit, whole, with the terminating NUL.
            let bytes = text.as_bytes();
            let mut start = 0;
            while bytes.len() - start + 1 > room {
                match text[start..].find('\n') {
                    Some(i) => start += i + 1,
                    None => start = bytes.len(),
                }
                if start >= bytes.len() {
                    caller::write(size, 0)?;
                    return Err(CudaStatus::ErrorInvalidValue);
                }
            }
            let out = caller::bytes_mut(buffer.cast::<u8>(), bytes.len() - start + 1)?;
            out[..bytes.len() - start].copy_from_slice(&bytes[start..]);
            out[bytes.len() - start] = 0;
            caller::write(size, bytes.len() - start)
        }
    })
}

// ---- user objects -----------------------------------------------------------------

type Destructor = unsafe extern "C" fn(*mut c_void);

struct UserObject {
    ptr: usize,
    destroy: Destructor,
    refs: u64,
}

#[derive(Default)]
struct UserObjects {
    objects: HashMap<u64, UserObject>,
    next: u64,
    /// References graphs and executable graphs hold: (holder, object) -> count.
    held: HashMap<(u64, u64), u64>,
}

static USER_OBJECTS: Mutex<Option<UserObjects>> = Mutex::new(None);

fn with_objects<T>(f: impl FnOnce(&mut UserObjects) -> T) -> T {
    f(USER_OBJECTS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get_or_insert_with(UserObjects::default))
}

/// Drop `count` references to `object`: its destructor runs when none is left (on a
/// thread of its own, as the driver's does, so it may not call CUDA).
fn release(object: u64, count: u64) -> Result<()> {
    let gone = with_objects(|o| {
        let obj = o
            .objects
            .get_mut(&object)
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        obj.refs = obj.refs.saturating_sub(count);
        Ok::<_, CudaStatus>(if obj.refs == 0 {
            o.objects.remove(&object)
        } else {
            None
        })
    })?;
    if let Some(obj) = gone {
        let (f, ptr) = (obj.destroy, obj.ptr);
        let run = move || {
            // SAFETY: the program's destructor and its pointer, called once, as
            // cudaUserObjectCreate's contract says.
            unsafe { f(ptr as *mut c_void) }
        };
        if std::thread::Builder::new().spawn(run).is_err() {
            // SAFETY: as above, on this thread where no other can be made.
            unsafe { f(ptr as *mut c_void) };
        }
    }
    Ok(())
}

/// `cudaUserObjectNoDestructorSync`, which CUDA requires.
const NO_DESTRUCTOR_SYNC: u32 = 1;

pub extern "C" fn cudaUserObjectCreate(
    out: *mut RawHandle,
    ptr: *mut c_void,
    destroy: Option<Destructor>,
    initial: u32,
    flags: u32,
) -> cudaError_t {
    guard("cudaUserObjectCreate", || {
        let destroy = destroy.ok_or(CudaStatus::ErrorInvalidValue)?;
        if initial == 0 || flags != NO_DESTRUCTOR_SYNC {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let id = with_objects(|o| {
            o.next += 1;
            let id = o.next;
            let obj = UserObject {
                ptr: ptr as usize,
                destroy,
                refs: initial as u64,
            };
            o.objects.insert(id, obj);
            id
        });
        // SAFETY: by its contract `out` is writable.
        unsafe { caller::write(out, id as RawHandle) }
    })
}

pub extern "C" fn cudaUserObjectRetain(object: RawHandle, count: u32) -> cudaError_t {
    guard("cudaUserObjectRetain", || {
        with_objects(|o| match o.objects.get_mut(&(object as u64)) {
            Some(obj) if count > 0 => {
                obj.refs += count as u64;
                Ok(())
            }
            _ => Err(CudaStatus::ErrorInvalidValue),
        })
    })
}

pub extern "C" fn cudaUserObjectRelease(object: RawHandle, count: u32) -> cudaError_t {
    guard("cudaUserObjectRelease", || {
        if count == 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        release(object as u64, count as u64)
    })
}

/// `cudaGraphUserObjectMove`: the caller's references move to the graph.
const USER_OBJECT_MOVE: u32 = 1;

pub extern "C" fn cudaGraphRetainUserObject(
    graph: RawHandle,
    object: RawHandle,
    count: u32,
    flags: u32,
) -> cudaError_t {
    guard("cudaGraphRetainUserObject", || {
        if graph.is_null() || count == 0 || flags & !USER_OBJECT_MOVE != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        with_objects(|o| {
            let obj = o
                .objects
                .get_mut(&(object as u64))
                .ok_or(CudaStatus::ErrorInvalidValue)?;
            if flags & USER_OBJECT_MOVE == 0 {
                obj.refs += count as u64;
            }
            *o.held.entry((graph as u64, object as u64)).or_default() += count as u64;
            Ok(())
        })
    })
}

pub extern "C" fn cudaGraphReleaseUserObject(
    graph: RawHandle,
    object: RawHandle,
    count: u32,
) -> cudaError_t {
    guard("cudaGraphReleaseUserObject", || {
        let key = (graph as u64, object as u64);
        with_objects(|o| match o.held.get_mut(&key) {
            Some(n) if *n >= count as u64 && count > 0 => {
                *n -= count as u64;
                if *n == 0 {
                    o.held.remove(&key);
                }
                Ok(())
            }
            _ => Err(CudaStatus::ErrorInvalidValue),
        })?;
        release(object as u64, count as u64)
    })
}

/// An executable graph was made of `graph`: it holds the graph's references too.
pub fn exec_made(exec: u64, graph: u64) {
    with_objects(|o| {
        let held: Vec<(u64, u64)> = o
            .held
            .iter()
            .filter(|((g, _), _)| *g == graph)
            .map(|((_, obj), n)| (*obj, *n))
            .collect();
        for (obj, n) in held {
            if let Some(object) = o.objects.get_mut(&obj) {
                object.refs += n;
                *o.held.entry((exec, obj)).or_default() += n;
            }
        }
    });
}

/// A graph or executable graph is gone: its references go with it.
pub fn holder_gone(holder: u64) {
    let held: Vec<(u64, u64)> = with_objects(|o| {
        let keys: Vec<(u64, u64)> = o
            .held
            .keys()
            .filter(|(h, _)| *h == holder)
            .copied()
            .collect();
        keys.into_iter()
            .filter_map(|k| o.held.remove(&k).map(|n| (k.1, n)))
            .collect()
    });
    for (obj, n) in held {
        let _ = release(obj, n);
    }
}

// ---- asynchronous notifications ----------------------------------------------------

static NOTIFICATIONS: Mutex<Vec<(i32, u64)>> = Mutex::new(Vec::new());

pub extern "C" fn cudaDeviceRegisterAsyncNotification(
    device: i32,
    callback: *const c_void,
    _data: *mut c_void,
    handle: *mut RawHandle,
) -> cudaError_t {
    guard("cudaDeviceRegisterAsyncNotification", || {
        let mut count = 0;
        crate::driver::keeping_last_error(|| super::device::cudaGetDeviceCount(&mut count))?;
        if callback.is_null() || device < 0 || device >= count {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let id = crate::state::fresh_id();
        NOTIFICATIONS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((device, id));
        // SAFETY: by its contract `handle` is writable.
        unsafe { caller::write(handle, id as RawHandle) }
    })
}

pub extern "C" fn cudaDeviceUnregisterAsyncNotification(
    device: i32,
    handle: RawHandle,
) -> cudaError_t {
    guard("cudaDeviceUnregisterAsyncNotification", || {
        let mut n = NOTIFICATIONS.lock().unwrap_or_else(|p| p.into_inner());
        let before = n.len();
        n.retain(|&(d, h)| !(d == device && h == handle as u64));
        if n.len() == before {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        Ok(())
    })
}

// ---- small calls ------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_objects_die_with_their_last_reference() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static DESTROYED: AtomicUsize = AtomicUsize::new(0);
        extern "C" fn destroy(_: *mut c_void) {
            DESTROYED.fetch_add(1, Ordering::SeqCst);
        }
        let mut obj: RawHandle = std::ptr::null_mut();
        assert_eq!(
            cudaUserObjectCreate(&mut obj, std::ptr::null_mut(), Some(destroy), 1, 1),
            0
        );
        let graph = 0x77 as RawHandle;
        assert_eq!(
            cudaGraphRetainUserObject(graph, obj, 1, USER_OBJECT_MOVE),
            0
        );
        exec_made(0x88, 0x77);
        holder_gone(0x77);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(
            DESTROYED.load(Ordering::SeqCst),
            0,
            "the executable graph holds it"
        );
        holder_gone(0x88);
        for _ in 0..100 {
            if DESTROYED.load(Ordering::SeqCst) == 1 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(DESTROYED.load(Ordering::SeqCst), 1);
        assert_ne!(cudaUserObjectRelease(obj, 1), 0, "gone");
    }
}
