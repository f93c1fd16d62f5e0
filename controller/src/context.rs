//! What every step of the controller is handed: the API client, the API
//! server's clock, the Event recorder, the metrics and the readiness flag
//! ([`Context`]), so that no module reaches back into the crate root for
//! shared state.

use std::path::Path;
use std::sync::atomic::AtomicBool;

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use netendpoint_crd::REPORTER_CONTROLLER;
use netendpoint_lease::ServerClock;

use crate::error::{Error, Result};
use crate::metrics::Metrics;

/// Shared state of a running controller, one per process.
pub struct Context {
    /// The API client; its responses feed [`Context::clock`].
    pub client: Client,
    /// The API server's clock, read from the `Date` of its responses.
    pub clock: ServerClock,
    /// Records Events as [`REPORTER_CONTROLLER`], instance `identity`.
    pub recorder: Recorder,
    /// The Prometheus metrics.
    pub metrics: Metrics,
    /// True once the initial lists are done (`/readyz`).
    pub ready: AtomicBool,
}

impl Context {
    /// The context of replica `identity` over `client`, whose responses
    /// feed `clock`; not ready yet.
    pub fn new(client: Client, clock: ServerClock, identity: &str) -> Self {
        let reporter =
            Reporter { controller: REPORTER_CONTROLLER.into(), instance: Some(identity.chars().take(128).collect()) };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            clock,
            metrics: Metrics::new(),
            ready: false.into(),
        }
    }
}

/// A client from `kubeconfig` (in-cluster configuration when `None`) whose
/// responses feed `clock` with the API server's `Date`.
pub async fn client(kubeconfig: Option<&Path>, clock: ServerClock) -> Result<Client> {
    let cfg = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(Error::KubeconfigFile)?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(Error::KubeconfigFile)?
        }
        None => kube::Config::infer().await.map_err(Error::Kubeconfig)?,
    };
    let layer = netendpoint_lease::clock::date_layer(clock);
    // kube's stack with TCP_NODELAY: a promise or a summary written right
    // after a watch event is not held back by Nagle's algorithm.
    Ok(netendpoint_lease::connect::client_builder(&cfg).map_err(Error::Client)?.with_layer(&layer).build())
}
