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

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::Client;
use kube::ResourceExt;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use netendpoint_crd::ipamclaim::IPAMClaim;
use netendpoint_crd::{NetworkEndpoint, NetworkEndpointNeed};
use netendpoint_lease::ServerClock;
use tokio::sync::Notify;
use tracing::{info, warn};

pub use crate::act::{
    REASON_INCARNATION_ACCEPTED, REASON_INCARNATION_CREATED, REASON_INCARNATION_REFUSED, REASON_NODE_VANISHED,
    REASON_POD_GONE,
};
use crate::context::Context;
pub use crate::context::REPORTING_CONTROLLER;
use crate::decide::{Capacity, Decision, Hold, Lease, Memory, Settings, StickyNetwork, World};
pub use crate::error::{Error, Result};
pub use crate::options::Options;

/// The longest pause between two passes when nothing changes.
const IDLE_PASS: Duration = Duration::from_secs(30);

/// The pause before the next pass. Never a pass at once again: a timer due
/// now (a failed write, a grace that ends) waits for the summaries' own
/// interval, and nothing waits longer than an idle pass.
fn pause_after(look_again_in: Option<Duration>) -> Duration {
    look_again_in.map_or(IDLE_PASS, |d| d.clamp(summary::MIN_INTERVAL, IDLE_PASS))
}

/// What every replica watches.
struct Stores {
    leases: Store<NetworkEndpoint>,
    nodes: Store<PartialObjectMeta<Node>>,
    pods: Option<Store<PartialObjectMeta<Pod>>>,
    needs: Store<NetworkEndpointNeed>,
    net_conf: Option<Store<ConfigMap>>,
    statefulsets: Store<StatefulSet>,
    claims: Store<IPAMClaim>,
    claims_listed: Arc<AtomicBool>,
}

/// Runs a reflector for `stream`'s objects, waking `notify` on every event
/// and setting `listed` once the first list is done.
fn spawn_reflector<K, S>(
    writer: reflector::store::Writer<K>,
    stream: S,
    notify: Arc<Notify>,
    what: &'static str,
    listed: Option<Arc<AtomicBool>>,
) where
    K: kube::Resource + Clone + Send + Sync + std::fmt::Debug + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
    S: futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
{
    tokio::spawn(async move {
        let mut s = reflector::reflector(writer, stream).default_backoff().boxed();
        while let Some(ev) = s.next().await {
            match ev {
                Err(e) => warn!(what, error = %e, "watch failed; retrying"),
                Ok(watcher::Event::InitDone) => {
                    if let Some(l) = &listed {
                        l.store(true, Ordering::Relaxed);
                    }
                }
                Ok(_) => {}
            }
            notify.notify_one();
        }
    });
}

fn start_watches(client: &Client, opts: &Options, settings: &Settings, notify: &Arc<Notify>) -> Result<Stores> {
    let cfg = watcher::Config::default;
    let (leases, w) = reflector::store();
    let selected = if opts.selector.is_empty() { cfg() } else { cfg().labels(&opts.selector) };
    // Whole objects: the controller reads pool, node and Pod from the spec
    // (labels only mirror them), and keeps no managedFields.
    let lease_stream =
        watcher(Api::<NetworkEndpoint>::all(client.clone()), selected).modify(|ep: &mut NetworkEndpoint| {
            ep.metadata.managed_fields = None;
        });
    spawn_reflector(w, lease_stream, notify.clone(), "leases", None);
    let (nodes, w) = reflector::store();
    spawn_reflector(
        w,
        watcher(Api::<PartialObjectMeta<Node>>::all(client.clone()), cfg()),
        notify.clone(),
        "nodes",
        None,
    );
    let pods = settings.pod_gone_grace.map(|_| {
        let (pods, w) = reflector::store();
        spawn_reflector(
            w,
            watcher(Api::<PartialObjectMeta<Pod>>::all(client.clone()), cfg()),
            notify.clone(),
            "pods",
            None,
        );
        pods
    });
    let (needs, w) = reflector::store();
    spawn_reflector(w, watcher(Api::<NetworkEndpointNeed>::all(client.clone()), cfg()), notify.clone(), "needs", None);
    let net_conf = match opts.net_conf()? {
        None => None,
        Some((ns, name)) => {
            let (cms, w) = reflector::store();
            let one = cfg().fields(&format!("metadata.name={name}"));
            spawn_reflector(
                w,
                watcher(Api::<ConfigMap>::namespaced(client.clone(), &ns), one),
                notify.clone(),
                "net-conf",
                None,
            );
            Some(cms)
        }
    };
    // StatefulSets end the legacy holds of their Pods, and get claims for sticky networks.
    let (statefulsets, w) = reflector::store();
    let sts = watcher(Api::<StatefulSet>::all(client.clone()), cfg()).modify(|s: &mut StatefulSet| {
        // Only the replica count is read: drop the Pod template and status.
        s.spec = s.spec.take().map(|spec| k8s_openapi::api::apps::v1::StatefulSetSpec {
            replicas: spec.replicas,
            ..k8s_openapi::api::apps::v1::StatefulSetSpec::default()
        });
        s.status = None;
        s.metadata.managed_fields = None;
    });
    spawn_reflector(w, sts, notify.clone(), "statefulsets", None);
    // Claims: the IPAMClaim CRD may not be installed; until they are
    // listed, nothing is concluded from a claim's absence.
    let (claims, w) = reflector::store();
    let claims_listed = Arc::new(AtomicBool::new(false));
    let claim_stream = watcher(Api::<IPAMClaim>::all(client.clone()), cfg()).modify(|c: &mut IPAMClaim| {
        c.metadata.managed_fields = None;
    });
    spawn_reflector(w, claim_stream, notify.clone(), "ipamclaims", Some(claims_listed.clone()));
    Ok(Stores { leases, nodes, pods, needs, net_conf, statefulsets, claims, claims_listed })
}

