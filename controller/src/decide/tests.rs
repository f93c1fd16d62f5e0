//! The controller's decisions as tables, with fixtures built by small
//! builders (`Lease::test("10.0.0.1").releasing_since(0, 30)`).

use super::*;
use netendpoint_crd::{
    ClaimRef, IpFamily, NetworkEndpoint, NetworkEndpointNeedStatus, NetworkEndpointSpec, NetworkEndpointStatus, PodRef,
    Role,
};

const T0: &str = "2026-01-01T00:00:00Z";

fn t(secs: i64) -> Timestamp {
    T0.parse::<Timestamp>().unwrap() + k8s_openapi::jiff::SignedDuration::from_secs(secs)
}

trait TestLease {
    fn test(ip: &str) -> Self;
    fn held(ip: &str, ordinal: u32, at: i64) -> Self;
    fn on(self, node: &str) -> Self;
    fn releasing_since(self, at: i64, bound: u64) -> Self;
    fn incarnation(self, k: u32) -> Self;
}

impl TestLease for Lease {
    fn test(ip: &str) -> Self {
        Lease {
            name: format!("p.{ip}"),
            uid: format!("uid-{ip}"),
            resource_version: "1".into(),
            pool: "p".into(),
            ip: ip.parse().ok(),
            node: "n1".into(),
            pod: Some(PodRef { namespace: "ns".into(), name: "web-0".into(), uid: format!("pod-{ip}") }),
            releasing_since: None,
            finalizers: vec![],
            force_release_after: None,
            sticky: None,
            incarnation: None,
            static_ip: false,
        }
    }
    /// A released lease of an older version held for StatefulSet `web`'s Pod `web-<ordinal>` since `at`.
    fn held(ip: &str, ordinal: u32, at: i64) -> Self {
        let mut l = Lease::test(ip).releasing_since(at, 600);
        l.finalizers = vec![netendpoint_crd::FINALIZER_STICKY_HOLD.into()];
        l.sticky = Some(Sticky {
            namespace: "ns".into(),
            pod: format!("web-{ordinal}"),
            owner_kind: "StatefulSet".into(),
            owner: "web".into(),
            sticky_for: Duration::from_secs(3600),
        });
        l
    }
    fn on(mut self, node: &str) -> Self {
        self.node = node.into();
        self
    }
    fn releasing_since(mut self, at: i64, bound: u64) -> Self {
        self.releasing_since = Some(t(at));
        self.force_release_after = Some(Duration::from_secs(bound));
        self.finalizers = vec!["example.com/agent".into()];
        self
    }
    fn incarnation(mut self, k: u32) -> Self {
        self.name = format!("{}-{k}", self.name);
        self.uid = format!("{}-{k}", self.uid);
        self.incarnation = Some(k);
        self
    }
}

/// A hold of claim `web-0.p` at `ip`, at incarnation `current` (0: none),
/// asking for `asked` (a request from node n2), with `stickyFor` 1h.
fn hold(ip: &str, current: u32, asked: Option<u32>) -> Hold {
    let spec = NetworkEndpointSpec {
        pool: "p".into(),
        ip: ip.into(),
        prefix_length: 24,
        if_name: "eth0".into(),
        container_id: "c1".into(),
        node: "n1".into(),
        pod: Some(PodRef { namespace: "ns".into(), name: "web-0".into(), uid: "u1".into() }),
        role: Some(Role::Hold),
        claim: Some(ClaimRef { namespace: "ns".into(), name: "web-0.p".into(), uid: "k1".into() }),
        sticky_for: Some("3600s".into()),
        ..NetworkEndpointSpec::default()
    };
    let mut ep = NetworkEndpoint::new(&format!("p.{ip}"), spec);
    ep.metadata.uid = Some(format!("hold-{ip}"));
    ep.metadata.resource_version = Some("5".into());
    let mut status = NetworkEndpointStatus::default();
    if current > 0 {
        status.incarnation = Some(current);
        status.endpoint = Some(format!("p.{ip}-{current}"));
    }
    if let Some(k) = asked {
        status.request = Some(IncarnationRequest {
            incarnation: k,
            node: "n2".into(),
            container_id: format!("c{k}"),
            if_name: "eth0".into(),
            pod: PodRef { namespace: "ns".into(), name: "web-0".into(), uid: format!("u{k}") },
            accepted: false,
            deadline: None,
        });
    }
    ep.status = Some(status);
    Hold::of(&ep).unwrap()
}

fn settings() -> Settings {
    Settings {
        vanished_node_grace: Duration::from_secs(60),
        pod_gone_grace: Some(Duration::from_secs(900)),
        default_force_release_after: Duration::from_secs(600),
        pressure_after: Duration::from_secs(120),
    }
}

fn world(leases: Vec<Lease>) -> World {
    let pod_uids = leases.iter().filter_map(|l| l.pod_uid().map(str::to_string)).collect();
    World {
        leases: leases.into_iter().map(Arc::new).collect(),
        nodes: ["n1".to_string()].into(),
        pod_uids,
        ..World::default()
    }
}

fn with_claim(mut w: World, uid: &str, ips: &[&str]) -> World {
    w.claims_known = true;
    w.claims.insert(
        ("ns".into(), "web-0.p".into()),
        ClaimFacts {
            uid: uid.into(),
            ips: ips.iter().map(|i| i.parse().unwrap()).collect(),
            statefulset: None,
            network: "net".into(),
        },
    );
    w
}

fn need(key: &str, until: i64) -> Need {
    Need { key: key.into(), pool: "p".into(), until: t(until) }
}

