//! netendpoint-controller: the cluster-side half of netendpoint.
//!
//! It watches (kube-runtime reflectors, no polling) the leases, the Nodes,
//! the Pods, the StatefulSets, the `IPNeeded` Events of waiting ADDs and the
//! ConfigMap the network config is rendered from, and on every change:
//! - publishes pool health as Prometheus metrics ([`metrics`]), on every replica;
//! - on the leader only (a `coordination.k8s.io` Lease), takes the
//!   cross-node actions that [`decide`] chooses: reclaim of vanished nodes'
//!   leases, deletion of leases whose Pod is gone, forced release of the
//!   oldest stuck release for an ADD that waits, and the end of sticky holds
//!   (StatefulSet deleted or scaled below the ordinal, `stickyFor` passed,
//!   pool pressure; see `docs/sticky-ips.md`).
//!
//! Every write names one lease by name and UID; a forced release also tests
//! its resourceVersion, so a successor under the same name is never touched.

pub mod decide;
pub mod error;
mod http;
pub mod metrics;
pub mod pool_status;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Node, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::core::PartialObjectMeta;
use kube::runtime::events::{Event as Recorded, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use netendpoint_crd::{
    ANNOTATION_NEEDED_FOR, ANNOTATION_NEEDED_POOL, FINALIZER_STICKY_HOLD, NetworkEndpoint, REASON_FORCED_RELEASE,
    REASON_IP_NEEDED, REASON_STICKY_HOLD_ENDED, duration,
};
use netendpoint_lease::ServerClock;
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use crate::decide::{Action, Capacity, Decision, Lease, Memory, Need, Settings, World};
pub use crate::error::{Error, Result};
use crate::metrics::Metrics;

/// The name in the controller's Events (`reportingController`).
pub const REPORTING_CONTROLLER: &str = "netendpoint-controller";
/// Event reason of a vanished node's lease whose release was requested.
pub const REASON_NODE_VANISHED: &str = "NodeVanished";
/// Event reason of a gone Pod's lease whose release was requested.
pub const REASON_POD_GONE: &str = "PodGone";
/// The longest pause between two passes when nothing changes.
const IDLE_PASS: Duration = Duration::from_secs(30);

/// The controller's flags; each also reads an environment variable.
#[derive(Debug, Clone, clap::Parser)]
#[command(name = "netendpoint-controller", version, about)]
pub struct Options {
    /// Kubeconfig to use; in-cluster configuration when absent.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Name of the coordination.k8s.io Lease that elects the leader.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_LEASE_NAME", default_value = "netendpoint-controller")]
    pub lease_name: String,
    /// Namespace of that Lease.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_LEASE_NAMESPACE", default_value = "netendpoint-system")]
    pub lease_namespace: String,
    /// This replica's identity in the Lease (the Pod name in a Deployment).
    #[arg(long, env = "NETENDPOINT_CONTROLLER_IDENTITY")]
    pub identity: String,
    /// Seconds a leader's Lease stays valid without renewal: a dead leader
    /// is replaced within this bound.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_LEASE_SECONDS", default_value_t = 15)]
    pub lease_seconds: u64,
    /// Seconds before expiry at which the leader renews (also the tolerated clock skew).
    #[arg(long, env = "NETENDPOINT_CONTROLLER_LEASE_GRACE_SECONDS", default_value_t = 5)]
    pub lease_grace_seconds: u64,
    /// How long a lease's Node must be absent, seen twice, before its lease is released.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_VANISHED_NODE_GRACE", default_value = "5m")]
    pub vanished_node_grace: String,
    /// How long a lease's Pod UID must be absent, seen twice, before its lease
    /// is released; `off` turns this cleanup off.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_POD_GONE_GRACE", default_value = "15m")]
    pub pod_gone_grace: String,
    /// The forced-release bound of leases that carry none of their own.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_FORCE_RELEASE_AFTER", default_value = "10m")]
    pub force_release_after: String,
    /// `namespace/name` of the ConfigMap holding the network config(s) the
    /// pools' ranges are read from; empty for none (no capacity figures).
    #[arg(long, env = "NETENDPOINT_CONTROLLER_NET_CONF", default_value = "netendpoint-system/netendpoint-net-conf")]
    pub net_conf: String,
    /// Label selector of the leases this controller manages (and counts);
    /// empty for all. Lets one controller per set of pools run side by side.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_SELECTOR", default_value = "")]
    pub selector: String,
    /// Least time between two writes of one pool's NetworkEndpointPool
    /// status (`kubectl get neppool`), written by the leader when the
    /// figures change; `off` writes none.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_POOL_STATUS_INTERVAL", default_value = "5s")]
    pub pool_status_interval: String,
    /// Address of the /metrics, /healthz and /readyz server.
    #[arg(long, env = "NETENDPOINT_CONTROLLER_LISTEN", default_value = "0.0.0.0:9090")]
    pub listen: SocketAddr,
}

impl Options {
    /// The decision settings these flags describe.
    pub fn settings(&self) -> Result<Settings> {
        let dur = |flag: &'static str, v: &str| {
            duration::parse(v)
                .ok_or_else(|| Error::Flag { flag, reason: format!("{v:?} is not a duration such as 90s or 5m") })
        };
        Ok(Settings {
            vanished_node_grace: dur("vanished-node-grace", &self.vanished_node_grace)?,
            pod_gone_grace: match self.pod_gone_grace.as_str() {
                "off" => None,
                v => Some(dur("pod-gone-grace", v)?),
            },
            default_force_release_after: dur("force-release-after", &self.force_release_after)?,
        })
    }

    /// The pool status interval; `None` when `off`.
    pub fn pool_status_interval(&self) -> Result<Option<Duration>> {
        match self.pool_status_interval.as_str() {
            "off" => Ok(None),
            v => duration::parse(v).map(Some).ok_or_else(|| Error::Flag {
                flag: "pool-status-interval",
                reason: format!("{v:?} is not a duration such as 5s, or off"),
            }),
        }
    }
}

