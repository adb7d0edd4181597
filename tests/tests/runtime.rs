//! C programs on NVIDIA's `libcudart.so.13` over vmcuda's `libcuda.so.1`: stream
//! attributes and exported memory pools, as the driver answers them.

use vmcuda_tests::{build_c_program, nvidia_cudart_dir, run_program_with, text, Daemon};

/// Stream attributes (tests/c/stream_attrs.c): an access policy window must lie in the
/// program's own memory, as every pointer range the host is handed; attributes a stream
/// does not have and streams the program does not hold are refused.
#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn stream_attributes_keep_to_the_programs_memory_and_streams() {
    let exe = build_c_program("stream_attrs", &["libcudart.so.13"]);
    let d = Daemon::host_memory("stream-attrs");
    let out = run_program_with(&exe, &d.server(), &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains("alloc 0 stream 0 own 0 beyond 1 wild 1 read 0 kept 1 not-a-stream-attribute 1 unknown-stream 400"),
        "{stdout}"
    );
    assert!(d
        .log()
        .contains("refused an access outside the guest's own memory"));
}

/// A pool exported again and again (tests/c/pool_exports.c): the guest keeps one
/// descriptor per exported pool, not one per export, and lets it go with the pool, so
/// a program that exports in a loop runs out of nothing.
#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn a_pool_exported_again_holds_one_descriptor_until_it_goes() {
    let exe = build_c_program("pool_exports", &["libcudart.so.13"]);
    let d = Daemon::host_memory("pool-exports");
    let out = run_program_with(&exe, &d.server(), &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(
            "made 0; 300 exports, failed 0, descriptors held beyond the program's: 1; \
             import from the last 0; destroyed 0; descriptors left after: 0"
        ),
        "{stdout}"
    );
}

/// Copy nodes updated in executable graphs as XLA updates its command buffers
/// (tests/c/graph_exec_copy.c, driver API): XLA's one-row device-to-device
/// `CUDA_MEMCPY3D` (pitches 0, device or unified memory types), for a node of the graph,
/// for nodes of a WHILE node's body and for a node of a child graph moved into its
/// node (JAX's `lax.scan`: XLA moves its child command buffers into their nodes and
/// updates them through the outermost executable graph, which the host refused), each
/// through the executable graph of the outermost graph; a copied child graph's node
/// stays refused, as the driver refuses it. Then each executable graph runs.
#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn copy_nodes_of_loop_bodies_take_new_parameters_through_the_executable_graph() {
    let exe = build_c_program("graph_exec_copy", &["libcuda.so.1"]);
    let d = Daemon::host_memory("graph-exec-copy");
    let out = run_program_with(&exe, &d.server(), &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains("setup 0\n"), "{stdout}");
    assert!(
        stdout.contains("graph node: made 0 same 0 moved 0 unified 0 back 0 ran 0 last byte 3\n"),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "while body node: made 0 copy 0 memset 0 instantiated 0 same 0 moved 0 \
             unified 0 memset update 0 ran 0\n"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "child graph node: made 0 added 0 instantiated 0 moved child 0 copied child 1 \
             ran 0 first byte 3\n"
        ),
        "{stdout}"
    );
}

/// The stream memory operations (tests/c/stream_mem_ops.c, driver API), which NCCL
/// calls through the driver: 64-bit writes to device and pinned memory, 32- and 64-bit
/// waits on values already there with each comparison, their checks, and the legacy,
/// per-thread and `cuGetProcAddress` names.
#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn stream_memory_operations_write_and_wait_in_stream_order() {
    let exe = build_c_program("stream_mem_ops", &["libcuda.so.1"]);
    let d = Daemon::host_memory("stream-mem-ops");
    let out = run_program_with(&exe, &d.server(), &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for line in [
        "setup 0\n",
        "writes 0 device ok pinned ok\n",
        "waits 0\n",
        "misaligned 1 1, bad comparison 1, bad write flags 1\n",
        "legacy 0, proc address 0 found\n",
    ] {
        assert!(stdout.contains(line), "{line}: {stdout}");
    }
}

