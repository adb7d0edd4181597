//! A worker process's connection (`vmcuda-host worker`, started by the daemon or the
//! vhost-user device): the configuration read, admission decided, the executor and
//! session made, and the transport (Unix, vsock, TCP, TLS) set up for
//! [`crate::worker::serve`].

use std::cell::Cell;
use std::net::TcpStream;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use tracing::{info, warn};
use vmcuda_wire::frame::FrameHeader;
use vmcuda_wire::handshake::caps;
use vmcuda_wire::op::{GuestPagesGrant, Hello, SessionResume};
use vmcuda_wire::polling::PollingReader;
use vmcuda_wire::tls::TlsError;
use vmcuda_wire::transport::FdReader;
use vmcuda_wire::{CudaStatus, FrameError};

use crate::admission;
use crate::console::ConsoleCapture;
use crate::daemon::{ExecutorChoice, TransportKind, WorkerTemplate};
use crate::executor::cuda::CudaExecutor;
use crate::executor::host_memory::HostMemoryExecutor;
use crate::executor::Executor;
use crate::guest_ram::GuestRam;
use crate::jail;
use crate::ledger::{Ledger, LedgerError};
use crate::module_cache::{ModuleCache, Scope};
use crate::policy::{Caller, ConfigError, Grant, Policy, Refusal};
use crate::resume;
use crate::session::BufferBudget;
use crate::session::Session;
use crate::stats::{self, Identity, WorkerStats};
use crate::tls::{self, Accepted};
use crate::worker::{self, Ended};

/// What a worker process is given besides its template.
pub struct Connection {
    /// The guest's connection (the worker's stdin).
    pub conn: OwnedFd,
    pub transport: TransportKind,
    /// The daemon's number for it (0 when another spawner started the worker).
    pub connection_id: u64,
    /// Who is calling, as the transport says.
    pub caller: Caller,
    /// Guest RAM regions inherited from the vhost-user device, as FD:GPA:LEN:OFFSET.
    pub guest_memory: Vec<String>,
    /// The socket to the daemon's peer broker, when the daemon has `[peers]`.
    pub peer_link: Option<crate::peer::PeerLink>,
    /// The socket to the daemon's CUDA IPC registry, when the daemon made one.
    pub ipc_link: Option<crate::ipc::IpcLink>,
}

