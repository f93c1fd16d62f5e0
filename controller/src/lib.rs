//! netendpoint-controller: the cluster-side half of netendpoint.
//!
//! It watches (kube-runtime reflectors, no polling) the leases and holds, the
//! Nodes, the Pods (metadata), the StatefulSets, the claims, the needs of
//! waiting ADDs and the ConfigMap the network config is rendered from, and
//! on every change:
//! - publishes pool health as Prometheus metrics ([`metrics`]), on every replica;
//! - on the leader only (a `coordination.k8s.io` Lease): writes the shard
//!   and pool summaries ADDs read ([`summary`]) and the pools the admission
//!   policy reads ([`pools_param`]), and takes the actions [`decide`]
//!   chooses ([`act`]): reclaim of vanished nodes' leases, deletion of
//!   leases whose Pod is gone, forced release for an ADD that waits,
//!   incarnations of sticky claims, the end of holds, and the claims of
//!   StatefulSet Pods.
//!
//! Every write names one object by name and UID; a forced release also
//! tests its resourceVersion, so a successor under the same name is never
//! touched.
//!
//! This root only wires the parts: the flags (`options`), the state every
//! step is handed ([`context::Context`]), the watches (`watches`), and the
//! passes over them (`passes`), which run [`decide`] and [`act`].

pub mod act;
pub mod claims;
pub mod context;
pub mod decide;
pub mod error;
#[cfg(test)]
mod fixtures;
mod http;
pub mod metrics;
pub mod migration;
pub mod needs;
mod options;
mod passes;
pub mod pool_status;
pub mod pools_param;
pub mod summary;
mod watches;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use netendpoint_lease::ServerClock;
use tokio::sync::Notify;
use tracing::info;

use crate::context::Context;
pub use crate::error::{Error, Result};
pub use crate::options::Options;
use crate::passes::Passes;
use crate::watches::Stores;

/// Runs the controller until the process ends.
pub async fn run(opts: Options) -> Result<()> {
    let settings = opts.settings()?;
    let pools_param = opts.pools_param()?;
    let pool_status = opts.pool_status_interval()?.map(pool_status::PoolStatusWriter::new);
    let clock = ServerClock::default();
    let client = context::client(opts.kubeconfig.as_deref(), clock.clone()).await?;
    let ctl = Arc::new(Context::new(client.clone(), clock, &opts.identity));
    let (addr, serve) = http::bind(opts.listen, ctl.clone(), http::Routes::All).await?;
    info!(%addr, identity = %opts.identity, "serving /metrics, /healthz, /readyz");
    tokio::spawn(serve);
    if let Some(probe) = opts.probe_listen()? {
        let (addr, serve) = http::bind(probe, ctl.clone(), http::Routes::Probes).await?;
        info!(%addr, "serving /healthz, /readyz");
        tokio::spawn(serve);
    }

    let notify = Arc::new(Notify::new());
    let queued = Arc::new(Notify::new());
    let stores = Stores::start(&client, &opts, &settings, &notify, &queued)?;
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &opts.lease_name)
        .with_namespace(&opts.lease_namespace)
        .with_identity(&opts.identity)
        .with_duration(opts.lease_seconds)
        .with_grace(opts.lease_grace_seconds)
        .build()
        .await
        .map_err(Error::Lease)?;
    let (mut leader, lease_task) = manager.watch().await;
    // On SIGTERM (a rollout, a drain), give the leader Lease back at once,
    // so that a standby leads within a pass instead of a Lease duration.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|source| Error::Signal { source })?;

    stores.ready().await;
    ctl.ready.store(true, Ordering::Relaxed);
    info!("initial lists done");
    let mut passes = Passes::new(ctl, stores, settings, pools_param, pool_status);
    let mut was_leader = false;
    loop {
        let is_leader = *leader.borrow_and_update();
        if is_leader != was_leader {
            info!(leader = is_leader, identity = %opts.identity, "leadership changed");
            passes.new_term();
            was_leader = is_leader;
        }
        let started = tokio::time::Instant::now();
        let decision = passes.pass(is_leader).await;
        let pause = passes::pause_after(decision.look_again_in);
        let mut coalesce = true;
        tokio::select! {
            _ = notify.notified() => {}
            // A queue entry came, changed or went: a waiting ADD is served
            // at once, not after a burst of other events had time to land.
            _ = queued.notified() => coalesce = false,
            _ = leader.changed() => {}
            _ = tokio::time::sleep(pause) => {}
            _ = terminate.recv() => {
                info!(identity = %opts.identity, "SIGTERM: releasing the leader Lease and stopping");
                // Closing the channel makes the Lease's task release the Lease and end.
                drop(leader);
                let _ = tokio::time::timeout(Duration::from_secs(5), lease_task).await;
                return Ok(());
            }
        }
        if coalesce {
            let wait = passes::coalesce_before_pass(started.elapsed()).max(passes.spacing_left());
            if !wait.is_zero() {
                // A queue entry or an urgent release cuts the wait short.
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = queued.notified() => {}
                }
            }
        }
    }
}
