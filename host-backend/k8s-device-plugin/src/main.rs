//! `vmcuda-k8s-device-plugin`: run on each node (a DaemonSet, images/kubernetes/),
//! with the configuration that names the vmcuda hosts whose shares it advertises.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;
use vmcuda_k8s_device_plugin::config::Config;
use vmcuda_k8s_device_plugin::grants::Allocator;
use vmcuda_k8s_device_plugin::kubelet::Kubelet;

#[derive(Parser)]
#[command(
    version,
    about = "vmcuda GPU shares as a Kubernetes device plugin resource"
)]
struct Args {
    /// The plugin's configuration (TOML).
    #[arg(long, default_value = "/etc/vmcuda/k8s-device-plugin.toml")]
    config: PathBuf,
    /// This node's name, in the names of its grants (default: the configuration's
    /// `node`, else $NODE_NAME, else the host name).
    #[arg(long)]
    node: Option<String>,
}

fn node_name(args: &Args, config: &Config) -> Option<String> {
    args.node
        .clone()
        .or_else(|| config.node.clone())
        .or_else(|| std::env::var("NODE_NAME").ok().filter(|n| !n.is_empty()))
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
        })
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let config = match Config::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("vmcuda-k8s-device-plugin: {e}");
            return ExitCode::FAILURE;
        }
    };
    let Some(node) = node_name(&args, &config) else {
        eprintln!("vmcuda-k8s-device-plugin: no node name: give --node or set NODE_NAME");
        return ExitCode::FAILURE;
    };
    let kubelet = Kubelet {
        dir: config.device_plugin_dir.clone(),
        socket_name: config.socket_name.clone(),
        resource_name: config.resource_name.clone(),
        health_interval: Duration::from_secs(config.health_interval_s.max(1)),
    };
    let allocator = Arc::new(Allocator::new(config, node));
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("vmcuda-k8s-device-plugin: {e}");
            return ExitCode::FAILURE;
        }
    };
    let served = runtime.block_on(async move {
        let (stop, shutdown) = watch::channel(false);
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            let _ = stop.send(true);
        });
        kubelet
            .run(allocator, shutdown)
            .await
            .map_err(std::io::Error::other)
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vmcuda-k8s-device-plugin: {e}");
            ExitCode::FAILURE
        }
    }
}
