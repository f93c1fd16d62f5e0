//! The JSON patches that change a lease. Each one tests the object's UID,
//! and where it acts on what a reader saw, its resourceVersion or the exact
//! finalizer at an index, before it changes anything: a successor under the
//! same name, or a lease changed since it was read, makes the patch fail
//! (HTTP 422 or 409) instead of acting on the wrong object.

use json_patch::jsonptr::PointerBuf;
use json_patch::{Patch, PatchOperation, RemoveOperation, TestOperation};

fn ptr(tokens: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(tokens.iter().copied())
}

fn test(tokens: &[&str], value: serde_json::Value) -> PatchOperation {
    PatchOperation::Test(TestOperation { path: ptr(tokens), value })
}

fn remove(tokens: &[&str]) -> PatchOperation {
    PatchOperation::Remove(RemoveOperation { path: ptr(tokens) })
}

/// Removes every finalizer of exactly the object that was read (UID and
/// resourceVersion): a forced release of a release that outlived its bound.
pub fn force_release(uid: &str, resource_version: &str) -> Patch {
    Patch(vec![
        test(&["metadata", "resourceVersion"], resource_version.into()),
        test(&["metadata", "uid"], uid.into()),
        remove(&["metadata", "finalizers"]),
    ])
}

/// Removes `finalizer`, found at `index`, from the object with `uid`, and
/// nothing else: another writer's finalizer never moves under this patch.
pub fn remove_finalizer(uid: &str, index: usize, finalizer: &str) -> Patch {
    let i = index.to_string();
    Patch(vec![
        test(&["metadata", "uid"], uid.into()),
        test(&["metadata", "finalizers", &i], finalizer.into()),
        remove(&["metadata", "finalizers", &i]),
    ])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn the_forced_release_tests_version_and_uid_before_removing() {
        assert_eq!(
            serde_json::to_value(force_release("u1", "42")).unwrap(),
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "42"},
                {"op": "test", "path": "/metadata/uid", "value": "u1"},
                {"op": "remove", "path": "/metadata/finalizers"},
            ])
        );
    }

    #[test]
    fn a_finalizer_is_removed_only_where_it_was_seen() {
        assert_eq!(
            serde_json::to_value(remove_finalizer("u1", 1, "a.example/x")).unwrap(),
            json!([
                {"op": "test", "path": "/metadata/uid", "value": "u1"},
                {"op": "test", "path": "/metadata/finalizers/1", "value": "a.example/x"},
                {"op": "remove", "path": "/metadata/finalizers/1"},
            ])
        );
    }
}