impl Stores {
    async fn ready(&self) {
        let _ = self.leases.wait_until_ready().await;
        let _ = self.nodes.wait_until_ready().await;
        if let Some(p) = &self.pods {
            let _ = p.wait_until_ready().await;
        }
        let _ = self.needs.wait_until_ready().await;
        if let Some(c) = &self.net_conf {
            let _ = c.wait_until_ready().await;
        }
        let _ = self.statefulsets.wait_until_ready().await;
    }

    /// The network configs of the net-conf ConfigMap.
    fn networks(&self) -> Vec<netendpoint_cni::config::IpamConfig> {
        let mut out = Vec::new();
        for cm in self.net_conf.iter().flat_map(|c| c.state()) {
            let files = cm.data.iter().flatten().map(|(k, v)| (k.as_str(), v.as_str()));
            let (networks, problems) = netendpoint_cni::config::networks_in_files(files);
            for p in problems {
                warn!(problem = %p, "network config gives no capacity");
            }
            out.extend(networks);
        }
        out
    }

    fn world(&self, needs: Vec<decide::Need>, networks: &[netendpoint_cni::config::IpamConfig]) -> World {
        let objects = self.leases.state();
        World {
            leases: objects.iter().filter_map(|ep| Lease::of(ep)).collect(),
            holds: objects.iter().filter_map(|ep| Hold::of(ep)).collect(),
            nodes: self.nodes.state().iter().map(|n| n.name_any()).collect(),
            pod_uids: self.pods.iter().flat_map(|p| p.state()).filter_map(|p| p.uid()).collect(),
            needs,
            capacity: capacities(networks),
            statefulsets: self
                .statefulsets
                .state()
                .iter()
                .map(|s| {
                    let replicas = s.spec.as_ref().and_then(|sp| sp.replicas).unwrap_or(1);
                    ((s.namespace().unwrap_or_default(), s.name_any()), i64::from(replicas))
                })
                .collect(),
            statefulsets_known: true,
            claims: self
                .claims
                .state()
                .iter()
                .map(|c| ((c.namespace().unwrap_or_default(), c.name_any()), claims::facts(c)))
                .collect(),
            claims_known: self.claims_listed.load(Ordering::Relaxed),
            sticky_networks: networks
                .iter()
                .filter(|n| n.sticky.as_ref().is_some_and(|s| s.stateful_sets))
                .map(|n| StickyNetwork { pool: n.pool.clone(), network: n.network.clone() })
                .collect(),
        }
    }
}

/// Capacities by pool of `networks`.
pub fn capacities(networks: &[netendpoint_cni::config::IpamConfig]) -> HashMap<String, Capacity> {
    networks.iter().map(|n| (n.pool.clone(), n.capacity())).collect()
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
    let stores = start_watches(&client, &opts, &settings, &notify)?;
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
    let needs = if is_leader { term.needs.check(&ctl.client, &stores.needs.state(), now).await } else { Vec::new() };
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
    fn capacities_come_from_every_netendpoint_ipam_section_and_skip_the_rest() {
        let conflist = serde_json::json!({
            "cniVersion": "1.1.0", "name": "podnet",
            "plugins": [{"type": "bridge", "ipam": {"type": "netendpoint", "pool": "pods",
                "ranges": [[{"subnet": "10.0.0.0/29"}], [{"subnet": "fd00::/125"}]]}},
                {"type": "portmap"}]
        });
        let other = serde_json::json!({"name": "x", "type": "bridge", "ipam": {"type": "host-local"}});
        let texts = [("10-a.conflist", conflist.to_string()), ("20-b.conf", other.to_string())];
        let (networks, problems) =
            netendpoint_cni::config::networks_in_files(texts.iter().map(|(n, t)| (*n, t.as_str())));
        assert!(problems.is_empty(), "{problems:?}");
        let caps = capacities(&networks);
        assert_eq!(caps.len(), 1);
        let c = caps["pods"];
        assert!(c.v4 > 0 && c.v6 > 0, "{c:?}");
    }

    #[test]
    fn a_pass_due_at_once_waits_for_the_summaries_interval() {
        assert_eq!(pause_after(Some(Duration::ZERO)), summary::MIN_INTERVAL, "no busy loop of passes");
        assert_eq!(pause_after(Some(Duration::from_secs(2))), Duration::from_secs(2));
        assert_eq!(pause_after(Some(Duration::from_secs(600))), IDLE_PASS);
        assert_eq!(pause_after(None), IDLE_PASS);
    }
}
