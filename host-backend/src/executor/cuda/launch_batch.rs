//! Runs of posted launches on one stream reach the GPU as one graph launch.
//!
//! On the H100 one `cuLaunchKernel` costs the worker 3.3-4.5 us, as it costs a native
//! program, while a ready graph of 16 kernel nodes whose parameters are set anew before
//! each launch costs 0.9 us a kernel (`bench/results/RESULTS-LAUNCH-BATCH.md`). So while the
//! guest's posted launches come faster than the worker could send them one by one, the
//! worker holds them and sends them together: once a call other than a launch comes,
//! once nothing more waits (the worker asks before it would wait), or once [`MAX_HELD`]
//! are held. They go as one launch of a chain of kernel nodes, made once per stream and
//! size and updated per batch (`cuGraphExecKernelNodeSetParams`, which may change the
//! function, shape and parameters).
//!
//! The effect is that of the plain launches: one stream, the same kernels in the same
//! order in a chain, and a graph launch is ordered with all else in its stream (a
//! stream's chains are its own, so no other stream waits on them). The checks a launch
//! makes itself run before it is held; should the driver refuse a chain, its launches
//! go one by one, and the first error is the guest's next call's, as for any posted
//! call. Not held: launches with attributes, launches while any stream captures (they
//! belong in the guest's graph as they are), and a stream's first [`HOLD_AFTER`]
//! launches (a chain costs tens of microseconds to make). `VMCUDA_BATCH_LAUNCHES=0` in
//! the host's environment sends every launch at once.

use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::ptr;

use cudarc::driver::sys;
use tracing::debug;

use super::super::{ExecResult, ExecStream};
use super::check;

/// The most launches held; also the largest chain.
const MAX_HELD: usize = crate::executor::MAX_HELD_LAUNCHES;
/// Chains have 2, 4, ... MAX_HELD nodes; a batch goes as the largest that fit, in turn.
const CHAIN_SIZES: usize = MAX_HELD.trailing_zeros() as usize;
/// Launches a stream has had before its launches are held.
const HOLD_AFTER: u64 = 64;
/// Streams with chains at once; launches on others go at once.
const MAX_STREAMS_WITH_CHAINS: usize = 16;
/// Refused chains after which a stream's launches always go at once.
const MAX_REFUSALS: u32 = 3;

/// A stream of a device, as the executor names it.
pub(super) type StreamKey = (usize, ExecStream);

/// One launch held back: its parameters are `len` bytes from word `start` of the
/// batch's parameter words.
struct Held {
    func: sys::CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem: u32,
    start: usize,
    len: usize,
}

/// A chain of kernel nodes, instantiated.
struct Chain {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    nodes: Vec<sys::CUgraphNode>,
}

impl Chain {
    fn destroy(self) {
        // SAFETY: made by `LaunchBatch::make_chain` and destroyed once (moved in); the
        // driver frees an executable graph still running once it is done.
        unsafe {
            sys::cuGraphExecDestroy(self.exec);
            sys::cuGraphDestroy(self.graph);
        }
    }
}

#[derive(Default)]
struct StreamState {
    launches: u64,
    refusals: u32,
    chains: [Option<Chain>; CHAIN_SIZES],
}

impl StreamState {
    fn has_chains(&self) -> bool {
        self.chains.iter().any(Option::is_some)
    }

    fn drop_chains(&mut self) {
        for chain in self.chains.iter_mut().filter_map(Option::take) {
            chain.destroy();
        }
    }
}

/// Launches held for one stream, and each stream's chains.
pub(super) struct LaunchBatch {
    on: bool,
    /// The stream of the held launches, with its driver handle.
    stream: Option<(StreamKey, sys::CUstream)>,
    held: Vec<Held>,
    /// The held launches' parameters, each starting 16-byte aligned.
    words: Vec<u128>,
    streams: HashMap<StreamKey, StreamState>,
    /// Streams between their capture's start and end.
    capturing: HashSet<ExecStream>,
}

impl Default for LaunchBatch {
    fn default() -> Self {
        LaunchBatch {
            on: std::env::var("VMCUDA_BATCH_LAUNCHES").map_or(true, |v| v != "0"),
            stream: None,
            held: Vec::with_capacity(MAX_HELD),
            words: Vec::new(),
            streams: HashMap::new(),
            capturing: HashSet::new(),
        }
    }
}

/// `params` in 16-byte words, so each parameter sits at an address aligned as it is.
pub(super) fn aligned_words(params: &[u8]) -> impl Iterator<Item = u128> + '_ {
    params.chunks(16).map(|chunk| {
        let mut bytes = [0u8; 16];
        bytes[..chunk.len()].copy_from_slice(chunk);
        u128::from_ne_bytes(bytes)
    })
}