fn kinds(d: &Decision) -> Vec<String> {
    d.actions
        .iter()
        .map(|a| match a {
            Action::Reclaim { lease } => format!("reclaim {}", lease.name),
            Action::DeleteLeak { lease } => format!("leak {}", lease.name),
            Action::Force { lease, why, .. } => format!("force {} for {why:?}", lease.name),
            Action::EndLegacyHold { lease, reason } => format!("end legacy hold {} {reason:?}", lease.name),
            Action::CreateIncarnation { hold, request } => format!("create {}-{}", hold.name, request.incarnation),
            Action::AcceptIncarnation { hold, request } => format!("accept {}-{}", hold.name, request.incarnation),
            Action::ReleaseHold { hold, reason, .. } => format!("release hold {} {reason:?}", hold.name),
            Action::Promise { waiter, status, place } => match &status.promise {
                Some(p) => format!(
                    "promise {}{} to {} ({}/{})",
                    p.ip,
                    if p.releasing { "~" } else { "" },
                    waiter.name,
                    place.0,
                    place.1
                ),
                None => format!("queue {} ({}/{})", waiter.name, place.0, place.1),
            },
            Action::DropEntry { waiter, why } => format!("drop {} ({why})", waiter.name),
            Action::DeleteHold { hold } => format!("delete hold {}", hold.name),
            Action::CreateClaim { namespace, name, .. } => format!("create claim {namespace}/{name}"),
            Action::DeleteClaim { namespace, name, .. } => format!("delete claim {namespace}/{name}"),
        })
        .collect()
}

#[test]
fn a_vanished_nodes_lease_is_reclaimed_only_when_seen_absent_twice_across_the_grace() {
    let w = world(vec![Lease::test("10.0.0.1").on("gone"), Lease::test("10.0.0.2")]);
    let mut m = Memory::default();
    let s = settings();
    // First sighting: nothing, and a pass is asked for after the grace.
    let d = decide(&w, &s, &mut m, t(0));
    assert!(d.actions.is_empty());
    assert_eq!(d.look_again_in, Some(Duration::from_secs(61)));
    assert!(decide(&w, &s, &mut m, t(60)).actions.is_empty(), "whole-second rounding: not yet");
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(61))), ["reclaim p.10.0.0.1"]);
    // Decided once, not again while the lease is still listed.
    assert!(decide(&w, &s, &mut m, t(62)).actions.is_empty());
}

#[test]
fn a_node_that_comes_back_starts_its_grace_again_and_a_present_nodes_lease_is_never_reclaimed() {
    let mut w = world(vec![Lease::test("10.0.0.1").on("flaky")]);
    let mut m = Memory::default();
    let s = settings();
    decide(&w, &s, &mut m, t(0));
    w.nodes.insert("flaky".into());
    assert!(decide(&w, &s, &mut m, t(100)).actions.is_empty());
    w.nodes.remove("flaky");
    assert!(decide(&w, &s, &mut m, t(200)).actions.is_empty(), "grace restarted");
    assert!(decide(&w, &s, &mut m, t(230)).actions.is_empty());
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(261))), ["reclaim p.10.0.0.1"]);
}

#[test]
fn a_releasing_lease_of_a_vanished_node_is_left_to_its_finalizers() {
    let w = world(vec![Lease::test("10.0.0.1").on("gone").releasing_since(0, 600)]);
    let mut m = Memory::default();
    decide(&w, &settings(), &mut m, t(0));
    assert!(decide(&w, &settings(), &mut m, t(1000)).actions.is_empty());
}

#[test]
fn pod_gone_cleanup_respects_its_grace_its_off_switch_and_living_pods() {
    let mut w = world(vec![Lease::test("10.0.0.1"), Lease::test("10.0.0.2"), Lease::test("10.0.0.3")]);
    w.pod_uids.remove("pod-10.0.0.1");
    Arc::make_mut(&mut w.leases[2]).pod = None; // no Pod named: never a leak
    let mut m = Memory::default();
    let s = settings();
    assert!(decide(&w, &s, &mut m, t(0)).actions.is_empty());
    assert!(decide(&w, &s, &mut m, t(900)).actions.is_empty());
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(901))), ["leak p.10.0.0.1"]);

    let off = Settings { pod_gone_grace: None, ..settings() };
    let mut m = Memory::default();
    assert!(decide(&w, &off, &mut m, t(0)).actions.is_empty());
    assert!(decide(&w, &off, &mut m, t(100_000)).actions.is_empty());

    // A Pod that reappears (a slow watch) restarts the grace.
    let mut m = Memory::default();
    decide(&w, &s, &mut m, t(0));
    w.pod_uids.insert("pod-10.0.0.1".into());
    assert!(decide(&w, &s, &mut m, t(500)).actions.is_empty());
    w.pod_uids.remove("pod-10.0.0.1");
    assert!(decide(&w, &s, &mut m, t(1000)).actions.is_empty());
}

#[test]
fn a_release_is_forced_only_for_a_waiting_need_and_only_past_its_own_bound() {
    let leases = vec![
        Lease::test("10.0.0.1").releasing_since(0, 30),
        Lease::test("10.0.0.2").releasing_since(0, 3600),
        Lease::test("10.0.0.3").releasing_since(10, 30),
    ];
    let s = settings();
    // No need: nothing, however old.
    let w = world(leases.clone());
    assert!(decide(&w, &s, &mut Memory::default(), t(10_000)).actions.is_empty());
    // A need, but every release young: nothing now, a pass when the first ripens.
    let mut w = world(leases.clone());
    w.needs = vec![need("a", 100)];
    let mut m = Memory::default();
    let d = decide(&w, &s, &mut m, t(20));
    assert!(d.actions.is_empty());
    assert_eq!(d.look_again_in, Some(Duration::from_secs(12)));
    // Past the bound of .1 only: .1 is forced, once.
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(35))), [r#"force p.10.0.0.1 for Need("a")"#]);
    assert!(decide(&w, &s, &mut m, t(50)).actions.is_empty(), "the need is served");
    // A second waiter gets the next eligible release, never the same one.
    w.needs.push(need("b", 100));
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(50))), [r#"force p.10.0.0.3 for Need("b")"#]);
    // An expired need forces nothing.
    let mut w = world(leases);
    w.needs = vec![need("old", 30)];
    assert!(decide(&w, &s, &mut Memory::default(), t(40)).actions.is_empty());
}

