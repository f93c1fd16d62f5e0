//! The strings netendpoint's Events carry: every reason, and who reports
//! them. Agents, alerts and `kubectl netendpoint why` match on these, so
//! each is defined once, here, below every part that records or reads one.

/// `reportingController` (and `reportingInstance`) of the plugin's Events:
/// it runs once per command and has no long-lived instance.
pub const REPORTER_PLUGIN: &str = "netendpoint-cni";
/// `reportingController` of netendpoint-controller's Events, and the field
/// manager of what it applies.
pub const REPORTER_CONTROLLER: &str = "netendpoint-controller";
/// `reportingController` of `kubectl netendpoint`'s Events; the reporting
/// instance is the user who asked.
pub const REPORTER_KUBECTL: &str = "kubectl-netendpoint";

/// A release's finalizers were force-removed after `forceReleaseAfter`
/// (by the controller, by a plugin with `crossNode: plugin`, or by
/// `kubectl netendpoint release --force`).
pub const REASON_FORCED_RELEASE: &str = "ForcedRelease";
/// An ADD failed for lack of IPs (recorded about its Pod).
pub const REASON_POOL_EXHAUSTED: &str = "PoolExhausted";
/// The controller ended a sticky hold.
pub const REASON_STICKY_HOLD_ENDED: &str = "StickyHoldEnded";
/// The controller requested the release of a lease of a vanished node.
pub const REASON_NODE_VANISHED: &str = "NodeVanished";
/// The controller requested the release of a lease whose Pod is gone.
pub const REASON_POD_GONE: &str = "PodGone";
/// The controller refused to create an incarnation (the message says why).
pub const REASON_INCARNATION_REFUSED: &str = "IncarnationRefused";
/// The controller created an incarnation of a hold.
pub const REASON_INCARNATION_CREATED: &str = "IncarnationCreated";
/// The controller accepted a request while the previous incarnation lives
/// (a VM's live migration).
pub const REASON_INCARNATION_ACCEPTED: &str = "IncarnationAccepted";
/// The controller does not answer early a request of a claim that
/// migrates: its Pod is not the VM's migration target (the message says
/// why); its incarnation comes once the current one is gone.
pub const REASON_INCARNATION_WAITS: &str = "IncarnationWaits";
/// An ADD waits in its full pool's queue (recorded about its Pod, with its
/// place in the queue).
pub const REASON_WAITING_FOR_IP: &str = "WaitingForIP";
/// A write was refused because an admission policy found no parameters: an
/// install object it reads is missing, or the API server does not read it
/// (the message names the ConfigMap and the cure; see [`crate::admission`]).
pub const REASON_ADMISSION_PARAMS_MISSING: &str = "AdmissionParamsMissing";
/// `netendpoint-pools` held other ranges, for pools the network config
/// defines, than the config says (changed by hand, or by whoever holds the
/// controller's token): the controller wrote them back. Recorded about the
/// ConfigMap, naming the pools.
pub const REASON_POOLS_PARAM_CHANGED: &str = "PoolsParamChanged";
