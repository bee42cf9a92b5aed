//! The controller's memory against claims written to exhaust it: N pending claims (N from
//! `CLAIMS`, default 2,000) each carrying 250 KB of annotations, half of them annotated by
//! their author with this provisioner's name (in a class that does not exist, so Kubernetes
//! never overwrites it). Reports the controller's time from start to ready and its peak
//! RSS, for a first start and a restart, and that a claim of a real class of ours still
//! gets its Job among them. Then, in a fresh sandbox with the controller running, N PVs
//! (`VOLUMES`, default 2,000) of 250 KB each, forged as the image accounts may make them
//! (named `pvc-<claimRef uid>`, this provisioner's name in `provisioned-by`, bound to claims
//! that do not exist): a claim of ours gets its Job amid them within its time alone + 5 s.
//! Exits non-zero when a start takes 10 s or more, the peak RSS reaches 128 MiB, or the
//! claim amid the forged volumes is 5 s slower than alone.
//!
//! `cargo bench --bench claim_memory`. The controller runs as its own process (the release
//! binary), so its memory is its own.

use flex_testing::controller_process as process;

use std::time::{Duration, Instant};

use kube_sandbox::{Sandbox, SandboxOptions, WriteCtx, resources};
use serde_json::json;

const NS: &str = "flex-system";
const ANNOTATION_BYTES: usize = 250 * 1024;
const READY_TARGET: Duration = Duration::from_secs(10);
const PEAK_TARGET_MIB: f64 = 128.0;
const AMID_FORGED_MARGIN: Duration = Duration::from_secs(5);

fn create(sb: &Sandbox, plural: &str, group: &str, ns: &str, body: serde_json::Value) {
    sb.api
        .create(
            resources::find(group, "v1", plural).unwrap(),
            ns,
            body,
            &WriteCtx::manager("bench"),
        )
        .unwrap();
}

/// The namespace, the class and its ConfigMap.
fn setup_class(sb: &Sandbox) {
    create(sb, "namespaces", "", "", json!({"metadata": {"name": NS}}));
    create(
        sb,
        "storageclasses",
        "storage.k8s.io",
        "",
        json!({"metadata": {"name": "fast"}, "provisioner": flex_core::names::DEFAULT_PROVISIONER_NAME,
               "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"}),
    );
    create(
        sb,
        "configmaps",
        "",
        NS,
        json!({"metadata": {"name": "fast-config", "labels": {"type": "provisioner-config", "storage-class": "fast"}},
               "data": {"image": "bench-image", "volume-sources": "hostPath", "allowed-paths": "/volumes"}}),
    );
}

fn setup(sb: &Sandbox, n: usize) {
    setup_class(sb);
    let filler = "x".repeat(ANNOTATION_BYTES);
    for i in 0..n {
        let mut annotations = json!({"example.com/filler": filler});
        if i % 2 == 0 {
            annotations["volume.kubernetes.io/storage-provisioner"] =
                json!(flex_core::names::DEFAULT_PROVISIONER_NAME);
        }
        create(
            sb,
            "persistentvolumeclaims",
            "",
            "default",
            json!({"metadata": {"name": format!("heavy-{i:05}"), "annotations": annotations},
                   "spec": {"storageClassName": "no-such-class", "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": "1Gi"}}}}),
        );
    }
}

/// `n` PVs of 250 KB as an image account may forge them.
fn forge_volumes(sb: &Sandbox, n: usize) {
    let filler = "x".repeat(ANNOTATION_BYTES);
    for i in 0..n {
        let uid = format!("00000000-0000-0000-0000-{i:012}");
        create(
            sb,
            "persistentvolumes",
            "",
            "",
            json!({"metadata": {"name": format!("pvc-{uid}"),
                        "annotations": {"pv.kubernetes.io/provisioned-by": flex_core::names::DEFAULT_PROVISIONER_NAME,
                                        "example.com/filler": filler}},
                   "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                            "storageClassName": "fast", "persistentVolumeReclaimPolicy": "Delete",
                            "hostPath": {"path": format!("/volumes/f{i}")},
                            "claimRef": {"namespace": "default", "name": format!("nobody-{i}"), "uid": uid}}}),
        );
    }
}