#[test]
fn with_known_ranges_a_release_is_forced_only_when_its_family_is_full() {
    let mut w = world(vec![Lease::test("10.0.0.1").releasing_since(0, 30), Lease::test("10.0.0.2")]);
    w.needs = vec![need("a", 1000)];
    w.capacity.insert("p".into(), Capacity { v4: 3, v6: 0 });
    assert!(decide(&w, &settings(), &mut Memory::default(), t(100)).actions.is_empty(), "one IPv4 free");
    w.capacity.insert("p".into(), Capacity { v4: 2, v6: 0 });
    assert_eq!(kinds(&decide(&w, &settings(), &mut Memory::default(), t(100))), [r#"force p.10.0.0.1 for Need("a")"#]);
}

#[test]
fn the_oldest_eligible_release_is_forced_first_and_other_pools_are_untouched() {
    let mut other = Lease::test("10.0.0.9").releasing_since(0, 1);
    other.pool = "q".into();
    other.name = "q.10.0.0.9".into();
    let mut w = world(vec![
        Lease::test("10.0.0.1").releasing_since(50, 10),
        Lease::test("10.0.0.2").releasing_since(20, 10),
        other,
    ]);
    w.needs = vec![need("a", 1000)];
    assert_eq!(kinds(&decide(&w, &settings(), &mut Memory::default(), t(100))), [r#"force p.10.0.0.2 for Need("a")"#]);
}

#[test]
fn an_incarnation_is_created_only_once_the_previous_one_is_gone() {
    let s = settings();
    // The first incarnation: asked for by the hold's spec.
    let mut w = world(vec![]);
    w.holds = vec![hold("10.0.0.5", 0, None)];
    let mut m = Memory::default();
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(0))), ["create p.10.0.0.5-1"]);
    assert!(decide(&w, &s, &mut m, t(1)).actions.is_empty(), "once");
    // Incarnation 2 asked while incarnation 1 is live: nothing.
    let mut w = world(vec![Lease::test("10.0.0.5").incarnation(1)]);
    w.holds = vec![hold("10.0.0.5", 1, Some(2))];
    assert!(decide(&w, &s, &mut Memory::default(), t(0)).actions.is_empty());
    // Releasing, young: nothing yet; stuck past its bound: forced for the hold.
    w.leases = vec![Arc::new(Lease::test("10.0.0.5").incarnation(1).releasing_since(0, 30))];
    let mut m = Memory::default();
    let d = decide(&w, &s, &mut m, t(10));
    assert!(d.actions.is_empty());
    assert_eq!(d.look_again_in, Some(Duration::from_secs(22)));
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(40))), [r#"force p.10.0.0.5-1 for Incarnation("p.10.0.0.5")"#]);
    // Gone: incarnation 2 is created.
    w.leases.clear();
    assert_eq!(kinds(&decide(&w, &s, &mut Memory::default(), t(50))), ["create p.10.0.0.5-2"]);
    // A stale request (for incarnation 3 while at 1) asks for nothing.
    w.holds = vec![hold("10.0.0.5", 1, Some(3))];
    assert!(decide(&w, &s, &mut Memory::default(), t(50)).actions.is_empty());
}

/// Each request is served on its own: after one for incarnation 2 was
/// refused (the executor wrote the reason), the next request for
/// incarnation 2, from another sandbox, is served too.
#[test]
fn a_new_request_for_the_same_incarnation_is_served_again() {
    let s = settings();
    let mut w = world(vec![]);
    w.holds = vec![hold("10.0.0.5", 1, Some(2))];
    let mut m = Memory::default();
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(0))), ["create p.10.0.0.5-2"]);
    assert!(decide(&w, &s, &mut m, t(1)).actions.is_empty(), "once per request");
    let next = w.holds[0].pending.as_mut().unwrap();
    next.container_id = "c2-retry".into();
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(2))), ["create p.10.0.0.5-2"], "the next sandbox's request");
}

#[test]
fn a_hold_ends_when_its_claim_is_gone_or_elsewhere_seen_twice_and_is_deleted_once_idle() {
    let s = settings();
    // The claim exists with this address: the hold stays.
    let mut w = with_claim(world(vec![]), "k1", &["10.0.0.5"]);
    w.holds = vec![hold("10.0.0.5", 1, None)];
    let mut m = Memory::default();
    assert!(decide(&w, &s, &mut m, t(0)).actions.is_empty());
    // The claim is deleted and recreated under the same name (another UID): seen twice, then released.
    let mut w = with_claim(world(vec![]), "k2", &[]);
    w.holds = vec![hold("10.0.0.5", 1, None)];
    let mut m = Memory::default();
    assert!(decide(&w, &s, &mut m, t(0)).actions.is_empty(), "first sighting");
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(1))), ["release hold p.10.0.0.5 ClaimGone"]);
    // A decoy: a hold of this claim at an address the claim does not hold.
    let mut w = with_claim(world(vec![]), "k1", &["10.0.0.9"]);
    w.holds = vec![hold("10.0.0.5", 0, None)];
    w.holds[0].pending = None;
    let mut m = Memory::default();
    decide(&w, &s, &mut m, t(0));
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(1))), ["release hold p.10.0.0.5 Superseded"]);
    // Releasing: deleted once its incarnation is gone, never while it is there.
    let mut releasing = hold("10.0.0.5", 1, None);
    releasing.releasing = true;
    let mut w = world(vec![Lease::test("10.0.0.5").incarnation(1).releasing_since(0, 600)]);
    w.holds = vec![releasing];
    assert!(decide(&w, &s, &mut Memory::default(), t(5)).actions.is_empty());
    w.leases.clear();
    assert_eq!(kinds(&decide(&w, &s, &mut Memory::default(), t(6))), ["delete hold p.10.0.0.5"]);
}

