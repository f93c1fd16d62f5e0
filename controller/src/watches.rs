//! What every replica watches, through kube-runtime reflectors (no
//! polling): [`Stores`], and the snapshot of them the decisions run over
//! ([`Stores::world`]).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::Client;
use kube::ResourceExt;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use netendpoint_crd::ipamclaim::IPAMClaim;
use netendpoint_crd::{NetworkEndpoint, NetworkEndpointNeed};
use netendpoint_netconf::IpamConfig;
use netendpoint_netconf::networks::{capacities, networks_in_files};
use tokio::sync::Notify;
use tracing::warn;

use crate::claims;
use crate::decide::{self, Hold, Lease, Settings, StickyNetwork, World};
use crate::error::Result;
use crate::options::Options;

/// What every replica watches.
pub struct Stores {
    leases: Store<NetworkEndpoint>,
    nodes: Store<PartialObjectMeta<Node>>,
    pods: Option<Store<PartialObjectMeta<Pod>>>,
    needs: Store<NetworkEndpointNeed>,
    net_conf: Option<Store<ConfigMap>>,
    pools_param: Option<Store<ConfigMap>>,
    statefulsets: Store<StatefulSet>,
    claims: Store<IPAMClaim>,
    claims_listed: Arc<AtomicBool>,
    views: Mutex<LeaseViews>,
    by_pool: Arc<Mutex<PoolIndex>>,
}

/// The lease views of the last snapshot, by stored object. The reflector
/// keeps an object's `Arc` until a watch event replaces it, so an object
/// whose pointer is unchanged is the one this view was read from: a pass
/// reads again only what changed since the last one. Each entry keeps its
/// object alive, so that its address cannot be reused by another.
#[derive(Default)]
pub(crate) struct LeaseViews {
    by_object: HashMap<usize, CachedView>,
    /// Counts the calls: an entry not marked with the current one is gone.
    generation: u64,
}

struct CachedView {
    /// Held so that no other object can be stored at its address.
    _object: Arc<NetworkEndpoint>,
    view: Option<Arc<Lease>>,
    seen: u64,
}

impl LeaseViews {
    /// The views of `objects` (no view for a hold or a malformed object),
    /// reading only the objects not seen in the last call; forgets the rest.
    /// Also the views read in this call (the fresh ones).
    pub(crate) fn of(&mut self, objects: &[Arc<NetworkEndpoint>]) -> (Vec<Arc<Lease>>, Vec<Arc<Lease>>) {
        self.generation += 1;
        let seen = self.generation;
        let mut out = Vec::with_capacity(objects.len());
        let mut fresh = Vec::new();
        for ep in objects {
            out.extend(self.view(ep, seen, &mut fresh));
        }
        self.by_object.retain(|_, c| c.seen == seen);
        (out, fresh)
    }

    /// The views of `objects`, a part of the store: read as [`Self::of`]
    /// reads them, and kept for it, but forgetting nothing.
    pub(crate) fn some<'o>(
        &mut self,
        objects: impl Iterator<Item = &'o Arc<NetworkEndpoint>>,
    ) -> (Vec<Arc<Lease>>, Vec<Arc<Lease>>) {
        let seen = self.generation;
        let mut fresh = Vec::new();
        let out = objects.filter_map(|ep| self.view(ep, seen, &mut fresh)).collect();
        (out, fresh)
    }

    /// The view of `ep`, read only if it is not kept yet (then also pushed
    /// to `fresh`); marked seen in call `seen`.
    fn view(&mut self, ep: &Arc<NetworkEndpoint>, seen: u64, fresh: &mut Vec<Arc<Lease>>) -> Option<Arc<Lease>> {
        let cached = self.by_object.entry(Arc::as_ptr(ep) as usize).or_insert_with(|| {
            let view = Lease::of(ep).map(Arc::new);
            fresh.extend(view.clone());
            CachedView { _object: ep.clone(), view, seen }
        });
        cached.seen = seen;
        cached.view.clone()
    }

    #[cfg(test)]
    fn cached(&self) -> usize {
        self.by_object.len()
    }
}

/// Runs a reflector for `stream`'s objects, backing off on errors as
/// kube-runtime's reflectors do by default, waking `notify` on every event
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
    let stream = stream.backoff(watcher::DefaultBackoff::default());
    spawn_reflector_seeing(writer, stream, Wake::usual(notify), what, listed, |_: &watcher::Event<K>| false);
}

