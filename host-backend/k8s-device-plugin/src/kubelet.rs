//! Serving the kubelet: our socket in its device-plugins directory, registration on
//! its `kubelet.sock`, health checks of the hosts, and starting over when the kubelet
//! restarts (it removes the plugins' sockets and makes a new `kubelet.sock`, and
//! forgets the plugins registered with the old one).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use thiserror::Error;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Endpoint, Server, Uri};
use tracing::{info, warn};

use crate::api::device_plugin_server::DevicePluginServer;
use crate::api::registration_client::RegistrationClient;
use crate::api::{Device, RegisterRequest, HEALTHY, UNHEALTHY, VERSION};
use crate::grants::Allocator;
use crate::plugin::{options, Plugin};

#[derive(Debug, Error)]
pub enum ServeError {
    #[error("cannot listen on {0}: {1}")]
    Listen(PathBuf, std::io::Error),
}

/// How often the sockets are looked at for a kubelet restart.
const WATCH: Duration = Duration::from_millis(500);

/// A gRPC channel to the Unix socket at `path`.
pub async fn unix_channel(
    path: &Path,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let path = path.to_path_buf();
    // The URI is not used: every connection is to the socket.
    Endpoint::from_static("http://[::]:0")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
        .await
}

/// The identity of a file: a new `kubelet.sock` is a new inode.
fn identity(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

pub struct Kubelet {
    pub dir: PathBuf,
    pub socket_name: String,
    pub resource_name: String,
    pub health_interval: Duration,
}

impl Kubelet {
    fn our_socket(&self) -> PathBuf {
        self.dir.join(&self.socket_name)
    }

    fn kubelet_socket(&self) -> PathBuf {
        self.dir.join("kubelet.sock")
    }

    /// Serve until `shutdown` says true; our socket is removed then.
    pub async fn run(
        &self,
        allocator: Arc<Allocator>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), ServeError> {
        // The kubelet's first ListAndWatch gets the devices as they are.
        let (devices_tx, devices) = watch::channel(health_round(&allocator).await);
        tokio::spawn(health(allocator.clone(), devices_tx, self.health_interval));
        loop {
            let (stop_tx, stop) = watch::channel(false);
            let path = self.our_socket();
            let _ = std::fs::remove_file(&path);
            let listener =
                UnixListener::bind(&path).map_err(|e| ServeError::Listen(path.clone(), e))?;
            let plugin = Plugin {
                allocator: allocator.clone(),
                devices: devices.clone(),
                stop: stop.clone(),
            };
            let mut stopped = stop.clone();
            let server = tokio::spawn(
                Server::builder()
                    .add_service(DevicePluginServer::new(plugin))
                    .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async move {
                        let _ = stopped.wait_for(|s| *s).await;
                    }),
            );
            info!(socket = %path.display(), "serving the device plugin");
            let kubelet = tokio::select! {
                k = self.register() => k,
                _ = shutdown.wait_for(|s| *s) => None,
            };
            let ours = identity(&path);
            if kubelet.is_some() {
                // Until the kubelet restarts: a new kubelet.sock, or our socket gone.
                loop {
                    tokio::select! {
                        () = tokio::time::sleep(WATCH) => {}
                        _ = shutdown.wait_for(|s| *s) => break,
                    }
                    if identity(&self.kubelet_socket()) != kubelet || identity(&path) != ours {
                        info!("the kubelet restarted: registering again");
                        break;
                    }
                }
            }
            let _ = stop_tx.send(true);
            if let Ok(Err(e)) = server.await {
                warn!("the device plugin server: {e}");
            }
            if *shutdown.borrow() {
                if identity(&path) == ours {
                    let _ = std::fs::remove_file(&path);
                }
                return Ok(());
            }
        }
    }

    /// Register with the kubelet, trying until it answers yes; the identity of the
    /// `kubelet.sock` that answered.
    async fn register(&self) -> Option<(u64, u64)> {
        let socket = self.kubelet_socket();
        let mut said = false;
        loop {
            let before = identity(&socket);
            match self.register_once(&socket).await {
                Ok(()) => {
                    info!(resource = %self.resource_name, "registered with the kubelet");
                    return before.or_else(|| identity(&socket));
                }
                Err(e) if !said => {
                    warn!(
                        "cannot register with the kubelet at {} yet: {e}",
                        socket.display()
                    );
                    said = true;
                }
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn register_once(&self, socket: &Path) -> Result<(), String> {
        let channel = unix_channel(socket).await.map_err(|e| e.to_string())?;
        RegistrationClient::new(channel)
            .register(RegisterRequest {
                version: VERSION.into(),
                endpoint: self.socket_name.clone(),
                resource_name: self.resource_name.clone(),
                options: Some(options()),
            })
            .await
            .map(drop)
            .map_err(|s| s.message().to_string())
    }
}

/// Every `interval`, whether each host's admin API answers: its shares are healthy
/// while it does.
async fn health(allocator: Arc<Allocator>, tx: watch::Sender<Vec<Device>>, interval: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        let devices = health_round(&allocator).await;
        tx.send_if_modified(|old| {
            let changed = *old != devices;
            if changed {
                *old = devices;
            }
            changed
        });
    }
}

/// The devices, healthy where their host's admin API answers now.
async fn health_round(allocator: &Arc<Allocator>) -> Vec<Device> {
    {
        let a = allocator.clone();
        let up = tokio::task::spawn_blocking(move || {
            (0..a.hosts()).map(|h| a.check(h)).collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        allocator
            .inventory()
            .all()
            .map(|(id, h)| Device {
                id: id.into(),
                health: if up.get(h).copied().unwrap_or(false) {
                    HEALTHY
                } else {
                    UNHEALTHY
                }
                .into(),
                topology: None,
            })
            .collect()
    }
}