#[test]
fn a_hold_without_an_incarnation_ends_after_sticky_for_and_a_live_one_never_does() {
    let s = settings();
    let mut w = world(vec![]);
    w.holds = vec![hold("10.0.0.5", 1, None)];
    let mut m = Memory::default();
    let d = decide(&w, &s, &mut m, t(0));
    assert!(d.actions.is_empty());
    assert!(decide(&w, &s, &mut m, t(3600)).actions.is_empty(), "whole-second rounding: not yet");
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(3601))), ["release hold p.10.0.0.5 Expired"]);
    // With its incarnation live, never.
    let mut w = world(vec![Lease::test("10.0.0.5").incarnation(1)]);
    w.holds = vec![hold("10.0.0.5", 1, None)];
    let mut m = Memory::default();
    decide(&w, &s, &mut m, t(0));
    assert!(decide(&w, &s, &mut m, t(100_000)).actions.is_empty());
}

#[test]
fn a_hold_end_that_a_request_overtook_is_decided_again() {
    // The executor's releasing patch tests the hold's resourceVersion: a
    // request that landed in between wins. Once that request is gone again
    // (refused, withdrawn), the end is decided again for the new version.
    let s = settings();
    let mut w = world(vec![]);
    w.holds = vec![hold("10.0.0.5", 0, None)];
    w.holds[0].pending = None;
    let mut m = Memory::default();
    decide(&w, &s, &mut m, t(0));
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(3601))), ["release hold p.10.0.0.5 Expired"]);
    assert!(decide(&w, &s, &mut m, t(3602)).actions.is_empty(), "decided once per version");
    // A request overtook it (the patch failed on the version); its ADD gave up and withdrew it.
    w.holds = vec![hold("10.0.0.5", 0, Some(1))];
    w.holds[0].resource_version = "6".into();
    decide(&w, &s, &mut m, t(3603));
    w.holds[0].pending = None;
    w.holds[0].resource_version = "7".into();
    decide(&w, &s, &mut m, t(3604));
    assert!(decide(&w, &s, &mut m, t(7204)).actions.is_empty(), "stickyFor counts from the new idle sighting");
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(7205))), ["release hold p.10.0.0.5 Expired"]);
    // Its claim deleted: the same for ClaimGone.
    let mut w = with_claim(world(vec![]), "k2", &[]);
    w.holds = vec![hold("10.0.0.5", 1, None)];
    let mut m = Memory::default();
    decide(&w, &s, &mut m, t(0));
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(1))), ["release hold p.10.0.0.5 ClaimGone"]);
    w.holds[0].resource_version = "6".into();
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(2))), ["release hold p.10.0.0.5 ClaimGone"], "the new version");
}

#[test]
fn pool_pressure_ends_the_oldest_hold_idle_for_pressure_after_only_when_no_other_release_can_serve() {
    let s = settings();
    let mut w = world(vec![Lease::test("10.0.0.3")]);
    w.holds = vec![hold("10.0.0.1", 1, None), hold("10.0.0.2", 1, None)];
    w.capacity.insert("p".into(), Capacity { v4: 3, v6: 0 });
    let mut m = Memory::default();
    // .2 went idle first.
    w.holds[0].incarnation = None;
    let idle_first = w.holds.remove(0);
    decide(&w, &s, &mut m, t(0));
    w.holds.push(idle_first);
    decide(&w, &s, &mut m, t(10));
    // No need: holds stay. A need while both are younger than pressureAfter: still nothing.
    w.needs = vec![need("a@1", 10_000)];
    let d = decide(&w, &s, &mut m, t(20));
    assert!(d.actions.is_empty(), "a hold idle for 20 s is a recreation, not a leak");
    // The need still waits: the next pass comes when .2 ripens, not at an idle pass.
    assert_eq!(d.look_again_in, Some(s.pressure_after - Duration::from_secs(20)));
    // Once idle for pressureAfter, the oldest idle hold ends, once per need.
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(121))), ["release hold p.10.0.0.2 PoolPressure"]);
    assert!(decide(&w, &s, &mut m, t(122)).actions.is_empty());
    // Another release in progress can serve it: no hold ends.
    let mut w2 = world(vec![Lease::test("10.0.0.3").releasing_since(90, 600)]);
    w2.holds = vec![hold("10.0.0.1", 1, None)];
    w2.capacity.insert("p".into(), Capacity { v4: 3, v6: 0 });
    w2.needs = vec![need("a@1", 10_000)];
    let mut m2 = Memory::default();
    decide(&w2, &s, &mut m2, t(0));
    assert!(decide(&w2, &s, &mut m2, t(500)).actions.is_empty());
    // A family with room, or a capacity nobody knows: no hold ends.
    for cap in [Some(Capacity { v4: 4, v6: 0 }), None] {
        let mut w3 = world(vec![Lease::test("10.0.0.3")]);
        w3.holds = vec![hold("10.0.0.1", 1, None), hold("10.0.0.2", 1, None)];
        w3.holds[0].incarnation = None;
        w3.holds[1].incarnation = None;
        if let Some(c) = cap {
            w3.capacity.insert("p".into(), c);
        }
        let mut m3 = Memory::default();
        decide(&w3, &s, &mut m3, t(0));
        w3.needs = vec![need("b@1", 10_000)];
        assert!(decide(&w3, &s, &mut m3, t(500)).actions.is_empty(), "{cap:?}");
    }
}

#[test]
fn a_new_term_under_pressure_looks_again_when_its_idle_hold_ripens() {
    // A new leader's first pass sees the idle hold and the waiting need at
    // once: the next pass is due when the hold has been idle for
    // pressureAfter, and that pass ends it.
    let s = settings();
    let mut w = world(vec![Lease::test("10.0.0.3"), Lease::test("10.0.0.2")]);
    w.holds = vec![hold("10.0.0.1", 0, None)];
    w.holds[0].pending = None;
    w.capacity.insert("p".into(), Capacity { v4: 3, v6: 0 });
    w.needs = vec![need("a@1", 10_000)];
    let mut m = Memory::default();
    let d = decide(&w, &s, &mut m, t(0));
    assert!(d.actions.is_empty(), "{:?}", kinds(&d));
    assert_eq!(d.look_again_in, Some(s.pressure_after));
    let at = i64::try_from(s.pressure_after.as_secs()).unwrap();
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(at))), ["release hold p.10.0.0.1 PoolPressure"]);
}