/// What a reflector's events wake: `usual`, which the passes coalesce
/// into bursts, or `urgent` for an event that `see` says a waiting ADD
/// waits on (the passes act on it at once).
struct Wake {
    usual: Arc<Notify>,
    urgent: Arc<Notify>,
}

impl Wake {
    fn usual(notify: Arc<Notify>) -> Self {
        Self { urgent: notify.clone(), usual: notify }
    }
}

/// A watch error is retried after this pause the first time (see [`QuickFirst`]).
const QUICK_RETRY: Duration = Duration::from_millis(50);
/// At most one quick retry in this long; other errors back off as usual.
const QUICK_RETRY_EVERY: Duration = Duration::from_secs(30);

/// The backoff of the queue entries' watch: the first error is retried
/// after [`QUICK_RETRY`], not after the 0.8–1.6 s a reflector waits by
/// default (as client-go's does), since until the watch is back no waiting
/// ADD is promised an address. An expired resource version (410), as after
/// the API server's watch cache was (re)initialised, needs only a relist
/// of the entries, a small list. Errors in a row, or more often than once
/// in [`QUICK_RETRY_EVERY`], back off as every other watch does.
struct QuickFirst {
    quick_at: Option<tokio::time::Instant>,
    in_a_row: bool,
    then: watcher::DefaultBackoff,
}

impl QuickFirst {
    fn new() -> Self {
        Self { quick_at: None, in_a_row: false, then: watcher::DefaultBackoff::default() }
    }
}

impl Iterator for QuickFirst {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let now = tokio::time::Instant::now();
        let quick = !self.in_a_row && self.quick_at.is_none_or(|at| now.duration_since(at) >= QUICK_RETRY_EVERY);
        self.in_a_row = true;
        if quick {
            self.quick_at = Some(now);
            return Some(QUICK_RETRY);
        }
        self.then.next()
    }
}

impl kube::runtime::utils::Backoff for QuickFirst {
    fn reset(&mut self) {
        self.in_a_row = false;
        self.then.reset();
    }
}

/// [`spawn_reflector`] over a stream that backs off on errors itself,
/// showing `see` each event once the store has it, before `wake` wakes
/// the passes: its urgent notification when `see` returns true.
fn spawn_reflector_seeing<K, S>(
    writer: reflector::store::Writer<K>,
    stream: S,
    wake: Wake,
    what: &'static str,
    listed: Option<Arc<AtomicBool>>,
    mut see: impl FnMut(&watcher::Event<K>) -> bool + Send + 'static,
) where
    K: kube::Resource + Clone + Send + Sync + std::fmt::Debug + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
    S: futures::Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
{
    tokio::spawn(async move {
        let mut s = reflector::reflector(writer, stream).boxed();
        while let Some(ev) = s.next().await {
            let urgent = match &ev {
                Err(e) => {
                    warn!(what, error = %e, "watch failed; retrying");
                    false
                }
                Ok(ev) => {
                    if matches!(ev, watcher::Event::InitDone)
                        && let Some(l) = &listed
                    {
                        l.store(true, Ordering::Relaxed);
                    }
                    see(ev)
                }
            };
            if urgent { &wake.urgent } else { &wake.usual }.notify_one();
        }
    });
}

/// True if `ev` ends a release, or begins or advances one, in a pool that
/// has a queue entry: the waiter at its head is promised the address.
fn releases_for_a_waiter(ev: &watcher::Event<NetworkEndpoint>, needs: &reflector::Store<NetworkEndpointNeed>) -> bool {
    let ep = match ev {
        watcher::Event::Delete(ep) => ep,
        watcher::Event::Apply(ep) if ep.metadata.deletion_timestamp.is_some() => ep,
        _ => return false,
    };
    needs.find(|n| n.spec.slot.is_some() && n.spec.pool == ep.spec.pool).is_some()
}

/// The names of the stored leases and holds, by pool: what a queue pass
/// reads, so that it touches only the waiters' pools. Kept from the watch
/// events as the reflector's store is: a relist is gathered aside and
/// replaces the index when it is complete.
#[derive(Default)]
pub(crate) struct PoolIndex {
    live: HashMap<String, HashSet<String>>,
    relisting: Option<HashMap<String, HashSet<String>>>,
}