/// The size of the chain that sends the next of `left` (2 or more) held launches: the
/// largest that fits.
fn chain_size(left: usize) -> usize {
    1 << (usize::BITS - 1 - left.min(MAX_HELD).leading_zeros())
}

/// The `extra` list that passes `len` bytes at `buffer` as a kernel's parameters; null
/// for none. `size` must outlive the list's use.
/// The parameter buffer and its size an `extra` list names (null and 0 where it names
/// none).
///
/// # Safety
/// `extra` is an END-terminated list of (key, value) pairs as `cuLaunchKernel` takes
/// it, whose size value (if any) points at a readable `usize`.
pub(super) unsafe fn extra_buffer(extra: *mut *mut c_void) -> (*const u8, usize) {
    let (mut buffer, mut size) = (ptr::null::<u8>(), 0usize);
    let mut at = extra;
    for _ in 0..8 {
        // SAFETY: as the caller promised, each key is followed by its value.
        let key = unsafe { *at } as usize;
        if key == sys::CU_LAUNCH_PARAM_END_AS_INT as usize {
            break;
        }
        // SAFETY: as above.
        let value = unsafe { *at.add(1) };
        if key == sys::CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT as usize {
            buffer = value.cast();
        } else if key == sys::CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT as usize && !value.is_null() {
            // SAFETY: as the caller promised.
            size = unsafe { *value.cast::<usize>() };
        }
        // SAFETY: as above: the list goes on to END.
        at = unsafe { at.add(2) };
    }
    (buffer, size)
}

pub(super) fn extra_list(buffer: *const u8, size: &mut usize) -> [*mut c_void; 5] {
    [
        sys::CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT as usize as *mut c_void,
        buffer.cast_mut().cast(),
        sys::CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT as usize as *mut c_void,
        (size as *mut usize).cast(),
        sys::CU_LAUNCH_PARAM_END_AS_INT as usize as *mut c_void,
    ]
}

/// Launch `func` at once, its parameters the `len` bytes at `buffer` (16-byte aligned).
#[allow(clippy::too_many_arguments)]
pub(super) fn launch_now(
    func: sys::CUfunction,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem: u32,
    stream: sys::CUstream,
    buffer: *const u8,
    len: usize,
) -> ExecResult<()> {
    let mut size = len;
    let mut extra = extra_list(buffer, &mut size);
    let extra_ptr = if len == 0 {
        ptr::null_mut()
    } else {
        extra.as_mut_ptr()
    };
    // SAFETY: `func` belongs to the current context and `stream` to it or is a default
    // stream (the caller's checks); `extra` is the END-terminated list whose buffer
    // (`size` bytes) and size word outlive the call, and the driver copies the
    // parameters before returning.
    check(unsafe {
        sys::cuLaunchKernel(
            func,
            grid[0],
            grid[1],
            grid[2],
            block[0],
            block[1],
            block[2],
            shared_mem,
            stream,
            ptr::null_mut(),
            extra_ptr,
        )
    })
}

impl LaunchBatch {
    /// Whether launches on `key` may be held now (counting this one).
    pub(super) fn may_hold(&mut self, key: StreamKey) -> bool {
        if !self.on || !self.capturing.is_empty() {
            return false;
        }
        let state = self.streams.entry(key).or_default();
        state.launches += 1;
        if state.launches <= HOLD_AFTER || state.refusals >= MAX_REFUSALS {
            return false;
        }
        // Only a stream without chains yet looks at how many others have some.
        state.has_chains()
            || self.streams.values().filter(|s| s.has_chains()).count() < MAX_STREAMS_WITH_CHAINS
    }

    /// The stream whose launches are held, if any are.
    pub(super) fn held_stream(&self) -> Option<StreamKey> {
        self.stream.map(|(key, _)| key)
    }

    pub(super) fn is_full(&self) -> bool {
        self.held.len() >= MAX_HELD
    }

    /// Hold a launch on `key` (no launch of another stream may be held).
    pub(super) fn hold(
        &mut self,
        key: StreamKey,
        stream: sys::CUstream,
        func: sys::CUfunction,
        config: (&[u32; 3], &[u32; 3], u32),
        params: &[u8],
    ) {
        debug_assert!(self.stream.is_none_or(|(k, _)| k == key));
        self.stream = Some((key, stream));
        let start = self.words.len();
        self.words.extend(aligned_words(params));
        self.held.push(Held {
            func,
            grid: *config.0,
            block: *config.1,
            shared_mem: config.2,
            start,
            len: params.len(),
        });
    }