#[test]
fn a_pool_of_unknown_ranges_is_full_for_pressure_only_when_its_admission_bound_is_used_up() {
    let s = settings();
    // No network config of p: netendpoint-pools lets it lease `bound` IPv4 addresses; 3 are in use.
    for (bound, ends) in [(None, false), (Some(4), false), (Some(3), true)] {
        let mut w = world(vec![Lease::test("10.0.0.3")]);
        w.holds = vec![hold("10.0.0.1", 1, None), hold("10.0.0.2", 1, None)];
        w.holds[0].incarnation = None;
        w.holds[1].incarnation = None;
        if let Some(b) = bound {
            w.capacity_bound.insert("p".into(), Capacity { v4: b, v6: 0 });
        }
        let mut m = Memory::default();
        decide(&w, &s, &mut m, t(0));
        w.needs = vec![need("b@1", 10_000)];
        let acted = kinds(&decide(&w, &s, &mut m, t(500)));
        assert_eq!(acted.iter().any(|k| k.contains("PoolPressure")), ends, "bound {bound:?}: {acted:?}");
    }
}

#[test]
fn pool_pressure_spares_the_hold_of_an_ordinal_its_statefulset_still_wants() {
    let s = settings();
    let mut w = world(vec![Lease::test("10.0.0.3"), Lease::test("10.0.0.2")]);
    w.holds = vec![hold("10.0.0.1", 0, None)];
    w.holds[0].pending = None;
    w.capacity.insert("p".into(), Capacity { v4: 3, v6: 0 });
    w.claims_known = true;
    let sts = ClaimFacts { uid: "k1".into(), ips: vec![], statefulset: Some("web".into()), network: "net".into() };
    w.claims.insert(("ns".into(), "web-0.p".into()), sts);
    w.statefulsets_known = true;
    w.statefulsets.insert(("ns".into(), "web".into()), 1);
    let mut m = Memory::default();
    decide(&w, &s, &mut m, t(0));
    w.needs = vec![need("a@1", 1000)];
    let d = decide(&w, &s, &mut m, t(500));
    assert!(d.actions.is_empty(), "web still wants ordinal 0: {:?}", kinds(&d));
    w.statefulsets.insert(("ns".into(), "web".into()), 0);
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(501))), ["release hold p.10.0.0.1 PoolPressure"], "scaled to 0");
}

#[test]
fn a_pressure_attempt_the_executor_refused_keeps_the_hold_from_no_other_end() {
    // The executor refuses pool pressure after its own reads (the claim's
    // Pod exists, the waiting ADD was served, a read failed): nothing
    // changes on the server, and the hold must still end later for its
    // own reasons, and stay open to pressure for another waiting ADD.
    let s = settings();
    let mut w = world(vec![Lease::test("10.0.0.3")]);
    w.holds = vec![hold("10.0.0.1", 0, None)];
    w.holds[0].pending = None;
    w.capacity.insert("p".into(), Capacity { v4: 2, v6: 0 });
    let mut m = Memory::default();
    decide(&w, &s, &mut m, t(0));
    w.needs = vec![need("a@1", 10_000)];
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(121))), ["release hold p.10.0.0.1 PoolPressure"]);
    assert!(decide(&w, &s, &mut m, t(122)).actions.is_empty(), "once per waiting ADD");
    // Refused: another waiting ADD may still have it.
    w.needs.push(need("b@1", 10_000));
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(200))), ["release hold p.10.0.0.1 PoolPressure"]);
    // Refused again; the needs go. stickyFor (1 h) still ends it.
    w.needs.clear();
    assert!(decide(&w, &s, &mut m, t(3600)).actions.is_empty(), "whole-second rounding: not yet");
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(3601))), ["release hold p.10.0.0.1 Expired"]);
    // And so does its claim's deletion (seen twice), after a refused attempt.
    let mut w = with_claim(world(vec![Lease::test("10.0.0.3")]), "k1", &["10.0.0.1"]);
    w.holds = vec![hold("10.0.0.1", 0, None)];
    w.holds[0].pending = None;
    w.capacity.insert("p".into(), Capacity { v4: 2, v6: 0 });
    let mut m = Memory::default();
    decide(&w, &s, &mut m, t(0));
    w.needs = vec![need("a@1", 10_000)];
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(121))), ["release hold p.10.0.0.1 PoolPressure"]);
    w.claims.clear();
    decide(&w, &s, &mut m, t(130));
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(131))), ["release hold p.10.0.0.1 ClaimGone"]);
}

/// A queue entry of node `node`, arrived `arrival`, with its own deadline.
fn waiter(name: &str, arrival: u128, deadline: i64) -> Waiter {
    Waiter {
        name: name.into(),
        uid: format!("uid-{name}"),
        pool: "p".into(),
        family: IpFamily::IPv4,
        node: "n1".into(),
        pod: PodRef { namespace: "ns".into(), name: format!("pod-{name}"), uid: format!("pod-{name}") },
        container_id: format!("c-{name}"),
        if_name: "eth0".into(),
        arrival,
        created: t(0),
        deadline: t(deadline),
        status: NetworkEndpointNeedStatus::default(),
        spans: None,
    }
}

fn ranges(cidr: &str) -> Vec<netendpoint_netconf::RangeSet> {
    let conf = netendpoint_netconf::IpamConfig::parse(&serde_json::json!({"ranges": [[{"subnet": cidr}]]}), "net");
    conf.unwrap().range_sets
}

