//! `vmcuda-host admin ...`: the operator's side of the daemon's admin socket
//! (`vmcuda_host::admin`, docs/admin-api.md).

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use vmcuda_host::admin::{self, GrantSpec, Request, Response};
use vmcuda_host::policy::{parse_size, ByteSize, GpuSelection, Gpus, Limits, Policy, Secret};

/// Where the daemon's admin socket is.
#[derive(Args)]
pub struct AdminAt {
    /// The admin socket. Default: the configuration's [admin] socket, else admin.sock
    /// in the state directory.
    #[arg(long, global = true)]
    socket: Option<PathBuf>,
    /// The host configuration, for [admin] socket and state_dir. Default:
    /// /etc/vmcuda/host.toml when it exists.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// The daemon's state directory (as given to `serve --state-dir`).
    #[arg(long, global = true)]
    state_dir: Option<PathBuf>,
}

#[derive(Subcommand)]
pub enum AdminCmd {
    /// Grant a VM (or a job, or a user) the use of this host's GPUs, from now on.
    /// With --generate-token the token made is printed alone on stdout.
    Grant {
        /// Its name (what the log, the ledger and `status` call it).
        name: String,
        #[command(flatten)]
        spec: SpecArgs,
        /// Keep the grant when the daemon restarts (otherwise it is dropped then).
        #[arg(long)]
        persist: bool,
    },
    /// Change a grant: what is given is set, the rest kept. New connections get the
    /// new policy; those open keep theirs, but for the compute share, priority and
    /// cap, which reach them at once.
    Change {
        name: String,
        #[command(flatten)]
        spec: SpecArgs,
        /// Keep the grant when the daemon restarts from now on.
        #[arg(long, conflicts_with = "no_persist")]
        persist: bool,
        /// Drop the grant when the daemon restarts.
        #[arg(long)]
        no_persist: bool,
    },
    /// Remove a grant: new connections are refused; those open go on until they end.
    Remove { name: String },
    /// Remove a grant and end its VM's live workers: their GPU memory is freed and
    /// their quota given back.
    Revoke { name: String },
    /// The run-time grants, with their live workers (tokens are never shown).
    List {
        /// Print JSON (the "grants" list) instead of a table.
        #[arg(long)]
        json: bool,
    },
}

/// Who may connect and what they get.
#[derive(Args)]
pub struct SpecArgs {
    /// The VM's vsock context id (kernel vhost-vsock: QEMU's guest-cid).
    #[arg(long)]
    cid: Option<u32>,
    /// A Unix user whose programs on this host (through the daemon's Unix socket) are
    /// this grant's guests.
    #[arg(long)]
    uid: Option<u32>,
    /// Read the TCP token from this file (its first line; `-`: stdin). A token turns
    /// TCP on for the grant unless --no-tcp is given.
    #[arg(long, value_name = "FILE", conflicts_with = "generate_token")]
    token_from: Option<PathBuf>,
    /// Have the daemon make a token (printed alone on stdout, once).
    #[arg(long)]
    generate_token: bool,
    /// Allow TCP connections with the token.
    #[arg(long, conflicts_with = "no_tcp")]
    tcp: bool,
    /// Refuse TCP connections.
    #[arg(long)]
    no_tcp: bool,
    /// The GPUs it sees, in its order: `all`, or host ordinals and GPU-UUIDs, e.g. 0,1.
    #[arg(long, value_parser = GpuSelection::from_arg)]
    gpus: Option<GpuSelection>,
    /// GPU memory its guests may hold at once, all together (e.g. 16GiB).
    #[arg(long, value_parser = size)]
    memory_quota: Option<ByteSize>,
    /// Host memory its workers may keep for it (e.g. 4GiB).
    #[arg(long, value_parser = size)]
    host_memory: Option<ByteSize>,
    /// Frame buffers of its workers, all together.
    #[arg(long, value_parser = size)]
    buffer_memory: Option<ByteSize>,
    /// Connections (guest processes) it may have open at once.
    #[arg(long)]
    max_connections: Option<u32>,
    #[arg(long)]
    max_streams: Option<u32>,
    #[arg(long)]
    max_events: Option<u32>,
    #[arg(long)]
    max_modules: Option<u32>,
    /// Host memory registrations per connection.
    #[arg(long)]
    max_registrations: Option<u32>,
    /// Bytes those registrations may span, per connection.
    #[arg(long, value_parser = size)]
    registered_memory: Option<ByteSize>,
    /// Its module cache on this host's disk (0 turns it off).
    #[arg(long, value_parser = size)]
    module_cache: Option<ByteSize>,
    /// Its share of the GPUs' time, a weight (active VMs get time in proportion to
    /// their shares; default 100). A change reaches its live workers at once.
    #[arg(long)]
    compute_share: Option<u32>,
    /// batch, normal or latency (a change reaches its live workers at once).
    #[arg(long)]
    compute_priority: Option<vmcuda_host::compute::Priority>,
    /// At most this percent of the GPUs' time, even when nobody else wants it.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    compute_cap: Option<u32>,
}

fn size(s: &str) -> Result<ByteSize, String> {
    parse_size(s).map(ByteSize)
}

