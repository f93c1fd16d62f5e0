//! The Kubernetes side: a watcher on the node's endpoints, finalizer patches
//! that touch only the object they were meant for (see [`crate::finalizer`]),
//! and Events on failed teardowns.
//!
//! Watch events are processed one at a time, in the order the API server sent
//! them. Installing a rule is immediate; a teardown runs as its own task (after
//! the optional injected delay), like a real agent whose teardown is slow
//! (draining, remote calls). Nothing in the agent orders a teardown before a
//! later install of the same IP: with netendpoint the order comes from the
//! protocol — the next holder cannot exist until our finalizer is gone, and we
//! remove it only after the rule.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::watcher::{self, Event};
use kube::{Client, Resource};
use netendpoint_crd::{ENDPOINTS_ONLY, FIELD_NODE, NetworkEndpoint};
use tracing::{Instrument, debug, info, info_span, warn};

use crate::agent::{Agent, EndpointKey};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::finalizer::{Removal, add_own_finalizer, remove_own_finalizer};

/// Event reason recorded on an endpoint whose teardown failed.
pub const REASON_TEARDOWN_FAILED: &str = "TeardownFailed";

/// How long a finished teardown is remembered, so that the DELETED event that
/// follows it does not start a second one.
const DONE_TTL: Duration = Duration::from_secs(300);

/// Builds a client from `kubeconfig`, or by inference (in-cluster, then `KUBECONFIG`).
pub async fn client(kubeconfig: Option<&Path>) -> Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(Error::Kubeconfig)?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.map_err(Error::Kubeconfig)?
        }
        None => kube::Config::infer().await.map_err(Error::InferConfig)?,
    };
    // TCP_NODELAY: the PATCH that removes this agent's finalizer right
    // after a watch event is not held back by Nagle's algorithm (about
    // 40 ms of every release). An agent of its own should do the same.
    Ok(netendpoint_lease::connect::client_builder(&config).map_err(Error::Kube)?.build())
}

#[derive(Default)]
struct Tasks {
    inflight: HashSet<String>,
    done: HashMap<String, Instant>,
}

/// Shared state of the watch loop and its teardown tasks.
struct Context {
    api: Api<NetworkEndpoint>,
    agent: Arc<Agent>,
    cfg: Config,
    recorder: Recorder,
    tasks: Mutex<Tasks>,
}

/// Runs the agent until the watch stream ends (it does not, except on shutdown).
///
/// On every (re)list the table is reconciled to the listed endpoints: live ones
/// get their rule (a changed UID replaces the rule), releasing ones are torn
/// down, and rules whose endpoint vanished are removed.
pub async fn run(client: Client, agent: Arc<Agent>, cfg: Config) -> Result<()> {
    let api: Api<NetworkEndpoint> = Api::all(client.clone());
    let recorder =
        Recorder::new(client, Reporter { controller: "watcher-example".into(), instance: Some(cfg.node.clone()) });
    // Its node's endpoints only (the events it receives grow with its node,
    // not with the cluster), and never a sticky hold: a hold owns an
    // address between the incarnations of a claim and carries no rule.
    let selector = format!("{FIELD_NODE}={}", cfg.node);
    info!(node = %cfg.node, finalizer = ?cfg.finalizer, lazy = cfg.lazy_finalizer,
        naive_ip_keyed = cfg.naive_ip_keyed, "watching endpoints with {selector},{ENDPOINTS_ONLY}");
    let ctx = Arc::new(Context { api: api.clone(), agent, cfg, recorder, tasks: Mutex::default() });
    let config = watcher::Config::default().fields(&selector).labels(ENDPOINTS_ONLY);
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    let mut listed: HashMap<IpAddr, String> = HashMap::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => listed.clear(),
            Ok(Event::InitApply(ep)) => {
                if let Ok(key) = EndpointKey::try_from(&ep) {
                    listed.insert(key.ip, key.uid);
                }
                ctx.observe(ep);
            }
            Ok(Event::InitDone) => {
                if let Err(e) = ctx.agent.prune(&listed) {
                    warn!(error = %e, "resync could not remove every stale rule");
                }
                info!(endpoints = listed.len(), rules = ctx.agent.rules().len(), "resynced with the API server");
                ctx.agent.set_ready();
            }
            Ok(Event::Apply(ep)) => ctx.observe(ep),
            Ok(Event::Delete(ep)) => ctx.deleted(ep),
            Err(e) => warn!(error = %e, "watch failed; retrying with backoff"),
        }
    }
    Ok(())
}

