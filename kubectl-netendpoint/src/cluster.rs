//! Everything that talks to the API server: the client, the lease and Event
//! lookups, the ranges (ConfigMap), and the forced-release write.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::coordination::v1::Lease as CoordinationLease;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use netendpoint_crd::admission::{AGENTS_CONFIGMAP, POLICIES, POOLS_CONFIGMAP};
use netendpoint_crd::{
    LABEL_BLOCK, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POOL, NetworkEndpoint, REPORTER_KUBECTL, block_label_value,
    endpoint_name, label_value,
};
use netendpoint_lease::events::{Reporter, event_object, lease_ref, pod_ref};
use netendpoint_lease::outcome::{Guard, unless_changed};
use netendpoint_lease::pools::Capacity;
use netendpoint_lease::view::{Lease, ip_from_name};
use netendpoint_netconf::config::IpamConfig;
use netendpoint_netconf::networks::networks_in_files;

use crate::error::{Error, Result};
use crate::report::EventRow;
use crate::status::{ControllerFacts, InstallerFacts, NotReadyInstaller, PolicyFacts};

/// The name of the controller's Deployment and of its leader Lease.
const CONTROLLER: &str = "netendpoint-controller";
/// The name of the installer DaemonSet, and its Pods' `app.kubernetes.io/name`.
const INSTALLER: &str = "netendpoint-installer";

/// A client from `--kubeconfig` (else `KUBECONFIG` or `~/.kube/config`, else
/// in-cluster) and `--context`.
pub async fn client(kubeconfig: Option<&Path>, context: Option<&str>) -> Result<Client> {
    let opts = KubeConfigOptions { context: context.map(str::to_string), ..KubeConfigOptions::default() };
    let cfg = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|e| Error::Kubeconfig(format!("{}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(kc, &opts).await.map_err(|e| Error::Kubeconfig(e.to_string()))?
        }
        None => match Config::from_kubeconfig(&opts).await {
            Ok(c) => c,
            Err(e) if context.is_none() => Config::incluster().map_err(|_| Error::Kubeconfig(e.to_string()))?,
            Err(e) => return Err(Error::Kubeconfig(e.to_string())),
        },
    };
    Client::try_from(cfg).map_err(|e| Error::Kubeconfig(e.to_string()))
}

/// Every lease, from a metadata-only list.
pub async fn all_leases(client: &Client) -> Result<Vec<Lease>> {
    let api: Api<NetworkEndpoint> = Api::all(client.clone());
    let list = api.list(&ListParams::default()).await.map_err(|e| Error::api("list networkendpoints", e))?;
    Ok(list.items.iter().filter_map(Lease::of).collect())
}

/// The waiting ADDs of every full pool (one LIST of the queue entries).
pub async fn all_waiters(client: &Client) -> Result<Vec<netendpoint_lease::queue::Waiter>> {
    let api: Api<netendpoint_crd::NetworkEndpointNeed> = Api::all(client.clone());
    let list = api.list(&ListParams::default()).await.map_err(|e| Error::api("list networkendpointneeds", e))?;
    Ok(list.items.iter().filter_map(netendpoint_lease::queue::Waiter::of).collect())
}

/// Where the pools' ranges come from.
#[derive(Debug, Clone)]
pub enum Ranges {
    /// Network config files on disk (`--config`).
    Files(Vec<PathBuf>),
    /// The ConfigMap the installer renders the network config from (`namespace/name`), as the controller reads it.
    ConfigMap(String),
}

/// The capacities by pool label value, the sources they came from, and warnings to print.
pub async fn capacities(
    client: &Client,
    ranges: &Ranges,
) -> Result<(HashMap<String, Capacity>, Vec<String>, Vec<String>)> {
    let (networks, sources, warnings) = networks(client, ranges).await?;
    Ok((netendpoint_netconf::networks::capacities(&networks), sources, warnings))
}

