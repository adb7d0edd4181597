//! Slurm end to end (tests/slurm/run.sh): a real slurmctld and slurmd on this machine
//! run jobs whose share of a host-memory daemon the vmcuda prolog grants and the
//! epilog revokes through the admin API. Skipped, saying why, where Slurm cannot run
//! (not root, or no slurm-wlm and munge); CI installs them and sets
//! VMCUDA_REQUIRE_SLURM_TESTS=1, which turns a skip into a failure.

use std::process::Command;

use vmcuda_tests::{host_bin, root, text};

#[test]
fn slurm_jobs_get_their_own_quota_and_lose_it_when_they_end_or_are_cancelled() {
    let out = Command::new("bash")
        .arg(root().join("tests/slurm/run.sh"))
        .env("VMCUDA_HOST_BIN", host_bin())
        .env("RAW_GUEST_BIN", env!("CARGO_BIN_EXE_raw-guest"))
        .output()
        .expect("run tests/slurm/run.sh");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    println!("{stdout}");
    if out.status.code() == Some(77) {
        assert!(
            std::env::var_os("VMCUDA_REQUIRE_SLURM_TESTS").is_none(),
            "the Slurm test was skipped but VMCUDA_REQUIRE_SLURM_TESTS is set: {stdout}"
        );
        return;
    }
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
}
