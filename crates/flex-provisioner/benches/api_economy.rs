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

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::provisioning::{NS, all_bound, burst, class, sandbox_with};
use flex_provisioner::sandbox::{Sandbox, resources};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, DeleteParams, ListParams};

const AGENT: &str = "flex-provisioner";

fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn peak_rss_mib(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn start_controller(sb: &Sandbox, addr: std::net::SocketAddr) -> Child {
    Command::new(env!("CARGO_BIN_EXE_flex-provisioner"))
        .args([
            "run",
            &format!("--config-namespace={NS}"),
            &format!("--metrics-addr={addr}"),
            "--no-leader-elect",
        ])
        .env("KUBECONFIG", &sb.kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the controller binary starts")
}

async fn ready(addr: std::net::SocketAddr) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    loop {
        if let Ok(mut s) = tokio::net::TcpStream::connect(addr).await {
            let req = "GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
            let mut out = String::new();
            if s.write_all(req.as_bytes()).await.is_ok()
                && s.read_to_string(&mut out).await.is_ok()
                && out.starts_with("HTTP/1.1 200")
            {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the process has used no CPU for `quiet` (its last events and writes done).
async fn settle(pid: u32, quiet: Duration) {
    let mut last = cpu_seconds(pid);
    let mut still_since = Instant::now();
    let start = Instant::now();
    while still_since.elapsed() < quiet && start.elapsed() < Duration::from_secs(600) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = cpu_seconds(pid);
        if now - last > 0.005 {
            still_since = Instant::now();
        }
        last = now;
    }
}

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

async fn round(n: usize) {
    let sb = sandbox_with(|o| o).await;
    class(&sb, "bench", "Immediate", "make-pv", serde_json::json!({})).await;
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut child = start_controller(&sb, addr);
    let pid = child.id();
    ready(addr).await;
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
        peak_rss_mib(pid)
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
