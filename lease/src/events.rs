//! Events about leases and Pods, and the references they are about.
//!
//! The plugin runs once per command and so never extends a series; it
//! writes each Event with [`event_object`], the fields kube-runtime's
//! `Recorder` writes for a first occurrence. The long-running controller
//! uses the `Recorder` itself, with the same references.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use netendpoint_crd::GROUP;

/// Who writes an Event (`reportingController`, `reportingInstance`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reporter {
    /// The component, e.g. `netendpoint-cni`.
    pub controller: String,
    /// The instance (a Pod name, or the component again for one-shot processes).
    pub instance: String,
}

impl Reporter {
    /// A reporter whose instance is its component's name.
    pub fn component(name: &str) -> Self {
        Self { controller: name.to_string(), instance: name.to_string() }
    }
}

/// The reference to lease `name` (UID `uid`).
pub fn lease_ref(name: &str, uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some(format!("{GROUP}/v1alpha1")),
        kind: Some("NetworkEndpoint".into()),
        name: Some(name.to_string()),
        uid: (!uid.is_empty()).then(|| uid.to_string()),
        ..ObjectReference::default()
    }
}

/// The reference to Pod `namespace`/`name` (UID `uid`, when known).
pub fn pod_ref(namespace: &str, name: &str, uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(namespace.to_string()),
        name: Some(name.to_string()),
        uid: (!uid.is_empty()).then(|| uid.to_string()),
        ..ObjectReference::default()
    }
}

/// The events.k8s.io/v1 Event `reporter` records about `regarding` at `now`.
///
/// `action` is the reason, the note is cut to 1000 characters, and the Event
/// lives in the namespace of `regarding` (`default` for a cluster-scoped
/// object such as a NetworkEndpoint).
pub fn event_object(
    reporter: &Reporter,
    regarding: ObjectReference,
    reason: &str,
    note: String,
    warning: bool,
    now: Timestamp,
) -> Event {
    let namespace = regarding.namespace.clone().unwrap_or_else(|| "default".to_string());
    let name = format!("{}.{:x}", regarding.name.as_deref().unwrap_or(&reporter.controller), now.as_nanosecond());
    Event {
        metadata: ObjectMeta { name: Some(name), namespace: Some(namespace), ..ObjectMeta::default() },
        action: Some(reason.to_string()),
        reason: Some(reason.to_string()),
        note: Some(note.chars().take(1000).collect()),
        type_: Some(if warning { "Warning" } else { "Normal" }.to_string()),
        event_time: Some(MicroTime(now)),
        regarding: Some(regarding),
        reporting_controller: Some(reporter.controller.chars().take(128).collect()),
        reporting_instance: Some(reporter.instance.chars().take(128).collect()),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn events_carry_what_the_recorder_writes() {
        let now = "2026-01-01T00:00:00Z".parse::<Timestamp>().unwrap();
        let me = Reporter::component("netendpoint-cni");
        let ev = event_object(&me, lease_ref("p.10.0.0.2", "u1"), "ForcedRelease", "x".repeat(2000), true, now);
        assert_eq!(ev.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(ev.metadata.name, Some(format!("p.10.0.0.2.{:x}", now.as_nanosecond())));
        assert_eq!((ev.reason.as_deref(), ev.action.as_deref()), (Some("ForcedRelease"), Some("ForcedRelease")));
        assert_eq!(ev.type_.as_deref(), Some("Warning"));
        assert_eq!(ev.note.map(|n| n.len()), Some(1000));
        assert_eq!(ev.regarding.unwrap().uid.as_deref(), Some("u1"));
        assert_eq!(ev.reporting_controller.as_deref(), Some("netendpoint-cni"));
        assert_eq!(ev.reporting_instance.as_deref(), Some("netendpoint-cni"));
        let ev = event_object(&me, pod_ref("ns", "p", ""), "PoolExhausted", String::new(), false, now);
        assert_eq!((ev.metadata.namespace.as_deref(), ev.type_.as_deref()), (Some("ns"), Some("Normal")));
        assert_eq!(ev.regarding.unwrap().uid, None);
    }
}
