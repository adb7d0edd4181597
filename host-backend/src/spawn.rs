//! Starting a `vmcuda-host worker`, the one way both of its spawners start one: the
//! daemon's listeners ([`crate::daemon`]) and the vhost-user device (`vmm-glue`,
//! `vmcuda-vhost-vsock`). So every worker, whichever way its guest came, has the same
//! bounds:
//!
//! - **Its log** reaches the host log through its spawner, a pipe each, under the limit
//!   of its VM ([`WorkerLogs`]: [`VM_LOG_BURST`] lines at once, then
//!   [`VM_LOG_PER_SECOND`], all the VM's connections of that spawner together), on top
//!   of the worker's own limit per connection ([`crate::guest_log`]). A spawner that
//!   knows the VM (the device is one VM's) counts every line under it; the daemon
//!   learns it from the worker ([`crate::guest_log::VM_MARK`]) and counts the lines
//!   before under the limit of the connection's source ([`Whose::Source`]: a vsock
//!   CID, a TCP address or IPv6 /64, a Unix uid; [`crate::source_log::PRE_ADMISSION`]),
//!   so one source's workers flooding their refusals cannot crowd out another's.
//! - **Its memory**: the worker, once its guest is admitted, counts what it keeps
//!   against its VM's `host_memory` (`session/host_memory.rs`) and caps its own data
//!   segment at that and [`crate::memory_cap::DRIVER_HEADROOM`] (`RLIMIT_DATA`,
//!   [`crate::memory_cap`], from `connection.rs`). Both come from the configuration
//!   the worker reads at admission ([`WorkerLaunch::config`]), whoever started it.
//!
//! What the spawners add is their own: the daemon the admission channel, the peer link
//! and a pid namespace; the device the guest's RAM for privileged guest ports.

use std::collections::BTreeMap;
use std::io::{self, BufRead, Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread;
use std::time::Duration;

use crate::guest_log::{Limited, VM_MARK};
use crate::policy::Caller;
use crate::source_log::Source;
use crate::source_log::{self, SourceLog};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExecutorChoice {
    /// The CUDA executor when a GPU and driver are present, else the host-memory test
    /// double, said loudly on stderr (an explicit choice: never the default).
    Auto,
    /// The GPUs, through NVIDIA's driver: `serve` refuses to start without a usable one.
    Cuda,
    /// The test double: memory is real, kernels are recorded, never run.
    HostMemory,
}

impl ExecutorChoice {
    pub fn as_arg(self) -> &'static str {
        match self {
            ExecutorChoice::Auto => "auto",
            ExecutorChoice::Cuda => "cuda",
            ExecutorChoice::HostMemory => "host-memory",
        }
    }
}

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize,
)]
pub enum TransportKind {
    Unix,
    Tcp,
    Vsock,
}

/// Lines all the workers of one VM may write at once, and a second after: on top of
/// each worker's own limit ([`crate::guest_log`]), so a VM that spreads a flood over
/// many connections gets no more.
pub const VM_LOG_BURST: u32 = 100;
pub const VM_LOG_PER_SECOND: u32 = 5;

/// The VM log limit in force: [`VM_LOG_BURST`] and [`VM_LOG_PER_SECOND`], or what
/// `VMCUDA_VM_LOG_BURST` and `VMCUDA_VM_LOG_PER_SECOND` in the host's environment say
/// (a host that keeps every line of a busy VM's workers, or a test that counts them).
fn vm_log_limit() -> (u32, u32) {
    static LIMIT: OnceLock<(u32, u32)> = OnceLock::new();
    *LIMIT.get_or_init(|| {
        let var = |name, default| {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        };
        (
            var("VMCUDA_VM_LOG_BURST", VM_LOG_BURST),
            var("VMCUDA_VM_LOG_PER_SECOND", VM_LOG_PER_SECOND),
        )
    })
}
/// The longest worker line passed on (a worker cuts its own at 2 KiB).
const MAX_WORKER_LINE: u64 = 4096;
/// How often what a VM's limit dropped is said, when its workers say nothing more.
const SUMMARY_EVERY: Duration = Duration::from_secs(2);