/// A client whose responses feed `clock` with the API server's `Date`.
async fn client(opts: &Options, clock: ServerClock) -> Result<Client> {
    let cfg = match &opts.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(Error::KubeconfigFile)?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(Error::KubeconfigFile)?
        }
        None => kube::Config::infer().await.map_err(Error::Kubeconfig)?,
    };
    let layer = netendpoint_lease::clock::date_layer(clock);
    Ok(kube::client::ClientBuilder::try_from(cfg).map_err(Error::Client)?.with_layer(&layer).build())
}

/// What every replica watches.
struct Stores {
    leases: Store<NetworkEndpoint>,
    nodes: Store<PartialObjectMeta<Node>>,
    pods: Option<Store<PartialObjectMeta<Pod>>>,
    needs: Store<PartialObjectMeta<CoreEvent>>,
    net_conf: Option<Store<ConfigMap>>,
    statefulsets: Store<StatefulSet>,
}

/// Runs a reflector for `stream`'s objects, waking `notify` on every event.
fn spawn_reflector<K, S>(writer: reflector::store::Writer<K>, stream: S, notify: Arc<Notify>, what: &'static str)
where
    K: kube::Resource + Clone + Send + Sync + std::fmt::Debug + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
    S: futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
{
    tokio::spawn(async move {
        let mut s = reflector::reflector(writer, stream).default_backoff().boxed();
        while let Some(ev) = s.next().await {
            if let Err(e) = ev {
                warn!(what, error = %e, "watch failed; retrying");
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
    let leases_stream =
        watcher(Api::<NetworkEndpoint>::all(client.clone()), selected).modify(|ep: &mut NetworkEndpoint| {
            ep.metadata.managed_fields = None;
        });
    spawn_reflector(w, leases_stream, notify.clone(), "leases");
    let (nodes, w) = reflector::store();
    spawn_reflector(w, watcher(Api::<PartialObjectMeta<Node>>::all(client.clone()), cfg()), notify.clone(), "nodes");
    let pods = settings.pod_gone_grace.map(|_| {
        let (pods, w) = reflector::store();
        spawn_reflector(w, watcher(Api::<PartialObjectMeta<Pod>>::all(client.clone()), cfg()), notify.clone(), "pods");
        pods
    });
    let (needs, w) = reflector::store();
    let by_reason = cfg().fields(&format!("reason={REASON_IP_NEEDED}"));
    spawn_reflector(
        w,
        watcher(Api::<PartialObjectMeta<CoreEvent>>::all(client.clone()), by_reason),
        notify.clone(),
        "needs",
    );
    let net_conf = match opts.net_conf.split_once('/') {
        _ if opts.net_conf.is_empty() => None,
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() => {
            let (cms, w) = reflector::store();
            let one = cfg().fields(&format!("metadata.name={name}"));
            spawn_reflector(
                w,
                watcher(Api::<ConfigMap>::namespaced(client.clone(), ns), one),
                notify.clone(),
                "net-conf",
            );
            Some(cms)
        }
        _ => {
            return Err(Error::Flag { flag: "net-conf", reason: format!("{:?} is not namespace/name", opts.net_conf) });
        }
    };
    // StatefulSets end the sticky holds of their Pods when deleted or scaled down.
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
    spawn_reflector(w, sts, notify.clone(), "statefulsets");
    Ok(Stores { leases, nodes, pods, needs, net_conf, statefulsets })
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

    fn world(&self) -> World {
        World {
            leases: self.leases.state().iter().filter_map(|ep| Lease::of(ep)).collect(),
            nodes: self.nodes.state().iter().map(|n| n.name_any()).collect(),
            pod_uids: self.pods.iter().flat_map(|p| p.state()).filter_map(|p| p.uid()).collect(),
            needs: self.needs.state().iter().filter_map(|e| need_of(e)).collect(),
            capacity: self.net_conf.iter().flat_map(|c| c.state()).flat_map(|cm| capacities(&cm)).collect(),
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
        }
    }
}

pub use netendpoint_lease::view::ip_from_name;

/// The [`Need`] of an `IPNeeded` Event; `None` when it lacks its annotations.
pub fn need_of(e: &PartialObjectMeta<CoreEvent>) -> Option<Need> {
    let ann = e.metadata.annotations.as_ref()?;
    let wait = duration::parse(ann.get(ANNOTATION_NEEDED_FOR)?)?;
    let created = e.metadata.creation_timestamp.as_ref()?.0;
    Some(Need {
        key: format!("{}/{}", e.metadata.namespace.as_deref().unwrap_or_default(), e.metadata.name.as_deref()?),
        pool: ann.get(ANNOTATION_NEEDED_POOL)?.clone(),
        until: created.checked_add(k8s_openapi::jiff::SignedDuration::try_from(wait).ok()?).ok()?,
    })
}

/// Pool capacities (by pool label value) of every netendpoint `ipam`
/// section in the network config(s) of `cm` (a `.conflist` or a `.conf`
/// per key). A section that does not validate is skipped with a warning.
pub fn capacities(cm: &ConfigMap) -> Vec<(String, Capacity)> {
    let files = cm.data.iter().flatten().map(|(k, v)| (k.as_str(), v.as_str()));
    let (caps, problems) = netendpoint_cni::config::capacities_in_files(files);
    for p in problems {
        warn!(problem = %p, "network config gives no capacity");
    }
    caps.into_iter().collect()
}

/// Shared state of a running controller.
struct Controller {
    client: Client,
    clock: ServerClock,
    recorder: Recorder,
    metrics: Metrics,
    ready: std::sync::atomic::AtomicBool,
}

impl Controller {
    fn endpoints(&self) -> Api<NetworkEndpoint> {
        Api::all(self.client.clone())
    }

    async fn delete(&self, lease: &Lease) -> kube::Result<bool> {
        let dp = DeleteParams {
            preconditions: Some(Preconditions { uid: Some(lease.uid.clone()), resource_version: None }),
            ..DeleteParams::default()
        };
        match self.endpoints().delete(&lease.name, &dp).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn force(&self, lease: &Lease) -> kube::Result<bool> {
        let patch = Patch::Json::<()>(netendpoint_lease::patch::force_release(&lease.uid, &lease.resource_version));
        match self.endpoints().patch(&lease.name, &PatchParams::default(), &patch).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() || s.code == 422 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Removes the sticky hold, and only it, from exactly this lease (test
    /// UID and the finalizer's index). False when it changed or is gone.
    async fn end_hold(&self, lease: &Lease) -> kube::Result<bool> {
        let Some(i) = lease.finalizers.iter().position(|f| f == FINALIZER_STICKY_HOLD) else { return Ok(false) };
        let patch = netendpoint_lease::patch::remove_finalizer(&lease.uid, i, FINALIZER_STICKY_HOLD);
        match self.endpoints().patch(&lease.name, &PatchParams::default(), &Patch::Json::<()>(patch)).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.is_not_found() || s.is_conflict() || s.code == 422 => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn record(&self, lease: &Lease, reason: &str, note: String, warning: bool) {
        let regarding = netendpoint_lease::events::lease_ref(&lease.name, &lease.uid);
        let ev = Recorded {
            type_: if warning { EventType::Warning } else { EventType::Normal },
            reason: reason.into(),
            note: Some(note.chars().take(1000).collect()),
            action: reason.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &regarding).await {
            warn!(reason, error = %e, "cannot record event");
        }
    }

    async fn act(&self, action: &Action) {
        match action {
            Action::Reclaim { lease } => match self.delete(lease).await {
                Ok(done) => {
                    if done {
                        warn!(lease = %lease.name, node = %lease.node, "node absent for the grace: releasing its lease");
                        self.metrics.reclaimed(&lease.pool);
                        let note = format!("node {} is gone: release of {} requested", lease.node, lease.name);
                        self.record(lease, REASON_NODE_VANISHED, note, true).await;
                    }
                }
                Err(e) => warn!(lease = %lease.name, error = %e, "cannot reclaim"),
            },
            Action::DeleteLeak { lease } => match self.delete(lease).await {
                Ok(done) => {
                    if done {
                        warn!(lease = %lease.name, pod_uid = ?lease.pod_uid(), "pod gone for the grace: releasing its lease");
                        self.metrics.leaked(&lease.pool);
                        let note = format!(
                            "pod UID {} is gone: release of {} requested",
                            lease.pod_uid().unwrap_or_default(),
                            lease.name
                        );
                        self.record(lease, REASON_POD_GONE, note, true).await;
                    }
                }
                Err(e) => warn!(lease = %lease.name, error = %e, "cannot delete a leaked lease"),
            },
            Action::EndHold { lease, reason } => match self.end_hold(lease).await {
                Ok(true) => {
                    info!(lease = %lease.name, reason = ?reason, "sticky hold ended: {}", reason.describe());
                    let note = format!("sticky hold of {} ended: {}", lease.name, reason.describe());
                    self.record(lease, REASON_STICKY_HOLD_ENDED, note, false).await;
                }
                Ok(false) => debug!(lease = %lease.name, "changed or gone before the hold ended"),
                Err(e) => warn!(lease = %lease.name, error = %e, "cannot end the sticky hold"),
            },
            Action::Force { lease, age, bound, need } => match self.force(lease).await {
                Ok(true) => {
                    warn!(
                        lease = %lease.name, finalizers = ?lease.finalizers, releasing_for_ms = age.as_millis() as u64,
                        bound = %duration::format(*bound), need = %need,
                        "forced release: finalizers did not answer within forceReleaseAfter, and an ADD needs the IP"
                    );
                    self.metrics.forced(&lease.pool);
                    let note = format!(
                        "{} released by force after {:.1}s for a waiting ADD ({need}): finalizers {:?} did not answer within forceReleaseAfter ({})",
                        lease.name,
                        age.as_secs_f64(),
                        lease.finalizers,
                        duration::format(*bound)
                    );
                    self.record(lease, REASON_FORCED_RELEASE, note, true).await;
                }
                Ok(false) => debug!(lease = %lease.name, "changed or gone before the forced release"),
                Err(e) => warn!(lease = %lease.name, error = %e, "cannot force the release"),
            },
        }
    }
}

/// Runs the controller until the process ends.
pub async fn run(opts: Options) -> Result<()> {
    let settings = opts.settings()?;
    let mut pool_status = opts.pool_status_interval()?.map(pool_status::PoolStatusWriter::new);
    let clock = ServerClock::default();
    let client = client(&opts, clock.clone()).await?;
    let ctl = Arc::new(Controller {
        client: client.clone(),
        clock: clock.clone(),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: REPORTING_CONTROLLER.into(),
                instance: Some(opts.identity.chars().take(128).collect()),
            },
        ),
        metrics: Metrics::new(),
        ready: false.into(),
    });
    let (addr, serve) = http::bind(opts.listen, ctl.clone()).await?;
    info!(%addr, identity = %opts.identity, "serving /metrics, /healthz, /readyz");
    tokio::spawn(serve);

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
    let (mut leader, _task) = manager.watch().await;

    stores.ready().await;
    ctl.ready.store(true, std::sync::atomic::Ordering::Relaxed);
    info!("initial lists done");
    let mut memory = Memory::default();
    let mut seen_needs: HashSet<String> = HashSet::new();
    let mut was_leader = false;
    loop {
        let is_leader = *leader.borrow_and_update();
        if is_leader != was_leader {
            info!(leader = is_leader, identity = %opts.identity, "leadership changed");
            // A new term starts every grace again.
            memory = Memory::default();
            if let Some(w) = pool_status.as_mut() {
                w.reset();
            }
            was_leader = is_leader;
        }
        ctl.metrics.set_leader(is_leader);
        let decision =
            pass(&ctl, &stores, &settings, &mut memory, &mut seen_needs, is_leader, pool_status.as_mut()).await;
        let pause = decision.look_again_in.map_or(IDLE_PASS, |d| d.min(IDLE_PASS));
        tokio::select! {
            _ = notify.notified() => {}
            _ = leader.changed() => {}
            _ = tokio::time::sleep(pause) => {}
        }
        // Let a burst of watch events land before the next pass.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One pass: metrics on every replica, actions on the leader.
async fn pass(
    ctl: &Controller,
    stores: &Stores,
    settings: &Settings,
    memory: &mut Memory,
    seen_needs: &mut HashSet<String>,
    is_leader: bool,
    pool_status: Option<&mut pool_status::PoolStatusWriter>,
) -> Decision {
    let Some(now) = ctl.clock.now() else { return Decision::default() };
    let world = stores.world();
    let stats = metrics::pool_stats(&world.leases, &world.capacity, now);
    ctl.metrics.set_pools(&stats);
    let keys: HashSet<String> = world.needs.iter().map(|n| n.key.clone()).collect();
    for n in world.needs.iter().filter(|n| !seen_needs.contains(&n.key)) {
        ctl.metrics.needed(&n.pool);
    }
    *seen_needs = keys;
    if !is_leader {
        return Decision::default();
    }
    let mut decision = decide::decide(&world, settings, memory, now);
    for action in &decision.actions {
        ctl.act(action).await;
    }
    if let Some(w) = pool_status
        && let Some(later) = w.sync(&ctl.client, &stats, now).await
    {
        decision.look_again_in = Some(decision.look_again_in.map_or(later, |d| d.min(later)));
    }
    decision
}

/// The capacity of each pool, for tests and tools: see [`capacities`].
pub fn capacity_map(cm: &ConfigMap) -> HashMap<String, Capacity> {
    capacities(cm).into_iter().collect()
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
        let cm = ConfigMap {
            data: Some(
                [("10-a.conflist".to_string(), conflist.to_string()), ("20-b.conf".into(), other.to_string())].into(),
            ),
            ..ConfigMap::default()
        };
        let caps = capacity_map(&cm);
        assert_eq!(caps.len(), 1);
        let c = caps["pods"];
        assert!(c.v4 > 0 && c.v6 > 0, "{c:?}");
    }

    #[test]
    fn flags_turn_into_settings_and_pod_gc_can_be_off() {
        use clap::Parser;
        let o =
            Options::parse_from(["x", "--identity", "a", "--pod-gone-grace", "off", "--vanished-node-grace", "90s"]);
        let s = o.settings().unwrap();
        assert_eq!(s.pod_gone_grace, None);
        assert_eq!(s.vanished_node_grace, Duration::from_secs(90));
        assert_eq!(s.default_force_release_after, Duration::from_secs(600));
        let bad = Options::parse_from(["x", "--identity", "a", "--pod-gone-grace", "soon"]);
        assert!(bad.settings().unwrap_err().to_string().contains("pod-gone-grace"));
    }
}