impl SpecArgs {
    fn spec(self) -> Result<GrantSpec, String> {
        let token = match &self.token_from {
            None => None,
            Some(path) => {
                let mut text = zeroize::Zeroizing::new(String::new());
                let read = if path.as_os_str() == "-" {
                    std::io::stdin().read_to_string(&mut text)
                } else {
                    std::fs::File::open(path).and_then(|mut f| f.read_to_string(&mut text))
                };
                read.map_err(|e| format!("cannot read the token from {}: {e}", path.display()))?;
                Some(Secret::new(
                    text.lines().next().unwrap_or("").trim().to_string(),
                ))
            }
        };
        Ok(GrantSpec {
            cid: self.cid,
            uid: self.uid,
            token,
            generate_token: self.generate_token,
            tcp: match (self.tcp, self.no_tcp) {
                (true, _) => Some(true),
                (_, true) => Some(false),
                _ => None,
            },
            limits: Limits {
                gpus: self.gpus.map(|g| match g.0 {
                    None => Gpus::Named("all".into()),
                    Some(ids) => Gpus::List(ids),
                }),
                memory_quota: self.memory_quota,
                max_streams: self.max_streams,
                max_events: self.max_events,
                max_modules: self.max_modules,
                max_connections: self.max_connections,
                buffer_memory: self.buffer_memory,
                host_memory: self.host_memory,
                max_registrations: self.max_registrations,
                registered_memory: self.registered_memory,
                module_cache: self.module_cache,
                compute_share: self.compute_share,
                compute_priority: self.compute_priority,
                compute_cap: self.compute_cap,
            },
        })
    }
}

/// `vmcuda-host admin ...`.
pub fn run(at: AdminAt, command: AdminCmd) -> ExitCode {
    // Where the socket is, from the configuration; a member of [admin] group may not
    // be able to read it, and then gets the default place (said if it fails).
    let mut unread = None;
    let socket = match at.socket {
        Some(s) => s,
        None => match Policy::load(at.config.as_deref()) {
            Ok(p) => {
                let state_dir = at
                    .state_dir
                    .clone()
                    .unwrap_or_else(|| p.state_dir().to_path_buf());
                p.config.admin.socket(&state_dir)
            }
            Err(e) => {
                let state_dir = at
                    .state_dir
                    .clone()
                    .unwrap_or_else(|| PathBuf::from(vmcuda_host::policy::DEFAULT_STATE_DIR));
                unread = Some(e.to_string());
                state_dir.join(admin::SOCKET_NAME)
            }
        },
    };
    let (request, json) = match command {
        AdminCmd::Grant {
            name,
            spec,
            persist,
        } => match spec.spec() {
            Ok(spec) => (
                Request::Grant {
                    name,
                    spec,
                    persist,
                },
                false,
            ),
            Err(e) => return fail(&e),
        },
        AdminCmd::Change {
            name,
            spec,
            persist,
            no_persist,
        } => match spec.spec() {
            Ok(spec) => (
                Request::Change {
                    name,
                    spec,
                    persist: match (persist, no_persist) {
                        (true, _) => Some(true),
                        (_, true) => Some(false),
                        _ => None,
                    },
                },
                false,
            ),
            Err(e) => return fail(&e),
        },
        AdminCmd::Remove { name } => (Request::Remove { name }, false),
        AdminCmd::Revoke { name } => (Request::Revoke { name }, false),
        AdminCmd::List { json } => (Request::List, json),
    };
    let listing = matches!(request, Request::List);
    match admin::call(&socket, &request) {
        Ok(response) if response.ok => {
            if listing {
                print_list(&response, json);
            } else if let Some(token) = &response.token {
                // The token alone on stdout, for a script to take.
                eprintln!("{}", response.message);
                println!("{token}");
            } else {
                println!("{}", response.message);
            }
            ExitCode::SUCCESS
        }
        Ok(response) => fail(&response.message),
        Err(e) => match unread {
            Some(why) => fail(&format!(
                "{e} (the configuration, which may name another socket, could not be read: \
                 {why}; give --socket)"
            )),
            None => fail(&e),
        },
    }
}

fn fail(why: &str) -> ExitCode {
    eprintln!("vmcuda-host admin: {why}");
    ExitCode::FAILURE
}

fn print_list(response: &Response, json: bool) {
    if json {
        let value = serde_json::json!({ "grants": response.grants });
        println!(
            "{}",
            serde_json::to_string_pretty(&value).expect("the list serializes")
        );
        return;
    }
    if response.grants.is_empty() {
        println!("no run-time grants");
        return;
    }
    println!(
        "{:<20} {:<28} {:>14} {:>8} {:>7} {:>14}",
        "NAME", "WHO", "MEMORY_QUOTA", "PERSIST", "WORKERS", "DEVICE_BYTES"
    );
    for g in &response.grants {
        let mut who = Vec::new();
        if let Some(cid) = g.cid {
            who.push(format!("cid {cid}"));
        }
        if let Some(uid) = g.uid {
            who.push(format!("uid {uid}"));
        }
        if g.token && g.tcp {
            who.push("tcp token".into());
        }
        let quota = g
            .limits
            .memory_quota
            .map_or("default".to_string(), |q| q.0.to_string());
        println!(
            "{:<20} {:<28} {:>14} {:>8} {:>7} {:>14}",
            g.name,
            who.join(", "),
            quota,
            if g.persist { "yes" } else { "no" },
            g.workers,
            g.device_bytes
        );
    }
}
