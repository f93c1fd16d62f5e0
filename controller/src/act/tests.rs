//! The writes of every action, request by request, against a scripted API
//! server ([`crate::fixtures`]): each test fails if a write changes its
//! method, path, preconditions or body, or if an answer of "changed or
//! gone" leads to anything more.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use netendpoint_crd::ipamclaim::IPAMClaim;
use serde_json::json;

use super::*;
use crate::decide::HoldEnd;
use crate::fixtures::{Exchange, TestClaim, TestHold, TestLease, TestPod, event, lease_object, statefulset};

const NEPS: &str = "/apis/netendpoint.dev/v1alpha1/networkendpoints";
const CLAIMS: &str = "/apis/k8s.cni.cncf.io/v1alpha1/namespaces/ns/ipamclaims";
const PODS: &str = "/api/v1/namespaces/ns/pods";

/// Takes `action` against a server that plays `script`, checks that the
/// whole script was played, and returns the context (for its metrics).
async fn acting(action: Action, script: Vec<Exchange>) -> Context {
    let (ctl, server) = Context::test(script);
    act(&ctl, &action).await;
    server.assert_done();
    ctl
}

/// The value of counter `netendpoint_<name>_total` for pool `p`, 0 when absent.
fn counted(ctl: &Context, name: &str) -> u64 {
    let prefix = format!("netendpoint_{name}_total{{pool=\"p\"}} ");
    ctl.metrics.render().lines().find_map(|l| l.strip_prefix(&prefix)?.parse().ok()).unwrap_or(0)
}

/// The DELETE of lease `l` with only its UID as precondition.
fn delete_by_uid(l: &Lease) -> Exchange {
    Exchange::delete(&format!("{NEPS}/{}", l.name), json!({"preconditions": {"uid": l.uid}}))
}

#[tokio::test]
async fn a_vanished_nodes_lease_is_deleted_by_uid_and_recorded() {
    let lease = Lease::test("10.0.0.1");
    let ctl = acting(
        Action::Reclaim { lease: lease.clone() },
        vec![
            delete_by_uid(&lease),
            event(
                "p.10.0.0.1",
                "uid-10.0.0.1",
                REASON_NODE_VANISHED,
                "node n1 is gone: release of p.10.0.0.1 requested",
                true,
            ),
        ],
    )
    .await;
    assert_eq!(counted(&ctl, "node_reclaims"), 1);
}

#[tokio::test]
async fn a_gone_pods_lease_is_deleted_by_uid_and_recorded() {
    let lease = Lease::test("10.0.0.1");
    let ctl = acting(
        Action::DeleteLeak { lease: lease.clone() },
        vec![
            delete_by_uid(&lease),
            event(
                "p.10.0.0.1",
                "uid-10.0.0.1",
                REASON_POD_GONE,
                "pod UID pod-10.0.0.1 is gone: release of p.10.0.0.1 requested",
                true,
            ),
        ],
    )
    .await;
    assert_eq!(counted(&ctl, "leak_deletions"), 1);
}

#[tokio::test]
async fn a_delete_answered_gone_or_changed_is_neither_recorded_nor_counted() {
    for code in [404, 409] {
        let lease = Lease::test("10.0.0.1");
        let ctl = acting(Action::Reclaim { lease: lease.clone() }, vec![delete_by_uid(&lease).fails(code)]).await;
        assert_eq!(counted(&ctl, "node_reclaims"), 0, "{code}");
        let ctl = acting(Action::DeleteLeak { lease: lease.clone() }, vec![delete_by_uid(&lease).fails(code)]).await;
        assert_eq!(counted(&ctl, "leak_deletions"), 0, "{code}");
    }
}

/// The forced release of `lease`: tests its resourceVersion and UID, then removes every finalizer.
fn force_patch(lease: &Lease) -> Exchange {
    Exchange::json_patch(
        &format!("{NEPS}/{}", lease.name),
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": lease.resource_version},
            {"op": "test", "path": "/metadata/uid", "value": lease.uid},
            {"op": "remove", "path": "/metadata/finalizers"},
        ]),
    )
}

#[tokio::test]
async fn a_forced_release_tests_version_and_uid_before_removing_the_finalizers_and_is_recorded() {
    let lease = Lease::test("10.0.0.1").releasing(&["a.example/x", "b.example/y"]);
    let cases = [
        (ForceFor::Need("p.n2".into()), "a waiting ADD (p.n2)"),
        (ForceFor::Incarnation("p.10.0.0.5".into()), "the next incarnation of sticky hold p.10.0.0.5"),
    ];
    for (why, for_what) in cases {
        let note = format!(
            "p.10.0.0.1 released by force after 700.5s for {for_what}: finalizers [\"a.example/x\", \
             \"b.example/y\"] did not answer within forceReleaseAfter (600s)"
        );
        let action = Action::Force {
            lease: lease.clone(),
            age: Duration::from_millis(700_500),
            bound: Duration::from_secs(600),
            why,
        };
        let ctl = acting(
            action,
            vec![
                force_patch(&lease).returns(&lease_object(&lease)),
                event("p.10.0.0.1", "uid-10.0.0.1", REASON_FORCED_RELEASE, &note, true),
            ],
        )
        .await;
        assert_eq!(counted(&ctl, "forced_releases"), 1);
    }
}