/// Batches of stream memory operations (tests/c/batch_mem_ops.c, driver API): writes
/// and waits of 32 and 64 bits and a barrier in stream order, the legacy, per-thread
/// and `cuGetProcAddress` names, the batch's checks, and batch memory operation graph
/// nodes (added, read back, set, launched, set in an executable graph, made by
/// `cuGraphAddNode`).
#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn stream_memory_operation_batches_run_in_order_and_make_graph_nodes() {
    let exe = build_c_program("batch_mem_ops", &["libcuda.so.1"]);
    let d = Daemon::host_memory("batch-mem-ops");
    let out = run_program_with(&exe, &d.server(), &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for line in [
        "setup 0\n",
        "batch 0 values ok\n",
        "legacy 0 ptsz 0 values ok, proc address 0 found\n",
        "too many 1, unknown 1, misaligned 1, flags 1, null 1, untouched ok\n",
        "graph node: made 0 got 0 same 1 type 0 12 set 0 got 0 same 1 ran 0 value 21 \
         exec set 0 value 31\n",
        "generic node 0 value 41\n",
    ] {
        assert!(stdout.contains(line), "{line}: {stdout}");
    }
}

/// Texture and surface references (tests/c/texrefs.c, driver API) of a module
/// declaring a `.texref` and a `.surfref` (tests/c/texref.ptx, made a cubin by the nvcc
/// wheels' ptxas): every setting read back as set, each binding, a reference of the
/// program's own, a surface reference's array, `cuParamSetTexRef` and the checks.
#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn texture_references_keep_their_settings_and_bind_only_the_guests_memory() {
    let exe = build_c_program("texrefs", &["libcuda.so.1"]);
    let ptxas = nvidia_cudart_dir().join("../bin/ptxas");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("c/texref.ptx");
    let cubin = exe.with_file_name("texref.cubin");
    let built = std::process::Command::new(&ptxas)
        .args(["-arch=sm_90", "-o"])
        .arg(&cubin)
        .arg(&src)
        .status()
        .expect("ptxas");
    assert!(built.success(), "ptxas {}", src.display());
    let d = Daemon::host_memory("texrefs");
    let out = run_program_with(
        &exe,
        &d.server(),
        &[("TEXREF_CUBIN", cubin.to_str().expect("path"))],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for line in [
        "setup 0 found 0 same 1 missing 500\n",
        "settings: set 0 got 0 same 1\n",
        "bindings: made 0 unbound 1 array 0 same not linear 1 mipmapped 0 same linear 0 offset 0 \
         same not array 1 pitched 0 same format 1 channels 4\n",
        "checks: dim 1 mode 1 filter 1 flags 1 outside 1 too long 1 format 1 kept 1\n",
        "own 0 filter 1, destroy module's 1 own 0 after 1, surface unbound 1 set 0 same, \
         param 0 unit 1, proc address 0 found\n",
    ] {
        assert!(stdout.contains(line), "{line}: {stdout}");
    }
}

/// `cuMemGetAccess` over mapped memory (tests/c/vmm_access.c, driver API): none before
/// `cuMemSetAccess`, then what was set, none again once mapped anew; refused outside
/// mapped memory and for a host location; and `cuMemMapArrayAsync`, refused for the
/// arrays vmcuda makes (none is sparse).
#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn memory_access_reads_back_what_was_set_and_arrays_are_not_sparse() {
    let exe = build_c_program("vmm_access", &["libcuda.so.1"]);
    let d = Daemon::host_memory("vmm-access");
    let out = run_program_with(&exe, &d.server(), &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for line in [
        "setup 0\n",
        "access: none 0 0, read-write 0 3, read-only 0 1, mapped again 0 0\n",
        "checks: unmapped 1, host 1, null 1\n",
        "map array: empty 0, one 1, ptsz 1\n",
    ] {
        assert!(stdout.contains(line), "{line}: {stdout}");
    }
}

