//! `check` on the worst ConfigMaps under Kubernetes' 1 MiB limit (issue #13): templates at the
//! maximum size and expression count, at the maximum nesting, tens of thousands of keys, long keys, one 1 MiB
//! value, a 1 MiB pod-template, thousands of errors. Each must be checked within a second.
//!
//! `cargo bench -p flex-provisioner --bench check` prints one line per case: its size, the
//! problems `check` found, and the time of the fastest, median and slowest of a few runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use flex_core::config::MAX_PARAMETERS;
use flex_core::names::DEFAULT_PROVISIONER_NAME;
use flex_core::template::{MAX_EXPRESSIONS, MAX_SOURCE_BYTES};
use flex_provisioner::offline::check_files;
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::json;

const MIB: usize = 1024 * 1024;
/// What Kubernetes accepts for a whole ConfigMap; our data stays just under it.
const BUDGET: usize = MIB - 4096;
const RUNS: usize = 5;

/// A ConfigMap with `data` (plus a valid image), written to `dir/name.yaml`.
fn write(dir: &Path, name: &str, data: BTreeMap<String, String>) -> (PathBuf, usize) {
    let mut data = data;
    data.insert("image".into(), "registry.example.com/prov:1.0".into());
    let bytes: usize = data.iter().map(|(k, v)| k.len() + v.len()).sum();
    assert!(bytes <= MIB, "{name}: {bytes} bytes is over 1 MiB");
    let cm: ConfigMap = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "storage-admin",
                     "labels": {"type": "provisioner-config", "storage-class": name}},
        "data": data,
    }))
    .unwrap();
    let path = dir.join(format!("{name}.yaml"));
    let mut yaml = serde_yaml_ng::to_string(&cm).unwrap();
    yaml.insert_str(0, "apiVersion: v1\nkind: ConfigMap\n");
    std::fs::write(&path, yaml).unwrap();
    (path, bytes)
}

/// Repeats `unit` to fill at most `size` bytes.
fn fill(unit: &str, size: usize) -> String {
    unit.repeat(size / unit.len())
}

/// As many keys as fit in the budget, each `key(i)` with value `value(i)`.
fn many(
    key: impl Fn(usize) -> String,
    value: impl Fn(usize) -> String,
) -> BTreeMap<String, String> {
    let mut data = BTreeMap::new();
    let mut bytes = 0;
    for i in 0.. {
        let (k, v) = (key(i), value(i));
        if bytes + k.len() + v.len() > BUDGET {
            break;
        }
        bytes += k.len() + v.len();
        data.insert(k, v);
    }
    data
}

fn cases() -> Vec<(&'static str, BTreeMap<String, String>)> {
    let max = MAX_SOURCE_BYTES;
    let per_key = BUDGET / (max + 16);
    let dense = fill("{{claim.name}}", max);
    let deep_unit = "{{#each claim.annotations}}{{#with this}}{{#if (eq (lower (default @key \"x\")) (upper (trunc @root.claim.name 3)))}}{{#unless @first}}{{#each @root.class.parameters}}{{#if this}}{{#with @root}}{{#each claim.accessModes}}{{dnslabel (replace (join @root.claim.accessModes \",\") \"a\" \"b\") 20}}{{/each}}{{/with}}{{/if}}{{/each}}{{/unless}}{{/if}}{{/with}}{{/each}}";
    let deep = deep_unit.repeat(MAX_EXPRESSIONS / deep_unit.matches("{{").count());
    // The costliest template the limits let through: the most expressions over the most bytes.
    let gap = "x".repeat(max / MAX_EXPRESSIONS - "{{claim.name}}".len());
    let costly = format!("{gap}{{{{claim.name}}}}").repeat(MAX_EXPRESSIONS);
    let tolerations = fill(
        "  - {key: storage.example.com/dedicated, operator: Equal, value: provisioner, effect: NoSchedule}\n",
        BUDGET - 64,
    );
    vec![
        (
            "max-size-templates",
            (0..per_key)
                .map(|i| (format!("p{i:03}"), dense.clone()))
                .collect(),
        ),
        (
            "costliest-valid-templates",
            (0..per_key)
                .map(|i| (format!("p{i:03}"), costly.clone()))
                .collect(),
        ),
        (
            "max-parameters-4k-each",
            (0..MAX_PARAMETERS)
                .map(|i| (format!("p{i:03}"), fill("x", BUDGET / MAX_PARAMETERS - 8)))
                .collect(),
        ),
        (
            "max-size-8-deep-templates",
            (0..per_key)
                .map(|i| (format!("p{i:03}"), deep.clone()))
                .collect(),
        ),
        (
            "one-1-mib-value",
            BTreeMap::from([("export".into(), fill("{{claim.name}}", BUDGET))]),
        ),
        (
            "many-keys",
            many(|i| format!("p{i:06}"), |_| "{{claim.name}}".into()),
        ),
        (
            "long-keys",
            many(|i| format!("p{i:06}-{}", "k".repeat(245)), |_| "x".into()),
        ),
        (
            "1-mib-pod-template",
            BTreeMap::from([(
                "pod-template".into(),
                format!("spec:\n  tolerations:\n{tolerations}"),
            )]),
        ),
        (
            "thousands-of-errors",
            many(
                |i| format!("dir-{i:06}"),
                |_| "/x/{{claim.labels.team}}/{{claim.nmae}}".into(),
            ),
        ),
    ]
}

fn main() {
    let dir = std::env::temp_dir().join(format!("flex-check-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    println!("check on ConfigMaps under 1 MiB ({RUNS} runs each, release build)");
    println!(
        "{:<28} {:>9} {:>7} {:>8} {:>10} {:>10} {:>10}",
        "case", "bytes", "keys", "problems", "min", "median", "max"
    );
    let mut worst = Duration::ZERO;
    for (name, data) in cases() {
        let keys = data.len();
        let (path, bytes) = write(&dir, name, data);
        let mut times = Vec::new();
        let mut problems = 0;
        for _ in 0..RUNS {
            let started = Instant::now();
            let report = check_files(std::slice::from_ref(&path), &[], DEFAULT_PROVISIONER_NAME);
            times.push(started.elapsed());
            problems = report.errors + report.warnings;
        }
        times.sort();
        worst = worst.max(times[RUNS - 1]);
        println!(
            "{name:<28} {bytes:>9} {keys:>7} {problems:>8} {:>10.1?} {:>10.1?} {:>10.1?}",
            times[0],
            times[RUNS / 2],
            times[RUNS - 1]
        );
    }
    std::fs::remove_dir_all(&dir).ok();
    let verdict = if worst < Duration::from_secs(1) {
        "within"
    } else {
        "OVER"
    };
    println!("slowest run: {worst:.1?}, {verdict} the 1 s target");
}
