//! Trust boundaries of every lease, whoever creates it, enforced by the
//! real API server with the manifests of deploy/ applied: the CRD's schema
//! and CEL rules (the name tied to pool and IP, bounded strings, an
//! immutable spec), the lease integrity policy (labels and annotation that
//! mirror the spec), and what a new lease may carry (registered agents'
//! finalizers, no owner, no annotation or label of its own, an address
//! inside its own pool's ranges). Leases are sent with the plugin's real
//! token, bound to its Node, or as the administrator. Each denial is the
//! server's answer to a request the client did send; each test names the
//! finding of the trust issue it closes.

#![allow(clippy::unwrap_used)]

use kube::api::{PatchParams, PostParams};
use netendpoint_crd::{ClaimRef, NetworkEndpoint};
use netendpoint_tests::trust::*;
use netendpoint_tests::{self as h, CNI_SERVICE_ACCOUNT};
use serde_json::json;

#[tokio::test]
async fn the_crd_ties_the_name_to_pool_and_ip_and_freezes_spec() {
    h::apply_deploy();
    let admin = h::endpoints().await;
    let pool = h::unique("trust-crd");
    let pp = PostParams::default();

    // The plugin's own names are accepted, for both families.
    let v4 = admin.create(&pp, &full_lease(&pool, "10.79.0.5", "trust-n1", &[])).await.unwrap();
    let v6 = admin.create(&pp, &full_lease(&pool, "fd00::79:5", "trust-n1", &[])).await.unwrap();
    assert_eq!(v6.metadata.name.as_deref(), Some(&*format!("{pool}.fd00-0000-0000-0000-0000-0000-0079-0005")));

    // A name that is not pool + encoded IP is refused.
    let mut wrong_ip = full_lease(&pool, "10.79.0.6", "trust-n1", &[]);
    wrong_ip.metadata.name = Some(format!("{pool}.10.79.0.7"));
    assert_refused("name of another IPv4", admin.create(&pp, &wrong_ip).await, 422, "metadata.name must be");
    let mut wrong_pool = full_lease(&pool, "10.79.0.6", "trust-n1", &[]);
    wrong_pool.metadata.name = Some("elsewhere.10.79.0.6".into());
    assert_refused("name of another pool", admin.create(&pp, &wrong_pool).await, 422, "metadata.name must be");
    let mut wrong_v6 = full_lease(&pool, "fd00::79:6", "trust-n1", &[]);
    wrong_v6.metadata.name = Some(format!("{pool}.fd00-0000-0000-0000-0000-0000-0079-0007"));
    assert_refused("name of another IPv6", admin.create(&pp, &wrong_v6).await, 422, "metadata.name must be");
    let mut short_v6 = full_lease(&pool, "fd00::79:6", "trust-n1", &[]);
    short_v6.metadata.name = Some(format!("{pool}.fd00--79-6"));
    assert_refused("compressed IPv6 name", admin.create(&pp, &short_v6).await, 422, "metadata.name must be");

    // spec is immutable, for every field and every caller.
    let name = v4.metadata.name.clone().unwrap();
    for (field, value) in
        [("node", json!("trust-n2")), ("ip", json!("10.79.0.9")), ("containerID", json!("x")), ("static", json!(true))]
    {
        let r = admin.patch(&name, &PatchParams::default(), &merge(json!({"spec": {field: value}}))).await;
        assert_refused(&format!("patch spec.{field}"), r, 422, "spec is immutable");
    }
    // Labels and annotations of netendpoint.dev cannot drift, not even for an administrator.
    let drift = [
        json!({"metadata": {"labels": {"netendpoint.dev/node": "trust-n2"}}}),
        json!({"metadata": {"labels": {"netendpoint.dev/node": null}}}),
        json!({"metadata": {"labels": {"netendpoint.dev/block": "10.79.0.64"}}}),
        json!({"metadata": {"labels": {"netendpoint.dev/pod-name": "web-1"}}}),
        json!({"metadata": {"labels": {"netendpoint.dev/role": "hold"}}}),
        json!({"metadata": {"annotations": {"netendpoint.dev/force-release-after": "1s"}}}),
        json!({"metadata": {"annotations": {"netendpoint.dev/sticky-for": "876000h"}}}),
    ];
    for patch in drift {
        let r = admin.patch(&name, &PatchParams::default(), &merge(patch.clone())).await;
        assert_refused(&format!("{patch}"), r, 422, "netendpoint-lease-integrity");
    }
    let mut mislabelled = full_lease(&pool, "10.79.0.10", "trust-n1", &[]);
    mislabelled.metadata.labels.as_mut().unwrap().insert("netendpoint.dev/node".into(), "trust-n2".into());
    assert_refused(
        "create with a drifted label",
        admin.create(&pp, &mislabelled).await,
        422,
        "must be present and equal",
    );
    // A static lease is accepted, and its mark is frozen with the rest of spec.
    let mut marked = full_lease(&pool, "10.79.0.11", "trust-n1", &[]);
    marked.spec.static_ip = Some(true);
    let marked = admin.create(&pp, &marked).await.unwrap();
    assert_eq!(marked.spec.static_ip, Some(true), "the API server keeps spec.static");
    let marked_name = marked.metadata.name.unwrap();
    let r = admin.patch(&marked_name, &PatchParams::default(), &merge(json!({"spec": {"static": null}}))).await;
    assert_refused("unmark a static lease", r, 422, "spec is immutable");
    // Other labels stay free for an administrator.
    admin.patch(&name, &PatchParams::default(), &merge(json!({"metadata": {"labels": {"team": "a"}}}))).await.unwrap();
    h::cleanup_pool(&pool).await;
}