impl PoolIndex {
    pub(crate) fn see(&mut self, ev: &watcher::Event<NetworkEndpoint>) {
        let add = |map: &mut HashMap<String, HashSet<String>>, ep: &NetworkEndpoint| {
            map.entry(ep.spec.pool.clone()).or_default().insert(ep.name_any());
        };
        match ev {
            watcher::Event::Init => self.relisting = Some(HashMap::new()),
            watcher::Event::InitApply(ep) => add(self.relisting.get_or_insert_with(HashMap::new), ep),
            watcher::Event::InitDone => self.live = self.relisting.take().unwrap_or_default(),
            watcher::Event::Apply(ep) => add(&mut self.live, ep),
            watcher::Event::Delete(ep) => {
                if let Some(names) = self.live.get_mut(&ep.spec.pool) {
                    names.remove(&ep.name_any());
                    if names.is_empty() {
                        self.live.remove(&ep.spec.pool);
                    }
                }
            }
        }
    }

    /// The names of `pool`'s objects.
    pub(crate) fn names(&self, pool: &str) -> impl Iterator<Item = &String> {
        self.live.get(pool).into_iter().flatten()
    }
}

/// A store of the one ConfigMap `(namespace, name)`, watched by name.
fn one_configmap(
    client: &Client,
    (ns, name): (String, String),
    notify: &Arc<Notify>,
    what: &'static str,
) -> Store<ConfigMap> {
    let (cms, w) = reflector::store();
    let one = watcher::Config::default().fields(&format!("metadata.name={name}"));
    spawn_reflector(w, watcher(Api::<ConfigMap>::namespaced(client.clone(), &ns), one), notify.clone(), what, None);
    cms
}

impl Stores {
    /// Starts a reflector for each kind the controller reads, each waking
    /// `notify` on every event: the leases of `--selector`, Nodes,
    /// StatefulSets, claims, the `--net-conf` ConfigMap when named, and Pods
    /// when the Pod-gone cleanup is on. The needs (the queue entries among
    /// them) wake `queued` instead, which the passes do not coalesce, as
    /// does a lease's release in a pool with a queue entry.
    pub fn start(
        client: &Client,
        opts: &Options,
        settings: &Settings,
        notify: &Arc<Notify>,
        queued: &Arc<Notify>,
    ) -> Result<Self> {
        let cfg = watcher::Config::default;
        // The queue entries wake `queued`: a pass at once, and a watch back at once.
        let (needs, w) = reflector::store();
        let needs_stream = watcher(Api::<NetworkEndpointNeed>::all(client.clone()), cfg()).backoff(QuickFirst::new());
        spawn_reflector_seeing(w, needs_stream, Wake::usual(queued.clone()), "needs", None, |_| false);
        let (leases, w) = reflector::store();
        let selected = if opts.selector.is_empty() { cfg() } else { cfg().labels(&opts.selector) };
        // Whole objects: the controller reads pool, node and Pod from the spec
        // (labels only mirror them), and keeps no managedFields.
        let lease_stream =
            watcher(Api::<NetworkEndpoint>::all(client.clone()), selected).modify(|ep: &mut NetworkEndpoint| {
                ep.metadata.managed_fields = None;
            });
        let by_pool = Arc::new(Mutex::new(PoolIndex::default()));
        let index = by_pool.clone();
        let lease_stream = lease_stream.backoff(watcher::DefaultBackoff::default());
        // A release in a pool an ADD waits in wakes `queued`, so that its
        // waiter is promised the address without a burst's wait.
        let wake = Wake { usual: notify.clone(), urgent: queued.clone() };
        let queues = needs.clone();
        spawn_reflector_seeing(w, lease_stream, wake, "leases", None, move |ev| {
            index.lock().unwrap_or_else(PoisonError::into_inner).see(ev);
            releases_for_a_waiter(ev, &queues)
        });
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
        let net_conf = opts.net_conf()?.map(|one| one_configmap(client, one, notify, "net-conf"));
        // The pools parameter, so that one deleted by hand is written again at once.
        let pools_param = opts.pools_param()?.map(|one| one_configmap(client, one, notify, "pools-param"));
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
        Ok(Stores {
            leases,
            nodes,
            pods,
            needs,
            net_conf,
            pools_param,
            statefulsets,
            claims,
            claims_listed,
            views: Mutex::default(),
            by_pool,
        })
    }