/// Serve one guest connection to its end: admission, then its calls. Whatever
/// happens is logged; nothing is returned, as the worker's exit status says only
/// whether it started.
pub fn run(template: &WorkerTemplate, c: Connection, mut console: Option<ConsoleCapture>) {
    let Connection {
        conn,
        transport,
        connection_id,
        caller,
        guest_memory,
        peer_link,
        ipc_link,
    } = c;
    let peer_link = std::cell::RefCell::new(peer_link);
    let ipc_link = std::cell::RefCell::new(ipc_link);
    let guest_memory = &guest_memory[..];
    let span = tracing::info_span!("worker", connection = connection_id);
    let _enter = span.enter();

    // The configuration as it is now: for admission (and a TLS listener's certificate).
    // It holds every VM's limits and inline tokens, so admission takes it and drops it
    // (tokens wiped, see `policy::Secret`): an admitted worker keeps only its grant.
    // The run-time grants (`crate::admin`) are merged in: those of the daemon whose
    // state directory this worker uses.
    let policy = std::cell::RefCell::new(Some(Policy::load_with_grants(
        template.config.as_deref(),
        template.state_dir.as_deref(),
    )));
    let borrowed = policy.borrow();
    let loaded = borrowed.as_ref().expect("loaded above");
    admission::hello_deadline(
        loaded
            .as_ref()
            .map_or(admission::DEFAULT_HELLO_TIMEOUT, |p| {
                p.config.admission.hello_timeout()
            }),
    );
    let state_dir = template.state_dir.clone().unwrap_or_else(|| {
        loaded
            .as_ref()
            .map_or(Path::new(crate::policy::DEFAULT_STATE_DIR), |p| {
                p.state_dir()
            })
            .to_path_buf()
    });
    // The guest's RAM, taken at once so that no descriptor lingers unowned; kept only
    // where the VM's configuration allows copies straight from it.
    let mut guest_ram = match GuestRam::from_inherited(guest_memory) {
        Ok(ram) if ram.is_empty() => None,
        Ok(ram) => Some(ram),
        Err(e) => {
            warn!("{e}; this connection's copies go over the socket");
            None
        }
    };
    if let (Some(_), Caller::Vm(vm)) = (&guest_ram, &caller) {
        if !loaded.as_ref().is_ok_and(|p| p.guest_memory_copies(vm)) {
            info!(vm = %vm, "guest_memory_copies is off for this VM; copies go over the socket");
            guest_ram = None;
        }
    } else {
        // Guest RAM only ever comes with a VM's connection.
        guest_ram = None;
    }
    let guest_ram = std::cell::RefCell::new(guest_ram);
    // Admission takes the configuration out of its cell.
    drop(borrowed);
    // A program on this host: its Unix user, whose own module cache it gets.
    let local_uid = match transport {
        TransportKind::Unix => crate::daemon::peer_cred(&conn).map(|c| c.uid),
        _ => None,
    };
    // A local program's host pid, as the daemon read it: a session whose program has
    // ended is not held for it.
    let caller_pid = match &caller {
        Caller::Local { pid } => *pid,
        _ => None,
    };
    // Set once a TCP guest has done its TLS handshake, for the figures.
    let over_tls = Cell::new(false);
    // Admission, and only then an executor: a refused caller never touches a GPU.
    let open = |hello: &Hello| -> Result<Session, Refusal> {
        // Read again now that the hello is here: a grant revoked while the guest took
        // its time to send it (up to the hello timeout) does not admit it on the
        // strength of the grants as they were when it connected.
        drop(policy.take().expect("admission runs once"));
        let config =
            Policy::load_with_grants(template.config.as_deref(), template.state_dir.as_deref());
        let policy = config.as_ref().map_err(|e| Refusal {
            status: CudaStatus::ErrorNotPermitted,
            guest: "the host's configuration cannot be read; its administrator can fix it".into(),
            host: format!("refused {caller}: {e}"),
        })?;
        let grant = policy.admit_as(&caller, &hello.token, local_uid)?;
        crate::guest_log::set_vm(&grant.name);
        admission::report(admission::Event::Vm(grant.name.clone()));
        // The VM's quota and connection count span all its connections.
        let ledger = match Ledger::join(&state_dir, &grant.name, grant.max_connections) {
            Ok(ledger) => ledger,
            Err(LedgerError::TooManyConnections(n)) => {
                return Err(Refusal {
                    status: CudaStatus::ErrorDevicesUnavailable,
                    guest: format!("this VM already has {n} connections to the host, its limit"),
                    host: format!(
                        "refused {caller} ({}): it has {n} connections already",
                        grant.name
                    ),
                })
            }
            // Without the ledger neither the VM's quota nor its connection limit can
            // hold: the guest is turned away rather than served unaccounted.
            Err(e @ LedgerError::Io { .. }) => {
                return Err(Refusal {
                    status: CudaStatus::ErrorDevicesUnavailable,
                    guest: "the host cannot account for this VM's use of its GPUs now \
                            (its state directory); its administrator can fix it"
                        .into(),
                    host: format!(
                        "refused {caller} ({}): {e}; without its ledger the VM's quota and \
                         connection limit cannot hold",
                        grant.name
                    ),
                })
            }
        };
        // The guest's library adds the status to the reason it prints: it is not
        // repeated here.
        let exec = make_executor(template, &grant).map_err(|(status, why)| Refusal {
            status,
            guest: "the host cannot serve this guest".into(),
            host: format!("cannot serve {caller} ({}): {why}", grant.name),
        })?;
        let identity = Identity {
            vm: grant.name.clone(),
            program: hello.client.clone(),
            program_pid: hello.pid,
            caller: caller.to_arg(),
            transport: match transport {
                TransportKind::Unix => "unix",
                TransportKind::Vsock => "vsock",
                TransportKind::Tcp if over_tls.get() => "tls",
                TransportKind::Tcp => "tcp",
            }
            .into(),
            connection_id,
        };
        // A guest that can come back after a drop gets a resume point (a TLS guest
        // comes back through the worker of its new connection, which relays).
        let hold = policy.config.reconnect.hold();
        let resume_point = (hello.capabilities & caps::RESUMABLE != 0 && !hold.is_zero())
            .then(|| {
                resume::ResumePoint::open(&state_dir, &grant.name, hold, caller_pid)
                    .inspect_err(|e| warn!("{e}; this connection cannot be come back to"))
                    .ok()
            })
            .flatten();
        let grant_buffers = grant.buffer_memory;
        let grant_host_memory = grant.host_memory;
        let grant_module_cache = grant.module_cache;
        // A place on the GPU's board, taken now (the jail below keeps the worker from
        // opening it later).
        let turns = crate::compute::join_if_enabled(
            &policy.config.compute,
            &state_dir,
            &grant.name,
            grant.compute,
            exec.keeper_drain(),
        );
        let mut session = Session::new(exec, grant).with_compute(turns);
        if let Some(ram) = guest_ram.borrow_mut().take() {
            session = session.with_guest_ram(ram);
        }
        if let Some(link) = peer_link.borrow_mut().take() {
            session = session.with_peer_link(link);
        }
        if let Some(link) = ipc_link.borrow_mut().take() {
            session = session.with_ipc_link(link);
        }
        if let Some(point) = resume_point {
            session = session.with_resume_point(point);
        }
        session = session.with_room_wait(policy.config.suspend.room_wait());
        // The VM's module cache, opened now (the jail below keeps the worker from
        // making it later); without it, images simply cross every time.
        let mut own_cache = None;
        if grant_module_cache > 0 {
            let caches = policy.module_cache_dir(&state_dir);
            let scope = Scope {
                vm: identity.vm.clone(),
                local_uid: match caller {
                    Caller::Local { .. } => local_uid,
                    _ => None,
                },
            };
            match ModuleCache::open(&caches, &scope, grant_module_cache) {
                Ok(cache) => {
                    own_cache = Some(cache.dir().to_path_buf());
                    session = session.with_module_cache(cache);
                }
                Err(e) => warn!("{e}; this VM's module cache is not used by this connection"),
            }
        }
        // Monitoring never stands in a guest's way: without a file, it goes unwatched.
        match WorkerStats::create(&state_dir, &identity) {
            Ok(stats) => session = session.with_stats(stats),
            Err(e) => warn!("{e}; this connection's figures are not published"),
        }
        // Admitted, and holding all it needs: from here on the worker reaches only its
        // own VM's ledger and files (docs/security.md, "Worker jail").
        jail::confine_admitted(
            policy,
            &identity.vm,
            &state_dir,
            Some(ledger.path()),
            own_cache.as_deref(),
        )
        .map_err(|e| e.refusal(&caller, &identity.vm))?;
        // The kernel's cap, should the host-memory accounts miss anything.
        crate::memory_cap::cap_worker(grant_host_memory);
        let buffers = BufferBudget::new(grant_buffers, Some(ledger.buffers()));
        // Every VM's limits and tokens go before the guest's first request.
        drop(config);
        Ok(session.with_buffer_budget(buffers).with_ledger(ledger))
    };
    let poll_for = worker::request_poll_window();
    // A returning guest's connection, handed to its session's worker as it came.
    let handoff_fd = conn.try_clone().ok();
    // Admit a returning guest and hand `fd`, its connection as the session's worker
    // will see it, over. A worker that relays it after (TLS: the keys stay in the
    // worker that made the handshake) is then jailed, as an admitted worker is.
    let admit_and_hand_over = |header: &FrameHeader,
                               resume: &SessionResume,
                               pages: Option<GuestPagesGrant>,
                               fd: Option<std::os::fd::BorrowedFd<'_>>,
                               transport: TransportKind,
                               relayed: bool|
     -> Result<(), Refusal> {
        // As for a hello: the configuration and run-time grants as they are now.
        drop(policy.take().expect("admission runs once"));
        let config =
            Policy::load_with_grants(template.config.as_deref(), template.state_dir.as_deref());
        let policy = config.as_ref().map_err(|e| Refusal {
            status: CudaStatus::ErrorNotPermitted,
            guest: "the host's configuration cannot be read; its administrator can fix it".into(),
            host: format!("refused {caller}: {e}"),
        })?;
        // Admitted again, as any connection: the caller must still be that VM (a VM
        // whose grant was revoked meanwhile is refused; its session has ended anyway).
        let grant = policy.admit_as(&caller, &resume.hello.token, local_uid)?;
        crate::guest_log::set_vm(&grant.name);
        admission::report(admission::Event::Vm(grant.name.clone()));
        let refused = |status: CudaStatus, why: String| Refusal {
            status,
            guest: format!("cannot come back to the session: {why}"),
            host: format!(
                "refused {caller} ({}) coming back to session {:016x}: {why}",
                grant.name, resume.session
            ),
        };
        let fd = fd.ok_or_else(|| {
            refused(
                CudaStatus::ErrorOperatingSystem,
                "out of descriptors".into(),
            )
        })?;
        let h = resume::Handoff {
            vm: grant.name.clone(),
            session: resume.session,
            secret: resume.secret,
            last_reply: resume.last_reply,
            request_id: header.request_id.get(),
            transport,
            grant: pages,
            peer_pid: caller_pid,
        };
        match resume::hand_over(&state_dir, &h, fd) {
            Ok(()) => {
                info!(%caller, vm = %grant.name, session = format!("{:016x}", resume.session),
                    relayed, "a guest came back; its connection went to its session's worker");
                // Jailed only now: the handoff itself needs the sessions folder and a
                // socket. A relay that cannot be jailed is not run (the guest is told).
                if relayed {
                    jail::confine_admitted(policy, &grant.name, &state_dir, None, None)
                        .map_err(|e| e.refusal(&caller, &grant.name))?;
                }
                Ok(())
            }
            Err(e @ resume::HandoffError::Refused) => {
                Err(refused(CudaStatus::ErrorNotPermitted, e.to_string()))
            }
            Err(e) => Err(refused(CudaStatus::ErrorDevicesUnavailable, e.to_string())),
        }
    };
    let session_streams =
        move |arrival: resume::Arrival| streams(arrival.conn, arrival.transport, poll_for);
    // A guest on a plain socket comes back on that socket itself.
    let returning = || worker::Returning {
        hand_over: Box::new(|header: &FrameHeader, resume: &SessionResume, pages| {
            let fd = handoff_fd.as_ref().map(|fd| fd.as_fd());
            admit_and_hand_over(header, resume, pages, fd, transport, false)
        }),
        streams: Box::new(session_streams),
    };
    // A TLS guest's keys cannot leave this worker: the session's worker gets one end
    // of a socket pair, and this worker relays between it and the guest
    // ([`tls::relay`]) once the handoff is done.
    let relay_end = std::cell::RefCell::new(None);
    let returning_over_tls = || worker::Returning {
        hand_over: Box::new(|header: &FrameHeader, resume: &SessionResume, pages| {
            let pair = UnixStream::pair();
            let session_end = pair.as_ref().ok().map(|(s, _)| s.as_fd());
            admit_and_hand_over(
                header,
                resume,
                pages,
                session_end,
                TransportKind::Unix,
                true,
            )?;
            *relay_end.borrow_mut() = pair.ok().map(|(_, relay)| relay);
            Ok(())
        }),
        streams: Box::new(session_streams),
    };
    let result = match transport {
        TransportKind::Tcp if template.tls => {
            match accept_on_tls_listener(TcpStream::from(conn), &policy) {
                Ok(Accepted::Tls(stream)) => {
                    over_tls.set(true);
                    // The socket under the TLS stream: shut down should the guest come
                    // back on another connection while this one still looks alive.
                    let link = worker::Link {
                        socket: handoff_fd.as_ref().and_then(|fd| fd.try_clone().ok()),
                        fds: None,
                    };
                    let served = worker::serve(
                        stream.clone(),
                        stream.clone(),
                        link,
                        open,
                        Some(returning_over_tls()),
                        console.as_mut(),
                    );
                    if let (Ok(Ended::HandedOff), Some(end)) = (&served, relay_end.take()) {
                        relay_tls(stream, end);
                    }
                    served.map_err(Into::into)
                }
                Ok(Accepted::Plain(stream)) => {
                    serve_tcp(stream, open, Some(returning()), console.as_mut())
                }
                Ok(Accepted::PlainRefused(stream)) => {
                    serve_tcp(stream, refuse_plain(&caller), None, None)
                }
                Ok(Accepted::Gone) => Ok(Ended::Served),
                Err(e) => Err(e),
            }
        }
        TransportKind::Unix | TransportKind::Vsock | TransportKind::Tcp => {
            // The connection stays open until the session is gone (its copies over,
            // its guest pages let go): whoever made it for a VM guest (the guest's RAM
            // broker) frees the pages only after it closes.
            let _open_until_served = conn.try_clone();
            match streams(conn, transport, poll_for) {
                Ok(worker::Streams {
                    reader,
                    writer,
                    link,
                }) => worker::serve(
                    reader,
                    writer,
                    link,
                    open,
                    Some(returning()),
                    console.as_mut(),
                )
                .map_err(Into::into),
                Err(e) => Err(FrameError::from(e).into()),
            }
        }
    };
    // Until its guest is admitted, a connection's lines go at the daemon's pace.
    let admitted = admission::admitted();
    match result {
        Ok(Ended::Served) if admitted => info!(%caller, "guest disconnected"),
        Ok(Ended::HandedOff) => {}
        Ok(Ended::Served) => admission::log(format!("{caller} left before being admitted")),
        Ok(Ended::Refused(status)) => {
            if let Err(e) = stats::record_refusal(&state_dir, status) {
                warn!("cannot count the refusal: {e}");
            }
        }
        Err(e) if admitted => warn!(%caller, "connection ended: {e}"),
        Err(e) => admission::log(format!("{caller}: connection ended: {e}")),
    }
}

