//! The device plugin against a test kubelet of our own (the kubelet's v1beta1 gRPC
//! API on a temporary `kubelet.sock`) and a host-memory `vmcuda-host` daemon: it
//! registers, lists its shares, grants a container its shares with a token that a
//! guest connects with under the shares' quota, revokes a share's old grant when the
//! share is allocated again (also after the plugin restarts), registers again when
//! the kubelet restarts, and marks a host's shares unhealthy when its daemon is gone.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnixListenerStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status};
use vmcuda_k8s_device_plugin::api::device_plugin_client::DevicePluginClient;
use vmcuda_k8s_device_plugin::api::registration_server::{Registration, RegistrationServer};
use vmcuda_k8s_device_plugin::api::*;
use vmcuda_k8s_device_plugin::kubelet::unix_channel;
use vmcuda_tests::raw_guest::Guest;
use vmcuda_tests::{free_tcp_addr, Daemon};
use vmcuda_wire::CudaStatus;

const MIB: u64 = 1 << 20;
const RESOURCE: &str = "vmcuda.io/gpu-share";

/// The kubelet's Registration service: each request is passed on to the test.
struct TestKubelet {
    registered: mpsc::UnboundedSender<RegisterRequest>,
}

#[tonic::async_trait]
impl Registration for TestKubelet {
    async fn register(&self, r: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let r = r.into_inner();
        if r.version != VERSION {
            return Err(Status::invalid_argument("unsupported version"));
        }
        let _ = self.registered.send(r);
        Ok(Response::new(Empty {}))
    }
}

/// A kubelet on `dir/kubelet.sock`, until the handle is aborted.
fn start_kubelet(
    dir: &Path,
    tx: mpsc::UnboundedSender<RegisterRequest>,
) -> tokio::task::JoinHandle<()> {
    let path = dir.join("kubelet.sock");
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).expect("bind kubelet.sock");
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(RegistrationServer::new(TestKubelet { registered: tx }))
            .serve_with_incoming(UnixListenerStream::new(listener))
            .await;
    })
}

struct PluginProcess(Child);

impl Drop for PluginProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_plugin(config: &Path, log: &Path) -> PluginProcess {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    PluginProcess(
        Command::new(env!("CARGO_BIN_EXE_vmcuda-k8s-device-plugin"))
            .args([
                "--config".as_ref(),
                config.as_os_str(),
                "--node".as_ref(),
                "node-a".as_ref(),
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the plugin"),
    )
}

async fn next_register(
    rx: &mut mpsc::UnboundedReceiver<RegisterRequest>,
    log: &Path,
) -> RegisterRequest {
    match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
        Ok(Some(r)) => r,
        _ => panic!(
            "the plugin did not register: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        ),
    }
}

async fn plugin_client(dir: &Path) -> DevicePluginClient<tonic::transport::Channel> {
    DevicePluginClient::new(
        unix_channel(&dir.join("vmcuda.sock"))
            .await
            .expect("plugin socket"),
    )
}

async fn allocate(
    client: &mut DevicePluginClient<tonic::transport::Channel>,
    ids: &[&str],
) -> ContainerAllocateResponse {
    let r = client
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: ids.iter().map(|s| s.to_string()).collect(),
            }],
        })
        .await
        .expect("allocate")
        .into_inner();
    assert_eq!(r.container_responses.len(), 1);
    r.container_responses.into_iter().next().unwrap()
}