fn has_finalizer(ep: &NetworkEndpoint, finalizer: &str) -> bool {
    ep.metadata.finalizers.as_ref().is_some_and(|f| f.iter().any(|x| x == finalizer))
}

impl Context {
    /// An ADDED/MODIFIED endpoint (or one from a list).
    fn observe(self: &Arc<Self>, ep: NetworkEndpoint) {
        if ep.is_hold() {
            // The selector leaves holds out; an API server that ignored it must not add a rule.
            return debug!(hold = ?ep.metadata.name, "ignoring a sticky hold");
        }
        let key = match EndpointKey::try_from(&ep) {
            Ok(k) => k,
            Err(e) => return warn!(error = %e, "ignoring endpoint"),
        };
        let _span = info_span!("reconcile", endpoint = %key.name, ip = %key.ip, uid = %key.uid).entered();
        if ep.is_releasing() {
            return self.spawn_teardown(key, Some(ep));
        }
        if self.tasks.lock().is_ok_and(|t| t.done.contains_key(&key.uid)) {
            return debug!("already torn down");
        }
        if let Some(f) = self.cfg.finalizer.as_deref()
            && self.cfg.lazy_finalizer
            && !has_finalizer(&ep, f)
        {
            // As the kube-rs finalizer contract asks: apply only once the finalizer is on the object.
            // The MODIFIED event of our patch brings the endpoint back here.
            return self.spawn_add_finalizer(key, ep);
        }
        if let Err(e) = self.agent.install(&key) {
            warn!(error = %e, "cannot install the rule");
        }
    }

    /// A DELETED endpoint: its teardown already ran unless nothing gated the
    /// deletion (no finalizer of ours, or it was force-removed).
    fn deleted(self: &Arc<Self>, ep: NetworkEndpoint) {
        let Ok(key) = EndpointKey::try_from(&ep) else { return };
        if let Ok(mut t) = self.tasks.lock()
            && (t.inflight.contains(&key.uid) || t.done.remove(&key.uid).is_some())
        {
            return;
        }
        let _span = info_span!("reconcile", endpoint = %key.name, ip = %key.ip, uid = %key.uid).entered();
        self.spawn_teardown(key, None);
    }

    fn spawn_add_finalizer(self: &Arc<Self>, key: EndpointKey, ep: NetworkEndpoint) {
        let Some(name) = self.cfg.finalizer.clone() else { return };
        let ctx = self.clone();
        let span = info_span!("add_finalizer", endpoint = %key.name, ip = %key.ip, uid = %key.uid);
        tokio::spawn(
            async move {
                match add_own_finalizer(&ctx.api, &ep, &name).await {
                    Ok(true) => {
                        ctx.agent.metrics.finalizer_added();
                        info!(finalizer = %name, "finalizer added lazily");
                    }
                    // The endpoint changed, was replaced or is gone: its next event (if any) brings us back.
                    Ok(false) => debug!("finalizer add raced; will retry on the next event"),
                    Err(e) => warn!(error = %e, "cannot add the finalizer"),
                }
            }
            .instrument(span),
        );
    }