    /// Send what is held, in order: as chains while two or more are left, the last one
    /// alone. The first error, if any; every launch was tried.
    pub(super) fn send(&mut self) -> ExecResult<()> {
        let Some((key, stream)) = self.stream.take() else {
            return Ok(());
        };
        let held = std::mem::take(&mut self.held);
        let words = std::mem::take(&mut self.words);
        let mut first_error = Ok(());
        let mut at = 0;
        while at < held.len() {
            let left = held.len() - at;
            if left == 1 {
                first_error = first_error.and(Self::send_one(&held[at], &words, stream));
                break;
            }
            let n = chain_size(left);
            let run = &held[at..at + n];
            if let Err(e) = self.send_chain(key, stream, run, &words) {
                debug!(stream = key.1, launches = n, %e, "chain refused; launching one by one");
                let state = self.streams.entry(key).or_default();
                state.refusals += 1;
                state.drop_chains();
                for h in run {
                    first_error = first_error.and(Self::send_one(h, &words, stream));
                }
            }
            at += n;
        }
        // The buffers are kept for the next batch.
        self.held = held;
        self.held.clear();
        self.words = words;
        self.words.clear();
        first_error
    }

    fn send_one(h: &Held, words: &[u128], stream: sys::CUstream) -> ExecResult<()> {
        let buffer = words[h.start..].as_ptr().cast::<u8>();
        launch_now(h.func, h.grid, h.block, h.shared_mem, stream, buffer, h.len)
    }

    /// Launch `run` (2, 4, ... MAX_HELD launches) as the stream's chain of that size,
    /// made with these launches' parameters the first time.
    fn send_chain(
        &mut self,
        key: StreamKey,
        stream: sys::CUstream,
        run: &[Held],
        words: &[u128],
    ) -> ExecResult<()> {
        let slot = run.len().trailing_zeros() as usize - 1;
        let state = self.streams.entry(key).or_default();
        let exec = match &state.chains[slot] {
            Some(chain) => {
                for (&node, h) in chain.nodes.iter().zip(run) {
                    node_params(h, words, |p| {
                        // SAFETY: `node` is a node of the graph `chain.exec` was made
                        // of; `p` and the parameters it points to live through the
                        // call, which copies them.
                        check(unsafe {
                            sys::cuGraphExecKernelNodeSetParams_v2(chain.exec, node, p)
                        })
                    })?;
                }
                chain.exec
            }
            None => {
                let chain = make_chain(run, words)?;
                let exec = chain.exec;
                state.chains[slot] = Some(chain);
                exec
            }
        };
        // SAFETY: `exec` is live and was made in the current context; `stream` is a
        // checked stream of it or a default stream.
        check(unsafe { sys::cuGraphLaunch(exec, stream) })
    }

    /// A stream's capture began (any launch now waits until it ends).
    pub(super) fn capture_began(&mut self, stream: ExecStream) {
        self.capturing.insert(stream);
    }

    pub(super) fn capture_ended(&mut self, stream: ExecStream) {
        self.capturing.remove(&stream);
    }

    /// A stream is gone: its chains go too (whatever was held was sent before).
    pub(super) fn forget_stream(&mut self, stream: ExecStream) {
        self.capturing.remove(&stream);
        self.streams.retain(|&(_, s), state| {
            let keep = s != stream;
            if !keep {
                state.drop_chains();
            }
            keep
        });
    }

    /// A device's context is going: its chains go, and nothing of it stays held.
    pub(super) fn forget_device(&mut self, idx: usize) {
        if self.stream.is_some_and(|((d, _), _)| d == idx) {
            self.stream = None;
            self.held.clear();
            self.words.clear();
        }
        self.streams.retain(|&(d, _), state| {
            let keep = d != idx;
            if !keep {
                state.drop_chains();
            }
            keep
        });
    }
}

/// Call `f` with the kernel node parameters of launch `h`.
fn node_params<T>(
    h: &Held,
    words: &[u128],
    f: impl FnOnce(&sys::CUDA_KERNEL_NODE_PARAMS) -> T,
) -> T {
    let buffer = words[h.start..].as_ptr().cast::<u8>();
    let shape = (h.grid, h.block, h.shared_mem);
    kernel_node_params(h.func, shape, buffer, h.len, f)
}