#[tokio::test]
async fn a_forced_release_answered_changed_or_gone_does_nothing_more() {
    // 404: gone; 409: another object under the name; 422: a failed test
    // (the lease changed since it was read). A server error is no success
    // either: nothing is recorded, and the next pass decides again.
    for code in [404, 409, 422, 500] {
        let lease = Lease::test("10.0.0.1").releasing(&["a.example/x"]);
        let action = Action::Force {
            lease: lease.clone(),
            age: Duration::from_secs(700),
            bound: Duration::from_secs(600),
            why: ForceFor::Need("p.n2".into()),
        };
        let ctl = acting(action, vec![force_patch(&lease).fails(code)]).await;
        assert_eq!(counted(&ctl, "forced_releases"), 0, "{code}");
    }
}

#[tokio::test]
async fn a_legacy_hold_ends_by_removing_only_its_own_finalizer_where_it_was_seen() {
    let lease = Lease::test("10.0.0.1").releasing(&["a.example/x", FINALIZER_STICKY_HOLD]);
    let patch = Exchange::json_patch(
        &format!("{NEPS}/p.10.0.0.1"),
        json!([
            {"op": "test", "path": "/metadata/uid", "value": "uid-10.0.0.1"},
            {"op": "test", "path": "/metadata/finalizers/1", "value": FINALIZER_STICKY_HOLD},
            {"op": "remove", "path": "/metadata/finalizers/1"},
        ]),
    );
    let note = "sticky hold of p.10.0.0.1 ended: its StatefulSet was scaled below the Pod's ordinal";
    acting(
        Action::EndLegacyHold { lease: lease.clone(), reason: HoldEnd::ScaledDown },
        vec![
            patch.returns(&lease_object(&lease)),
            event("p.10.0.0.1", "uid-10.0.0.1", REASON_STICKY_HOLD_ENDED, note, false),
        ],
    )
    .await;
    // Without the finalizer there is nothing to end: no request at all.
    let plain = Lease::test("10.0.0.1").releasing(&["a.example/x"]);
    acting(Action::EndLegacyHold { lease: plain, reason: HoldEnd::ScaledDown }, vec![]).await;
}

/// The status patch of `hold`: tests the resourceVersion it was read at, then sets `status`.
fn hold_status_patch(hold: &Hold, status: serde_json::Value) -> Exchange {
    Exchange::json_patch(
        &format!("{NEPS}/{}/status", hold.name),
        json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": hold.resource_version},
            {"op": "add", "path": "/status", "value": status},
        ]),
    )
    .returns(&hold.object)
}

/// Hold `p.10.0.0.5` at incarnation 1, asked for incarnation 2 by node n2.
fn asked_hold() -> Hold {
    Hold::test("10.0.0.5").at(1).asking(2, "n2")
}

fn create(hold: Hold) -> Action {
    let request = hold.pending.clone().expect("a pending request");
    Action::CreateIncarnation { hold: Box::new(hold), request }
}