/// The netendpoint networks of the network config (files or the ConfigMap),
/// validated as the plugin validates them, the sources they came from, and
/// warnings to print (a section that does not validate, a ConfigMap that is
/// missing or may not be read).
pub async fn networks(client: &Client, ranges: &Ranges) -> Result<(Vec<IpamConfig>, Vec<String>, Vec<String>)> {
    let warn = |problems: Vec<netendpoint_netconf::error::Error>| problems.iter().map(ToString::to_string).collect();
    match ranges {
        Ranges::Files(paths) => {
            let mut texts = Vec::new();
            for p in paths {
                let text = std::fs::read_to_string(p)
                    .map_err(|source| Error::ConfigFile { path: p.display().to_string(), source })?;
                texts.push((p.display().to_string(), text));
            }
            let (networks, problems) = networks_in_files(texts.iter().map(|(n, t)| (n.as_str(), t.as_str())));
            Ok((networks, texts.into_iter().map(|(n, _)| n).collect(), warn(problems)))
        }
        Ranges::ConfigMap(spec) if spec.is_empty() => Ok((Vec::new(), Vec::new(), Vec::new())),
        Ranges::ConfigMap(spec) => match config_map(client, "--net-conf", spec).await? {
            Found::Data(data) => {
                let (networks, problems) = networks_in_files(data.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                Ok((networks, vec![format!("configmap/{spec}")], warn(problems)))
            }
            Found::Missing(why) => Ok((
                Vec::new(),
                Vec::new(),
                vec![format!("{why}: the networks are unknown (pass --config <network config file>)")],
            )),
        },
    }
}

/// The agents list (`<namespace>.<serviceaccount>` → finalizer) of the
/// ConfigMap `spec` (`namespace/name`), the source, and warnings.
pub async fn registered_agents(
    client: &Client,
    spec: &str,
) -> Result<(BTreeMap<String, String>, Option<String>, Vec<String>)> {
    match config_map(client, "--agents", spec).await? {
        Found::Data(data) => Ok((data, Some(format!("configmap/{spec}")), Vec::new())),
        Found::Missing(why) => Ok((BTreeMap::new(), None, vec![format!("{why}: no agent counts as registered")])),
    }
}

/// A ConfigMap's data, or why it could not be had.
enum Found {
    Data(BTreeMap<String, String>),
    Missing(String),
}

/// Reads the ConfigMap `spec` (`namespace/name`, given with `flag`). A
/// missing one, or one the caller may not read, is [`Found::Missing`].
async fn config_map(client: &Client, flag: &str, spec: &str) -> Result<Found> {
    let Some((ns, name)) = spec.split_once('/').filter(|(a, b)| !a.is_empty() && !b.is_empty()) else {
        return Err(Error::Refused(format!("{flag} {spec:?} is not namespace/name")));
    };
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    match api.get_opt(name).await {
        Ok(Some(cm)) => Ok(Found::Data(cm.data.unwrap_or_default())),
        Ok(None) => Ok(Found::Missing(format!("ConfigMap {spec} not found"))),
        Err(kube::Error::Api(s)) if s.code == 403 => {
            Ok(Found::Missing(format!("not allowed to read ConfigMap {spec}")))
        }
        Err(e) => Err(Error::api(format!("get ConfigMap {spec}"), e)),
    }
}

/// What `why` and `release` look up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// An address, in one pool or any.
    Ip(IpAddr),
    /// A Pod.
    Pod {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
}

impl Target {
    /// `10.0.0.1`, `fd00::1` or `namespace/pod`.
    pub fn parse(s: &str) -> Result<Self> {
        if let Ok(ip) = s.parse() {
            return Ok(Target::Ip(ip));
        }
        match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
                Ok(Target::Pod { namespace: ns.into(), name: name.into() })
            }
            _ => Err(Error::BadTarget(s.into())),
        }
    }
}

/// The leases (full objects) of `target`, in `pool` when given, by name.
pub async fn find_leases(client: &Client, target: &Target, pool: Option<&str>) -> Result<Vec<NetworkEndpoint>> {
    let api: Api<NetworkEndpoint> = Api::all(client.clone());
    let list = |selector: String| {
        let api = api.clone();
        async move {
            api.list(&ListParams::default().labels(&selector))
                .await
                .map(|l| l.items)
                .map_err(|e| Error::api(format!("list networkendpoints ({selector})"), e))
        }
    };
    let in_pool = |ep: &NetworkEndpoint| pool.is_none_or(|p| ep.spec.pool == p);
    let mut found: Vec<NetworkEndpoint> = match target {
        Target::Ip(ip) => {
            if let Some(p) = pool {
                let name = endpoint_name(p, *ip);
                api.get_opt(&name)
                    .await
                    .map_err(|e| Error::api(format!("get networkendpoint {name}"), e))?
                    .into_iter()
                    .collect()
            } else {
                // Every lease carries its block label; older ones may not, so fall back to names.
                let mut by_block = list(format!("{LABEL_BLOCK}={}", block_label_value(*ip))).await?;
                // A sticky address has its hold and an incarnation, named apart: match the spec's IP.
                by_block.retain(|ep| ep.ip() == Some(*ip));
                if by_block.is_empty() {
                    let named = api
                        .list_metadata(&ListParams::default())
                        .await
                        .map_err(|e| Error::api("list networkendpoints", e))?;
                    for m in named.items {
                        let Some(name) = m.metadata.name else { continue };
                        if ip_from_name(&name) == Some(*ip)
                            && let Some(ep) =
                                api.get_opt(&name).await.map_err(|e| Error::api(format!("get {name}"), e))?
                        {
                            by_block.push(ep);
                        }
                    }
                }
                by_block
            }
        }
        Target::Pod { namespace, name } => {
            let mut selector =
                format!("{LABEL_POD_NAMESPACE}={},{LABEL_POD_NAME}={}", label_value(namespace), label_value(name));
            if let Some(p) = pool {
                selector.push_str(&format!(",{LABEL_POOL}={}", label_value(p)));
            }
            let mut eps = list(selector).await?;
            eps.retain(|ep| ep.spec.pod.as_ref().is_some_and(|p| &p.namespace == namespace && &p.name == name));
            eps
        }
    };
    found.retain(in_pool);
    found.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    Ok(found)
}

