//! Adding and removing our finalizer, on one object only.
//!
//! An endpoint's name is `<pool>.<ip>`, so after a release the next holder of
//! the IP gets the same name. Only `metadata.uid` tells the two apart. Every
//! patch here therefore tests `/metadata/uid` before it touches
//! `/metadata/finalizers`. A patch meant for the old holder fails (HTTP 422)
//! on its successor and changes nothing.
//!
//! `kube::runtime::finalizer` patches by name and tests only the finalizer's
//! index. If the old holder was force-released while our teardown was slow,
//! and a successor was created with our finalizer, that helper's late removal
//! strips the finalizer from the successor. The successor's release is then no
//! longer gated on us. Copy these functions instead.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation, TestOperation};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use netendpoint_crd::NetworkEndpoint;
use serde_json::Value;
use tracing::debug;

use crate::error::{Error, Result};

/// How often [`remove_own_finalizer`] rereads the object and patches again
/// while the object keeps its UID but its finalizers keep moving.
const REMOVE_ATTEMPTS: usize = 5;

/// What [`remove_own_finalizer`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Removal {
    /// Our finalizer is off the object we tore down.
    Removed,
    /// The object is gone (for example after a forced release): nothing is
    /// left to acknowledge.
    Gone,
    /// The name now belongs to a successor with this UID. Its finalizers were
    /// left alone.
    Replaced(String),
    /// The object still exists but no longer holds our finalizer: someone
    /// else removed it.
    NotHeld,
}

/// Removes `finalizer` from `obj`, and from no other object and entry.
///
/// Each attempt is one JSON patch:
/// `test /metadata/uid == <obj's UID>`,
/// `test /metadata/finalizers/<i> == finalizer`,
/// `remove /metadata/finalizers/<i>`.
/// It removes our entry of this object or changes nothing. It never rewrites
/// the list, so other agents' finalizers are safe.
///
/// A 404 means the object is gone. A failed test (422) or a conflict (409)
/// leads to a fresh read. The patch is tried again, with the fresh index, only
/// while the name still belongs to `obj`'s UID, so a successor is never patched.
/// Any other API error is returned, and the caller retries later.
pub async fn remove_own_finalizer(
    api: &Api<NetworkEndpoint>,
    obj: &NetworkEndpoint,
    finalizer: &str,
) -> Result<Removal> {
    let (name, uid) = identity(obj)?;
    let mut current = obj.clone();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let Some(index) = current.finalizers().iter().position(|f| f == finalizer) else {
            return Ok(Removal::NotHeld);
        };
        let patch = removal_patch(uid, index, finalizer);
        match api.patch(name, &PatchParams::default(), &Patch::Json::<()>(patch)).await {
            Ok(_) => return Ok(Removal::Removed),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Removal::Gone),
            Err(kube::Error::Api(s)) if (s.code == 409 || s.code == 422) && attempts < REMOVE_ATTEMPTS => {
                debug!(code = s.code, reason = %s.message, "finalizer removal not applied; rereading the endpoint");
            }
            Err(source) => return Err(Error::Finalizer { endpoint: name.into(), source }),
        }
        current = match api.get_opt(name).await {
            Ok(Some(fresh)) if fresh.metadata.uid.as_deref() == Some(uid) => fresh,
            Ok(Some(successor)) => return Ok(Removal::Replaced(successor.metadata.uid.unwrap_or_default())),
            Ok(None) => return Ok(Removal::Gone),
            Err(source) => return Err(Error::Finalizer { endpoint: name.into(), source }),
        };
    }
}

/// Adds `finalizer` to `obj`, unless the object changed since it was read.
///
/// The patch tests `/metadata/uid` and the whole finalizer list as read
/// (`null` when there is none), then appends. It never lands on a successor,
/// never adds a second copy of an entry someone added meanwhile, and never
/// drops one. Returns false, having changed nothing, when a test failed or the
/// object is gone. Whatever made the patch fail comes with its own watch event,
/// which brings the object back for another try.
pub async fn add_own_finalizer(api: &Api<NetworkEndpoint>, obj: &NetworkEndpoint, finalizer: &str) -> Result<bool> {
    let (name, uid) = identity(obj)?;
    let patch = add_patch(uid, obj.finalizers(), finalizer);
    match api.patch(name, &PatchParams::default(), &Patch::Json::<()>(patch)).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 || s.code == 422 => {
            debug!(code = s.code, reason = %s.message, "finalizer add not applied");
            Ok(false)
        }
        Err(source) => Err(Error::Finalizer { endpoint: name.into(), source }),
    }
}

/// The object's name and UID, which every patch needs.
fn identity(obj: &NetworkEndpoint) -> Result<(&str, &str)> {
    let name = obj.metadata.name.as_deref().unwrap_or_default();
    let bad = |reason: &str| Error::BadEndpoint { name: name.into(), reason: reason.into() };
    let uid = obj.metadata.uid.as_deref().filter(|u| !u.is_empty()).ok_or_else(|| bad("no metadata.uid"))?;
    if name.is_empty() {
        return Err(bad("no metadata.name"));
    }
    Ok((name, uid))
}

fn pointer(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

fn test_uid(uid: &str) -> PatchOperation {
    PatchOperation::Test(TestOperation { path: pointer(&["metadata", "uid"]), value: uid.into() })
}

/// `test uid`, `test finalizers/<index> == finalizer`, `remove finalizers/<index>`.
fn removal_patch(uid: &str, index: usize, finalizer: &str) -> json_patch::Patch {
    let entry = pointer(&["metadata", "finalizers", &index.to_string()]);
    json_patch::Patch(vec![
        test_uid(uid),
        PatchOperation::Test(TestOperation { path: entry.clone(), value: finalizer.into() }),
        PatchOperation::Remove(RemoveOperation { path: entry }),
    ])
}

/// `test uid`, `test finalizers == current`, then add `finalizer` (creating
/// the list when there is none), as `kube::runtime::finalizer` does plus the UID.
fn add_patch(uid: &str, current: &[String], finalizer: &str) -> json_patch::Patch {
    let list = pointer(&["metadata", "finalizers"]);
    let (expected, path, value) = if current.is_empty() {
        (Value::Null, list.clone(), Value::from(vec![finalizer]))
    } else {
        (Value::from(current), pointer(&["metadata", "finalizers", "-"]), Value::from(finalizer))
    };
    json_patch::Patch(vec![
        test_uid(uid),
        PatchOperation::Test(TestOperation { path: list, value: expected }),
        PatchOperation::Add(AddOperation { path, value }),
    ])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn ops(p: json_patch::Patch) -> Value {
        serde_json::to_value(p).unwrap()
    }

    #[test]
    fn the_removal_patch_tests_the_uid_before_the_entry() {
        assert_eq!(
            ops(removal_patch("u1", 1, "a.example/x")),
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "u1"},
                {"op": "test", "path": "/metadata/finalizers/1", "value": "a.example/x"},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ])
        );
    }

    #[test]
    fn the_add_patch_tests_the_uid_and_the_list_as_read() {
        assert_eq!(
            ops(add_patch("u1", &[], "a.example/x")),
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "u1"},
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": ["a.example/x"]},
            ])
        );
        assert_eq!(
            ops(add_patch("u1", &["b.example/y".into()], "a.example/x")),
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "u1"},
                {"op": "test", "path": "/metadata/finalizers", "value": ["b.example/y"]},
                {"op": "add", "path": "/metadata/finalizers/-", "value": "a.example/x"},
            ])
        );
    }
}