/// Why a worker's connection ended early.
#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error("TLS handshake failed: {0}")]
    Tls(#[from] TlsError),
    #[error("{0}")]
    Setup(String),
}

/// Accept a connection to a TLS listener: a TLS guest after the handshake; a plain one
/// served only where `[tcp] require_tls = false`, else told to use TLS
/// ([`refuse_plain`]).
fn accept_on_tls_listener(
    stream: TcpStream,
    policy: &std::cell::RefCell<Option<Result<Policy, ConfigError>>>,
) -> Result<Accepted, ConnectionError> {
    // The certificate as configured now: renewing it needs no restart.
    let unusable = |e: &ConfigError| ConnectionError::Setup(format!("no TLS certificate: {e}"));
    // Borrowed only for this: admission takes the configuration.
    let server = policy
        .borrow()
        .as_ref()
        .expect("not admitted yet")
        .as_ref()
        .map_err(unusable)?
        .tls_server()
        .map_err(|e| unusable(&e))?
        .ok_or_else(|| {
            ConnectionError::Setup(
                "this listener speaks TLS, but the configuration no longer has [tcp] tls_cert \
                 and tls_key (restart the daemon to drop TLS)"
                    .into(),
            )
        })?;
    Ok(tls::accept(stream, &server)?)
}