/// Events about the lease, and about its Pod when it names one.
pub async fn events_of(client: &Client, ep: &NetworkEndpoint) -> Result<Vec<EventRow>> {
    let name = ep.metadata.name.clone().unwrap_or_default();
    let all: Api<CoreEvent> = Api::all(client.clone());
    let about_lease =
        ListParams::default().fields(&format!("involvedObject.kind=NetworkEndpoint,involvedObject.name={name}"));
    let mut rows: Vec<EventRow> = all
        .list(&about_lease)
        .await
        .map_err(|e| Error::api(format!("list events about {name}"), e))?
        .items
        .iter()
        .map(EventRow::from_event)
        .collect();
    if let Some(pod) = &ep.spec.pod {
        let api: Api<CoreEvent> = Api::namespaced(client.clone(), &pod.namespace);
        let about_pod =
            ListParams::default().fields(&format!("involvedObject.kind=Pod,involvedObject.name={}", pod.name));
        let events = api
            .list(&about_pod)
            .await
            .map_err(|e| Error::api(format!("list events about pod {}/{}", pod.namespace, pod.name), e))?;
        rows.extend(events.items.iter().map(EventRow::from_event));
    }
    Ok(rows)
}

/// Who the API server says we are (a SelfSubjectReview); `None` when it cannot tell.
pub async fn whoami(client: &Client) -> Option<String> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = api.create(&PostParams::default(), &SelfSubjectReview::default()).await.ok()?;
    review.status?.user_info?.username
}

/// How a forced release ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forced {
    /// The finalizers were removed.
    Done,
    /// The lease changed (or went away) since it was read: nothing was written.
    Changed,
}

/// Removes every finalizer of exactly the object `ep` was read as (UID and
/// resourceVersion tested in the same JSON patch the controller sends).
pub async fn force(client: &Client, ep: &NetworkEndpoint) -> Result<Forced> {
    let name = ep.metadata.name.clone().unwrap_or_default();
    let uid = ep.metadata.uid.as_deref().unwrap_or_default();
    let rv = ep.metadata.resource_version.as_deref().unwrap_or_default();
    let api: Api<NetworkEndpoint> = Api::all(client.clone());
    let patch = Patch::Json::<()>(netendpoint_lease::patch::force_release(uid, rv));
    match unless_changed(api.patch(&name, &PatchParams::default(), &patch).await, Guard::Tests) {
        Ok(Some(_)) => Ok(Forced::Done),
        Ok(None) => Ok(Forced::Changed),
        Err(e) => Err(Error::api(format!("remove the finalizers of {name}"), e)),
    }
}

/// Records a `reason` Warning Event about the lease and about its Pod; the
/// reporting instance is the user who asked.
pub async fn record(client: &Client, ep: &NetworkEndpoint, reason: &str, note: &str, user: &str) -> Result<()> {
    let mut about = vec![lease_ref(
        ep.metadata.name.as_deref().unwrap_or_default(),
        ep.metadata.uid.as_deref().unwrap_or_default(),
    )];
    if let Some(pod) = &ep.spec.pod {
        about.push(pod_ref(&pod.namespace, &pod.name, &pod.uid));
    }
    let me = Reporter { controller: REPORTER_KUBECTL.into(), instance: user.to_string() };
    for (i, regarding) in about.into_iter().enumerate() {
        let ev = event_object(&me, regarding, reason, note.to_string(), true, Timestamp::now());
        let ns = ev.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let result = Api::<Event>::namespaced(client.clone(), &ns).create(&PostParams::default(), &ev).await;
        // The Event about the lease is the record; one about the Pod is a courtesy.
        if let Err(e) = result
            && i == 0
        {
            return Err(Error::api(format!("record the {reason} Event"), e));
        }
    }
    Ok(())
}