/// Finding 3: every lease is created with every label that mirrors its
/// spec, and nothing else of netendpoint.dev; the controller and agents can
/// select by them, and the controller reads the spec.
#[tokio::test]
async fn every_lease_is_created_with_the_labels_that_mirror_its_spec() {
    h::apply_deploy();
    let dir = h::TempDir::new("trust-labels");
    let node = h::unique("trust-ln");
    let plugin = as_node_bound(CNI_SERVICE_ACCOUNT, &node, &dir).await;
    let pool = h::unique("trust-labels");
    let _ranges = h::register_pool(&pool, &["10.79.6.0/24", "fd00:79:6::/64"]);
    let pp = PostParams::default();
    type Change = fn(&mut NetworkEndpoint);
    fn labels(ep: &mut NetworkEndpoint) -> &mut std::collections::BTreeMap<String, String> {
        ep.metadata.labels.get_or_insert_default()
    }
    let cases: [(&str, Change, &str, bool); 13] = [
        ("no pool label", |ep| drop(labels(ep).remove("netendpoint.dev/pool")), "must be present and equal", false),
        ("no node label", |ep| drop(labels(ep).remove("netendpoint.dev/node")), "must be present and equal", false),
        (
            "no network label",
            |ep| drop(labels(ep).remove("netendpoint.dev/network")),
            "must be present and equal",
            false,
        ),
        (
            "no pod-uid label",
            |ep| drop(labels(ep).remove("netendpoint.dev/pod-uid")),
            "must be present and equal",
            false,
        ),
        (
            "no pod-name label",
            |ep| drop(labels(ep).remove("netendpoint.dev/pod-name")),
            "must be present and equal",
            false,
        ),
        (
            "another pod-namespace",
            |ep| drop(labels(ep).insert("netendpoint.dev/pod-namespace".into(), "kube-system".into())),
            "must be present and equal",
            false,
        ),
        ("no ip-family label", |ep| drop(labels(ep).remove("netendpoint.dev/ip-family")), "ip-family", false),
        ("no block label", |ep| drop(labels(ep).remove("netendpoint.dev/block")), "netendpoint.dev/block", false),
        (
            "a hold label on an endpoint",
            |ep| drop(labels(ep).insert("netendpoint.dev/role".into(), "hold".into())),
            "netendpoint.dev/role",
            false,
        ),
        (
            "an old sticky-identity label",
            |ep| drop(labels(ep).insert("netendpoint.dev/sticky-identity".into(), "default.web-0".into())),
            "no netendpoint.dev label but",
            false,
        ),
        (
            "no force-release annotation",
            |ep| ep.metadata.annotations = None,
            "netendpoint.dev/force-release-after is present exactly",
            false,
        ),
        (
            "a sticky-for annotation",
            |ep| {
                ep.metadata
                    .annotations
                    .get_or_insert_default()
                    .insert("netendpoint.dev/sticky-for".into(), "876000h".into());
            },
            "no other netendpoint.dev annotation",
            true,
        ),
        (
            "a claim without its labels",
            |ep| {
                ep.spec.claim =
                    Some(ClaimRef { namespace: "default".into(), name: "web-0.x".into(), uid: "k1".into() });
                ep.spec.incarnation = Some(1);
                let name = format!("{}-1", ep.metadata.name.clone().unwrap());
                ep.metadata.name = Some(name);
            },
            "must be present and equal",
            true,
        ),
    ];
    // An administrator is held to the labels too: the cases that another
    // policy would also refuse for the plugin (an annotation of its own, an
    // incarnation, which is the controller's) are sent as the administrator.
    for (i, (what, change, says, by_admin)) in cases.iter().enumerate() {
        let ip = if i % 2 == 0 { format!("10.79.6.{}", 10 + i) } else { format!("fd00:79:6::{:x}", 10 + i) };
        let mut ep = full_lease(&pool, &ip, &node, &[]);
        change(&mut ep);
        let r = if *by_admin { h::endpoints().await.create(&pp, &ep).await } else { plugin.create(&pp, &ep).await };
        assert_refused(what, r, 422, says);
    }
    // The hold: its role label is required.
    let mut unmarked = hold(&pool, "10.79.6.40", &node, "web-0.h");
    labels(&mut unmarked).remove("netendpoint.dev/role");
    assert_refused("a hold without its role label", plugin.create(&pp, &unmarked).await, 422, "netendpoint.dev/role");
    // As the plugin writes them, both families are accepted.
    plugin.create(&pp, &full_lease(&pool, "10.79.6.50", &node, &[])).await.unwrap();
    plugin.create(&pp, &full_lease(&pool, "fd00:79:6::50", &node, &[])).await.unwrap();
    plugin.create(&pp, &hold(&pool, "10.79.6.51", &node, "web-0.h")).await.unwrap();
    h::cleanup_pool(&pool).await;
}