/// Starts the controller, waits until it is ready and a little longer (the claims' first
/// reconciles), and returns (time to ready, peak RSS in MiB) with the process still running.
async fn start(sb: &Sandbox) -> (std::process::Child, Duration, f64) {
    let addr = process::free_addr();
    let started = Instant::now();
    let child = process::start(&sb.kubeconfig, NS, addr);
    let pid = child.id();
    while !process::http_ok(addr, "/readyz").await {
        assert!(
            started.elapsed() < Duration::from_secs(300),
            "not ready within 300 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ready = started.elapsed();
    process::settle(pid, Duration::from_secs(2), Duration::from_secs(120)).await;
    (child, ready, process::memory_mib(pid).1)
}

/// Whether a claim of a real class of ours gets its Job among the heavy claims.
async fn serves_a_claim(sb: &Sandbox, name: &str) -> Duration {
    let t = Instant::now();
    create(
        sb,
        "persistentvolumeclaims",
        "",
        "default",
        json!({"metadata": {"name": name},
               "spec": {"storageClassName": "fast", "accessModes": ["ReadWriteOnce"],
                        "resources": {"requests": {"storage": "1Gi"}}}}),
    );
    let jobs = resources::find("batch", "v1", "jobs").unwrap();
    loop {
        let (found, _, _) = sb.api.store.list_page(jobs, Some(NS), None, None, |j| {
            j["metadata"]["annotations"]["flex-provisioner.io/claim"]
                .as_str()
                .is_some_and(|c| c.ends_with(name))
        });
        if !found.is_empty() {
            return t.elapsed();
        }
        assert!(t.elapsed() < Duration::from_secs(60), "no Job for {name}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let n: usize = std::env::var("CLAIMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let sb = Sandbox::start(SandboxOptions::default())
        .await
        .expect("sandbox");
    let t = Instant::now();
    setup(&sb, n);
    println!(
        "{n} pending claims with {} KiB of annotations each ({} naming this provisioner themselves) in {:.1?}",
        ANNOTATION_BYTES / 1024,
        n.div_ceil(2),
        t.elapsed()
    );
    let mut failed = false;
    for (round, claim) in [("first start", "light-1"), ("restart", "light-2")] {
        let (mut child, ready, peak) = start(&sb).await;
        let to_job = serves_a_claim(&sb, claim).await;
        let (rss, peak_after) = process::memory_mib(child.id());
        let peak = peak.max(peak_after);
        println!(
            "{round}: ready in {ready:.2?}, peak RSS {peak:.0} MiB (RSS {rss:.0} MiB), a claim of ours to its Job in {to_job:.1?}"
        );
        failed |= ready >= READY_TARGET || peak >= PEAK_TARGET_MIB;
        let _ = child.kill();
        let _ = child.wait();
    }
    let volumes: usize = std::env::var("VOLUMES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000);
    let sb = Sandbox::start(SandboxOptions::default())
        .await
        .expect("sandbox");
    setup_class(&sb);
    let (mut child, _, _) = start(&sb).await;
    let alone = serves_a_claim(&sb, "alone").await;
    let t = Instant::now();
    forge_volumes(&sb, volumes);
    let forged_in = t.elapsed();
    let amid = serves_a_claim(&sb, "amid-forged").await;
    process::settle(child.id(), Duration::from_secs(2), Duration::from_secs(120)).await;
    let again = serves_a_claim(&sb, "after-forged").await;
    let (rss, peak) = process::memory_mib(child.id());
    println!(
        "{volumes} forged PVs of {} KiB (made in {forged_in:.1?}): a claim of ours to its Job in {alone:.1?} alone, {amid:.1?} amid them, {again:.1?} after; peak RSS {peak:.0} MiB (RSS {rss:.0} MiB)",
        ANNOTATION_BYTES / 1024
    );
    failed |= peak >= PEAK_TARGET_MIB || amid.max(again) > alone + AMID_FORGED_MARGIN;
    let _ = child.kill();
    let _ = child.wait();
    if failed {
        eprintln!(
            "over target: ready within {READY_TARGET:?}, peak RSS under {PEAK_TARGET_MIB} MiB, a claim amid forged volumes within {AMID_FORGED_MARGIN:?} of alone"
        );
        std::process::exit(1);
    }
}
