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

pub mod act;
pub mod claims;
pub mod context;
pub mod decide;
pub mod error;
mod http;
pub mod metrics;
pub mod needs;
mod options;
pub mod pool_status;
pub mod pools_param;
pub mod summary;
mod watches;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use netendpoint_lease::ServerClock;
use tokio::sync::Notify;
use tracing::info;

pub use crate::act::{
    REASON_INCARNATION_ACCEPTED, REASON_INCARNATION_CREATED, REASON_INCARNATION_REFUSED, REASON_NODE_VANISHED,
    REASON_POD_GONE,
};
use crate::context::Context;
pub use crate::context::REPORTING_CONTROLLER;
use crate::decide::{Decision, Memory, Settings};
pub use crate::error::{Error, Result};
pub use crate::options::Options;
use crate::watches::Stores;

/// The longest pause between two passes when nothing changes.
const IDLE_PASS: Duration = Duration::from_secs(30);

/// The pause before the next pass. Never a pass at once again: a timer due
/// now (a failed write, a grace that ends) waits for the summaries' own
/// interval, and nothing waits longer than an idle pass.
fn pause_after(look_again_in: Option<Duration>) -> Duration {
    look_again_in.map_or(IDLE_PASS, |d| d.clamp(summary::MIN_INTERVAL, IDLE_PASS))
}

/// Runs the controller until the process ends.
pub async fn run(opts: Options) -> Result<()> {
    let settings = opts.settings()?;
    let pools_param = opts.pools_param()?;
    let mut pool_status = opts.pool_status_interval()?.map(pool_status::PoolStatusWriter::new);
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
    let stores = Stores::start(&client, &opts, &settings, &notify)?;
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
    let mut term = Term::default();
    let mut was_leader = false;
    loop {
        let is_leader = *leader.borrow_and_update();
        if is_leader != was_leader {
            info!(leader = is_leader, identity = %opts.identity, "leadership changed");
            // A new term starts every grace again, and writes every summary again.
            term = Term::default();
            if let Some(w) = pool_status.as_mut() {
                w.reset();
            }
            was_leader = is_leader;
        }
        ctl.metrics.set_leader(is_leader);
        let decision =
            pass(&ctl, &stores, &settings, &mut term, is_leader, pool_status.as_mut(), pools_param.as_ref()).await;
        let pause = pause_after(decision.look_again_in);
        tokio::select! {
            _ = notify.notified() => {}
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
        // Let a burst of watch events land before the next pass.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// What a leadership term remembers.
#[derive(Default)]
struct Term {
    memory: Memory,
    needs: needs::Checked,
    summaries: summary::SummaryWriter,
    pools: pools_param::PoolsParamWriter,
    seen_needs: HashSet<String>,
}

/// One pass: metrics on every replica; summaries, the pools parameter and
/// the actions on the leader.
async fn pass(
    ctl: &Context,
    stores: &Stores,
    settings: &Settings,
    term: &mut Term,
    is_leader: bool,
    pool_status: Option<&mut pool_status::PoolStatusWriter>,
    pools_param: Option<&(String, String)>,
) -> Decision {
    let Some(now) = ctl.clock.now() else { return Decision::default() };
    let networks = stores.networks();
    let needs = if is_leader { term.needs.check(&ctl.client, &stores.needs(), now).await } else { Vec::new() };
    let world = stores.world(needs, &networks);
    let stats = metrics::pool_stats(&world.leases, &world.capacity, now);
    ctl.metrics.set_pools(&stats);
    let keys: HashSet<String> = world.needs.iter().map(|n| n.key.clone()).collect();
    for n in world.needs.iter().filter(|n| !term.seen_needs.contains(&n.key)) {
        ctl.metrics.needed(&n.pool);
    }
    term.seen_needs = keys;
    if !is_leader {
        return Decision::default();
    }
    let mut decision = decide::decide(&world, settings, &mut term.memory, now);
    for action in &decision.actions {
        act::act(ctl, action).await;
    }
    let pools: HashSet<String> = networks.iter().map(|n| n.pool.clone()).collect();
    let wanted = summary::wanted(&world.leases, &world.holds, &pools);
    let mut later = term.summaries.sync(&ctl.client, &wanted, now).await;
    ctl.metrics.add_summary_writes(term.summaries.take_writes());
    if let Some((ns, name)) = pools_param {
        term.pools.sync(&ctl.client, ns, name, &networks).await;
    }
    if let Some(w) = pool_status
        && let Some(l) = w.sync(&ctl.client, &stats, now).await
    {
        later = Some(later.map_or(l, |x| x.min(l)));
    }
    if let Some(l) = later {
        decision.look_again_in = Some(decision.look_again_in.map_or(l, |d| d.min(l)));
    }
    decision
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_due_at_once_waits_for_the_summaries_interval() {
        assert_eq!(pause_after(Some(Duration::ZERO)), summary::MIN_INTERVAL, "no busy loop of passes");
        assert_eq!(pause_after(Some(Duration::from_secs(2))), Duration::from_secs(2));
        assert_eq!(pause_after(Some(Duration::from_secs(600))), IDLE_PASS);
        assert_eq!(pause_after(None), IDLE_PASS);
    }
}