/// Connect with the container's variables, in a thread (the guest is blocking).
async fn guest(r: &ContainerAllocateResponse) -> Result<Guest, CudaStatus> {
    let (server, token) = (
        r.envs["VMCUDA_SERVER"].clone(),
        r.envs["VMCUDA_TOKEN"].clone(),
    );
    tokio::task::spawn_blocking(move || Guest::connect(&server, &token))
        .await
        .unwrap()
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vmcuda-k8s-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_plugin_grants_shares_to_containers_through_the_test_kubelet() {
    let dir = temp_dir();
    let tcp = free_tcp_addr();
    let daemon = Daemon::start_with_config(
        "k8s",
        Some(""),
        &[
            "--executor",
            "host-memory",
            "--host-memory-bytes",
            "1073741824",
            "--tcp",
            &tcp,
        ],
    );
    let admin = daemon.admin_socket();
    let server = format!("tcp:{tcp}");
    let config = dir.join("plugin.toml");
    std::fs::write(
        &config,
        format!(
            "resource_name = \"{RESOURCE}\"\ndevice_plugin_dir = \"{}\"\nhealth_interval_s = 1\n\
             [env]\nVMCUDA_VERBOSE = \"1\"\n\
             [[host]]\nname = \"gpu0\"\nserver = \"{server}\"\nadmin_socket = \"{}\"\n\
             shares = 4\nshare_memory = \"256MiB\"\n",
            dir.display(),
            admin.display()
        ),
    )
    .unwrap();
    let log = dir.join("plugin.log");

    // Registration.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let kubelet = start_kubelet(&dir, tx.clone());
    let mut plugin = start_plugin(&config, &log);
    let reg = next_register(&mut rx, &log).await;
    assert_eq!(reg.resource_name, RESOURCE);
    assert_eq!(reg.endpoint, "vmcuda.sock");
    assert!(reg.options.unwrap().get_preferred_allocation_available);

    // The shares, healthy.
    let mut client = plugin_client(&dir).await;
    let mut watch = client.list_and_watch(Empty {}).await.unwrap().into_inner();
    let first = watch.next().await.unwrap().unwrap();
    let ids: Vec<&str> = first.devices.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(ids, ["gpu0-0", "gpu0-1", "gpu0-2", "gpu0-3"]);
    assert!(
        first.devices.iter().all(|d| d.health == HEALTHY),
        "{first:?}"
    );

    let preferred = client
        .get_preferred_allocation(PreferredAllocationRequest {
            container_requests: vec![ContainerPreferredAllocationRequest {
                available_device_ids: ids.iter().map(|s| s.to_string()).collect(),
                must_include_device_ids: vec!["gpu0-3".into()],
                allocation_size: 2,
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        preferred.container_responses[0].device_ids,
        ["gpu0-3", "gpu0-0"]
    );

    // Two shares: 512 MiB, with a token of the container's own.
    let a = allocate(&mut client, &["gpu0-0", "gpu0-1"]).await;
    assert_eq!(a.envs["VMCUDA_SERVER"], server);
    assert_eq!(a.envs["VMCUDA_TOKEN"].len(), 64);
    assert_eq!(a.envs["VMCUDA_VERBOSE"], "1");
    let cdi: Vec<&str> = a.cdi_devices.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(cdi, ["vmcuda.dev/gpu=all"]);
    let mut ga = guest(&a).await.expect("the container's token is admitted");
    assert_eq!(ga.alloc(400 * MIB), Some(CudaStatus::Success));
    assert_eq!(
        ga.alloc(200 * MIB),
        Some(CudaStatus::ErrorMemoryAllocation),
        "over the two shares' 512 MiB"
    );

    // gpu0-1 allocated again: the first container is gone by the kubelet's account,
    // and so is its grant, with its worker.
    let b = allocate(&mut client, &["gpu0-1", "gpu0-2"]).await;
    assert_ne!(a.envs["VMCUDA_TOKEN"], b.envs["VMCUDA_TOKEN"]);
    assert_eq!(ga.alloc(MIB), None, "the old grant's worker is ended");
    assert_eq!(guest(&a).await.err(), Some(CudaStatus::ErrorNotPermitted));
    let mut gb = guest(&b).await.expect("the new token is admitted");
    assert_eq!(gb.alloc(500 * MIB), Some(CudaStatus::Success));

    // A share that is not ours.
    let unknown = client
        .allocate(AllocateRequest {
            container_requests: vec![ContainerAllocateRequest {
                devices_ids: vec!["gpu9-0".into()],
            }],
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::InvalidArgument);

    // The kubelet restarts: it removes the plugins' sockets and makes a new
    // kubelet.sock; the plugin registers again.
    kubelet.abort();
    let _ = std::fs::remove_file(dir.join("vmcuda.sock"));
    let _kubelet = start_kubelet(&dir, tx.clone());
    let again = next_register(&mut rx, &log).await;
    assert_eq!(again.resource_name, RESOURCE);
    let mut client = plugin_client(&dir).await;
    let listed = client
        .list_and_watch(Empty {})
        .await
        .unwrap()
        .into_inner()
        .next()
        .await;
    assert_eq!(listed.unwrap().unwrap().devices.len(), 4);

    // The plugin restarts: it learns the grants from the host, so gpu0-2 allocated
    // again still revokes the second container's grant.
    drop(plugin);
    plugin = start_plugin(&config, &log);
    next_register(&mut rx, &log).await;
    let mut client = plugin_client(&dir).await;
    let c = allocate(&mut client, &["gpu0-2"]).await;
    assert_eq!(
        gb.alloc(MIB),
        None,
        "the grant from before the restart is revoked"
    );
    let mut gc = guest(&c).await.expect("admitted");
    assert_eq!(gc.alloc(200 * MIB), Some(CudaStatus::Success));
    assert_eq!(gc.alloc(100 * MIB), Some(CudaStatus::ErrorMemoryAllocation));

    // The host's daemon stops: its shares turn unhealthy.
    let mut watch = client.list_and_watch(Empty {}).await.unwrap().into_inner();
    drop(gc);
    drop(daemon);
    let unhealthy = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(Ok(list)) = watch.next().await {
            if list.devices.iter().all(|d| d.health == UNHEALTHY) {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        unhealthy,
        Ok(true),
        "{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    drop(plugin);
    let _ = std::fs::remove_dir_all(&dir);
}