    /// Starts the teardown of `key` unless one is running or finished.
    fn spawn_teardown(self: &Arc<Self>, key: EndpointKey, obj: Option<NetworkEndpoint>) {
        {
            let Ok(mut t) = self.tasks.lock() else { return };
            if t.inflight.contains(&key.uid) || t.done.contains_key(&key.uid) {
                return;
            }
            t.inflight.insert(key.uid.clone());
        }
        let ctx = self.clone();
        let span = info_span!("teardown", endpoint = %key.name, ip = %key.ip, uid = %key.uid);
        tokio::spawn(
            async move {
                let delay = ctx.cfg.teardown_delay.sample();
                if !delay.is_zero() {
                    debug!(delay_ms = delay.as_millis() as u64, "injected teardown delay");
                    tokio::time::sleep(delay).await;
                }
                let mut obj = obj;
                let mut backoff = Duration::from_millis(100);
                let mut published = false;
                loop {
                    let Err(e) = ctx.teardown_once(&key, obj.as_ref()).await else { break };
                    ctx.agent.metrics.teardown_failed();
                    warn!(error = %e, retry_in_ms = backoff.as_millis() as u64, "teardown failed");
                    if !published {
                        published = ctx.publish_failure(obj.as_ref(), &e).await;
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    obj = match ctx.api.get_opt(&key.name).await {
                        Ok(Some(fresh)) if fresh.metadata.uid.as_deref() == Some(key.uid.as_str()) => Some(fresh),
                        // Gone, or the name now belongs to the next holder: only our rule is left to remove.
                        Ok(_) => None,
                        Err(_) => obj,
                    };
                }
                if let Ok(mut t) = ctx.tasks.lock() {
                    t.inflight.remove(&key.uid);
                    let now = Instant::now();
                    t.done.retain(|_, at| now.duration_since(*at) < DONE_TTL);
                    t.done.insert(key.uid.clone(), now);
                }
            }
            .instrument(span),
        );
    }

    /// Removes the rule, then (if we hold one) our finalizer from this very
    /// object (this UID), and nothing else.
    async fn teardown_once(&self, key: &EndpointKey, obj: Option<&NetworkEndpoint>) -> Result<()> {
        self.agent.teardown(key)?;
        let (Some(obj), Some(name)) = (obj, self.cfg.finalizer.as_deref()) else { return Ok(()) };
        if !has_finalizer(obj, name) {
            return Ok(());
        }
        match remove_own_finalizer(&self.api, obj, name).await? {
            Removal::Removed => {
                let seconds = obj
                    .metadata
                    .deletion_timestamp
                    .as_ref()
                    .map_or(0.0, |t| Timestamp::now().duration_since(t.0).as_secs_f64());
                self.agent.metrics.finalizer_removed(seconds);
                info!(finalizer = %name, release_seconds = seconds, "finalizer removed");
            }
            // Force-released while we were slow: nobody waits on us any more.
            Removal::Gone => info!(finalizer = %name, "endpoint gone before our finalizer was removed"),
            // The next holder of the IP: its finalizer gates its own release, not ours.
            Removal::Replaced(successor) => info!(finalizer = %name, successor_uid = %successor,
                "endpoint replaced under the same name; the successor's finalizer was left alone"),
            Removal::NotHeld => info!(finalizer = %name, "our finalizer was already removed by someone else"),
        }
        Ok(())
    }

    /// Records a Warning Event on the endpoint. Returns true if it was recorded.
    async fn publish_failure(&self, obj: Option<&NetworkEndpoint>, e: &Error) -> bool {
        let Some(obj) = obj else { return false };
        let mut note = format!("{e}");
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            note.push_str(&format!(": {s}"));
            source = s.source();
        }
        note.truncate(1000);
        let event = KubeEvent {
            type_: EventType::Warning,
            reason: REASON_TEARDOWN_FAILED.into(),
            note: Some(note),
            action: "Teardown".into(),
            secondary: None,
        };
        match self.recorder.publish(&event, &obj.object_ref(&())).await {
            Ok(()) => true,
            Err(err) => {
                warn!(error = %err, "cannot record the TeardownFailed event");
                false
            }
        }
    }
}