    /// Returns once every store has its first list (the claims excepted:
    /// their CRD may not be installed).
    pub async fn ready(&self) {
        let _ = self.leases.wait_until_ready().await;
        let _ = self.nodes.wait_until_ready().await;
        if let Some(p) = &self.pods {
            let _ = p.wait_until_ready().await;
        }
        let _ = self.needs.wait_until_ready().await;
        if let Some(c) = &self.net_conf {
            let _ = c.wait_until_ready().await;
        }
        if let Some(c) = &self.pools_param {
            let _ = c.wait_until_ready().await;
        }
        let _ = self.statefulsets.wait_until_ready().await;
    }

    /// The needs of waiting ADDs, as watched (not checked yet).
    pub fn needs(&self) -> Vec<Arc<NetworkEndpointNeed>> {
        self.needs.state()
    }

    /// The queue entries among them, as the decisions read them.
    pub fn waiters(&self) -> Vec<decide::Waiter> {
        self.needs.state().iter().filter_map(|e| decide::Waiter::of(e)).collect()
    }

    /// The data of the pools parameter's ConfigMap as watched: `None` when
    /// it does not exist (or is not watched).
    pub fn pools_param(&self) -> Option<std::collections::BTreeMap<String, String>> {
        let cm = self.pools_param.as_ref()?.state().into_iter().next()?;
        Some(cm.data.clone().unwrap_or_default())
    }

    /// The network configs of the net-conf ConfigMap.
    pub fn networks(&self) -> Vec<IpamConfig> {
        let mut out = Vec::new();
        for cm in self.net_conf.iter().flat_map(|c| c.state()) {
            let files = cm.data.iter().flatten().map(|(k, v)| (k.as_str(), v.as_str()));
            let (networks, problems) = networks_in_files(files);
            for p in problems {
                warn!(problem = %p, "network config gives no capacity");
            }
            out.extend(networks);
        }
        out
    }

    /// The leases and holds in the store.
    pub fn lease_count(&self) -> usize {
        self.leases.len()
    }

    /// The snapshot a queue pass runs over: the waiters, and the leases,
    /// holds, ranges and capacities of their pools only; `None` when no ADD
    /// waits. Those leases are found by name through the pool index, at a
    /// cost that does not grow with the other pools.
    pub fn queue_world(&self, networks: &[IpamConfig]) -> Option<World> {
        let waiters = self.waiters();
        if waiters.is_empty() {
            return None;
        }
        let pools: HashSet<&str> = waiters.iter().map(|w| w.pool.as_str()).collect();
        let theirs: Vec<Arc<NetworkEndpoint>> = {
            let index = self.by_pool.lock().unwrap_or_else(PoisonError::into_inner);
            pools
                .iter()
                .flat_map(|pool| index.names(pool))
                .filter_map(|name| self.leases.get(&ObjectRef::new(name)))
                .filter(|ep| pools.contains(ep.spec.pool.as_str()))
                .collect()
        };
        let (leases, fresh) = self.views.lock().unwrap_or_else(PoisonError::into_inner).some(theirs.iter());
        let holds = theirs.iter().filter_map(|ep| Hold::of(ep)).collect();
        let PoolLimits { ranges, capacity, capacity_bound } = self.pool_limits(networks, |p| pools.contains(p));
        let fresh = Some(fresh);
        Some(World { leases, holds, ranges, capacity, capacity_bound, waiters, fresh, ..World::default() })
    }

    /// The ranges, capacities and admission bounds of the pools `keep` accepts.
    fn pool_limits(&self, networks: &[IpamConfig], keep: impl Fn(&str) -> bool) -> PoolLimits {
        let mut ranges: HashMap<String, Vec<netendpoint_netconf::RangeSet>> = HashMap::new();
        for n in networks.iter().filter(|n| keep(&n.pool)) {
            // Networks sharing a pool share its ranges: the first one says them.
            ranges.entry(n.pool.clone()).or_insert_with(|| n.range_sets.clone());
        }
        PoolLimits {
            ranges,
            capacity: capacities(networks).into_iter().filter(|(p, _)| keep(p)).collect(),
            capacity_bound: self
                .pools_param()
                .unwrap_or_default()
                .iter()
                .filter(|(pool, _)| keep(pool))
                .filter_map(|(pool, entry)| {
                    Some((pool.clone(), netendpoint_netconf::networks::admission_capacity(entry)?))
                })
                .collect(),
        }
    }