/// What every worker's command line holds; each spawner adds its own arguments.
#[derive(Clone, Copy, Debug)]
pub struct WorkerLaunch<'a> {
    /// The `vmcuda-host` binary.
    pub exe: &'a Path,
    pub executor: ExecutorChoice,
    pub transport: TransportKind,
    /// The spawner's number for the connection.
    pub connection_id: u64,
    /// Who is calling, as the transport says (the device: its VM).
    pub caller: &'a Caller,
    pub launch_log: Option<&'a Path>,
    /// The configuration the worker admits its guest by, and takes its limits from.
    pub config: Option<&'a Path>,
}

impl WorkerLaunch<'_> {
    /// `<exe> worker --executor E --transport T --connection-id N --caller C
    /// [--launch-log P] [--config P]`.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new(self.exe);
        cmd.arg("worker")
            .arg("--executor")
            .arg(self.executor.as_arg())
            .arg("--transport")
            .arg(match self.transport {
                TransportKind::Unix => "unix",
                TransportKind::Tcp => "tcp",
                TransportKind::Vsock => "vsock",
            })
            .arg("--connection-id")
            .arg(self.connection_id.to_string())
            .arg("--caller")
            .arg(self.caller.to_arg());
        if let Some(log) = self.launch_log {
            cmd.arg("--launch-log").arg(log);
        }
        if let Some(config) = self.config {
            cmd.arg("--config").arg(config);
        }
        cmd
    }
}

/// Whose a worker's lines are, as its spawner knows it.
#[derive(Clone, Debug)]
pub enum Whose<'a> {
    /// One VM's (the vhost-user device is one VM's): every line counts under its limit.
    Vm(&'a str),
    /// A connection from this source (the daemon's): its lines count under the
    /// source's limit until the worker names its VM, under the VM's from then on.
    Source(Source),
}

/// A worker started by [`start`].
pub struct Started {
    pub child: Child,
    /// Its VM, once known: the spawner's word, else the worker's own.
    pub vm: Arc<OnceLock<String>>,
}