/// The admission of a plain-TCP guest where TLS is required: turned away, told in the
/// protocol it speaks, so the program says why it failed.
fn refuse_plain(caller: &Caller) -> impl FnOnce(&Hello) -> Result<Session, Refusal> + '_ {
    move |hello: &Hello| {
        let leaked = if hello.token.is_empty() {
            ""
        } else {
            "; its token crossed the network unencrypted"
        };
        Err(Refusal {
            status: CudaStatus::ErrorNotPermitted,
            guest: "this host takes TCP guests only over TLS: connect with \
                    VMCUDA_SERVER=tls:HOST:PORT"
                .into(),
            host: format!(
                "refused {caller}: plain TCP to a TLS listener ([tcp] require_tls){leaked}"
            ),
        })
    }
}

/// Relay a TLS guest handed over to its session, to the relay's end (logged, as the
/// worker's exit says nothing).
fn relay_tls(stream: vmcuda_wire::tls::Shared<vmcuda_wire::tls::ServerStream>, end: UnixStream) {
    let Some(stream) = stream.into_inner() else {
        warn!("the returning TLS connection is still in use; it cannot be relayed");
        return;
    };
    match tls::relay(stream, end) {
        Ok(()) => info!("the relayed TLS connection ended"),
        Err(e) => warn!("the relayed TLS connection ended: {e}"),
    }
}

