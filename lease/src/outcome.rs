//! What a guarded write came to when the API server refused it.
//!
//! Every write to a lease, a hold or a claim names exactly the object it
//! read: by UID and resourceVersion preconditions, or by the `test`
//! operations of a JSON patch ([`crate::patch`], [`crate::hold`]). A refusal
//! of that kind is an answer, not a failure: the object is gone, or is no
//! longer what the write was for, and nothing was written. [`refusal`] is the
//! one place that tells such a refusal from an error; [`unless_changed`]
//! applies it with what the write's guard can mean.

/// Why the API server refused a write aimed at one object as it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// 404 NotFound: the object is gone.
    Gone,
    /// 409 Conflict: a precondition failed (the name holds another object,
    /// or a newer version of it).
    Replaced,
    /// 422: a JSON-patch `test` failed (the object changed since it was read).
    /// Not an admission policy's refusal for want of its parameters (also
    /// 422): that one is an error, and names the missing ConfigMap.
    TestFailed,
}

/// The refusal `e` is, if it is one: `None` for every other error, which a
/// caller reports or retries.
pub fn refusal(e: &kube::Error) -> Option<Refusal> {
    let kube::Error::Api(s) = e else { return None };
    if s.is_not_found() {
        Some(Refusal::Gone)
    } else if s.is_conflict() {
        Some(Refusal::Replaced)
    } else if s.code == 422 && netendpoint_crd::admission::MissingParams::of_message(&s.message).is_none() {
        Some(Refusal::TestFailed)
    } else {
        None
    }
}

/// What guards a write, and so which refusals mean "gone or changed".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// UID (and resourceVersion) preconditions only: a delete, or a merge
    /// patch carrying `metadata.uid` and `metadata.resourceVersion`. Gone
    /// and Replaced count; a 422 is an invalid request, and stays an error.
    Preconditions,
    /// A JSON patch whose `test` operations name the object: every
    /// [`Refusal`] counts.
    Tests,
}

impl Guard {
    fn admits(self, r: Refusal) -> bool {
        match self {
            Self::Preconditions => matches!(r, Refusal::Gone | Refusal::Replaced),
            Self::Tests => true,
        }
    }
}

/// `Ok(Some(v))` when the write was done; `Ok(None)` when the API server
/// refused it because the object is gone or changed, as far as `guard`
/// can tell (nothing was written); any other error as it came.
pub fn unless_changed<T>(res: kube::Result<T>, guard: Guard) -> kube::Result<Option<T>> {
    match res {
        Ok(v) => Ok(Some(v)),
        Err(e) if refusal(&e).is_some_and(|r| guard.admits(r)) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use kube::core::Status;

    fn api(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(Box::new(Status::failure("refused", reason).with_code(code)))
    }

    #[test]
    fn refusals_are_told_from_errors_and_each_guard_admits_its_own() {
        let cases = [
            // code, reason, refusal, "gone or changed" under Preconditions, under Tests
            (404, "NotFound", Some(Refusal::Gone), true, true),
            (409, "Conflict", Some(Refusal::Replaced), true, true),
            (422, "Invalid", Some(Refusal::TestFailed), false, true),
            (409, "AlreadyExists", None, false, false),
            (403, "Forbidden", None, false, false),
            (429, "TooManyRequests", None, false, false),
            (500, "InternalError", None, false, false),
        ];
        for (code, reason, want, pre, tests) in cases {
            assert_eq!(refusal(&api(code, reason)), want, "{code} {reason}");
            let changed = |guard| unless_changed::<()>(Err(api(code, reason)), guard).is_ok_and(|v| v.is_none());
            assert_eq!(changed(Guard::Preconditions), pre, "{code} {reason} under preconditions");
            assert_eq!(changed(Guard::Tests), tests, "{code} {reason} under tests");
        }
        assert_eq!(unless_changed(Ok(7), Guard::Preconditions).unwrap(), Some(7));
        let transport = kube::Error::Service(Box::new(std::io::Error::other("reset")));
        assert_eq!(refusal(&transport), None, "not an answer of the server");
    }

    #[test]
    fn a_policy_without_its_parameters_is_no_failed_test() {
        let no_params = Status::failure(
            "ValidatingAdmissionPolicy 'netendpoint-agent' with binding 'netendpoint-agent' denied request: failed \
             to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction",
            "Invalid",
        )
        .with_code(422);
        let e = kube::Error::Api(Box::new(no_params));
        assert_eq!(refusal(&e), None);
        assert!(unless_changed::<()>(Err(e), Guard::Tests).is_err(), "an error, not \"changed since read\"");
    }
}