/// The im2col tensor-map encoders and `cuTensorMapReplaceAddress`
/// (tests/c/tensor_maps.c): their shape checks in the guest, and well-formed calls
/// reaching the host (the double has no driver to encode with: not supported).
#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn im2col_tensor_maps_are_checked_then_encoded_by_the_host() {
    let exe = build_c_program("tensor_maps", &["libcuda.so.1"]);
    let d = Daemon::host_memory("tensor-maps");
    let out = run_program_with(&exe, &d.server(), &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let line = "setup 0, rank 2 1, rank 6 1, null map 1, im2col 801, wide 801, replace 801\n";
    assert!(stdout.contains(line), "{stdout}");
}

/// `cuMemBatchDecompressAsync` (tests/c/decompress.c): the guest's and the host's
/// checks, and a well-formed batch answered by the host (the double, like a GPU
/// without a decompression engine, does not support it).
#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn batch_decompression_is_checked_then_answered_by_the_host() {
    let exe = build_c_program("decompress", &["libcuda.so.1"]);
    let d = Daemon::host_memory("decompress");
    let out = run_program_with(&exe, &d.server(), &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let line = "setup 0, batch 801 index none, ptsz 801, empty 1, flags 1, padding 1 index 1, \
                outside 1\n";
    assert!(stdout.contains(line), "{stdout}");
}

/// Graph memsets and copies on memory the driver does not know
/// (tests/gpu/probe/graph_node_answers.c, driver API): made by hand, in an executable
/// graph's update and through a program's own stream capture. Through vmcuda (the
/// host-memory executor) every answer is the one NVIDIA's driver gave on an H100, as
/// tests/gpu/results/RESULTS-GRAPH-NODE-ANSWERS-2026-12-07.md records it: a captured
/// memset on such memory is taken, and its graph refused at instantiation, as XLA's
/// cuDNN graphs need.
#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn graph_memsets_on_unknown_memory_get_the_drivers_answers() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = std::env::temp_dir().join(format!("vmcuda-gna-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("graph_node_answers");
    let include = nvidia_cudart_dir().join("../include");
    let built = std::process::Command::new("cc")
        .arg("-o")
        .arg(&exe)
        .arg(root.join("tests/gpu/probe/graph_node_answers.c"))
        .arg(format!("-I{}", include.display()))
        .arg(format!("-L{}", vmcuda_tests::guest_lib_dir().display()))
        .arg("-l:libcuda.so.1")
        .output()
        .expect("cc");
    assert!(built.status.success(), "{}", text(&built.stderr));
    let d = Daemon::host_memory("graph-node-answers");
    let out = run_program_with(&exe, &d.server(), &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let recorded = std::fs::read_to_string(
        root.join("tests/gpu/results/RESULTS-GRAPH-NODE-ANSWERS-2026-12-07.md"),
    )
    .unwrap();
    let native: Vec<&str> = recorded
        .split("Native:")
        .nth(1)
        .and_then(|s| s.split("```").nth(1))
        .expect("the native block")
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("exit "))
        .collect();
    let bridged: Vec<&str> = stdout.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(bridged, native, "bridged:\n{stdout}");
    assert!(d
        .log()
        .contains("refused a graph whose captured memset names memory not the guest's"));
}

/// Memset nodes made by hand (tests/c/memset_nodes.c, driver API) on every kind of the
/// program's memory the driver takes them on (device, managed, pinned host) are made,
/// and the device and managed ones run; one on memory the program does not have is refused at once, as the
/// driver refuses it (the guest library checks these, since the host takes a
/// captured memset on unknown memory).
#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn hand_made_memset_nodes_take_the_programs_memory_and_refuse_the_rest() {
    let exe = build_c_program("memset_nodes", &["libcuda.so.1"]);
    let d = Daemon::host_memory("memset-nodes");
    let out = run_program_with(&exe, &d.server(), &[]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout
            .contains("alloc 0 0 0 made 0 0 0 unknown 1 instantiate 0 launch 0 sync 0 read 10 11"),
        "{stdout}"
    );
}
