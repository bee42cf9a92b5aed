//! Sandbox API server under load: 10,000 PersistentVolumeClaims created through the kube
//! client, listed, and watched by three watchers; reports times, rates and peak memory.
//!
//! `cargo bench --bench sandbox_pvcs` (`PVCS=N` for another count).

use std::time::Instant;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube_sandbox::{Sandbox, SandboxOptions};

fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn claim(i: usize) -> PersistentVolumeClaim {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("claim-{i:05}"), "labels": {"bench": "yes", "shard": (i % 10).to_string()}},
        "spec": {"storageClassName": "", "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap()
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let n: usize = std::env::var("PVCS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let base_rss = peak_rss_mib();
    let sb = Sandbox::start(SandboxOptions::default())
        .await
        .expect("sandbox");
    let client = sb.client().expect("client");
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let start_rv = pvcs
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();

    let watchers: Vec<_> = (0..3)
        .map(|_| {
            let pvcs = pvcs.clone();
            let rv = start_rv.clone();
            tokio::spawn(async move {
                let t = Instant::now();
                let mut seen = 0usize;
                let mut rv = rv;
                while seen < n {
                    let mut stream = pvcs
                        .watch(&WatchParams::default().timeout(290), &rv)
                        .await
                        .unwrap()
                        .boxed();
                    while let Some(ev) = stream.try_next().await.unwrap() {
                        if let WatchEvent::Added(p) = ev {
                            rv = p.metadata.resource_version.clone().unwrap();
                            seen += 1;
                            if seen == n {
                                break;
                            }
                        }
                    }
                }
                t.elapsed()
            })
        })
        .collect();

    let t = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let pvcs = pvcs.clone();
            async move {
                pvcs.create(&PostParams::default(), &claim(i))
                    .await
                    .unwrap()
            }
        })
        .buffer_unordered(32)
        .collect::<Vec<_>>()
        .await;
    let create = t.elapsed();

    let t = Instant::now();
    let all = pvcs.list(&ListParams::default()).await.unwrap();
    let list = t.elapsed();
    assert_eq!(all.items.len(), n);
    let t = Instant::now();
    let shard = pvcs
        .list(&ListParams::default().labels("shard=3"))
        .await
        .unwrap();
    let selected = t.elapsed();
    assert_eq!(shard.items.len(), n / 10);
    let mut watch_times = Vec::new();
    for w in watchers {
        watch_times.push(w.await.unwrap());
    }

    println!("sandbox_pvcs: {n} PersistentVolumeClaims, 3 watchers, 32 concurrent creators");
    println!(
        "  create:           {:>8.2} s  ({:.0} objects/s)",
        create.as_secs_f64(),
        n as f64 / create.as_secs_f64()
    );
    println!("  list all:         {:>8.3} s", list.as_secs_f64());
    println!(
        "  list by label:    {:>8.3} s  ({} items)",
        selected.as_secs_f64(),
        shard.items.len()
    );
    for (i, w) in watch_times.iter().enumerate() {
        println!(
            "  watcher {i} saw all {n} ADDED events after {:.2} s",
            w.as_secs_f64()
        );
    }
    println!(
        "  peak RSS (server + client + watchers): {:.0} MiB (at start {:.0} MiB)",
        peak_rss_mib(),
        base_rss
    );
}
