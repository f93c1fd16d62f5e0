//! What one lease costs, stored in etcd and in a list.

use crate::prelude::*;

/// etcd's size before and after a fill.
pub(crate) struct Storage {
    pub(crate) db_before: Option<u64>,
    pub(crate) db_after: Option<u64>,
    pub(crate) leases: usize,
}

impl Storage {
    pub(crate) fn before(ctx: &Ctx) -> Self {
        Self { db_before: ctx.etcd_db_bytes(), db_after: None, leases: 0 }
    }

    /// Records the size now, with `leases` created since [`Storage::before`].
    pub(crate) fn after(&mut self, ctx: &Ctx, leases: usize) {
        self.db_after = ctx.etcd_db_bytes();
        self.leases = leases;
    }
}

/// What one lease costs, stored and listed.
pub(crate) struct Lean {
    pub(crate) pool: String,
    /// JSON bytes of the parts of one plugin-created lease, as GET returns it.
    pub(crate) parts: Vec<(&'static str, usize)>,
    pub(crate) total: usize,
    /// The object without its resourceVersion (which etcd does not store), and the etcd key.
    pub(crate) stored: usize,
    pub(crate) key: usize,
    /// One lease of the fill, for comparison.
    pub(crate) filler_total: usize,
    pub(crate) list_full: (usize, usize),
    pub(crate) list_meta: (usize, usize),
    pub(crate) storage: Storage,
    /// `apiserver_resource_size_estimate_bytes` and `apiserver_resource_objects` for NetworkEndpoints.
    pub(crate) estimate: (f64, f64),
}

pub(crate) fn measure_lean(ctx: &Ctx, pool_desc: &str, pool: &str, conf: &[u8], storage: Storage) -> Lean {
    let api: Api<NetworkEndpoint> = Api::all(ctx.client.clone());
    let url = api.resource_url().to_string();
    let mut add = ctx.add(conf, "lean-sample");
    for (k, v) in &mut add.env {
        if k == "CNI_ARGS" {
            v.push_str(";K8S_POD_UID=6f1d2c3b-4a59-4e68-9d7c-8b9a0f1e2d3c");
        }
    }
    let (ok, _, out) = run_one(&add);
    let sample: Value = match (ok, added_ip(&out)) {
        (true, Some(ip)) => {
            let req = kube::core::Request::new(&url).get(&endpoint_name(pool, ip), &GetParams::default()).unwrap();
            serde_json::from_str(&ctx.text(req)).unwrap_or_default()
        }
        _ => {
            eprintln!("lean: sample ADD failed: {}", out.trim());
            Value::Null
        }
    };
    let len = |v: &Value| if v.is_null() { 0 } else { serde_json::to_string(v).map_or(0, |s| s.len()) };
    let meta = &sample["metadata"];
    let parts = vec![
        ("metadata.managedFields", len(&meta["managedFields"])),
        ("metadata.labels", len(&meta["labels"])),
        ("metadata.annotations", len(&meta["annotations"])),
        ("spec", len(&sample["spec"])),
    ];
    let total = len(&sample);
    let name = meta["name"].as_str().unwrap_or_default().to_string();
    let mut unstored = sample.clone();
    if let Some(m) = unstored["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }
    let first_filler = {
        let lp = ListParams::default()
            .labels(&format!("{LABEL_POOL}={},netendpoint.dev/pod-namespace=default", label_value(pool)))
            .limit(50);
        let req = kube::core::Request::new(&url).list(&lp).unwrap();
        let v: Value = serde_json::from_str(&ctx.text(req)).unwrap_or_default();
        v["items"]
            .as_array()
            .and_then(|a| a.iter().find(|i| i["spec"]["containerID"].as_str().is_some_and(|c| c.starts_with("fill."))))
            .cloned()
            .unwrap_or_default()
    };
    let page = |meta_only: bool| {
        let lp = ListParams::default().labels(&format!("{LABEL_POOL}={}", label_value(pool))).limit(500);
        let r = kube::core::Request::new(&url);
        let req = if meta_only { r.list_metadata(&lp) } else { r.list(&lp) }.unwrap();
        let body = ctx.text(req);
        let items =
            serde_json::from_str::<Value>(&body).ok().and_then(|v| v["items"].as_array().map(Vec::len)).unwrap_or(0);
        (body.len(), items)
    };
    let m = ctx.metrics();
    Lean {
        pool: pool_desc.to_string(),
        parts,
        total,
        stored: len(&unstored),
        key: format!("/registry/netendpoint.dev/networkendpoints/{name}").len(),
        filler_total: len(&first_filler),
        list_full: page(false),
        list_meta: page(true),
        storage,
        estimate: (
            m.sum("apiserver_resource_size_estimate_bytes", |l| l.networkendpoints()),
            m.sum("apiserver_resource_objects", |l| l.networkendpoints()),
        ),
    }
}

pub(crate) fn report_lean(ctx: &Ctx, report: &mut String) {
    let shared = ctx.shared.lock().unwrap();
    let Some(l) = &shared.lean else { return };
    let _ = writeln!(report, "## Lease objects: bytes stored and listed\n");
    let _ = writeln!(
        report,
        "Measured in the {}. One lease created by the plugin's ADD (with a pod UID, as kubelet passes it), fetched with a GET \
         through kube-rs, as the server stores it; each part is the JSON of its value. The pool's other leases were created by \
         the fill in the plugin's shape (the same labels, annotation and spec fields; one of them is {} bytes, against {} for \
         the plugin's, which adds a gateway). etcd keeps each lease as that JSON, less the resourceVersion, under its key.\n",
        l.pool, l.filler_total, l.total
    );
    let _ = writeln!(report, "| part of one lease | bytes | share |");
    let _ = writeln!(report, "|---|---:|---:|");
    let share = |b: usize| 100.0 * b as f64 / l.total.max(1) as f64;
    for (name, b) in &l.parts {
        let _ = writeln!(report, "| {name} | {b} | {:.0} % |", share(*b));
    }
    let rest = l.total.saturating_sub(l.parts.iter().map(|(_, b)| b).sum::<usize>());
    let _ = writeln!(
        report,
        "| the rest (name, uid, resourceVersion, creationTimestamp, generation, apiVersion, kind, keys) | {rest} | {:.0} % |",
        share(rest)
    );
    let _ = writeln!(report, "| whole object | {} | 100 % |\n", l.total);

    let s = &l.storage;
    let db = match (s.db_before, s.db_after) {
        (Some(a), Some(b)) if s.leases > 0 => format!("{:.0}", (b as f64 - a as f64) / s.leases as f64),
        _ => "n/a".into(),
    };
    let estimate = if l.estimate.0 > 0.0 && l.estimate.1 > 0.0 {
        format!(
            "`apiserver_resource_size_estimate_bytes` ÷ `apiserver_resource_objects`: {:.0} bytes per lease",
            l.estimate.0 / l.estimate.1
        )
    } else {
        "`apiserver_resource_size_estimate_bytes` is exposed but reads 0".into()
    };
    let _ = writeln!(
        report,
        "Bytes per lease in etcd: this v1.36 server does not expose `apiserver_storage_size_bytes` ({estimate}), so the figure is the \
         growth of etcd's data file (`etcd/member/snap/db` in the state directory) across the fill of {} leases, divided by them. \
         It is rough: the file grows in steps and first reuses pages freed by earlier cases' deletions. In a list: one page of up \
         to 500 leases of the pool, the full JSON list and the metadata-only list (`PartialObjectMetadataList`, which the plugin's \
         block and pool lists ask for), each body's bytes divided by its items.\n",
        s.leases
    );
    let per = |(bytes, items): (usize, usize)| {
        if items > 0 { format!("{:.0} ({items} items)", bytes as f64 / items as f64) } else { "n/a".into() }
    };
    let _ = writeln!(report, "| measure | bytes per lease |");
    let _ = writeln!(report, "|---|---:|");
    let _ = writeln!(report, "| etcd data file growth over the fill | {db} |");
    let _ = writeln!(report, "| stored value (the object less its resourceVersion) + key | {} + {} |", l.stored, l.key);
    let _ = writeln!(report, "| full list (JSON) | {} |", per(l.list_full));
    let _ = writeln!(report, "| metadata-only list | {} |\n", per(l.list_meta));
}