    /// The snapshot the decisions run over: the stores' objects as the
    /// decisions read them, `needs` (checked by the caller) and the
    /// capacities and sticky networks of `networks`.
    pub fn world(&self, needs: Vec<decide::Need>, networks: &[IpamConfig]) -> World {
        let objects = self.leases.state();
        let PoolLimits { ranges, capacity, capacity_bound } = self.pool_limits(networks, |_| true);
        let (leases, fresh) = self.views.lock().unwrap_or_else(PoisonError::into_inner).of(&objects);
        World {
            fresh: Some(fresh),
            waiters: self.waiters(),
            believed: HashMap::new(),
            ranges,
            leases,
            holds: objects.iter().filter_map(|ep| Hold::of(ep)).collect(),
            nodes: self.nodes.state().iter().map(|n| n.name_any()).collect(),
            pod_uids: self.pods.iter().flat_map(|p| p.state()).filter_map(|p| p.uid()).collect(),
            needs,
            capacity_bound,
            capacity,
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

/// What the networks and the pools parameter say of some pools: [`World`]'s
/// `ranges`, `capacity` and `capacity_bound`.
struct PoolLimits {
    ranges: HashMap<String, Vec<netendpoint_netconf::RangeSet>>,
    capacity: HashMap<String, decide::Capacity>,
    capacity_bound: HashMap<String, decide::Capacity>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::utils::Backoff;

    #[tokio::test(start_paused = true)]
    async fn the_queue_watch_retries_its_first_error_at_once_and_then_backs_off() {
        let mut b = QuickFirst::new();
        assert_eq!(b.next(), Some(QUICK_RETRY), "a lone error (an expired resource version) is retried at once");
        let second = b.next().unwrap();
        assert!(second >= Duration::from_millis(400), "an error in a row backs off as other watches do: {second:?}");
        b.reset();
        assert!(b.next().unwrap() > QUICK_RETRY, "a second quick retry within {QUICK_RETRY_EVERY:?}: a relist loop");
        b.reset();
        tokio::time::advance(QUICK_RETRY_EVERY).await;
        assert_eq!(b.next(), Some(QUICK_RETRY), "quick again once the interval passed");
    }

    fn need(pool: &str, slot: Option<u8>) -> NetworkEndpointNeed {
        let spec = netendpoint_crd::NetworkEndpointNeedSpec {
            pool: pool.into(),
            node: "n1".into(),
            pod: netendpoint_crd::PodRef { namespace: "default".into(), name: "p".into(), uid: String::new() },
            wait_seconds: 10,
            slot,
            ip_family: None,
            container_id: None,
            if_name: None,
            deadline: None,
            spans: None,
        };
        let name = slot.map_or(format!("{pool}.n1"), |s| format!("{pool}.n1.{s}"));
        NetworkEndpointNeed::new(&name, spec)
    }

    /// A release (begun, advanced or ended) in a pool with a queue entry
    /// wakes the passes at once; one in another pool, a lease that is not
    /// releasing, and a pool with only an older plugin's need do not.
    #[test]
    fn a_release_in_a_pool_with_a_queue_entry_is_acted_on_at_once() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let (needs, mut w) = reflector::store();
        w.apply_watcher_event(&watcher::Event::Apply(need("p", Some(0))));
        w.apply_watcher_event(&watcher::Event::Apply(need("other", None)));
        let lease = |pool: &str, releasing: bool| {
            let mut ep = (*endpoint("10.0.0.2", "n1")).clone();
            ep.spec.pool = pool.into();
            if releasing {
                ep.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
            }
            ep
        };
        let urgent = |ev: watcher::Event<NetworkEndpoint>| releases_for_a_waiter(&ev, &needs);
        assert!(urgent(watcher::Event::Delete(lease("p", false))), "a release ended");
        assert!(urgent(watcher::Event::Apply(lease("p", true))), "a release begun or a finalizer removed");
        assert!(!urgent(watcher::Event::Apply(lease("p", false))), "a lease created or changed");
        assert!(!urgent(watcher::Event::InitApply(lease("p", true))), "a relist");
        assert!(!urgent(watcher::Event::Delete(lease("q", false))), "a pool nobody waits in");
        assert!(!urgent(watcher::Event::Delete(lease("other", false))), "an older plugin's need is no queue");
    }

    fn endpoint(ip: &str, node: &str) -> Arc<NetworkEndpoint> {
        let spec = netendpoint_crd::NetworkEndpointSpec {
            pool: "p".into(),
            ip: ip.into(),
            prefix_length: 24,
            node: node.into(),
            ..Default::default()
        };
        let mut ep = NetworkEndpoint::new(&netendpoint_crd::endpoint_name("p", ip.parse().unwrap()), spec);
        ep.metadata.uid = Some(format!("uid-{ip}"));
        Arc::new(ep)
    }

    #[test]
    fn the_pool_index_follows_the_watch_and_a_relist_replaces_it_when_complete() {
        let names = |ix: &PoolIndex, pool: &str| {
            let mut v: Vec<String> = ix.names(pool).cloned().collect();
            v.sort();
            v
        };
        let ep = |ip: &str| (*endpoint(ip, "n1")).clone();
        let mut other = ep("10.9.0.1");
        other.spec.pool = "q".into();
        other.metadata.name = Some("q.10.9.0.1".into());
        let mut ix = PoolIndex::default();
        for e in [ep("10.0.0.1"), ep("10.0.0.2"), other.clone()] {
            ix.see(&watcher::Event::Apply(e));
        }
        ix.see(&watcher::Event::Delete(ep("10.0.0.1")));
        assert_eq!(names(&ix, "p"), ["p.10.0.0.2"]);
        assert_eq!(names(&ix, "q"), ["q.10.9.0.1"]);
        // A relist: until it is done the index stays as it was.
        ix.see(&watcher::Event::Init);
        ix.see(&watcher::Event::InitApply(ep("10.0.0.3")));
        assert_eq!(names(&ix, "p"), ["p.10.0.0.2"]);
        ix.see(&watcher::Event::InitDone);
        assert_eq!(names(&ix, "p"), ["p.10.0.0.3"]);
        assert!(names(&ix, "q").is_empty(), "what the relist did not list is gone");
    }

    #[test]
    fn a_pass_reads_again_only_the_leases_the_watch_replaced() {
        let mut views = LeaseViews::default();
        let (a, b) = (endpoint("10.0.0.1", "n1"), endpoint("10.0.0.2", "n1"));
        let (first, fresh) = views.of(&[a.clone(), b.clone()]);
        assert_eq!(first.iter().map(|l| l.node.as_str()).collect::<Vec<_>>(), ["n1", "n1"]);
        assert_eq!(fresh.len(), 2, "every view of a first snapshot is fresh");
        // Unchanged objects: the very same views, not read again.
        let (second, fresh) = views.of(&[a.clone(), b.clone()]);
        assert!(first.iter().zip(&second).all(|(x, y)| Arc::ptr_eq(x, y)));
        assert!(fresh.is_empty(), "nothing read again is fresh");
        // The watch replaced b (another node now) and removed a.
        let b2 = endpoint("10.0.0.2", "n2");
        let (third, fresh) = views.of(std::slice::from_ref(&b2));
        assert_eq!(third.len(), 1);
        assert_eq!(third[0].node, "n2", "a replaced object is read again");
        assert!(fresh.len() == 1 && Arc::ptr_eq(&fresh[0], &third[0]), "and is fresh");
        assert_eq!(views.cached(), 1, "what left the store is forgotten");
        // A part of the store read by a queue pass: what it read is fresh
        // there, and not again in the next full snapshot.
        let c = endpoint("10.0.0.4", "n1");
        let (part, fresh) = views.some([c.clone()].iter());
        assert!(part.len() == 1 && fresh.len() == 1);
        let (_, fresh) = views.of(&[b2, c]);
        assert!(fresh.is_empty());
        // A hold has no lease view, and is remembered as such.
        let mut hold = (*endpoint("10.0.0.3", "n1")).clone();
        hold.spec.role = Some(netendpoint_crd::Role::Hold);
        let (held, fresh) = views.of(&[Arc::new(hold)]);
        assert!(held.is_empty() && fresh.is_empty());
    }

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
        let (networks, problems) = networks_in_files(texts.iter().map(|(n, t)| (*n, t.as_str())));
        assert!(problems.is_empty(), "{problems:?}");
        let caps = capacities(&networks);
        assert_eq!(caps.len(), 1);
        let c = caps["pods"];
        assert!(c.v4 > 0 && c.v6 > 0, "{c:?}");
    }
}