/// Finding 8: a node name longer than 63 characters is labelled by its
/// prefix, which admission recomputes and checks like any other.
#[tokio::test]
async fn a_node_name_longer_than_63_characters_is_checked_by_its_label_prefix() {
    h::apply_deploy();
    let dir = h::TempDir::new("trust-long");
    // The 63rd character is a '-', which may not end a label value.
    let node = format!("{}-{}", "n".repeat(62), h::unique("long"));
    assert!(node.len() > 63);
    let plugin = as_node_bound(CNI_SERVICE_ACCOUNT, &node, &dir).await;
    let pool = h::unique("trust-long");
    let _ranges = h::register_pool(&pool, &["10.79.7.0/24"]);
    let pp = PostParams::default();
    let mut wrong = full_lease(&pool, "10.79.7.1", &node, &[]);
    let cut = netendpoint_crd::label_value(&node);
    assert_eq!(cut, "n".repeat(62), "the label loses the trailing '-' of the cut");
    wrong.metadata.labels.as_mut().unwrap().insert("netendpoint.dev/node".into(), "n".repeat(61));
    // The first create waits until admission has read the pool registered a moment ago.
    let first = create_once_the_pool_is_seen(&plugin, &wrong).await;
    assert_refused("a long node's wrong label", first, 422, "must be present and equal");
    // The prefix-and-hash form of earlier versions.
    wrong
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("netendpoint.dev/node".into(), format!("{}-0123456789", "n".repeat(52)));
    assert_refused("a long node's hashed label", plugin.create(&pp, &wrong).await, 422, "must be present and equal");
    let right = plugin.create(&pp, &full_lease(&pool, "10.79.7.2", &node, &[])).await.unwrap();
    assert_eq!(right.metadata.labels.unwrap()["netendpoint.dev/node"], cut);
    h::cleanup_pool(&pool).await;
}

