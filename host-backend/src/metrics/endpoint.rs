//! The Prometheus endpoint: a small HTTP/1.1 responder on a thread of its own, every
//! client served from one poll loop with deadlines.

use super::*;

/// What the endpoint reports on.
#[derive(Clone, Debug)]
pub struct Source {
    pub state_dir: PathBuf,
    /// VMs listed even before their first connection (the configured ones, "local").
    pub known_vms: Vec<KnownVm>,
    /// The configuration file, when the VMs granted at run time (`crate::admin`) are
    /// listed too: it and the grants are read at each scrape.
    pub grants_over: Option<Option<PathBuf>>,
}

impl Source {
    /// A scrape: dead workers pruned, then everything rendered.
    pub fn scrape(&self) -> String {
        let census = stats::census(&self.state_dir, true);
        if let Err(e) = &census {
            warn!("metrics without per-VM figures: {e}");
        }
        let mut known = self.known_vms.clone();
        if let Some(config) = &self.grants_over {
            // The VMs granted now, with their host_memory (a grant over a configured
            // VM stands in for it).
            if let Ok(p) =
                crate::policy::Policy::load_with_grants(config.as_deref(), Some(&self.state_dir))
            {
                for name in &p.granted {
                    known.retain(|k| &k.name != name);
                    known.push(KnownVm {
                        name: name.clone(),
                        host_memory: p.host_memory_of(name),
                    });
                }
            }
        }
        render(census.as_ref(), &known)
    }
}

/// Clients held at once, all together and from one source (an IPv4 address, an IPv6
/// /64). A client past either cap makes room by closing the oldest one of its source,
/// or the oldest of all: a new connection is always taken, so clients that connect
/// and say nothing cannot keep a scrape out, however many they are.
pub(super) const MAX_CLIENTS: usize = 256;
const MAX_CLIENTS_PER_SOURCE: usize = 64;
/// How long a client has to send its whole request head (a scraper sends it at once).
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a client has to take the answer.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// After the answer, what the client still sends is read for this long before the
/// connection closes (closing with unread bytes would reset it, and the client could
/// lose the answer).
const LINGER: Duration = Duration::from_secs(1);
const MAX_LINGER_BYTES: usize = 64 << 10;
/// A request head longer than this is not a scrape.
const MAX_REQUEST: usize = 8 << 10;

/// Serve `GET /metrics` on `addr` from a thread of its own: the listening address (the
/// port is the kernel's when `addr` asks for 0) and the thread. One thread serves
/// every client, none of them blocking it (see [`MAX_CLIENTS`]).
pub fn serve(addr: &str, source: Source) -> std::io::Result<(SocketAddr, thread::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr)?;
    let local = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let handle = thread::Builder::new()
        .name("metrics".into())
        .spawn(move || Endpoint::default().run(&listener, &source))?;
    Ok((local, handle))
}

/// Where one client's exchange stands.
enum Stage {
    /// Reading the request head.
    Request(Vec<u8>),
    /// Writing the answer, from this offset.
    Answer(Vec<u8>, usize),
    /// Answered and shut down for writing; taking what the client still sends.
    Linger(usize),
}

struct Client {
    stream: TcpStream,
    source: crate::source_log::Source,
    since: Instant,
    deadline: Instant,
    stage: Stage,
}

#[derive(Default)]
struct Endpoint {
    clients: Vec<Client>,
}

impl Endpoint {
    fn run(mut self, listener: &TcpListener, source: &Source) {
        use std::os::fd::AsFd;
        loop {
            let now = Instant::now();
            self.clients.retain(|c| c.deadline > now);
            let wait = self
                .clients
                .iter()
                .map(|c| c.deadline.saturating_duration_since(now))
                .min()
                .unwrap_or(Duration::from_secs(60));
            let mut fds = Vec::with_capacity(self.clients.len() + 1);
            fds.push(nix::poll::PollFd::new(
                listener.as_fd(),
                nix::poll::PollFlags::POLLIN,
            ));
            for c in &self.clients {
                let want = match c.stage {
                    Stage::Answer(..) => nix::poll::PollFlags::POLLOUT,
                    _ => nix::poll::PollFlags::POLLIN,
                };
                fds.push(nix::poll::PollFd::new(c.stream.as_fd(), want));
            }
            let timeout = nix::poll::PollTimeout::try_from(wait.as_millis() as u32 + 1)
                .unwrap_or(nix::poll::PollTimeout::MAX);
            if let Err(e) = nix::poll::poll(&mut fds, timeout) {
                if e != nix::errno::Errno::EINTR {
                    warn!("metrics: poll failed: {e}");
                    thread::sleep(Duration::from_millis(100));
                }
                continue;
            }
            let ready: Vec<bool> = fds
                .iter()
                .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
                .collect();
            drop(fds);
            // Clients first (indices as polled), then the new ones.
            let mut done = vec![false; self.clients.len()];
            for (i, c) in self.clients.iter_mut().enumerate() {
                if ready[i + 1] {
                    done[i] = !c.advance(source);
                }
            }
            let mut i = 0;
            self.clients.retain(|_| {
                i += 1;
                !done[i - 1]
            });
            if ready[0] {
                self.accept(listener);
            }
        }
    }

