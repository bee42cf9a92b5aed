//! The simulated control-plane loops and what they share: a change-driven loop with a
//! periodic resync, event recording, and the objects the sandbox starts with.

mod gc;
mod jobs;
pub(crate) mod namespaces;
mod pv;
mod scheduler;

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast::error::TryRecvError;
use tokio::task::JoinHandle;

use super::SandboxOptions;
use super::api::{Api, WriteCtx};
use super::ids;
use super::resources::{self, Rid};
use super::store::{Change, Write};

pub fn rid(group: &str, plural: &str) -> Rid {
    resources::find(group, "v1", plural)
        .unwrap_or_else(|| panic!("unknown resource {group}/{plural}"))
}

pub fn name_of(v: &Value) -> &str {
    v["metadata"]["name"].as_str().unwrap_or_default()
}

pub fn ns_of(v: &Value) -> &str {
    v["metadata"]["namespace"].as_str().unwrap_or_default()
}

pub fn uid_of(v: &Value) -> &str {
    v["metadata"]["uid"].as_str().unwrap_or_default()
}

pub fn is_deleting(v: &Value) -> bool {
    v["metadata"]
        .get("deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// Applies `f` to the stored object if it still exists, and returns what is stored. A
/// deleting object left without finalizers is removed, as the API server would.
pub fn modify(
    api: &Api,
    rid: Rid,
    ns: &str,
    name: &str,
    f: impl FnOnce(&mut Value),
) -> Option<Value> {
    api.store
        .write(rid, ns, name, |cur, _| {
            let Some(cur) = cur else {
                return Ok(Write::Unchanged(Value::Null));
            };
            let mut next = cur.clone();
            f(&mut next);
            if next == *cur {
                return Ok(Write::Unchanged(next));
            }
            let finalized = next["metadata"]["finalizers"]
                .as_array()
                .is_none_or(|a| a.is_empty());
            if is_deleting(&next) && finalized {
                return Ok(Write::Delete(cur.clone()));
            }
            Ok(Write::Put(next))
        })
        .ok()
        .filter(|v| !v.is_null())
}

/// Records a core/v1 Event about `object`, as the named component.
pub fn record_event(
    api: &Api,
    object: &Value,
    type_: &str,
    reason: &str,
    message: &str,
    component: &str,
) {
    let ns = match ns_of(object) {
        "" => "default",
        ns => ns,
    };
    let now = ids::now();
    let event = json!({
        "metadata": {"name": format!("{}.{:x}", name_of(object), jiff::Timestamp::now().as_nanosecond()), "namespace": ns},
        "involvedObject": {
            "kind": object["kind"], "namespace": ns_of(object), "name": name_of(object),
            "uid": uid_of(object), "apiVersion": object["apiVersion"],
            "resourceVersion": object["metadata"]["resourceVersion"],
        },
        "reason": reason, "message": message, "type": type_,
        "source": {"component": component},
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        "reportingComponent": component, "reportingInstance": "",
    });
    let _ = api.create(rid("", "events"), ns, event, &WriteCtx::manager(component));
}

/// Runs `reconcile` on every batch of changes to `interests`, and on its own every `tick`
/// with an empty batch (for time-based work and as a resync).
pub async fn run_loop(
    api: Arc<Api>,
    interests: Vec<Rid>,
    tick: Duration,
    mut reconcile: impl FnMut(&Api, &[Arc<Change>]),
) {
    let mut rx = api.store.subscribe();
    reconcile(&api, &[]);
    let mut interval = tokio::time::interval(tick);
    loop {
        tokio::select! {
            msg = rx.recv() => {
                let mut batch = Vec::new();
                let mut lagged = false;
                match msg {
                    Ok(c) => batch.push(c),
                    Err(_) => lagged = true,
                }
                loop {
                    match rx.try_recv() {
                        Ok(c) => batch.push(c),
                        Err(TryRecvError::Lagged(_)) => lagged = true,
                        Err(_) => break,
                    }
                }
                if lagged {
                    reconcile(&api, &[]);
                    continue;
                }
                batch.retain(|c| interests.contains(&c.rid));
                if !batch.is_empty() {
                    reconcile(&api, &batch);
                }
            }
            _ = interval.tick() => reconcile(&api, &[]),
        }
    }
}

/// Namespaces and nodes every cluster has.
pub fn bootstrap(api: &Api, nodes: &[String]) {
    let ctx = WriteCtx::manager("kube-apiserver");
    for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let _ = api.create(
            rid("", "namespaces"),
            "",
            json!({"metadata": {"name": ns}}),
            &ctx,
        );
    }
    for node in nodes {
        let _ = api.create(
            rid("", "nodes"),
            "",
            json!({
                "metadata": {"name": node, "labels": {
                    "kubernetes.io/hostname": node, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                    "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64"}},
                "spec": {},
                "status": {
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                    "message": "kubelet is posting ready status", "lastHeartbeatTime": ids::now(),
                                    "lastTransitionTime": ids::now()}],
                    "capacity": {"cpu": "2", "memory": "24Gi", "pods": "110"},
                    "allocatable": {"cpu": "2", "memory": "24Gi", "pods": "110"},
                    "nodeInfo": {"kubeletVersion": "v1.36.2", "operatingSystem": "linux", "architecture": "amd64",
                                 "containerRuntimeVersion": "kube-sandbox://1", "kernelVersion": "", "osImage": "kube sandbox",
                                 "machineID": "", "systemUUID": "", "bootID": "", "kubeProxyVersion": ""},
                    "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": node}],
                },
            }),
            &WriteCtx::manager("kubelet"),
        );
    }
}

pub fn spawn_all(api: Arc<Api>, opts: &SandboxOptions) -> Vec<JoinHandle<()>> {
    vec![
        tokio::spawn(namespaces::run(api.clone())),
        tokio::spawn(gc::run(api.clone())),
        tokio::spawn(pv::run(api.clone())),
        tokio::spawn(scheduler::run(api.clone())),
        tokio::spawn(jobs::run(api, opts.pod_backoff)),
    ]
}