/// Finding 3: a lease is bounded (its strings by the CRD) and inside its
/// own pool's ranges (netendpoint-lease-range): no address outside every
/// range, none excluded, none of another pool under an invented name.
#[tokio::test]
async fn a_lease_is_bounded_and_inside_its_own_pools_ranges() {
    h::apply_deploy();
    let dir = h::TempDir::new("trust-range");
    let node = h::unique("trust-rn");
    let plugin = as_node_bound(CNI_SERVICE_ACCOUNT, &node, &dir).await;
    let pp = PostParams::default();
    let (wide, narrow, carved) = (h::unique("trust-wide"), h::unique("trust-narrow"), h::unique("trust-carved"));
    let _w = h::register_pool(&wide, &["10.75.0.0/16"]);
    let _n = h::register_pool(&narrow, &["10.75.10.0/24"]);
    let _c = h::register_pool(&carved, &["10.76.20.0/24", "!10.76.20.0/28"]);

    let mut huge = full_lease(&carved, "10.76.20.100", &node, &[]);
    huge.spec.container_id = "c".repeat(1_000_000);
    assert_refused("a 1,000,000-byte containerID", plugin.create(&pp, &huge).await, 422, "Too long");
    let r = create_once_the_pool_is_seen(&plugin, &full_lease(&carved, "8.8.8.8", &node, &[])).await;
    assert_refused("8.8.8.8", r, 403, "is not in the ranges of pool");
    let r = plugin.create(&pp, &full_lease(&carved, "10.76.20.5", &node, &[])).await;
    assert_refused("an excluded address", r, 403, "is not in the ranges of pool");
    let invented = h::unique("trust-invented");
    let r = plugin.create(&pp, &full_lease(&invented, "10.75.10.5", &node, &[])).await;
    assert_refused("another pool's address under an invented pool", r, 403, "has no ranges");
    let r = create_once_the_pool_is_seen(&plugin, &full_lease(&wide, "10.75.10.5", &node, &[])).await;
    assert_refused(
        "another pool's address under a pool that overlaps it",
        r,
        403,
        &format!("belongs to pool {narrow}"),
    );
    // A pool whose ranges do not parse leases nothing.
    let garbled = h::unique("trust-garbled");
    let _g = h::register_pool(&garbled, &["10.76.30.0/24", "10.76.31.0/33"]);
    let r = create_once_the_pool_is_seen(&plugin, &full_lease(&garbled, "10.76.30.5", &node, &[])).await;
    assert_refused("a pool with a malformed range", r, 403, "are not all CIDRs");
    plugin.create(&pp, &full_lease(&carved, "10.76.20.17", &node, &[])).await.unwrap();
    plugin.create(&pp, &full_lease(&wide, "10.75.11.5", &node, &[])).await.unwrap();
    // An administrator is not held to the ranges (a repair by hand).
    h::endpoints().await.create(&pp, &full_lease(&invented, "8.8.8.8", &node, &[])).await.unwrap();
    for pool in [&wide, &narrow, &carved, &invented, &garbled] {
        h::cleanup_pool(pool).await;
    }
}

/// Finding 8: a lease is created with no finalizer but registered agents'
/// (at most 16, never a netendpoint.dev one, none on a hold), no owner, no
/// annotation but the force-release bound and no label of its own.
#[tokio::test]
async fn a_lease_carries_only_the_finalizers_owners_and_annotations_of_the_design() {
    h::apply_deploy();
    let dir = h::TempDir::new("trust-shape");
    let node = h::unique("trust-sn");
    let plugin = as_node_bound(CNI_SERVICE_ACCOUNT, &node, &dir).await;
    let pool = h::unique("trust-shape");
    let _ranges = h::register_pool(&pool, &["10.79.8.0/24"]);
    let pp = PostParams::default();
    let many: Vec<(String, String)> =
        (0..17).map(|i| (format!("{PROBE_NS}.fin-{i}"), format!("trust.example.com/f{i}"))).collect();
    let _lines = h::AgentLines::set(&many.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect::<Vec<_>>());
    let seventeen: Vec<&str> = many.iter().map(|(_, v)| v.as_str()).collect();

    let r = plugin.create(&pp, &full_lease(&pool, "10.79.8.1", &node, &["never.example.com/registered"])).await;
    assert_refused("an unregistered finalizer", r, 422, "finalizers must be those of registered agents");
    let r = plugin.create(&pp, &full_lease(&pool, "10.79.8.2", &node, &[netendpoint_crd::FINALIZER_STICKY_HOLD])).await;
    assert_refused("the sticky-hold finalizer", r, 422, "no netendpoint.dev finalizer");
    let r = plugin.create(&pp, &full_lease(&pool, "10.79.8.3", &node, &seventeen)).await;
    assert_refused("17 finalizers", r, 422, "at most 16 finalizers");
    plugin.create(&pp, &full_lease(&pool, "10.79.8.4", &node, &seventeen[..16])).await.unwrap();

    let mut owned = full_lease(&pool, "10.79.8.5", &node, &[OWN]);
    owned.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node", "name": node, "uid": "00000000-0000-0000-0000-000000000001",
        }))
        .unwrap(),
    ]);
    assert_refused("an owner reference to a Node", plugin.create(&pp, &owned).await, 422, "a lease has no owner");
    let mut annotated = full_lease(&pool, "10.79.8.6", &node, &[OWN]);
    annotated.metadata.annotations.get_or_insert_default().insert("padding".into(), "x".repeat(200_000));
    assert_refused("a large annotation", plugin.create(&pp, &annotated).await, 422, "no annotation but");
    let mut labelled = full_lease(&pool, "10.79.8.7", &node, &[OWN]);
    labelled.metadata.labels.get_or_insert_default().insert("team".into(), "a".into());
    assert_refused("a label of its own", plugin.create(&pp, &labelled).await, 422, "no label outside netendpoint.dev");

    let mut held = hold(&pool, "10.79.8.8", &node, "web-0.s");
    held.metadata.finalizers = Some(vec![OWN.into()]);
    assert_refused("a hold with a finalizer", plugin.create(&pp, &held).await, 422, "a hold carries no finalizer");
    let mut asks = hold(&pool, "10.79.8.9", &node, "web-0.s");
    asks.spec.endpoint_finalizers = Some(vec![netendpoint_crd::FINALIZER_STICKY_HOLD.into()]);
    assert_refused(
        "a hold asking for the hold finalizer",
        plugin.create(&pp, &asks).await,
        422,
        "no netendpoint.dev finalizer",
    );
    asks.spec.endpoint_finalizers = Some(vec!["never.example.com/registered".into()]);
    assert_refused(
        "a hold asking for an unregistered finalizer",
        plugin.create(&pp, &asks).await,
        422,
        "registered agents",
    );
    plugin.create(&pp, &hold(&pool, "10.79.8.10", &node, "web-0.s")).await.unwrap();
    h::cleanup_pool(&pool).await;
}

