//! The `DevicePlugin` service the kubelet calls on our socket.

use std::sync::Arc;

use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::api::device_plugin_server::DevicePlugin;
use crate::api::*;
use crate::grants::{AllocError, Allocator};

pub struct Plugin {
    pub allocator: Arc<Allocator>,
    /// The devices and their health, as the health checks last saw them.
    pub devices: watch::Receiver<Vec<Device>>,
    /// Set when this server is replaced (the kubelet restarted): open ListAndWatch
    /// streams end, so that the server can stop.
    pub stop: watch::Receiver<bool>,
}

fn status(e: AllocError) -> Status {
    match e {
        AllocError::UnknownDevice(_) | AllocError::Empty => Status::invalid_argument(e.to_string()),
        AllocError::Admin(crate::admin::AdminError::Refused { .. }) => {
            Status::failed_precondition(e.to_string())
        }
        AllocError::Admin(_) => Status::unavailable(e.to_string()),
        AllocError::Random(_) => Status::internal(e.to_string()),
    }
}

#[tonic::async_trait]
impl DevicePlugin for Plugin {
    async fn get_device_plugin_options(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<DevicePluginOptions>, Status> {
        Ok(Response::new(options()))
    }

    type ListAndWatchStream = ReceiverStream<Result<ListAndWatchResponse, Status>>;

    async fn list_and_watch(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListAndWatchStream>, Status> {
        let (tx, rx) = mpsc::channel(4);
        let mut devices = self.devices.clone();
        let mut stop = self.stop.clone();
        tokio::spawn(async move {
            loop {
                let list = devices.borrow_and_update().clone();
                if tx
                    .send(Ok(ListAndWatchResponse { devices: list }))
                    .await
                    .is_err()
                {
                    return; // the kubelet hung up
                }
                tokio::select! {
                    changed = devices.changed() => if changed.is_err() { return },
                    _ = stop.wait_for(|s| *s) => return,
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn get_preferred_allocation(
        &self,
        request: Request<PreferredAllocationRequest>,
    ) -> Result<Response<PreferredAllocationResponse>, Status> {
        let inventory = self.allocator.inventory();
        let container_responses = request
            .into_inner()
            .container_requests
            .iter()
            .map(|c| ContainerPreferredAllocationResponse {
                device_ids: inventory.preferred(
                    &c.available_device_ids,
                    &c.must_include_device_ids,
                    usize::try_from(c.allocation_size).unwrap_or(0),
                ),
            })
            .collect();
        Ok(Response::new(PreferredAllocationResponse {
            container_responses,
        }))
    }

    async fn allocate(
        &self,
        request: Request<AllocateRequest>,
    ) -> Result<Response<AllocateResponse>, Status> {
        let allocator = self.allocator.clone();
        let requests = request.into_inner().container_requests;
        // The admin API is blocking, one call at a time per grant.
        let answer = tokio::task::spawn_blocking(move || {
            requests
                .iter()
                .map(|c| allocator.allocate(&c.devices_ids))
                .collect::<Result<Vec<_>, _>>()
        })
        .await
        .map_err(|e| Status::internal(e.to_string()))?
        .map_err(status)?;
        Ok(Response::new(AllocateResponse {
            container_responses: answer,
        }))
    }

    async fn pre_start_container(
        &self,
        _: Request<PreStartContainerRequest>,
    ) -> Result<Response<PreStartContainerResponse>, Status> {
        Ok(Response::new(PreStartContainerResponse {}))
    }
}

/// What the plugin tells the kubelet as it registers and when asked.
pub fn options() -> DevicePluginOptions {
    DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    }
}