/// The controller's leader Lease (`namespace/netendpoint-controller`) and
/// Deployment, as `status` judges them.
pub async fn controller_facts(client: &Client, namespace: &str) -> Result<ControllerFacts> {
    let leases: Api<CoordinationLease> = Api::namespaced(client.clone(), namespace);
    let lease = leases.get_opt(CONTROLLER).await.map_err(|e| Error::api("get the controller's leader Lease", e))?;
    let spec = lease.and_then(|l| l.spec).unwrap_or_default();
    let now = Timestamp::now();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let deployment =
        deployments.get_opt(CONTROLLER).await.map_err(|e| Error::api("get the controller's Deployment", e))?;
    Ok(ControllerFacts {
        leader: spec.holder_identity.filter(|h| !h.is_empty()),
        renewed_ago: spec.renew_time.map(|t| netendpoint_lease::age_at_least(now, t.0)),
        lease_duration: spec.lease_duration_seconds.map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0))),
        replicas: deployment.map(|d| {
            let want = d.spec.and_then(|s| s.replicas).unwrap_or(1);
            (want, d.status.and_then(|s| s.ready_replicas).unwrap_or(0))
        }),
    })
}

/// The installer DaemonSet, and each of its Pods that is not ready with the
/// last message of its failed readiness probe (the kubelet's `Unhealthy` Event).
pub async fn installer_facts(client: &Client, namespace: &str) -> Result<InstallerFacts> {
    let sets: Api<DaemonSet> = Api::namespaced(client.clone(), namespace);
    let Some(set) = sets.get_opt(INSTALLER).await.map_err(|e| Error::api("get the installer DaemonSet", e))? else {
        return Ok(InstallerFacts::default());
    };
    let status = set.status.unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let selector = format!("app.kubernetes.io/name={INSTALLER}");
    let list =
        pods.list(&ListParams::default().labels(&selector)).await.map_err(|e| Error::api("list installer Pods", e))?;
    let events: Api<CoreEvent> = Api::namespaced(client.clone(), namespace);
    let mut not_ready = Vec::new();
    for pod in list.items {
        let ready = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if ready {
            continue;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let fields = format!("involvedObject.name={name},reason=Unhealthy");
        let found =
            events.list(&ListParams::default().fields(&fields)).await.map_err(|e| Error::api("list Events", e))?;
        let message = found
            .items
            .into_iter()
            .max_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0).or(e.event_time.as_ref().map(|t| t.0)))
            .and_then(|e| e.message);
        not_ready.push(NotReadyInstaller {
            pod: name,
            node: pod.spec.and_then(|s| s.node_name).unwrap_or_default(),
            message,
        });
    }
    Ok(InstallerFacts {
        present: true,
        desired: status.desired_number_scheduled,
        ready: status.number_ready,
        not_ready,
    })
}

/// Which admission policies of deploy/, their bindings and their parameter
/// ConfigMaps (in `namespace`) the cluster lacks.
pub async fn policy_facts(client: &Client, namespace: &str) -> Result<PolicyFacts> {
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let have: Vec<String> = policies
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| Error::api("list validatingadmissionpolicies", e))?
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let bound: Vec<String> = bindings
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| Error::api("list validatingadmissionpolicybindings", e))?
        .items
        .into_iter()
        .filter_map(|b| b.metadata.name)
        .collect();
    let missing = |present: &[String]| -> Vec<String> {
        POLICIES.iter().filter(|p| !present.iter().any(|n| n == *p)).map(|p| p.to_string()).collect()
    };
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let mut missing_params = Vec::new();
    for name in [AGENTS_CONFIGMAP, POOLS_CONFIGMAP] {
        if maps.get_opt(name).await.map_err(|e| Error::api(format!("get ConfigMap {name}"), e))?.is_none() {
            missing_params.push(format!("{namespace}/{name}"));
        }
    }
    Ok(PolicyFacts { missing_policies: missing(&have), missing_bindings: missing(&bound), missing_params })
}
