//! vmcuda's Kubernetes device plugin (docs/kubernetes.md): it advertises shares of the
//! GPUs of vmcuda hosts to the kubelet as an extended resource, and grants each
//! container the shares it is allocated through the hosts' admin API, with a token of
//! its own that the container's programs present.

pub mod admin;
pub mod api;
pub mod config;
pub mod grants;
pub mod kubelet;
pub mod plugin;
pub mod shares;