/// Call `f` with the kernel node parameters of a launch of `func` of `shape` (grid,
/// block, dynamic shared memory) whose parameters are the `len` bytes at `buffer`
/// (16-byte aligned), which the driver copies before a node call returns.
pub(super) fn kernel_node_params<T>(
    func: sys::CUfunction,
    (grid, block, shared_mem): ([u32; 3], [u32; 3], u32),
    buffer: *const u8,
    len: usize,
    f: impl FnOnce(&sys::CUDA_KERNEL_NODE_PARAMS) -> T,
) -> T {
    let mut size = len;
    let mut extra = extra_list(buffer, &mut size);
    let p = sys::CUDA_KERNEL_NODE_PARAMS {
        func,
        gridDimX: grid[0],
        gridDimY: grid[1],
        gridDimZ: grid[2],
        blockDimX: block[0],
        blockDimY: block[1],
        blockDimZ: block[2],
        sharedMemBytes: shared_mem,
        kernelParams: ptr::null_mut(),
        extra: if len == 0 {
            ptr::null_mut()
        } else {
            extra.as_mut_ptr()
        },
        kern: ptr::null_mut(),
        ctx: ptr::null_mut(),
    };
    f(&p)
}

/// A chain of `run.len()` kernel nodes with `run`'s launches, instantiated.
fn make_chain(run: &[Held], words: &[u128]) -> ExecResult<Chain> {
    let mut graph: sys::CUgraph = ptr::null_mut();
    // SAFETY: out-pointer to a local.
    check(unsafe { sys::cuGraphCreate(&mut graph, 0) })?;
    let mut nodes: Vec<sys::CUgraphNode> = Vec::with_capacity(run.len());
    let built = run.iter().try_for_each(|h| {
        let mut node: sys::CUgraphNode = ptr::null_mut();
        let deps = nodes
            .last()
            .map_or(ptr::null(), |n| n as *const sys::CUgraphNode);
        node_params(h, words, |p| {
            // SAFETY: `graph` is live; `deps` points at one node of it or is null with
            // a count of 0; `p` lives through the call, which copies it.
            check(unsafe {
                sys::cuGraphAddKernelNode_v2(
                    &mut node,
                    graph,
                    deps,
                    usize::from(!deps.is_null()),
                    p,
                )
            })
        })?;
        nodes.push(node);
        Ok(())
    });
    let mut exec: sys::CUgraphExec = ptr::null_mut();
    // SAFETY: `graph` is live; out-pointer to a local.
    let made = built
        .and_then(|()| check(unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) }));
    if let Err(e) = made {
        // SAFETY: made above and not handed out.
        unsafe { sys::cuGraphDestroy(graph) };
        return Err(e);
    }
    Ok(Chain { graph, exec, nodes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_goes_as_the_largest_chains_that_fit() {
        // The sizes `send` picks, as it picks them.
        let sizes = |mut left: usize| {
            let mut out = Vec::new();
            while left > 1 {
                let n = chain_size(left);
                out.push(n);
                left -= n;
            }
            out.extend((left == 1).then_some(1));
            out
        };
        assert_eq!(sizes(32), [32]);
        assert_eq!(sizes(13), [8, 4, 1]);
        assert_eq!(sizes(2), [2]);
        assert_eq!(sizes(1), [1]);
        assert_eq!(CHAIN_SIZES, 5);
    }

    #[test]
    fn launches_are_held_only_after_a_streams_first_ones_and_never_while_capturing() {
        let mut b = LaunchBatch {
            on: true,
            ..LaunchBatch::default()
        };
        let key = (0, 7);
        assert!((0..HOLD_AFTER).all(|_| !b.may_hold(key)));
        assert!(b.may_hold(key));
        b.capture_began(9);
        assert!(!b.may_hold(key));
        b.capture_ended(9);
        assert!(b.may_hold(key));
        b.forget_stream(7);
        assert!(
            !b.may_hold(key),
            "a new stream of the same handle starts over"
        );
    }

    #[test]
    fn parameters_are_kept_aligned_and_in_order() {
        let mut b = LaunchBatch::default();
        let f = ptr::null_mut();
        b.hold(
            (0, 1),
            ptr::null_mut(),
            f,
            (&[1; 3], &[1; 3], 0),
            &[1, 2, 3],
        );
        b.hold((0, 1), ptr::null_mut(), f, (&[1; 3], &[1; 3], 0), &[9; 20]);
        assert_eq!(b.held[0].start, 0);
        assert_eq!(b.held[1].start, 1);
        assert_eq!(b.held[1].len, 20);
        let bytes: Vec<u8> = b.words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(&bytes[..3], [1, 2, 3]);
        assert_eq!(&bytes[16..36], [9; 20]);
        assert_eq!(b.held_stream(), Some((0, 1)));
    }
}
