//! How soon the render budget stops hostile templates over a claim with 2,000 annotations:
//! loops that write past the output limit, loops that write nothing (only the clock stops
//! them) and a `replace` that would grow a 200 KB annotation to gigabytes. Unbounded, they
//! took seconds to hours; each must stop within `LIMIT_MS` (default 1,000 ms: ten times the
//! 100 ms budget, for a busy machine).
//!
//! `cargo bench -p flex-core --bench template_budget` prints one line per case (the fastest,
//! median and slowest of `RUNS` runs, default 5) and exits non-zero when a run is over.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use flex_core::claim::ClaimRequest;
use flex_core::config::{StorageClassInfo, Verdict, parse_config_map};
use flex_core::template::{Context, TemplateError, build_context, render};

fn context(annotations: BTreeMap<String, String>) -> Context {
    let claim = ClaimRequest {
        name: "data".into(),
        namespace: "team-a".into(),
        uid: "u-1".into(),
        labels: BTreeMap::new(),
        annotations,
        storage_class: "silver".into(),
        requested: "1Gi".into(),
        bytes: kube_rules::quantity::parse_bytes("1Gi").unwrap(),
        access_modes: vec!["ReadWriteOnce".into()],
        volume_mode: "Filesystem".into(),
        selected_node: None,
        data_source: None,
    };
    let class = StorageClassInfo {
        name: "silver".into(),
        provisioner: "flex-provisioner.io/job".into(),
        parameters: BTreeMap::new(),
        reclaim_policy: "Delete".into(),
        mount_options: vec![],
        volume_binding_mode: "Immediate".into(),
    };
    build_context(&claim, &class, None, "flex-provisioner.io/job", "pvc-u-1")
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Prints a case's sorted times; whether its slowest run was over `limit`.
fn report(name: &str, times: &[Duration], limit: Duration) -> bool {
    let slowest = times[times.len() - 1];
    println!(
        "{name}: fastest {:?}, median {:?}, slowest {slowest:?} (limit {limit:?})",
        times[0],
        times[times.len() / 2]
    );
    slowest > limit
}

fn main() {
    let runs = env("RUNS", 5).max(1) as usize;
    let limit = Duration::from_millis(env("LIMIT_MS", 1000));
    let many: BTreeMap<String, String> = (0..2000)
        .map(|i| (format!("example.com/a{i:04}"), format!("value-{i:04}")))
        .collect();
    let each = "{{#each claim.annotations}}{{#each @root.claim.annotations}}";
    let inner = "{{#each @root.claim.annotations}}";
    let cases = [
        (
            "nested each, 2,000 x 2,000 writes",
            context(many.clone()),
            format!("{each}{{{{@key}}}}={{{{this}}}};{{{{/each}}}}{{{{/each}}}}"),
        ),
        (
            "nested each four deep, writes nothing",
            context(many),
            format!(
                "{each}{inner}{inner}{{{{#if false}}}}x{{{{/if}}}}{{{{/each}}}}{{{{/each}}}}{{{{/each}}}}{{{{/each}}}}"
            ),
        ),
        (
            "replace growing a 200 KB annotation",
            context(BTreeMap::from([("big".into(), "a".repeat(200_000))])),
            format!(
                "{{{{replace claim.annotations.big \"a\" \"{}\"}}}}",
                "y".repeat(8 * 1024)
            ),
        ),
    ];
    let mut over = false;
    // A 100,000-expression template (1.4 MB): `check` took more than 20 s on it before
    // templates were measured before parsing.
    let huge = "{{claim.name}}".repeat(100_000);
    let cm = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "huge", "namespace": "storage-admin",
                     "labels": {"type": "provisioner-config", "storage-class": "silver"}},
        "data": {"image": "example.com/prov:1", "export": huge},
    }))
    .unwrap();
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let started = Instant::now();
            let verdict = parse_config_map(&cm, "flex-provisioner.io/job");
            let took = started.elapsed();
            assert!(
                matches!(&verdict, Verdict::Checked { config: None, .. }),
                "refused: {verdict:?}"
            );
            took
        })
        .collect();
    times.sort();
    over |= report("a 100,000-expression template, checked", &times, limit);
    for (name, ctx, source) in &cases {
        let mut times: Vec<Duration> = (0..runs)
            .map(|_| {
                let started = Instant::now();
                let result = render(source, ctx);
                let took = started.elapsed();
                assert!(
                    matches!(result, Err(TemplateError::Limit(_))),
                    "{name}: stopped by a limit, not {result:?}"
                );
                took
            })
            .collect();
        times.sort();
        over |= report(name, &times, limit);
    }
    if over {
        eprintln!("a hostile template ran past the limit");
        std::process::exit(1);
    }
}