    /// Take every connection waiting, making room for each as [`MAX_CLIENTS`] says.
    fn accept(&mut self, listener: &TcpListener) {
        loop {
            let (stream, peer) = match listener.accept() {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    debug!("metrics accept failed: {e}");
                    return;
                }
            };
            if stream.set_nonblocking(true).is_err() {
                continue;
            }
            let source = crate::source_log::Source::of_ip(peer.ip());
            let theirs = self.clients.iter().filter(|c| c.source == source).count();
            let oldest = if theirs >= MAX_CLIENTS_PER_SOURCE {
                self.oldest(|c| c.source == source)
            } else if self.clients.len() >= MAX_CLIENTS {
                self.oldest(|_| true)
            } else {
                None
            };
            if let Some(at) = oldest {
                debug!("metrics: too many clients at once; closing the oldest");
                self.clients.swap_remove(at);
            }
            let now = Instant::now();
            self.clients.push(Client {
                stream,
                source,
                since: now,
                deadline: now + REQUEST_TIMEOUT,
                stage: Stage::Request(Vec::new()),
            });
        }
    }

    fn oldest(&self, of: impl Fn(&Client) -> bool) -> Option<usize> {
        (0..self.clients.len())
            .filter(|&i| of(&self.clients[i]))
            .min_by_key(|&i| self.clients[i].since)
    }
}

impl Client {
    /// Go on with the exchange as far as the socket allows; false once it is over.
    fn advance(&mut self, source: &Source) -> bool {
        let mut buf = [0u8; 4096];
        loop {
            match &mut self.stage {
                Stage::Request(head) => match self.stream.read(&mut buf) {
                    Ok(0) => return false,
                    Ok(n) => {
                        head.extend_from_slice(&buf[..n]);
                        let end = find(head, b"\r\n\r\n").or_else(|| find(head, b"\n\n"));
                        let request = match end {
                            Some(end) => {
                                head.truncate(end);
                                Some(String::from_utf8(std::mem::take(head)).ok())
                            }
                            None if head.len() > MAX_REQUEST => Some(None),
                            None => None,
                        };
                        if let Some(request) = request {
                            self.stage = Stage::Answer(answer(request.as_deref(), source), 0);
                            self.deadline = Instant::now() + ANSWER_TIMEOUT;
                        }
                    }
                    Err(e) => return e.kind() == std::io::ErrorKind::WouldBlock,
                },
                Stage::Answer(reply, at) => match self.stream.write(&reply[*at..]) {
                    Ok(n) => {
                        *at += n;
                        if *at == reply.len() {
                            if self.stream.shutdown(std::net::Shutdown::Write).is_err() {
                                return false;
                            }
                            self.stage = Stage::Linger(0);
                            self.deadline = Instant::now() + LINGER;
                        }
                    }
                    Err(e) => return e.kind() == std::io::ErrorKind::WouldBlock,
                },
                Stage::Linger(drained) => match self.stream.read(&mut buf) {
                    Ok(0) => return false,
                    Ok(n) => {
                        *drained += n;
                        if *drained > MAX_LINGER_BYTES {
                            return false;
                        }
                    }
                    Err(e) => return e.kind() == std::io::ErrorKind::WouldBlock,
                },
            }
        }
    }
}

/// The whole answer to a request head (`None`: too long or not text).
fn answer(head: Option<&str>, source: &Source) -> Vec<u8> {
    let Some(head) = head else {
        return respond("400 Bad Request", "", "bad request\n", false);
    };
    let mut parts = head.lines().next().unwrap_or("").split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return respond(
            "405 Method Not Allowed",
            "Allow: GET, HEAD\r\n",
            "only GET\n",
            false,
        );
    }
    if path != "/metrics" {
        return respond(
            "404 Not Found",
            "",
            "not found: the metrics are at /metrics\n",
            head_only,
        );
    }
    let body = source.scrape();
    respond(
        "200 OK",
        "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n",
        &body,
        head_only,
    )
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn respond(status: &str, headers: &str, body: &str, head_only: bool) -> Vec<u8> {
    let mut reply = format!(
        "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if !head_only {
        reply.push_str(body);
    }
    reply.into_bytes()
}