#[test]
fn the_queue_is_served_in_arrival_order_and_entries_nobody_waits_for_are_dropped() {
    let s = settings();
    // A /29 holds .2 to .6; .3 and .5 are being released, the others leased.
    let mut w = world(vec![
        Lease::test("10.0.0.2"),
        Lease::test("10.0.0.3").releasing_since(10, 600),
        Lease::test("10.0.0.4"),
        Lease::test("10.0.0.5").releasing_since(5, 600),
        Lease::test("10.0.0.6"),
    ]);
    w.ranges.insert("p".into(), ranges("10.0.0.0/29"));
    // Arrivals, not names, order the queue; a later arrival may have a smaller name.
    w.waiters = vec![waiter("z-first", 100, 60), waiter("a-second", 105, 60), waiter("m-third", 110, 60)];
    w.waiters.push(waiter("gone-pod", 90, 60));
    w.waiters.push(waiter("late", 95, 30));
    w.waiters.push(waiter("unchecked", 80, 60));
    for x in ["z-first", "a-second", "m-third", "late"] {
        w.believed.insert(format!("uid-{x}"), Ok(()));
    }
    w.believed.insert("uid-gone-pod".into(), Err("its Pod does not exist".into()));
    let mut m = Memory::default();
    assert_eq!(
        kinds(&decide(&w, &s, &mut m, t(40))),
        [
            "drop gone-pod (its Pod does not exist)",
            "drop late (its deadline passed: the ADD no longer waits)",
            "promise 10.0.0.5~ to z-first (1/3)",
            "promise 10.0.0.3~ to a-second (2/3)",
            "queue m-third (3/3)",
        ],
        "the oldest release to the first arrival; nothing for an entry not checked yet"
    );
    let d = decide(&w, &s, &mut m, t(41));
    assert!(d.actions.is_empty(), "written once, though the watch is behind: {:?}", kinds(&d));
    // .5's release ends: it is free now, and stays z-first's; .4 is released and goes to m-third.
    w.leases.retain(|l| l.name != "p.10.0.0.5");
    w.leases[2] = Arc::new(Lease::test("10.0.0.4").releasing_since(41, 600));
    for x in &mut w.waiters {
        x.status = m.promised.get(&x.uid).cloned().unwrap_or_default();
    }
    assert_eq!(
        kinds(&decide(&w, &s, &mut m, t(42))),
        ["promise 10.0.0.5 to z-first (1/3)", "promise 10.0.0.4~ to m-third (3/3)"]
    );
}

/// A queue pass reads only the waiters' pools: it must decide for them
/// what a full pass over the whole cluster decides, and leave nothing for
/// the full pass to write again.
#[test]
fn the_queues_alone_are_served_as_a_full_pass_serves_them_from_their_pools_alone() {
    let s = settings();
    let big = |ip: &str, node: &str| {
        let mut l = Lease::test(ip);
        l.name = format!("big.{ip}");
        l.pool = "big".into();
        l.node = node.into();
        l
    };
    let mut leases = vec![
        Lease::test("10.0.0.2"),
        Lease::test("10.0.0.3").releasing_since(10, 600),
        Lease::test("10.0.0.4"),
        Lease::test("10.0.0.5").releasing_since(5, 30),
        Lease::test("10.0.0.6"),
    ];
    // Another pool, with a release of its own and a lease of a node that vanished.
    leases.extend([big("10.1.0.2", "n1"), big("10.1.0.3", "n1").releasing_since(1, 600), big("10.1.0.4", "gone")]);
    let mut full = world(leases);
    full.ranges.insert("p".into(), ranges("10.0.0.0/29"));
    full.ranges.insert("big".into(), ranges("10.1.0.0/29"));
    full.waiters = vec![waiter("first", 100, 60), waiter("second", 105, 60), waiter("third", 110, 60)];
    full.waiters.push(waiter("gone-pod", 90, 60));
    full.believed = full.waiters.iter().map(|x| (x.uid.clone(), Ok(()))).collect();
    full.believed.insert("uid-gone-pod".into(), Err("its Pod does not exist".into()));
    let mut only_p = World {
        leases: full.leases.iter().filter(|l| l.pool == "p").cloned().collect(),
        waiters: full.waiters.clone(),
        believed: full.believed.clone(),
        ..World::default()
    };
    only_p.ranges.insert("p".into(), ranges("10.0.0.0/29"));

    let (mut by_queue, mut by_full) = (Memory::default(), Memory::default());
    let queued = kinds(&serve_queues(&only_p, &s, &mut by_queue, t(40)));
    assert_eq!(
        queued,
        [
            "drop gone-pod (its Pod does not exist)",
            "force p.10.0.0.5 for Need(\"first\")",
            "promise 10.0.0.5~ to first (1/3)",
            "promise 10.0.0.3~ to second (2/3)",
            "queue third (3/3)",
        ]
    );
    assert_eq!(queued, kinds(&decide(&full, &s, &mut by_full, t(40))), "as the full pass decides");
    let after = decide(&full, &s, &mut by_queue, t(40));
    assert!(after.actions.is_empty(), "a full pass after the queue pass writes nothing again: {:?}", kinds(&after));
    // .5's release ends: free now, and still first's; the full pass agrees.
    for w in [&mut only_p, &mut full] {
        w.leases.retain(|l| l.name != "p.10.0.0.5");
        for x in &mut w.waiters {
            x.status = by_queue.promised.get(&x.uid).cloned().unwrap_or_default();
        }
    }
    assert_eq!(kinds(&serve_queues(&only_p, &s, &mut by_queue, t(41))), ["promise 10.0.0.5 to first (1/3)"]);
    assert!(decide(&full, &s, &mut by_queue, t(41)).actions.is_empty());
}

#[test]
fn a_pool_of_unknown_ranges_promises_the_addresses_it_saw_allocated_once_they_are_free() {
    let s = settings();
    // No network config for pool p: only what was seen allocated is known in range.
    let mut w = world(vec![Lease::test("10.0.0.2"), Lease::test("10.0.0.3"), Lease::test("10.0.0.7")]);
    Arc::make_mut(&mut w.leases[2]).static_ip = true;
    w.waiters = vec![waiter("first", 100, 60), waiter("second", 101, 60)];
    w.believed = w.waiters.iter().map(|x| (x.uid.clone(), Ok(()))).collect();
    let mut m = Memory::default();
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(40))), ["queue first (1/2)", "queue second (2/2)"]);
    // .3 is deleted with no finalizer (gone at once), and so is the static .7.
    w.leases.retain(|l| l.name == "p.10.0.0.2");
    for x in &mut w.waiters {
        x.status = m.promised.get(&x.uid).cloned().unwrap_or_default();
    }
    assert_eq!(
        kinds(&decide(&w, &s, &mut m, t(41))),
        ["promise 10.0.0.3 to first (1/2)"],
        "an address seen allocated is promised once free; a static request's address never is"
    );
    // Once the pool's ranges are known, they are what counts.
    w.ranges.insert("p".into(), ranges("10.0.0.0/29"));
    for x in &mut w.waiters {
        x.status = m.promised.get(&x.uid).cloned().unwrap_or_default();
    }
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(42))), ["promise 10.0.0.4 to second (2/2)"]);
}