/// Start the worker `cmd` (from [`WorkerLaunch::command`] and the spawner's own
/// arguments) with `conn` as its stdin, stdout null and its stderr passed on to `logs`
/// under its VM's limit: the VM `whose` names where the spawner knows it, else the one
/// the worker names, and before that its source's.
/// `spawn` starts the process (where the spawner passes descriptors, or a namespace).
/// The caller's copy of `conn` is gone once `cmd` is dropped.
pub fn start(
    cmd: &mut Command,
    conn: OwnedFd,
    logs: &Arc<WorkerLogs>,
    whose: Whose<'_>,
    spawn: impl FnOnce(&mut Command) -> io::Result<Child>,
) -> io::Result<Started> {
    cmd.stdin(Stdio::from(conn))
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = spawn(cmd)?;
    let known = Arc::new(OnceLock::new());
    let source = match whose {
        Whose::Vm(name) => {
            let _ = known.set(name.to_string());
            Source::Unknown
        }
        Whose::Source(source) => source,
    };
    if let Some(log) = child.stderr.take() {
        let (logs, vm) = (logs.clone(), known.clone());
        let forwarding = thread::Builder::new()
            .name(format!("log-{}", child.id()))
            .stack_size(64 * 1024)
            .spawn(move || logs.forward(log, &vm, &source));
        if let Err(e) = forwarding {
            // Unread, its log would block the worker (or end it, a broken pipe).
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
    }
    Ok(Started { child, vm: known })
}

type Sink = Box<dyn Write + Send>;
type LimitedLog = Limited<Sink>;

/// Where a spawner's workers' log lines go, under a limit per VM.
pub struct WorkerLogs {
    /// A writer for a new limit (the host log: stderr).
    out: Box<dyn Fn() -> Sink + Send + Sync>,
    /// Each VM's limit, made at its first line (VMs are the configuration's, so few).
    vms: Mutex<BTreeMap<String, Arc<LimitedLog>>>,
    /// The limits on lines of workers that have not named their VM yet, per source,
    /// and where those lines and their summaries go.
    not_admitted: SourceLog,
    not_admitted_out: Arc<Mutex<Sink>>,
}

impl WorkerLogs {
    /// Workers' lines written to what `out` makes. A thread of its own says what each
    /// VM's limit dropped within [`SUMMARY_EVERY`] even when its workers say nothing
    /// more (within the limit: a summary takes a line of it), for as long as the
    /// `WorkerLogs` lives.
    pub fn new(out: impl Fn() -> Sink + Send + Sync + 'static) -> Arc<WorkerLogs> {
        let not_admitted_out = Arc::new(Mutex::new(out()));
        let summaries = not_admitted_out.clone();
        let not_admitted = SourceLog::with_limits(
            "workers of connections not admitted yet",
            source_log::PRE_ADMISSION,
        )
        .saying_to(move |line| {
            let mut out = summaries.lock().unwrap_or_else(|p| p.into_inner());
            let _ = writeln!(out, "{line}").and_then(|()| out.flush());
        });
        let logs = Arc::new(WorkerLogs {
            not_admitted,
            not_admitted_out,
            out: Box::new(out),
            vms: Mutex::new(BTreeMap::new()),
        });
        let weak: Weak<WorkerLogs> = Arc::downgrade(&logs);
        // Without the thread, summaries still precede the next line let through.
        let _ = thread::Builder::new()
            .name("log-summaries".into())
            .stack_size(64 * 1024)
            .spawn(move || loop {
                thread::sleep(SUMMARY_EVERY);
                match weak.upgrade() {
                    Some(logs) => logs.summaries(),
                    None => return,
                }
            });
        logs
    }

    /// This process's: its workers' lines on its stderr, the host log.
    pub fn host() -> Arc<WorkerLogs> {
        static HOST: OnceLock<Arc<WorkerLogs>> = OnceLock::new();
        HOST.get_or_init(|| WorkerLogs::new(|| Box::new(io::stderr())))
            .clone()
    }

    fn vm(&self, name: &str) -> Arc<LimitedLog> {
        let mut vms = self.vms.lock().unwrap_or_else(|p| p.into_inner());
        vms.entry(name.to_string())
            .or_insert_with(|| {
                let (burst, per_second) = vm_log_limit();
                Arc::new(LimitedLog::named(
                    (self.out)(),
                    burst,
                    per_second,
                    format!("vm {name} (all its connections)"),
                ))
            })
            .clone()
    }

    /// Say what each VM's limit, and each source's before admission, dropped since its
    /// last line, where the limit has a line for it.
    pub fn summaries(&self) {
        self.not_admitted.summarize();
        let vms: Vec<Arc<LimitedLog>> = self
            .vms
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for log in vms {
            let _ = log.summary_within_limit();
        }
    }

    /// Pass a worker's log lines on, under its VM's limit once `vm` is known, before
    /// that under the limit of its connection's `source`; until the worker closes it
    /// (it ends). A line that names the VM ([`VM_MARK`]) sets it, where it is not set
    /// yet, and is not passed on.
    pub fn forward(&self, from: impl Read, vm: &OnceLock<String>, source: &Source) {
        let mut from = io::BufReader::new(from);
        let mut line = Vec::with_capacity(256);
        loop {
            line.clear();
            match from
                .by_ref()
                .take(MAX_WORKER_LINE)
                .read_until(b'\n', &mut line)
            {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line.last() != Some(&b'\n') {
                line.push(b'\n');
            }
            // The worker names its VM in the stream, so every line after counts under it.
            if let Some(name) = line.strip_prefix(VM_MARK.as_bytes()) {
                let name = String::from_utf8_lossy(name.strip_suffix(b"\n").unwrap_or(name));
                let _ = vm.set(crate::admission::guest_text(
                    &name,
                    crate::admission::MAX_GUEST_TEXT,
                ));
                continue;
            }
            let _ = match vm.get() {
                Some(name) => self.vm(name).line(&line),
                None if self.not_admitted.allow(source) => {
                    let mut out = self
                        .not_admitted_out
                        .lock()
                        .unwrap_or_else(|p| p.into_inner());
                    out.write_all(&line).and_then(|()| out.flush())
                }
                None => Ok(()),
            };
        }
    }
}

/// Log lines kept in memory: where tests send what workers log.
#[derive(Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl LogCapture {
    /// What was written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }

    /// Workers' logs written here.
    pub fn logs(&self) -> Arc<WorkerLogs> {
        let sink = self.clone();
        WorkerLogs::new(move || -> Sink { Box::new(sink.clone()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Workers a spawner knows the VM of count every line under it, three of them
    /// together no more than the VM's burst; the summary says what was dropped.
    #[test]
    fn workers_of_a_known_vm_share_its_limit_from_their_first_line() {
        let sink = LogCapture::default();
        let logs = sink.logs();
        let workers: Vec<Started> = (0..3)
            .map(|_| {
                let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
                drop(ours);
                let mut cmd = Command::new("/bin/sh");
                cmd.arg("-c")
                    .arg("i=0; while [ $i -lt 200 ]; do echo \"flood $i\" >&2; i=$((i+1)); done");
                start(&mut cmd, theirs.into(), &logs, Whose::Vm("vm1"), |c| {
                    c.spawn()
                })
                .unwrap()
            })
            .collect();
        for mut w in workers {
            assert!(w.child.wait().unwrap().success());
            assert_eq!(w.vm.get().map(String::as_str), Some("vm1"));
        }
        // The forwarding threads read to the end of each pipe.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            std::thread::sleep(Duration::from_millis(300));
            logs.summaries();
            let text = sink.text();
            if text.contains("suppressed") || std::time::Instant::now() > deadline {
                break;
            }
        }
        let text = sink.text();
        let flood = text.lines().filter(|l| l.starts_with("flood ")).count() as u32;
        assert!(flood >= VM_LOG_BURST, "{flood} lines let through");
        assert!(
            flood <= VM_LOG_BURST + 20 * VM_LOG_PER_SECOND,
            "{flood} of 600 lines let through"
        );
        assert!(
            text.contains("lines from vm vm1 (all its connections)"),
            "{text}"
        );
    }

    /// Before a worker names its VM its lines count under the limit for workers not
    /// admitted yet; the line naming it is not passed on, and a second does not rename.
    #[test]
    fn a_worker_that_names_its_vm_counts_under_it_from_then_on() {
        let sink = LogCapture::default();
        let logs = sink.logs();
        let vm = OnceLock::new();
        let stream = format!("early\n{VM_MARK}vm2\nlate\n{VM_MARK}other\nlater\n");
        logs.forward(stream.as_bytes(), &vm, &Source::Uid(1000));
        assert_eq!(vm.get().map(String::as_str), Some("vm2"));
        assert_eq!(sink.text(), "early\nlate\nlater\n");
        assert!(logs.vms.lock().unwrap().contains_key("vm2"));
        assert!(!logs.vms.lock().unwrap().contains_key("other"));
    }

    /// Before admission each source's workers have a limit of their own: one source
    /// whose workers flood their lines (refused hellos, say) has them cut to its share
    /// and summed up, and another source's refusal is still written. (With one limit
    /// for all, as before, the flood took every line and the refusal was dropped.)
    #[test]
    fn one_sources_flood_before_admission_cannot_crowd_out_anothers_refusal() {
        let sink = LogCapture::default();
        let logs = sink.logs();
        let flooder = Source::of_ip("10.0.0.1".parse().unwrap());
        let guest = Source::of_ip("2001:db8:1:2::7".parse().unwrap());
        // Many workers of the flooder, each with a line or two.
        for n in 0..500 {
            let lines = format!("refused tcp:10.0.0.1:{n}: no token\nflood {n}\n");
            logs.forward(lines.as_bytes(), &OnceLock::new(), &flooder);
        }
        logs.forward(
            &b"refused tcp:[2001:db8:1:2::7]:9: no token\n"[..],
            &OnceLock::new(),
            &guest,
        );
        // The flooder's share gives it a line again within a second: its summary.
        std::thread::sleep(Duration::from_millis(600));
        logs.summaries();
        let text = sink.text();
        let flood = text
            .lines()
            .filter(|l| l.contains("10.0.0.1:") || l.starts_with("flood "))
            .count() as u32;
        let share = source_log::PRE_ADMISSION.per_source_burst;
        // The test takes well under a second: at most a few lines came back meanwhile.
        assert!(
            flood >= share && flood <= share + 2 * source_log::PRE_ADMISSION.per_source_per_second,
            "{flood} of 1000 lines of one source let through: {text}"
        );
        assert!(
            text.contains("refused tcp:[2001:db8:1:2::7]:9: no token"),
            "the other source's refusal was dropped: {text}"
        );
        assert!(
            text.contains("lines about workers of connections not admitted yet from 10.0.0.1"),
            "no summary of the flooder's dropped lines: {text}"
        );
    }
}