#[tokio::test]
async fn an_incarnation_is_created_after_reading_its_pod_its_claim_and_the_previous_one_gone() {
    let hold = asked_hold();
    // A dual-stack claim that shows its IPv6 address only so far.
    let claim = IPAMClaim::test("web-0.p", "k1").showing(&["fd00::5/64"]);
    let incarnation = json!({
        "apiVersion": "netendpoint.dev/v1alpha1",
        "kind": "NetworkEndpoint",
        "metadata": {
            "name": "p.10.0.0.5-2",
            "labels": {
                "netendpoint.dev/pool": "p",
                "netendpoint.dev/node": "n2",
                "netendpoint.dev/ip-family": "4",
                "netendpoint.dev/block": "10.0.0.0",
                "netendpoint.dev/pod-namespace": "ns",
                "netendpoint.dev/pod-name": "web-0",
                "netendpoint.dev/pod-uid": "u2",
                "netendpoint.dev/claim-namespace": "ns",
                "netendpoint.dev/claim-name": "web-0.p",
            },
        },
        "spec": {
            "pool": "p",
            "ip": "10.0.0.5",
            "prefixLength": 24,
            "ifName": "eth0",
            "containerID": "c2",
            "node": "n2",
            "pod": {"namespace": "ns", "name": "web-0", "uid": "u2"},
            "claim": {"namespace": "ns", "name": "web-0.p", "uid": "k1"},
            "incarnation": 2,
        },
    });
    acting(
        create(hold.clone()),
        vec![
            // The hold is read again first: it still asks for this request.
            Exchange::get(&format!("{NEPS}/p.10.0.0.5")).returns(&hold.object),
            Exchange::get(&format!("{PODS}/web-0")).returns(&Pod::test("web-0", "u2").on("n2")),
            Exchange::get(&format!("{CLAIMS}/web-0.p")).returns(&claim),
            Exchange::get(&format!("{NEPS}/p.10.0.0.5-1")).fails(404),
            // The claim shows the address first (the other family's stays),
            // with the resourceVersion it was read at.
            Exchange::get(&format!("{CLAIMS}/web-0.p")).returns(&claim),
            Exchange::merge_patch(
                &format!("{CLAIMS}/web-0.p/status"),
                json!({
                    "metadata": {"uid": "k1", "resourceVersion": "9"},
                    "status": {"ips": ["10.0.0.5/24", "fd00::5/64"], "ownerPod": {"name": "web-0"}},
                }),
            )
            .returns(&claim),
            Exchange::create(NEPS, incarnation),
            hold_status_patch(&hold, json!({"incarnation": 2, "endpoint": "p.10.0.0.5-2"})),
            event(
                "p.10.0.0.5",
                "hold-10.0.0.5",
                REASON_INCARNATION_CREATED,
                "incarnation 2 (p.10.0.0.5-2) created for Pod ns/web-0 on node n2",
                false,
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn no_incarnation_is_created_while_the_previous_one_is_there() {
    let claim = IPAMClaim::test("web-0.p", "k1").showing(&["10.0.0.5/24"]);
    let previous = lease_object(&Lease::test("10.0.0.5"));
    acting(
        create(asked_hold()),
        vec![
            Exchange::get(&format!("{NEPS}/p.10.0.0.5")).returns(&asked_hold().object),
            Exchange::get(&format!("{PODS}/web-0")).returns(&Pod::test("web-0", "u2").on("n2")),
            Exchange::get(&format!("{CLAIMS}/web-0.p")).returns(&claim),
            Exchange::get(&format!("{NEPS}/p.10.0.0.5-1")).returns(&previous),
        ],
    )
    .await;
}

#[tokio::test]
async fn an_incarnation_already_created_for_this_request_is_recorded_unless_the_server_fails() {
    // A pass whose status write did not land created it: the create is
    // refused, the endpoint read is this request's sandbox, and the pass goes on.
    let hold = asked_hold();
    let claim = IPAMClaim::test("web-0.p", "k1").showing(&["10.0.0.5/24"]);
    let mut made = lease_object(&Lease::test("10.0.0.5"));
    made.spec.container_id = "c2".into();
    let mut exchanges = vec![
        Exchange::get(&format!("{NEPS}/p.10.0.0.5")).returns(&hold.object),
        Exchange::get(&format!("{PODS}/web-0")).returns(&Pod::test("web-0", "u2").on("n2")),
        Exchange::get(&format!("{CLAIMS}/web-0.p")).returns(&claim),
        Exchange::get(&format!("{NEPS}/p.10.0.0.5-1")).fails(404),
        // The claim shows the address and its Pod already: no write.
        Exchange::get(&format!("{CLAIMS}/web-0.p")).returns(&claim),
    ];
    let incarnation = serde_json::to_value(netendpoint_lease::hold::incarnation_object(
        &hold.object,
        hold.pending.as_ref().expect("a request"),
    ))
    .expect("serializes");
    exchanges.extend([
        Exchange::create(NEPS, incarnation).fails(409),
        Exchange::get(&format!("{NEPS}/p.10.0.0.5-2")).returns(&made),
    ]);
    // The hold's status is written, or fixed on a later pass when the hold
    // changed meanwhile and still asks for this request; the Event says the
    // incarnation exists. A server error stops the action before it.
    for answer in [None, Some(409), Some(422), Some(500)] {
        let status = hold_status_patch(&hold, json!({"incarnation": 2, "endpoint": "p.10.0.0.5-2"}));
        let mut script = exchanges.clone();
        script.push(answer.map_or(status.clone(), |code| status.fails(code)));
        if matches!(answer, Some(409 | 422)) {
            script.push(Exchange::get(&format!("{NEPS}/p.10.0.0.5")).returns(&hold.object));
        }
        if answer != Some(500) {
            script.push(event(
                "p.10.0.0.5",
                "hold-10.0.0.5",
                REASON_INCARNATION_CREATED,
                "incarnation 2 (p.10.0.0.5-2) created for Pod ns/web-0 on node n2",
                false,
            ));
        }
        acting(create(hold.clone()), script).await;
    }
}

/// The asking ADD gave up and withdrew its request while the controller
/// made its incarnation: the status write fails its resourceVersion test,
/// the hold asks for nothing, and the controller deletes what it made, so
/// no endpoint stays for a sandbox that is gone (invariant 14).
#[tokio::test]
async fn an_incarnation_made_for_a_withdrawn_request_is_deleted_at_once() {
    let hold = asked_hold();
    let claim = IPAMClaim::test("web-0.p", "k1").showing(&["10.0.0.5/24"]);
    let mut made = lease_object(&Lease::test("10.0.0.5"));
    made.metadata.name = Some("p.10.0.0.5-2".into());
    made.metadata.uid = Some("made-uid".into());
    made.spec.container_id = "c2".into();
    let mut withdrawn = hold.object.clone();
    if let Some(st) = withdrawn.status.as_mut() {
        st.request = None;
    }
    let incarnation = serde_json::to_value(netendpoint_lease::hold::incarnation_object(
        &hold.object,
        hold.pending.as_ref().expect("a request"),
    ))
    .expect("serializes");
    acting(
        create(hold.clone()),
        vec![
            Exchange::get(&format!("{NEPS}/p.10.0.0.5")).returns(&hold.object),
            Exchange::get(&format!("{PODS}/web-0")).returns(&Pod::test("web-0", "u2").on("n2")),
            Exchange::get(&format!("{CLAIMS}/web-0.p")).returns(&claim),
            Exchange::get(&format!("{NEPS}/p.10.0.0.5-1")).fails(404),
            Exchange::get(&format!("{CLAIMS}/web-0.p")).returns(&claim),
            Exchange::create(NEPS, incarnation).returns(&made),
            hold_status_patch(&hold, json!({"incarnation": 2, "endpoint": "p.10.0.0.5-2"})).fails(422),
            Exchange::get(&format!("{NEPS}/p.10.0.0.5")).returns(&withdrawn),
            Exchange::get(&format!("{NEPS}/p.10.0.0.5-2")).returns(&made),
            Exchange::delete(&format!("{NEPS}/p.10.0.0.5-2"), json!({"preconditions": {"uid": "made-uid"}})),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_request_whose_pod_or_claim_does_not_fit_is_refused_on_the_hold_and_recorded() {
    let pod = || Pod::test("web-0", "u2").on("n2");
    let claim = || IPAMClaim::test("web-0.p", "k1").showing(&["10.0.0.5/24"]);
    let get_pod = || Exchange::get(&format!("{PODS}/web-0"));
    let get_claim = || Exchange::get(&format!("{CLAIMS}/web-0.p"));
    let cases: Vec<(Vec<Exchange>, &str)> = vec![
        (vec![get_pod().fails(404)], "Pod ns/web-0 does not exist"),
        (vec![get_pod().returns(&Pod::test("web-0", "u9").on("n2"))], "Pod ns/web-0 is another incarnation (UID)"),
        (vec![get_pod().returns(&pod().deleting())], "Pod ns/web-0 is being deleted"),
        (
            vec![get_pod().returns(&Pod::test("web-0", "u2").on("n3"))],
            "Pod ns/web-0 is bound to node \"n3\", not to the asking node n2",
        ),
        (vec![get_pod().returns(&pod()), get_claim().fails(404)], "claim ns/web-0.p is gone"),
        (
            vec![get_pod().returns(&pod()), get_claim().returns(&IPAMClaim::test("web-0.p", "k2"))],
            "claim ns/web-0.p is another claim now",
        ),
        (
            vec![
                get_pod().returns(&pod()),
                get_claim().returns(&IPAMClaim::test("web-0.p", "k1").showing(&["10.0.0.9/24", "fd00::5/64"])),
            ],
            "claim ns/web-0.p holds another address (10.0.0.9)",
        ),
        (
            // A bare Pod of the StatefulSet Pod's name is not its Pod.
            vec![get_pod().returns(&pod().naming_claim("web-0.p")), get_claim().returns(&claim())],
            "Pod ns/web-0 is not the Pod of claim web-0.p",
        ),
    ];
    for (reads, why) in cases {
        let hold = asked_hold();
        let mut script = vec![Exchange::get(&format!("{NEPS}/p.10.0.0.5")).returns(&hold.object)];
        script.extend(reads);
        // The request goes, the reason stays; the incarnation is untouched.
        script.push(hold_status_patch(&hold, json!({"incarnation": 1, "endpoint": "p.10.0.0.5-1", "message": why})));
        script.push(event(
            "p.10.0.0.5",
            "hold-10.0.0.5",
            REASON_INCARNATION_REFUSED,
            &format!("incarnation 2 of p.10.0.0.5 refused: {why}"),
            true,
        ));
        acting(create(hold), script).await;
    }
}

/// An incarnation is made only while enough of the asking ADD's wait is
/// left for it to see it; a refusal needs no margin.
#[tokio::test]
async fn no_incarnation_is_made_for_an_add_about_to_give_up() {
    let now: k8s_openapi::jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let claim = IPAMClaim::test("web-0.p", "k1").showing(&["10.0.0.5/24"]);
    let late = |left: i64| {
        let mut hold = asked_hold();
        let at = now + k8s_openapi::jiff::SignedDuration::from_secs(left);
        let mut status = hold.object.status.clone().unwrap_or_default();
        if let Some(r) = status.request.as_mut() {
            r.deadline = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at));
        }
        hold.object.status = Some(status);
        hold.pending = netendpoint_lease::hold::pending_request(&hold.object);
        hold
    };
    let hold = late(1);
    let script = vec![
        Exchange::get(&format!("{NEPS}/p.10.0.0.5")).returns(&hold.object),
        Exchange::get(&format!("{PODS}/web-0")).returns(&Pod::test("web-0", "u2").on("n2")),
        Exchange::get(&format!("{CLAIMS}/web-0.p")).returns(&claim),
    ];
    let (ctl, server) = Context::test(script);
    ctl.clock.set(now);
    act(&ctl, &create(hold)).await;
    server.assert_done();
    // With a request that has more time left, the previous incarnation is read next.
    let hold = late(30);
    let script = vec![
        Exchange::get(&format!("{NEPS}/p.10.0.0.5")).returns(&hold.object),
        Exchange::get(&format!("{PODS}/web-0")).returns(&Pod::test("web-0", "u2").on("n2")),
        Exchange::get(&format!("{CLAIMS}/web-0.p")).returns(&claim),
        Exchange::get(&format!("{NEPS}/p.10.0.0.5-1")).returns(&lease_object(&Lease::test("10.0.0.5"))),
    ];
    let (ctl, server) = Context::test(script);
    ctl.clock.set(now);
    act(&ctl, &create(hold)).await;
    server.assert_done();
}

#[tokio::test]
async fn a_refusal_that_finds_the_hold_changed_is_not_recorded() {
    let hold = asked_hold();
    let refused = json!({"incarnation": 1, "endpoint": "p.10.0.0.5-1", "message": "Pod ns/web-0 does not exist"});
    acting(
        create(hold.clone()),
        vec![
            Exchange::get(&format!("{NEPS}/p.10.0.0.5")).returns(&hold.object),
            Exchange::get(&format!("{PODS}/web-0")).fails(404),
            hold_status_patch(&hold, refused).fails(422),
        ],
    )
    .await;
}

/// The VirtualMachineInstance `vm-a` (UID `vmi-a`) migrating to `target`.
fn vmi(target: Option<&str>, completed: bool) -> serde_json::Value {
    let mut state = json!({"completed": completed});
    if let Some(t) = target {
        state["targetPod"] = json!(t);
    }
    json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm-a", "namespace": "ns", "uid": "vmi-a"},
        "status": {"migrationState": state},
    })
}

/// Pod `web-0` of claim `vm-a` on n2, controlled by the VMI of UID `vmi_uid`.
fn launcher(vmi_uid: &str) -> k8s_openapi::api::core::v1::Pod {
    let mut pod = Pod::test("web-0", "u2").on("n2").naming_claim("vm-a");
    pod.metadata.owner_references = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: "kubevirt.io/v1".into(),
        kind: "VirtualMachineInstance".into(),
        name: "vm-a".into(),
        uid: vmi_uid.into(),
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    pod
}

const VMIS: &str = "/apis/kubevirt.io/v1/namespaces/ns/virtualmachineinstances";

#[tokio::test]
async fn a_vm_claims_migration_target_is_answered_while_the_previous_incarnation_lives() {
    let hold = Hold::test("10.0.0.5").for_claim("vm-a").at(1).asking(2, "n2");
    let request = hold.pending.clone().expect("a pending request");
    let claim = IPAMClaim::test("vm-a", "k1").not_of_a_statefulset().showing(&["10.0.0.5/24"]);
    let accepted = json!({
        "incarnation": 1,
        "endpoint": "p.10.0.0.5-1",
        "request": {
            "incarnation": 2, "node": "n2", "containerID": "c2", "ifName": "eth0",
            "pod": {"namespace": "ns", "name": "web-0", "uid": "u2"}, "accepted": true,
        },
    });
    acting(
        Action::AcceptIncarnation { hold: Box::new(hold.clone()), request },
        vec![
            Exchange::get(&format!("{NEPS}/p.10.0.0.5")).returns(&hold.object),
            Exchange::get(&format!("{PODS}/web-0")).returns(&launcher("vmi-a")),
            Exchange::get(&format!("{CLAIMS}/vm-a")).returns(&claim),
            // KubeVirt's own word: the VMI names this Pod as its migration target.
            Exchange::get(&format!("{CLAIMS}/vm-a")).returns(&claim),
            Exchange::get(&format!("{VMIS}/vm-a")).returns(&vmi(Some("web-0"), false)),
            Exchange::get(&format!("{PODS}/web-0")).returns(&launcher("vmi-a")),
            hold_status_patch(&hold, accepted),
            event(
                "p.10.0.0.5",
                "hold-10.0.0.5",
                REASON_INCARNATION_ACCEPTED,
                "incarnation 2 for Pod ns/web-0 on node n2 accepted while incarnation 1 lives (live migration): \
                 its endpoint follows once that one is gone",
                false,
            ),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_pod_naming_a_running_vms_claim_is_not_answered_unless_kubevirt_names_it_the_target() {
    let claim = IPAMClaim::test("vm-a", "k1").not_of_a_statefulset().showing(&["10.0.0.5/24"]);
    // (the VMI's answer, the Pod's controller, why it waits)
    let cases: Vec<(Exchange, Option<&str>, &str)> = vec![
        (
            Exchange::get(&format!("{VMIS}/vm-a")).returns(&vmi(None, false)),
            None,
            "VirtualMachineInstance ns/vm-a names no Pod as its migration target",
        ),
        (
            Exchange::get(&format!("{VMIS}/vm-a")).returns(&vmi(Some("virt-launcher-vm-a-xyz"), false)),
            None,
            "VirtualMachineInstance ns/vm-a names Pod virt-launcher-vm-a-xyz as its migration target",
        ),
        (
            Exchange::get(&format!("{VMIS}/vm-a")).returns(&vmi(Some("web-0"), true)),
            None,
            "the migration of VirtualMachineInstance ns/vm-a has ended",
        ),
        (
            // A Pod creator copied the name and an owner reference: not the VMI's UID.
            Exchange::get(&format!("{VMIS}/vm-a")).returns(&vmi(Some("web-0"), false)),
            Some("forged"),
            "Pod ns/web-0 is not controlled by VirtualMachineInstance ns/vm-a",
        ),
        (Exchange::get(&format!("{VMIS}/vm-a")).fails(404), None, "no VirtualMachineInstance ns/vm-a"),
    ];
    for (vmi_read, controller, why) in cases {
        let hold = Hold::test("10.0.0.5").for_claim("vm-a").at(1).asking(2, "n2");
        let request = hold.pending.clone().expect("a pending request");
        let mut script = vec![
            Exchange::get(&format!("{NEPS}/p.10.0.0.5")).returns(&hold.object),
            Exchange::get(&format!("{PODS}/web-0")).returns(&launcher("vmi-a")),
            Exchange::get(&format!("{CLAIMS}/vm-a")).returns(&claim),
            Exchange::get(&format!("{CLAIMS}/vm-a")).returns(&claim),
            vmi_read,
        ];
        if let Some(uid) = controller {
            script.push(Exchange::get(&format!("{PODS}/web-0")).returns(&launcher(uid)));
        }
        script.push(event(
            "p.10.0.0.5",
            "hold-10.0.0.5",
            REASON_INCARNATION_WAITS,
            &format!(
                "incarnation 2 for Pod ns/web-0 is not answered while incarnation 1 lives: {why}; \
                 it is created once that one is gone"
            ),
            false,
        ));
        acting(Action::AcceptIncarnation { hold: Box::new(hold), request }, script).await;
    }
}

#[tokio::test]
async fn a_hold_starts_its_release_on_its_status_and_records_why() {
    let hold = Hold::test("10.0.0.5").at(1);
    let releasing = json!({
        "incarnation": 1, "endpoint": "p.10.0.0.5-1",
        "phase": "Releasing", "message": "stickyFor passed with no incarnation",
    });
    acting(
        Action::ReleaseHold { hold: Box::new(hold.clone()), reason: HoldEnd::Expired, for_waiter: None },
        vec![
            hold_status_patch(&hold, releasing.clone()),
            event(
                "p.10.0.0.5",
                "hold-10.0.0.5",
                REASON_STICKY_HOLD_ENDED,
                "sticky hold p.10.0.0.5 of claim ns/web-0.p ends: stickyFor passed with no incarnation",
                false,
            ),
        ],
    )
    .await;
    // A request that came in since the hold was read wins: nothing recorded.
    acting(
        Action::ReleaseHold { hold: Box::new(hold.clone()), reason: HoldEnd::Expired, for_waiter: None },
        vec![hold_status_patch(&hold, releasing).fails(422)],
    )
    .await;
}

#[tokio::test]
async fn a_released_hold_is_deleted_with_uid_and_version_and_its_claim_drops_the_address() {
    let hold = Hold::test("10.0.0.5").at(1).releasing();
    let claim = IPAMClaim::test("web-0.p", "k1").showing(&["10.0.0.5/24", "fd00::5/64"]);
    let delete = || {
        Exchange::delete(
            &format!("{NEPS}/p.10.0.0.5"),
            json!({"preconditions": {"uid": "hold-10.0.0.5", "resourceVersion": "5"}}),
        )
    };
    acting(
        Action::DeleteHold { hold: Box::new(hold.clone()) },
        vec![
            Exchange::get(&format!("{NEPS}/p.10.0.0.5-1")).fails(404),
            delete(),
            Exchange::get(&format!("{CLAIMS}/web-0.p")).returns(&claim),
            Exchange::get(&format!("{CLAIMS}/web-0.p")).returns(&claim),
            // The other family's address and the owner stay.
            Exchange::merge_patch(
                &format!("{CLAIMS}/web-0.p/status"),
                json!({
                    "metadata": {"uid": "k1", "resourceVersion": "9"},
                    "status": {"ips": ["fd00::5/64"], "ownerPod": {"name": "web-0"}},
                }),
            )
            .returns(&claim),
        ],
    )
    .await;
    // While its incarnation lives, the hold stays.
    let live = lease_object(&Lease::test("10.0.0.5"));
    acting(
        Action::DeleteHold { hold: Box::new(hold.clone()) },
        vec![Exchange::get(&format!("{NEPS}/p.10.0.0.5-1")).returns(&live)],
    )
    .await;
    // A hold that changed or went before the delete leaves its claim alone.
    for code in [404, 409] {
        acting(
            Action::DeleteHold { hold: Box::new(hold.clone()) },
            vec![Exchange::get(&format!("{NEPS}/p.10.0.0.5-1")).fails(404), delete().fails(code)],
        )
        .await;
    }
}

#[tokio::test]
async fn a_statefulset_pods_claim_is_created_owned_by_its_statefulset() {
    let action = || Action::CreateClaim {
        namespace: "ns".into(),
        name: "web-1.p".into(),
        network: "net".into(),
        statefulset: "web".into(),
        legacy: None,
    };
    let get_sts = || Exchange::get("/apis/apps/v1/namespaces/ns/statefulsets/web");
    let claim = json!({
        "apiVersion": "k8s.cni.cncf.io/v1alpha1",
        "kind": "IPAMClaim",
        "metadata": {
            "name": "web-1.p",
            "namespace": "ns",
            "labels": {"netendpoint.dev/statefulset": "web"},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "sts-web",
                "controller": false, "blockOwnerDeletion": false,
            }],
        },
        "spec": {"network": "net", "interface": ""},
    });
    acting(action(), vec![get_sts().returns(&statefulset("web", "sts-web")), Exchange::create(CLAIMS, claim.clone())])
        .await;
    // Made already: nothing more. The StatefulSet gone: no claim.
    acting(
        action(),
        vec![get_sts().returns(&statefulset("web", "sts-web")), Exchange::create(CLAIMS, claim).fails(409)],
    )
    .await;
    acting(action(), vec![get_sts().fails(404)]).await;
}

/// A claim made for a Pod whose address a lease of an older version keeps
/// (the sticky-hold finalizer) starts with that address in its status,
/// written with the created claim's UID and version as preconditions.
#[tokio::test]
async fn a_claim_for_a_pod_of_a_legacy_hold_is_created_then_given_its_address() {
    let action = Action::CreateClaim {
        namespace: "ns".into(),
        name: "web-1.p".into(),
        network: "net".into(),
        statefulset: "web".into(),
        legacy: Some("10.0.0.7/32".into()),
    };
    let get_sts = Exchange::get("/apis/apps/v1/namespaces/ns/statefulsets/web");
    let claim = json!({
        "apiVersion": "k8s.cni.cncf.io/v1alpha1",
        "kind": "IPAMClaim",
        "metadata": {
            "name": "web-1.p",
            "namespace": "ns",
            "labels": {"netendpoint.dev/statefulset": "web"},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "sts-web",
                "controller": false, "blockOwnerDeletion": false,
            }],
        },
        "spec": {"network": "net", "interface": ""},
    });
    let mut created = claim.clone();
    created["metadata"]["uid"] = json!("k1");
    created["metadata"]["resourceVersion"] = json!("5");
    let status = json!({"metadata": {"uid": "k1", "resourceVersion": "5"}, "status": {"ips": ["10.0.0.7/32"]}});
    acting(
        action,
        vec![
            get_sts.returns(&statefulset("web", "sts-web")),
            Exchange::create(CLAIMS, claim).returns(&created),
            Exchange::merge_patch(&format!("{CLAIMS}/web-1.p/status"), status).returns(&created),
        ],
    )
    .await;
}

#[tokio::test]
async fn a_statefulset_pods_claim_is_deleted_by_uid() {
    for answer in [None, Some(404), Some(409)] {
        let delete = Exchange::delete(&format!("{CLAIMS}/web-1.p"), json!({"preconditions": {"uid": "k7"}}));
        let action = Action::DeleteClaim { namespace: "ns".into(), name: "web-1.p".into(), uid: "k7".into() };
        acting(action, vec![if let Some(code) = answer { delete.fails(code) } else { delete }]).await;
    }
}

/// A forced release refused for want of the agents ConfigMap: one Warning
/// Event names the ConfigMap and the cure (not "changed since read"), and
/// the same refusal on a later pass records nothing more.
#[tokio::test]
async fn a_refusal_for_want_of_a_policys_configmap_is_recorded_once_naming_it() {
    let said = "networkendpoints.netendpoint.dev \"p.10.0.9.9\" is forbidden: ValidatingAdmissionPolicy \
        'netendpoint-agent' with binding 'netendpoint-agent' denied request: failed to configure binding: no params \
        found for policy binding with `Deny` parameterNotFoundAction";
    let missing = netendpoint_crd::admission::MissingParams::of_message(said).unwrap();
    let note = format!("netendpoint-controller could not act on p.10.0.9.9: {missing}");
    assert!(note.contains("ConfigMap netendpoint-agents"), "{note}");
    let lease = Lease::test("10.0.9.9").releasing(&["a.example/x"]);
    let force = || Action::Force {
        lease: lease.clone(),
        age: Duration::from_secs(700),
        bound: Duration::from_secs(600),
        why: ForceFor::Need("p.n2".into()),
    };
    let refused = || force_patch(&lease).fails_saying(422, "Invalid", said);
    let admission = netendpoint_crd::REASON_ADMISSION_PARAMS_MISSING;
    let ctl = acting(force(), vec![refused(), event("p.10.0.9.9", "uid-10.0.9.9", admission, &note, true)]).await;
    assert_eq!(counted(&ctl, "forced_releases"), 0);
    acting(force(), vec![refused()]).await;
}

/// A queue entry `p.n1.0` of Pod `ns/waiter` (UID `e1`), waiting until
/// 2026-01-01T00:01:00Z, promised `promise` (if any).
fn entry(promise: Option<&str>) -> NetworkEndpointNeed {
    let spec = netendpoint_crd::NetworkEndpointNeedSpec {
        pool: "p".into(),
        node: "n1".into(),
        pod: netendpoint_crd::PodRef { namespace: "ns".into(), name: "waiter".into(), uid: "pw".into() },
        wait_seconds: 60,
        slot: Some(0),
        ip_family: Some(netendpoint_crd::IpFamily::IPv4),
        container_id: Some("cw".into()),
        if_name: Some("eth0".into()),
        deadline: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2026-01-01T00:01:00Z".parse().unwrap())),
        spans: None,
    };
    let mut e = NetworkEndpointNeed::new("p.n1.0", spec);
    e.metadata.uid = Some("e1".into());
    e.metadata.resource_version = Some("100".into());
    e.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2026-01-01T00:00:00Z".parse().unwrap()));
    e.status = Some(netendpoint_crd::NetworkEndpointNeedStatus {
        arrival: Some("100".into()),
        promise: promise.map(|ip| netendpoint_lease::queue::free_promise("p", ip.parse().unwrap())),
        message: None,
    });
    e
}

/// Issue 33: pool pressure is checked against the server at the moment it
/// would end a hold. A waiting ADD served just before (its entry deleted,
/// or promised an address) ends no hold, whatever the watch still shows;
/// nor does one whose claim's Pod exists again. Only an entry still
/// waiting, unpromised, for a hold whose identity has no Pod, ends it.
#[tokio::test]
async fn pool_pressure_for_an_add_served_just_before_ends_no_hold() {
    let hold = Hold::test("10.0.0.5");
    let why = PressureFor { entry: "p.n1.0".into(), version: "e1".into(), queued: true };
    let pressure = || Action::ReleaseHold {
        hold: Box::new(hold.clone()),
        reason: HoldEnd::PoolPressure,
        for_waiter: Some(why.clone()),
    };
    let entry_path = "/apis/netendpoint.dev/v1alpha1/networkendpointneeds/p.n1.0";
    let at = |ctl: &Context| ctl.clock.set("2026-01-01T00:00:10Z".parse().unwrap());
    let run = |script: Vec<Exchange>| {
        let action = pressure();
        async move {
            let (ctl, server) = Context::test(script);
            at(&ctl);
            act(&ctl, &action).await;
            server.assert_done();
        }
    };
    // Served and gone: one read, no write.
    run(vec![Exchange::get(entry_path).fails(404)]).await;
    // Promised an address: no write.
    run(vec![Exchange::get(entry_path).returns(&entry(Some("10.0.0.7")))]).await;
    // Still waiting, but the claim's Pod exists again: no write.
    let claim = IPAMClaim::test("web-0.p", "claim-uid");
    run(vec![
        Exchange::get(entry_path).returns(&entry(None)),
        Exchange::get(&format!("{CLAIMS}/web-0.p")).returns(&claim),
        Exchange::get(&format!("{PODS}/web-0")).returns(&Pod::test("web-0", "u2")),
    ])
    .await;
    // Still waiting, no Pod, the StatefulSet scaled to 0: the hold ends.
    let mut scaled = statefulset("web", "sts-uid");
    scaled.spec = Some(k8s_openapi::api::apps::v1::StatefulSetSpec { replicas: Some(0), ..Default::default() });
    let releasing = json!({"phase": "Releasing", "message": HoldEnd::PoolPressure.describe()});
    run(vec![
        Exchange::get(entry_path).returns(&entry(None)),
        Exchange::get(&format!("{CLAIMS}/web-0.p")).returns(&claim),
        Exchange::get(&format!("{PODS}/web-0")).fails(404),
        Exchange::get("/apis/apps/v1/namespaces/ns/statefulsets/web").returns(&scaled),
        hold_status_patch(&hold, releasing),
        event(
            "p.10.0.0.5",
            "hold-10.0.0.5",
            REASON_STICKY_HOLD_ENDED,
            &format!("sticky hold p.10.0.0.5 of claim ns/web-0.p ends: {}", HoldEnd::PoolPressure.describe()),
            false,
        ),
    ])
    .await;
}