/// Sticky issue, trust: `stickyFor` has one cap, defined once in `crd`. The
/// plugin's parser (`ipam.sticky.stickyFor`) and the API server (the CRD's
/// schema and CEL rule, for a hold sent with a node's real token) accept
/// exactly the same values of this table, bare numbers of seconds included;
/// every value the plugin accepts is also accepted as the plugin writes it;
/// and every value the server accepts is one the controller reads back
/// within the cap, so no hold can be made to outlive it.
#[tokio::test]
async fn sticky_for_has_one_cap_that_the_plugin_and_the_server_agree_on() {
    use netendpoint_crd::{MAX_STICKY_FOR_SECS, duration};
    h::apply_deploy();
    let dir = h::TempDir::new("trust-sticky-for");
    let node = h::unique("trust-sf");
    let plugin = as_node_bound(CNI_SERVICE_ACCOUNT, &node, &dir).await;
    let pool = h::unique("trust-sf");
    let _ranges = h::register_pool(&pool, &["10.79.9.0/24"]);
    let pp = PostParams::default();
    let cap = std::time::Duration::from_secs(MAX_STICKY_FOR_SECS);
    let parses = |v: &str| {
        let ipam = json!({"type": "netendpoint", "ranges": [[{"subnet": "10.79.9.0/24"}]], "sticky": {"stickyFor": v}});
        netendpoint_netconf::IpamConfig::parse(&ipam, &pool).map(|c| c.sticky.map(|s| s.sticky_for))
    };
    let table = [
        "0",
        "1",
        "3600",
        "2592000",
        "2592001",
        "99999999999999999999",
        "1s",
        "90m",
        "1h30m",
        "1.5h",
        "2592000s",
        "2592001s",
        "2592000000ms",
        "2592000001ms",
        "43200m",
        "43201m",
        "720h",
        "720h1ms",
        "719h59m59s",
        "721h",
        "876000h",
        "1h30",
        "1.5",
        "30d",
        "forever",
    ];
    let mut host = 0u8;
    let mut next_hold = |sticky_for: &str| {
        host += 1;
        let mut held = hold(&pool, &format!("10.79.9.{host}"), &node, &format!("web-{host}.s"));
        held.spec.sticky_for = Some(sticky_for.to_string());
        held
    };
    let mut disagreements = Vec::new();
    for v in table {
        let parsed = parses(v);
        let server = plugin.create(&pp, &next_hold(v)).await;
        match (&parsed, &server) {
            (Ok(Some(d)), Ok(_)) => {
                assert!(*d <= cap, "{v}: the parser accepted {d:?}");
                let read = duration::parse(v).unwrap_or_else(|| panic!("{v}: the server kept a value nobody reads"));
                assert!(read <= cap, "{v}: the server kept {read:?}, over the cap");
                // What the plugin writes for it is accepted too, and reads back the same.
                let written = duration::format(*d);
                plugin
                    .create(&pp, &next_hold(&written))
                    .await
                    .unwrap_or_else(|e| panic!("{v} written as {written}: {e}"));
                assert_eq!(duration::parse(&written), Some(*d), "{v} written as {written}");
            }
            (Err(_), Err(kube::Error::Api(s))) => assert_eq!(s.code, 422, "{v}: {s:?}"),
            _ => disagreements.push(format!("{v}: plugin {parsed:?}, server {server:?}")),
        }
    }
    assert!(disagreements.is_empty(), "the plugin and the server disagree on:\n{}", disagreements.join("\n"));
    // One millisecond over the cap, as the plugin would write it: refused.
    let over = duration::format(cap + std::time::Duration::from_millis(1));
    assert_refused("stickyFor one ms over the cap", plugin.create(&pp, &next_hold(&over)).await, 422, "stickyFor");
    h::cleanup_pool(&pool).await;
}
