//! What provisioning and deprovisioning cost the API server and the controller: for each N
//! in `CLAIMS` (default `100,1000`), N claims are provisioned at once and then deleted, and
//! the sandbox's count of the controller's requests (by its User-Agent), by verb and
//! resource, is divided by N; with the controller's CPU time per volume, and the requests it
//! makes while idle with N volumes bound (none but re-opened watches: nothing polls).
//!
//! `cargo bench --bench api_economy` (`CLAIMS=100,1000,2000` for other sizes). The
//! controller runs as its own process (the release binary), as deploy/'s Deployment runs it.

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "support/controller_process.rs"]
mod process;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::provisioning::{NS, all_bound, burst, class, sandbox_with};
use flex_provisioner::sandbox::{Sandbox, resources};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, DeleteParams, ListParams};
use process::{cpu_seconds, memory_mib};

const AGENT: &str = "flex-provisioner";

/// How many objects of a resource the sandbox holds (read from its store: not a request).
fn count(sb: &Sandbox, group: &str, plural: &str, ns: Option<&str>) -> usize {
    let r = resources::find(group, "v1", plural).unwrap();
    sb.api.store.list_page(r, ns, None, None, |_| true).0.len()
}

/// The controller's requests since the last reset, per volume, by verb and resource.
fn report(sb: &Sandbox, what: &str, n: usize) -> f64 {
    let counts: BTreeMap<(String, String), u64> = sb.request_counts().by_agent(AGENT);
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

/// The events in the cluster, by reason (what the event creates above were).
fn events_by_reason(sb: &Sandbox) {
    let r = resources::find("", "v1", "events").unwrap();
    let mut by: BTreeMap<String, usize> = BTreeMap::new();
    for e in sb.api.store.list_page(r, None, None, None, |_| true).0 {
        let source = e["reportingComponent"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let reason = e["reason"].as_str().unwrap_or_default();
        *by.entry(format!("{source} {reason}")).or_default() += 1;
    }
    println!("  events so far, by reporter and reason: {by:?}");
}

/// Waits until the controller has used no CPU for `quiet` (its last events and writes done).
async fn settle(pid: u32, quiet: Duration) {
    process::settle(pid, quiet, Duration::from_secs(600)).await;
}

async fn round(n: usize) {
    let sb = sandbox_with(|o| o).await;
    class(&sb, "bench", "Immediate", "make-pv", serde_json::json!({})).await;
    let addr = process::free_addr();
    let mut child = process::start(&sb.kubeconfig, NS, addr);
    let pid = child.id();
    while !process::http_ok(addr, "/readyz").await {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    settle(pid, Duration::from_secs(1)).await;
    println!("N = {n}");

    sb.reset_request_counts();
    let cpu = cpu_seconds(pid);
    let t = Instant::now();
    burst(&sb, "b", n, "bench").await;
    all_bound(&sb, n, 1800).await;
    let bound_in = t.elapsed();
    // Bound is not the end: the success event and the record follow.
    settle(pid, Duration::from_secs(3)).await;
    let cpu_provision = cpu_seconds(pid) - cpu;
    println!("  {n} claims bound in {bound_in:.1?}");
    let per_provisioned = report(&sb, "provisioning", n);
    events_by_reason(&sb);

    sb.reset_request_counts();
    tokio::time::sleep(Duration::from_secs(20)).await;
    let idle = sb.request_counts().total(AGENT);
    println!("  idle for 20 s with {n} volumes bound: {idle} requests");

    sb.reset_request_counts();
    let cpu = cpu_seconds(pid);
    let t = Instant::now();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    claims
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .expect("claims deleted");
    while count(&sb, "", "persistentvolumes", None) > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(1800),
            "volumes left after 30 minutes"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let gone_in = t.elapsed();
    settle(pid, Duration::from_secs(3)).await;
    let cpu_deprovision = cpu_seconds(pid) - cpu;
    println!("  {n} volumes deprovisioned and gone in {gone_in:.1?}");
    let per_deprovisioned = report(&sb, "deprovisioning", n);
    println!(
        "  controller CPU: {:.1} ms per provisioned volume, {:.1} ms per deprovisioned one; peak RSS {:.0} MiB",
        cpu_provision * 1000.0 / n as f64,
        cpu_deprovision * 1000.0 / n as f64,
        memory_mib(pid).1
    );
    println!(
        "  summary N={n}: {per_provisioned:.2} req/provisioned, {per_deprovisioned:.2} req/deprovisioned, idle {idle}"
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
