//! `vmcuda`: the guest's view of the bridge, without loading `libcudart`.
//!
//! - `vmcuda info [--json]`: the host's GPUs as this guest sees them (names, memory
//!   and quota, versions, executor, transport and round-trip time).
//! - `vmcuda doctor [PROGRAM]`: the usual failures checked in order, each with a
//!   one-line fix; with PROGRAM, whether that program can reach the bridge at all.
//! - `vmcuda smi`: an nvidia-smi-like table of the guest's GPUs and its own
//!   processes, or `--query-gpu` / `--query-compute-apps` CSV.
//! - `vmcuda cdi generate [--output FILE] [--lib-dir DIR]`: a CDI spec that gives
//!   containers in this guest the bridge (`--device vmcuda.dev/gpu=all`).
//! - `vmcuda guest-ram-broker`: the guest service (run as root) that gives every
//!   process guest RAM the host can copy to and from (see `vmcuda_guest::guest_ram`).
//!
//! `info`, `doctor` and `smi` speak the wire protocol through the guest library's own
//! client ([`vmcuda_guest::client::Client`]), so what they see is what programs see.

mod broker;
mod cdi;
mod doctor;
mod info;
mod probe;
mod program;
mod smi;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "vmcuda",
    version,
    about = "Inspect and diagnose the vmcuda GPU bridge from inside a guest"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve guest RAM to this guest's unprivileged processes (run as root, by the
    /// guest package's service): each gets huge pages of its own and a connection to
    /// the host that may use only those, so its copies are the GPU's DMA from its pages.
    /// Internal: the package's service runs it, so `--help` does not list it.
    #[command(hide = true)]
    GuestRamBroker {
        /// Where to listen.
        #[arg(long, default_value = vmcuda_guest::guest_ram::BROKER_SOCKET)]
        socket: PathBuf,
        /// The most guest RAM one process gets, in MiB: its ring and staging area
        /// (18 MiB), then its pinned memory.
        #[arg(long, default_value_t = 1024)]
        max_area_mib: usize,
        /// The most processes of one user served at once.
        #[arg(long, default_value_t = 64)]
        max_per_user: usize,
    },
    /// Show the remote GPUs: names, memory used and quota, versions, transport and
    /// round-trip time.
    Info {
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Give up on a host that does not answer within this many seconds.
        #[arg(long, default_value_t = 30, value_name = "SECONDS")]
        timeout: u64,
    },
    /// Check the setup step by step and say how to fix what fails. Exit status 0 when
    /// every check passes, 1 otherwise.
    Doctor {
        /// Also check how this program (a path or a command on PATH) reaches the
        /// bridge: NVIDIA's runtime, linked in or as libcudart.so.13, over vmcuda's
        /// libcuda.so.1.
        program: Option<PathBuf>,
        /// Give up on a host that does not answer within this many seconds.
        #[arg(long, default_value_t = 10, value_name = "SECONDS")]
        timeout: u64,
    },
    /// The guest's GPUs as nvidia-smi shows them: memory (the guest's own, its quota as
    /// the total), utilization, temperature, power and this guest's processes.
    Smi {
        /// CSV of these fields, one line per GPU (index, name, uuid, pci.bus_id,
        /// driver_version, memory.total/used/free, utilization.gpu/memory,
        /// temperature.gpu, power.draw/limit, clocks.gr/sm/mem, clocks.max.sm,
        /// pstate, fan.speed).
        #[arg(long, value_name = "FIELDS")]
        query_gpu: Option<String>,
        /// CSV of the guest's programs on the GPUs (pid, used_memory, gpu_uuid,
        /// gpu_bus_id).
        #[arg(long, value_name = "FIELDS")]
        query_compute_apps: Option<String>,
        /// csv, with noheader and/or nounits as nvidia-smi takes them.
        #[arg(long, default_value = "csv")]
        format: String,
    },
    /// Container Device Interface: let containers in this guest use the bridge.
    Cdi {
        #[command(subcommand)]
        command: CdiCommand,
    },
}

#[derive(Subcommand)]
enum CdiCommand {
    /// Print (or write) a CDI spec for `--device vmcuda.dev/gpu=all`: the libraries,
    /// vmcuda-run's environment, this guest's host configuration and /dev/vsock. Needs
    /// no connection to the host; generate it again after changing the configuration.
    Generate {
        /// Write the spec here (atomically, mode 0644) instead of printing it; the
        /// packages install /etc/cdi/vmcuda.json.
        #[arg(long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// The directory holding vmcuda's libcuda.so.1 (default: where vmcuda-run
        /// looks, VMCUDA_LIB_DIR first).
        #[arg(long, value_name = "DIR")]
        lib_dir: Option<PathBuf>,
    },
}

/// Write the report whole; a reader that went away (`vmcuda doctor | head`) is no
/// error worth a panic, as `println!` would make it.
fn write_stdout(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::GuestRamBroker {
            socket,
            max_area_mib,
            max_per_user,
        } => broker::run(&socket, max_area_mib, max_per_user),
        Command::Info { json, timeout } => info::run(json, Duration::from_secs(timeout)),
        Command::Doctor { program, timeout } => {
            doctor::run(program.as_deref(), Duration::from_secs(timeout))
        }
        Command::Smi {
            query_gpu,
            query_compute_apps,
            format,
        } => smi::run(query_gpu.as_deref(), query_compute_apps.as_deref(), &format),
        Command::Cdi {
            command: CdiCommand::Generate { output, lib_dir },
        } => cdi::generate(output.as_deref(), lib_dir.as_deref()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn help_lists_the_users_commands_and_not_the_internal_broker() {
        let help = Cli::command().render_help().to_string();
        assert!(!help.contains("guest-ram-broker"), "{help}");
        for command in ["info", "doctor", "smi", "cdi"] {
            assert!(help.contains(command), "{command}: {help}");
        }
        // Hidden, not gone: the guest package's service runs it.
        let cli = Cli::try_parse_from(["vmcuda", "guest-ram-broker"]).unwrap();
        assert!(matches!(cli.command, Command::GuestRamBroker { .. }));
    }
}