#[test]
fn a_term_notes_every_lease_once_then_only_the_fresh_ones() {
    let s = settings();
    let promise_of = |w: &mut World, m: &mut Memory, at: i64| {
        for x in &mut w.waiters {
            x.status = m.promised.get(&x.uid).cloned().unwrap_or_default();
        }
        kinds(&decide(w, &s, m, t(at)))
    };
    // Pool p, ranges unknown. The views were read before this term: none is fresh.
    let mut w = world(vec![Lease::test("10.0.0.2"), Lease::test("10.0.0.3")]);
    w.fresh = Some(Vec::new());
    let mut m = Memory::default();
    // A queue pass first, over part of the store, does not count as having noted everything.
    assert!(serve_queues(&w, &s, &mut m, t(39)).actions.is_empty());
    w.waiters = vec![waiter("first", 100, 60), waiter("second", 101, 60)];
    w.believed = w.waiters.iter().map(|x| (x.uid.clone(), Ok(()))).collect();
    assert_eq!(promise_of(&mut w, &mut m, 40), ["queue first (1/2)", "queue second (2/2)"]);
    // The term's first full pass noted both: .3, gone, is promised.
    w.leases.retain(|l| l.name == "p.10.0.0.2");
    assert_eq!(promise_of(&mut w, &mut m, 41), ["promise 10.0.0.3 to first (1/2)"]);
    // Later passes note what is fresh: .5 came and went; .4 is in the
    // snapshot but not fresh (its view was read before), so it is not read
    // again (noted, it would be promised first, being lower).
    let (five, four) = (Arc::new(Lease::test("10.0.0.5")), Arc::new(Lease::test("10.0.0.4")));
    w.leases.extend([five.clone(), four]);
    w.fresh = Some(vec![five]);
    assert!(promise_of(&mut w, &mut m, 42).is_empty());
    w.leases.retain(|l| l.name == "p.10.0.0.2");
    w.fresh = Some(Vec::new());
    assert_eq!(
        promise_of(&mut w, &mut m, 43),
        ["promise 10.0.0.5 to second (2/2)"],
        "the fresh .5 was noted; .4 was not read again"
    );
}

#[test]
fn a_waiter_is_promised_only_an_address_of_the_spans_it_announced() {
    let s = settings();
    let ip = |x: &str| x.parse::<IpAddr>().unwrap();
    // Pool p, ranges unknown: .5 (seen allocated, then free) is outside the
    // first waiter's network (.2-.3), whose .2 is being released.
    let mut w =
        world(vec![Lease::test("10.0.0.2").releasing_since(10, 600), Lease::test("10.0.0.3"), Lease::test("10.0.0.5")]);
    let mut narrow = waiter("narrow", 100, 60);
    narrow.spans = Some(vec![(ip("10.0.0.2"), ip("10.0.0.3"))]);
    w.waiters = vec![narrow];
    w.believed = w.waiters.iter().map(|x| (x.uid.clone(), Ok(()))).collect();
    let mut m = Memory::default();
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(40))), ["promise 10.0.0.2~ to narrow (1/1)"]);
    w.leases.retain(|l| l.name != "p.10.0.0.5");
    w.waiters[0].status = m.promised.get("uid-narrow").cloned().unwrap_or_default();
    assert_eq!(
        kinds(&decide(&w, &s, &mut m, t(41))),
        Vec::<String>::new(),
        "the free .5 is not its address: it keeps .2"
    );
    // A waiter of the whole pool takes .5; one whose spans hold a free address never allocated is offered it.
    let mut wide = waiter("wide", 101, 60);
    wide.spans = Some(vec![(ip("10.0.0.2"), ip("10.0.0.6"))]);
    let mut other = waiter("other", 102, 60);
    other.spans = Some(vec![(ip("10.0.0.8"), ip("10.0.0.9"))]);
    w.waiters.extend([wide, other]);
    w.believed = w.waiters.iter().map(|x| (x.uid.clone(), Ok(()))).collect();
    assert_eq!(
        kinds(&decide(&w, &s, &mut m, t(42))),
        ["promise 10.0.0.5 to wide (2/3)", "promise 10.0.0.8 to other (3/3)"]
    );
}

#[test]
fn a_promised_release_past_its_bound_is_forced_for_its_waiter_and_a_young_one_is_not() {
    let s = settings();
    let mut w =
        world(vec![Lease::test("10.0.0.2").releasing_since(0, 30), Lease::test("10.0.0.3").releasing_since(0, 600)]);
    w.waiters = vec![waiter("first", 1, 100), waiter("second", 2, 100)];
    w.believed = w.waiters.iter().map(|x| (x.uid.clone(), Ok(()))).collect();
    let kinds_at_40 = kinds(&decide(&w, &s, &mut Memory::default(), t(40)));
    assert_eq!(
        kinds_at_40,
        [
            "force p.10.0.0.2 for Need(\"first\")",
            "promise 10.0.0.2~ to first (1/2)",
            "promise 10.0.0.3~ to second (2/2)",
        ]
    );
}

