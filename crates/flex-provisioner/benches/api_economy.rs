//! What provisioning and deprovisioning cost the API server and the controller: for each N
//! in `CLAIMS` (default `100,1000`), N claims are provisioned at once and then deleted, and
//! the controller's requests (by its User-Agent), by verb and resource, are divided by N;
//! with the time to all Bound, the controller's CPU time per volume and its peak memory,
//! and the requests it makes while idle with N volumes bound (none: nothing polls, but for
//! one discovery request every 5 minutes while the snapshot API is not served).
//!
//! `cargo bench --bench api_economy` runs on the sandbox, which counts requests itself.
//! `K8S_AUDIT=1 FLEX_E2E_K8S=../shared/k8s cargo bench --bench api_economy` runs on a real
//! Kubernetes control plane, counting from its API server's audit log, with the controller
//! holding its own ServiceAccount's token. Either way the controller runs as its own process
//! (the release binary), as deploy/'s Deployment runs it.

use flex_testing as common;
use flex_testing::controller_process as process;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::cluster::Cluster;
use common::provisioning::{CONTROLLER_NS, NS, all_bound, burst, class, reconciles, sandbox_with};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams, ListParams};
use process::{cpu_seconds, memory_mib};

const AGENT: &str = "flex-provisioner";

/// The controller's requests, by (verb, resource), counted from a mark on: by the sandbox,
/// or from a real API server's audit log (one entry per request, by its audit ID).
enum Counter {
    Sandbox,
    Audit { log: std::path::PathBuf, from: u64 },
}

impl Counter {
    fn new(sb: &Cluster) -> Counter {
        match sb.real_dir() {
            None => Counter::Sandbox,
            Some(dir) => {
                let log = dir.join("audit.log");
                assert!(
                    log.exists(),
                    "a real control plane's requests are counted from its audit log: run with K8S_AUDIT=1"
                );
                Counter::Audit { log, from: 0 }
            }
        }
    }

    fn reset(&mut self, sb: &Cluster) {
        match self {
            Counter::Sandbox => sb.sandbox().unwrap().reset_request_counts(),
            Counter::Audit { log, from } => *from = std::fs::metadata(log).unwrap().len(),
        }
    }

    fn counts(&self, sb: &Cluster) -> BTreeMap<(String, String), u64> {
        match self {
            Counter::Sandbox => sb.sandbox().unwrap().request_counts().by_agent(AGENT),
            Counter::Audit { log, from } => {
                let text = std::fs::read(log).unwrap();
                let text = String::from_utf8_lossy(&text[*from as usize..]);
                let mut seen = std::collections::HashSet::new();
                let mut out = BTreeMap::new();
                for line in text.lines() {
                    let Ok(e) = serde_json::from_str::<serde_json::Value>(line) else {
                        continue;
                    };
                    let agent = e["userAgent"].as_str().unwrap_or_default();
                    if !agent.starts_with(&format!("{AGENT}/"))
                        || !seen.insert(e["auditID"].as_str().unwrap_or_default().to_owned())
                    {
                        continue;
                    }
                    let r = &e["objectRef"];
                    let mut resource = r["resource"].as_str().unwrap_or_default().to_owned();
                    if let Some(sub) = r["subresource"].as_str() {
                        resource = format!("{resource}/{sub}");
                    }
                    let verb = e["verb"].as_str().unwrap_or_default().to_owned();
                    *out.entry((verb, resource)).or_default() += 1;
                }
                out
            }
        }
    }
}

/// The controller's requests since the last reset, per volume, by verb and resource.
fn report(sb: &Cluster, counter: &Counter, what: &str, n: usize) -> f64 {
    let counts = counter.counts(sb);
    let total: u64 = counts.values().sum();
    println!(
        "  {what}: {:.2} requests per volume ({total} for {n})",
        total as f64 / n as f64
    );
    for ((verb, resource), c) in &counts {
        println!(
            "    {verb:>6} {resource:<32} {:>6.2} per volume ({c})",
            *c as f64 / n as f64
        );
    }
    total as f64 / n as f64
}

/// The controller's reconciles of claims and of volumes so far.
async fn looks(addr: std::net::SocketAddr) -> [u64; 2] {
    [
        reconciles(addr, "claim").await,
        reconciles(addr, "volume").await,
    ]
}

/// Reconciles per volume from `before` to now, as the report prints them.
async fn looks_per_volume(addr: std::net::SocketAddr, before: [u64; 2], n: usize) -> String {
    let now = looks(addr).await;
    let per = |i: usize| (now[i] - before[i]) as f64 / n as f64;
    format!(
        "{:.1} claim and {:.1} volume reconciles per volume",
        per(0),
        per(1)
    )
}

