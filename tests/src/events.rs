//! Events about leases, as the tests read them back.

use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};

use crate::env::client;

/// An Event about a lease: who reported it and what it says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseEvent {
    /// `reportingController`, empty if unset.
    pub controller: String,
    /// `reportingInstance`, empty if unset.
    pub instance: String,
    /// `note`, empty if unset.
    pub note: String,
    /// `type` (`Normal`, `Warning`), empty if unset.
    pub type_: String,
}

/// The Events in `default` (where netendpoint records them) whose reason is
/// `reason` and that regard the object named `name`, in the server's order.
pub async fn events_about(name: &str, reason: &str) -> Vec<LeaseEvent> {
    let api: Api<Event> = Api::namespaced(client().await, "default");
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| LeaseEvent {
            controller: e.reporting_controller.unwrap_or_default(),
            instance: e.reporting_instance.unwrap_or_default(),
            note: e.note.unwrap_or_default(),
            type_: e.type_.unwrap_or_default(),
        })
        .collect()
}
