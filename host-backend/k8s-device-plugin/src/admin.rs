//! One vmcuda host's admin API as the plugin uses it: grant a container's shares with
//! its token, revoke them, and list the grants (blocking calls: run them off the
//! async threads).

use std::path::PathBuf;

use thiserror::Error;
use vmcuda_host::admin::{call, GrantSpec, Request, Response};
use vmcuda_host::policy::{Limits, Secret};

#[derive(Debug, Error)]
pub enum AdminError {
    /// The socket did not answer (the daemon is down, or the path is wrong).
    #[error("host {host}: {why}")]
    Unreachable { host: String, why: String },
    /// The daemon answered no, and why (a grant over the GPU's memory, ...).
    #[error("host {host} refused: {why}")]
    Refused { host: String, why: String },
}

#[derive(Clone, Debug)]
pub struct HostAdmin {
    pub host: String,
    pub socket: PathBuf,
}

impl HostAdmin {
    fn ask(&self, request: &Request) -> Result<Response, AdminError> {
        let answer = call(&self.socket, request).map_err(|why| AdminError::Unreachable {
            host: self.host.clone(),
            why,
        })?;
        if !answer.ok {
            return Err(AdminError::Refused {
                host: self.host.clone(),
                why: answer.message,
            });
        }
        Ok(answer)
    }

    /// A persistent grant `name` for guests presenting `token`: a daemon restart keeps
    /// it, as it keeps the pods' connections.
    pub fn grant(&self, name: &str, token: &str, limits: Limits) -> Result<(), AdminError> {
        let spec = GrantSpec {
            token: Some(Secret::new(token.to_string())),
            limits,
            ..GrantSpec::default()
        };
        self.ask(&Request::Grant {
            name: name.into(),
            spec,
            persist: true,
        })
        .map(drop)
    }

    /// Revoke `name`, ending its workers. One that is gone already is not an error.
    pub fn revoke(&self, name: &str) -> Result<(), AdminError> {
        match self.ask(&Request::Revoke { name: name.into() }) {
            Ok(_) | Err(AdminError::Refused { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The names of the host's grants.
    pub fn grant_names(&self) -> Result<Vec<String>, AdminError> {
        Ok(self
            .ask(&Request::List)?
            .grants
            .into_iter()
            .map(|g| g.name)
            .collect())
    }
}