/// Serve a guest on plain TCP.
fn serve_tcp<'a>(
    stream: TcpStream,
    open: impl FnOnce(&Hello) -> Result<Session, Refusal>,
    returning: Option<worker::Returning<'a>>,
    console: Option<&mut ConsoleCapture>,
) -> Result<Ended, ConnectionError> {
    let worker::Streams {
        reader,
        writer,
        link,
    } = streams(
        OwnedFd::from(stream),
        TransportKind::Tcp,
        worker::request_poll_window(),
    )
    .map_err(FrameError::from)?;
    Ok(worker::serve(
        reader, writer, link, open, returning, console,
    )?)
}

/// The streams of a socket that passes no descriptors.
fn plain<S: std::io::Read + std::io::Write + AsFd + 'static>(
    reader: S,
    writer: S,
    socket: OwnedFd,
    poll_for: std::time::Duration,
) -> std::io::Result<worker::Streams> {
    let reader = PollingReader::new(reader, Some(writer.as_fd()), poll_for);
    Ok(worker::Streams {
        reader: Box::new(reader),
        writer: Box::new(writer),
        link: worker::Link {
            socket: Some(socket),
            fds: None,
        },
    })
}

/// A connection's streams, as its transport makes them: a Unix guest may pass memory
/// descriptors along with frames; every reader polls a little before it sleeps.
fn streams(
    conn: OwnedFd,
    transport: TransportKind,
    poll_for: std::time::Duration,
) -> std::io::Result<worker::Streams> {
    let socket = conn.try_clone()?;
    match transport {
        TransportKind::Unix => {
            let stream = UnixStream::from(conn);
            let (reader, fds) = FdReader::new(stream.try_clone()?);
            let reader = PollingReader::new(reader, Some(stream.as_fd()), poll_for);
            Ok(worker::Streams {
                reader: Box::new(reader),
                writer: Box::new(stream),
                link: worker::Link {
                    socket: Some(socket),
                    fds: Some(fds),
                },
            })
        }
        // TCP guests ring no doorbells: their socket is for the resume point only.
        TransportKind::Vsock => {
            let stream = vsock::VsockStream::from(conn);
            plain(stream.try_clone()?, stream, socket, poll_for)
        }
        TransportKind::Tcp => {
            let stream = TcpStream::from(conn);
            plain(stream.try_clone()?, stream, socket, poll_for)
        }
    }
}

/// The executor a grant gets: only its GPUs, in its order.
fn make_executor(
    template: &WorkerTemplate,
    grant: &Grant,
) -> Result<Box<dyn Executor>, (CudaStatus, String)> {
    let host_memory = || {
        HostMemoryExecutor::new(template.host_memory_bytes, template.launch_log.clone())
            .map_err(|e| {
                (
                    CudaStatus::ErrorUnknown,
                    format!("cannot open launch log: {e}"),
                )
            })?
            .with_devices(template.host_memory_devices, &grant.gpus)
            .map_err(|why| (CudaStatus::ErrorNoDevice, why))
    };
    match template.executor {
        ExecutorChoice::HostMemory => Ok(Box::new(host_memory()?)),
        choice => match CudaExecutor::new(&grant.gpus) {
            Ok(e) => Ok(Box::new(e)),
            Err(status) if choice == ExecutorChoice::Auto => {
                warn!("no usable GPU ({status}); using the host-memory test executor");
                Ok(Box::new(host_memory()?))
            }
            Err(status) => Err((status, format!("CUDA executor unavailable: {status}"))),
        },
    }
}
