//! The controller started in a populated cluster: N bound claims and their PVs exist (N from
//! `CLAIMS`, default 5,000), with each volume's finished provisioning Job, its pod and its
//! deprovision record still there (kept for the Jobs' TTL, as after a burst). Reports how long the initial lists take for a plain client, the
//! controller's time from start to ready, its CPU time and memory once settled, and the
//! time from a new claim to its Job while the N exist.
//!
//! `cargo bench --bench controller_restart` (`CLAIMS=50000` for another count). The
//! controller runs as its own process (the release binary), so its memory is its own
//! (`CONTROLLER_WRAPPER=heaptrack` runs it under that profiler).

use process::{cpu_seconds, http_ok, memory_mib, settle};

use flex_testing::controller_process as process;
use flex_testing::populate;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, ListParams};
use kube_sandbox::{Sandbox, SandboxOptions, WriteCtx, resources};
use serde_json::json;

const NS: &str = "flex-system";

/// Paged lists of claims and PVs, as a reflector makes them, at the same time.
async fn list_everything(client: kube::Client) -> Duration {
    async fn paged<K>(api: Api<K>) -> usize
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let mut lp = ListParams::default().limit(500);
        let mut n = 0;
        loop {
            let page = api.list(&lp).await.expect("list");
            n += page.items.len();
            match page.metadata.continue_ {
                Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
                _ => return n,
            }
        }
    }
    let t = Instant::now();
    futures::join!(
        paged(Api::<PersistentVolumeClaim>::all(client.clone())),
        paged(Api::<PersistentVolume>::all(client))
    );
    t.elapsed()
}

fn setup(sb: &Sandbox) {
    let ctx = WriteCtx::manager("bench");
    let create = |plural: &str, group: &str, version: &str, ns: &str, body: serde_json::Value| {
        sb.api
            .create(
                resources::find(group, version, plural).unwrap(),
                ns,
                body,
                &ctx,
            )
            .unwrap();
    };
    create(
        "namespaces",
        "",
        "v1",
        "",
        json!({"metadata": {"name": NS}}),
    );
    create(
        "storageclasses",
        "storage.k8s.io",
        "v1",
        "",
        json!({"metadata": {"name": "fast"}, "provisioner": flex_core::names::DEFAULT_PROVISIONER_NAME,
               "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate"}),
    );
    create(
        "configmaps",
        "",
        "v1",
        NS,
        json!({"metadata": {"name": "fast-config", "labels": {"type": "provisioner-config", "storage-class": "fast"}},
               "data": {"image": "bench-image", "volume-sources": "hostPath", "allowed-paths": "/volumes"}}),
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let n: usize = std::env::var("CLAIMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let sb = Sandbox::start(SandboxOptions::default())
        .await
        .expect("sandbox");
    setup(&sb);
    let t = Instant::now();
    // Claims, their Jobs, then their volumes: the order provisioning makes them in.
    let claims = populate::pending_claims(&sb, "fast", n);
    populate::finished_jobs(&sb, NS, "fast", &claims);
    populate::volumes_for(&sb, "fast", &claims);
    while populate::bound_count(&sb) < n {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "{n} bound claims and PVs, {n} finished Jobs, pods and records in place in {:.1?}",
        t.elapsed()
    );
    let lists = list_everything(sb.client().unwrap()).await;
    println!("initial lists (claims and PVs, pages of 500) for a plain client: {lists:.2?}");

    let addr = process::free_addr();
    let started = Instant::now();
    let mut child = process::start(&sb.kubeconfig, NS, addr);
    let pid = child.id();
    while !http_ok(addr, "/readyz").await {
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "not ready within 600 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ready = started.elapsed();
    let cpu_at_ready = cpu_seconds(pid);
    println!(
        "controller start to ready: {ready:.2?} (CPU {cpu_at_ready:.2} s, RSS {:.0} MiB)",
        memory_mib(pid).0
    );
    let settled = settle(pid, Duration::from_secs(2), Duration::from_secs(600)).await;
    let (rss, peak) = memory_mib(pid);
    println!(
        "settled {settled:.1?} after ready: CPU {:.2} s in all, RSS {rss:.0} MiB, peak RSS {peak:.0} MiB",
        cpu_seconds(pid)
    );

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(sb.client().unwrap(), "default");
    let jobs = resources::find("batch", "v1", "jobs").unwrap();
    let pvcs = resources::find("", "v1", "persistentvolumeclaims").unwrap();
    // Five claims one after the other: the time to Job, and how much of it passed before
    // Kubernetes' PV controller (here the sandbox's) named our provisioner on the claim,
    // which is when a provisioner may act.
    let mut samples = Vec::new();
    for i in 0..5 {
        let t = Instant::now();
        let claim: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": format!("one-more-{i}")},
            "spec": {"storageClassName": "fast", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}
        }))
        .unwrap();
        let uid = claims
            .create(&Default::default(), &claim)
            .await
            .unwrap()
            .metadata
            .uid
            .unwrap();
        let mut annotated = None;
        loop {
            if annotated.is_none()
                && sb
                    .api
                    .store
                    .get(pvcs, "default", &format!("one-more-{i}"))
                    .is_some_and(|c| {
                        c["metadata"]["annotations"]["volume.kubernetes.io/storage-provisioner"]
                            .is_string()
                    })
            {
                annotated = Some(t.elapsed());
            }
            let (found, _, _) = sb.api.store.list_page(jobs, Some(NS), None, None, |j| {
                j["metadata"]["labels"]["flex-provisioner.io/claim-uid"].as_str() == Some(&uid)
            });
            if !found.is_empty() {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(120),
                "no Job for the new claim"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let to_job = t.elapsed();
        let annotated = annotated.unwrap_or(to_job);
        println!(
            "a new claim's time to Job among {n}: {to_job:.1?} (the PV controller named the provisioner after {annotated:.1?}; ours {:.1?})",
            to_job.saturating_sub(annotated)
        );
        samples.push((to_job, to_job.saturating_sub(annotated)));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    samples.sort();
    println!(
        "median time to Job among {n}: {:.1?} (controller's share {:.1?})",
        samples[2].0, samples[2].1
    );
    let _ = child.kill();
    let _ = child.wait();
}
