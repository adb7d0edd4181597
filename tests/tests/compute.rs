//! VMs taking turns on the GPU (`[compute]`), end to end through the guest library on
//! the host-memory executor: guests of two VMs with different shares and priorities
//! run at once and all pass, and `status` shows a live worker's policy and the time of its turns.

use std::time::{Duration, Instant};

use std::process::{Command, Stdio};

use vmcuda_tests::{
    apps_dir, build_c_program, free_tcp_addr, guest_library_path, host_bin, run_program_with, text,
    Daemon,
};

const TOKEN_A: &str = "compute-share-e2e-token-a-0123456789";
const TOKEN_B: &str = "compute-share-e2e-token-b-0123456789";

fn config() -> String {
    format!(
        "[compute]\nenable = true\nquantum_ms = 2\n\
         [[vm]]\nname = \"infer\"\ntcp = true\ntoken = \"{TOKEN_A}\"\ncompute_priority = \"latency\"\n\
         [[vm]]\nname = \"train\"\ntcp = true\ntoken = \"{TOKEN_B}\"\ncompute_share = 300\ncompute_priority = \"batch\"\n"
    )
}

fn status(daemon: &Daemon) -> serde_json::Value {
    let out = std::process::Command::new(host_bin())
        .args(["status", "--json", "--state-dir"])
        .arg(daemon.dir.join("state"))
        .output()
        .expect("status");
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("status JSON")
}

#[test]
#[ignore = "needs the linked guest library and nvcc-built apps: run tests/run.sh"]
fn guests_of_vms_with_shares_take_turns_and_all_pass() {
    let tcp = free_tcp_addr();
    let daemon = Daemon::start_with_config(
        "compute",
        Some(&config()),
        &["--executor", "host-memory", "--tcp", &tcp],
    );
    let server = format!("tcp:{tcp}");
    let apps = [
        "matmul",
        "streams",
        "events",
        "vector_add",
        "graphs",
        "launch_runs",
    ];
    let runs: Vec<_> = apps
        .iter()
        .enumerate()
        .map(|(i, app)| {
            let server = server.clone();
            let token = if i % 2 == 0 { TOKEN_A } else { TOKEN_B };
            let app = apps_dir().join(app);
            std::thread::spawn(move || run_program_with(&app, &server, &[("VMCUDA_TOKEN", token)]))
        })
        .collect();
    for (app, run) in apps.iter().zip(runs) {
        let out = run.join().unwrap();
        // The host-memory double runs no kernels of its own: the apps' exit status
        // says whether every call was served.
        assert!(
            out.status.success(),
            "{app}: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
    assert!(daemon.dir.join("state/compute.board").exists());
    assert!(!daemon.log().contains("panicked"), "{}", daemon.log());
}

#[test]
#[ignore = "needs the linked guest library: run tests/run.sh"]
fn a_live_worker_shows_its_policy_and_the_time_of_its_turns() {
    let tcp = free_tcp_addr();
    let daemon = Daemon::start_with_config(
        "compute-status",
        Some(&config()),
        &["--executor", "host-memory", "--tcp", &tcp],
    );
    // A guest that stays connected a while: 20 steps 50 ms apart.
    let exe = build_c_program("suspend_steps", &["libcuda.so.1"]);
    let guest = Command::new(exe)
        .args(["20", "50", "1"])
        .env("LD_LIBRARY_PATH", guest_library_path())
        .env("VMCUDA_SERVER", format!("tcp:{tcp}"))
        .env("VMCUDA_TOKEN", TOKEN_B)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("suspend_steps");
    let deadline = Instant::now() + Duration::from_secs(20);
    let shown = loop {
        let s = status(&daemon);
        let vm = s["vms"]
            .as_array()
            .and_then(|v| {
                v.iter()
                    .find(|v| v["vm"] == "train" && v["gpu_time_ns"].as_u64() > Some(0))
            })
            .cloned();
        if let Some(vm) = vm {
            break vm;
        }
        assert!(
            Instant::now() < deadline,
            "the guest's turns never showed in status: {s}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(shown["compute"]["share"], 300, "{shown}");
    assert_eq!(shown["compute"]["priority"], "batch", "{shown}");
    let table = std::process::Command::new(host_bin())
        .args(["status", "--state-dir"])
        .arg(daemon.dir.join("state"))
        .output()
        .expect("status");
    assert!(
        text(&table.stdout).contains("share 300 batch"),
        "{}",
        text(&table.stdout)
    );
    let out = guest.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}