/// Waits until the controller has used no CPU for `quiet` (its last events and writes done).
async fn settle(pid: u32, quiet: Duration) {
    process::settle(pid, quiet, Duration::from_secs(600)).await;
}

/// A kubeconfig holding a token of deploy/'s controller account, as the Deployment's pod
/// has (on the sandbox, the admin's: the sandbox counts by User-Agent anyway).
fn controller_kubeconfig(sb: &Cluster) -> std::path::PathBuf {
    let Some(dir) = sb.real_dir() else {
        return sb.kubeconfig.clone();
    };
    let admin = std::fs::read_to_string(&sb.kubeconfig).unwrap();
    let token_request = common::cluster::kubectl(
        &sb.kubeconfig,
        &[
            "create".into(),
            "token".into(),
            "flex-provisioner".into(),
            "-n".into(),
            CONTROLLER_NS.into(),
            "--duration=24h".into(),
        ],
    );
    assert!(token_request.status.success());
    let token = String::from_utf8(token_request.stdout).unwrap();
    let mut doc: serde_json::Value = serde_yaml_ng::from_str(&admin).unwrap();
    doc["users"] = serde_json::json!([{"name": "controller", "user": {"token": token.trim()}}]);
    doc["contexts"][0]["context"]["user"] = serde_json::json!("controller");
    let path = dir.join("controller.kubeconfig");
    std::fs::write(&path, serde_json::to_string(&doc).unwrap()).unwrap();
    path
}

async fn round(n: usize) {
    let sb = sandbox_with(|o| o).await;
    let mut counter = Counter::new(&sb);
    class(&sb, "bench", "Immediate", "make-pv", serde_json::json!({})).await;
    let addr = process::free_addr();
    let mut child = process::start(&controller_kubeconfig(&sb), NS, addr);
    let pid = child.id();
    while !process::http_ok(addr, "/readyz").await {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    settle(pid, Duration::from_secs(1)).await;
    println!(
        "N = {n} on {}",
        if sb.is_real() {
            "a real control plane"
        } else {
            "the sandbox"
        }
    );

    counter.reset(&sb);
    let (cpu, looked) = (cpu_seconds(pid), looks(addr).await);
    let t = Instant::now();
    burst(&sb, "b", n, "bench").await;
    all_bound(&sb, n, 1800).await;
    let bound_in = t.elapsed();
    // Bound is not the end: the success event and the record follow.
    settle(pid, Duration::from_secs(3)).await;
    let cpu_provision = cpu_seconds(pid) - cpu;
    let provision_looks = looks_per_volume(addr, looked, n).await;
    println!("  {n} claims bound in {bound_in:.1?}");
    let per_provisioned = report(&sb, &counter, "provisioning", n);

    counter.reset(&sb);
    tokio::time::sleep(Duration::from_secs(20)).await;
    let idle: u64 = counter.counts(&sb).values().sum();
    println!("  idle for 20 s with {n} volumes bound: {idle} requests");

    counter.reset(&sb);
    let (cpu, looked) = (cpu_seconds(pid), looks(addr).await);
    let t = Instant::now();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    claims
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .expect("claims deleted");
    let pvs: Api<PersistentVolume> = Api::all(sb.client().unwrap());
    while !pvs
        .list_metadata(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty()
    {
        assert!(
            t.elapsed() < Duration::from_secs(1800),
            "volumes left after 30 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let gone_in = t.elapsed();
    settle(pid, Duration::from_secs(3)).await;
    let cpu_deprovision = cpu_seconds(pid) - cpu;
    let deprovision_looks = looks_per_volume(addr, looked, n).await;
    println!("  {n} volumes deprovisioned and gone in {gone_in:.1?}");
    let per_deprovisioned = report(&sb, &counter, "deprovisioning", n);
    println!(
        "  controller CPU: {:.1} ms per provisioned volume, {:.1} ms per deprovisioned one; peak RSS {:.0} MiB",
        cpu_provision * 1000.0 / n as f64,
        cpu_deprovision * 1000.0 / n as f64,
        memory_mib(pid).1
    );
    println!("  provisioning: {provision_looks}; deprovisioning: {deprovision_looks}");
    println!(
        "  summary N={n}: bound in {bound_in:.1?}, {per_provisioned:.2} req/provisioned, {per_deprovisioned:.2} req/deprovisioned, idle {idle}"
    );
    let _ = child.kill();
    let _ = child.wait();
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let sizes: Vec<usize> = std::env::var("CLAIMS")
        .unwrap_or_else(|_| "100,1000".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    for n in sizes {
        round(n).await;
    }
}