#[test]
fn statefulset_pods_get_claims_and_lose_them_when_scaled_down_seen_twice() {
    let s = settings();
    let mut w = world(vec![]);
    w.statefulsets_known = true;
    w.claims_known = true;
    w.sticky_networks = vec![StickyNetwork { pool: "p".into(), network: "net".into() }];
    w.statefulsets.insert(("ns".into(), "web".into()), 2);
    let mut m = Memory::default();
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(0))), ["create claim ns/web-0.p", "create claim ns/web-1.p"]);
    assert!(decide(&w, &s, &mut m, t(1)).actions.is_empty(), "once, until the informer shows them");
    for i in 0..2 {
        let c =
            ClaimFacts { uid: format!("k{i}"), ips: vec![], statefulset: Some("web".into()), network: "net".into() };
        w.claims.insert(("ns".into(), format!("web-{i}.p")), c);
    }
    assert!(decide(&w, &s, &mut m, t(2)).actions.is_empty());
    w.statefulsets.insert(("ns".into(), "web".into()), 1);
    assert!(decide(&w, &s, &mut m, t(3)).actions.is_empty(), "first sighting");
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(4))), ["delete claim ns/web-1.p"]);
    // Claims of other origins are never deleted.
    w.claims.insert(("ns".into(), "vm1.net".into()), ClaimFacts { uid: "kv".into(), ..ClaimFacts::default() });
    assert!(decide(&w, &s, &mut m, t(5)).actions.is_empty());
    // Nor claims of a network this controller does not serve (another selector's).
    let other = ClaimFacts {
        uid: "ko".into(),
        statefulset: Some("db".into()),
        network: "other-net".into(),
        ..ClaimFacts::default()
    };
    w.claims.insert(("ns".into(), "db-0.q".into()), other);
    assert!(decide(&w, &s, &mut m, t(6)).actions.is_empty());
    assert!(decide(&w, &s, &mut m, t(7)).actions.is_empty(), "seen twice, still not ours");
}

/// An upgrade from the version whose sticky leases carry the sticky-hold
/// finalizer: the claim made for a StatefulSet Pod that such a lease keeps
/// an address for (released or live) starts with that address, so that the
/// Pod's next ADD continues it instead of waiting behind its own hold.
#[test]
fn a_claim_made_for_a_pod_of_a_legacy_hold_starts_with_its_address() {
    let s = settings();
    let mut w = world(vec![Lease::held("10.0.0.7", 1, 0)]);
    w.statefulsets_known = true;
    w.claims_known = true;
    w.sticky_networks = vec![StickyNetwork { pool: "p".into(), network: "net".into() }];
    w.statefulsets.insert(("ns".into(), "web".into()), 2);
    let mut m = Memory::default();
    let legacy: Vec<(String, Option<String>)> = decide(&w, &s, &mut m, t(0))
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::CreateClaim { name, legacy, .. } => Some((name.clone(), legacy.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(legacy, [("web-0.p".to_string(), None), ("web-1.p".to_string(), Some("10.0.0.7/32".to_string()))]);
}

fn with_sts(leases: Vec<Lease>, replicas: Option<i64>) -> World {
    let mut w = world(leases);
    w.statefulsets_known = true;
    if let Some(r) = replicas {
        w.statefulsets.insert(("ns".into(), "web".into()), r);
    }
    w
}

#[test]
fn a_legacy_hold_ends_when_its_statefulset_is_gone_or_scaled_below_it_seen_twice_or_after_sticky_for() {
    let s = settings();
    let leases = vec![Lease::held("10.0.0.1", 0, 0), Lease::held("10.0.0.2", 2, 0)];
    let mut m = Memory::default();
    assert!(decide(&with_sts(leases.clone(), Some(3)), &s, &mut m, t(10)).actions.is_empty());
    let w = with_sts(leases.clone(), Some(2));
    assert!(decide(&w, &s, &mut m, t(11)).actions.is_empty(), "first sighting");
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(12))), ["end legacy hold p.10.0.0.2 ScaledDown"]);
    let mut m = Memory::default();
    let w = with_sts(leases.clone(), None);
    assert!(decide(&w, &s, &mut m, t(10)).actions.is_empty());
    assert_eq!(
        kinds(&decide(&w, &s, &mut m, t(11))),
        ["end legacy hold p.10.0.0.1 OwnerDeleted", "end legacy hold p.10.0.0.2 OwnerDeleted"]
    );
    let mut m = Memory::default();
    let w = with_sts(vec![Lease::held("10.0.0.1", 0, 0)], Some(1));
    assert!(decide(&w, &s, &mut m, t(3600)).actions.is_empty());
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(3601))), ["end legacy hold p.10.0.0.1 Expired"]);
}

/// A VM's claim (no StatefulSet): a request while the previous incarnation
/// is live is accepted early, once; a StatefulSet's claim waits.
#[test]
fn a_request_of_a_vm_claim_is_accepted_while_the_previous_incarnation_lives() {
    let s = settings();
    let mut w = world(vec![Lease::test("10.0.0.5").incarnation(1)]);
    w.holds = vec![hold("10.0.0.5", 1, Some(2))];
    w.claims_known = true;
    let vm = ClaimFacts { uid: "k1".into(), network: "net".into(), ..ClaimFacts::default() };
    w.claims.insert(("ns".into(), "web-0.p".into()), vm);
    let mut m = Memory::default();
    assert_eq!(kinds(&decide(&w, &s, &mut m, t(0))), ["accept p.10.0.0.5-2"]);
    assert!(decide(&w, &s, &mut m, t(1)).actions.is_empty(), "once");
    // Accepted: nothing more until the previous incarnation is gone; then created.
    w.holds[0].pending.as_mut().unwrap().accepted = true;
    assert!(decide(&w, &s, &mut Memory::default(), t(2)).actions.is_empty());
    w.leases.clear();
    assert_eq!(kinds(&decide(&w, &s, &mut Memory::default(), t(3))), ["create p.10.0.0.5-2"]);
    // A StatefulSet's claim is never accepted early.
    let mut w = world(vec![Lease::test("10.0.0.5").incarnation(1)]);
    w.holds = vec![hold("10.0.0.5", 1, Some(2))];
    w.claims_known = true;
    let sts = ClaimFacts {
        uid: "k1".into(),
        network: "net".into(),
        statefulset: Some("web".into()),
        ..ClaimFacts::default()
    };
    w.claims.insert(("ns".into(), "web-0.p".into()), sts);
    assert!(decide(&w, &s, &mut Memory::default(), t(0)).actions.is_empty());
}
