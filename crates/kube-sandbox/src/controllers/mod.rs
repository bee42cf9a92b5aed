//! The simulated control-plane loops and what they share: a change-driven loop with a
//! periodic resync, event recording, and the objects the sandbox starts with.

mod expand;
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
use super::store::{Change, IndexDef, Store, Write};

/// Events by the uid of their involved object (the recorder's aggregation looks them up).
pub const EVENTS_BY_OBJECT: &str = "events-by-involved-uid";
/// Volumes by the claim their claimRef names, `namespace/name`; volumes without a claimRef
/// under [`FREE_VOLUME`].
pub const VOLUMES_BY_CLAIM: &str = "volumes-by-claim";
/// The key of volumes without a claimRef in [`VOLUMES_BY_CLAIM`] (no claim key is empty).
pub const FREE_VOLUME: &str = "";
/// Volumes by the uid in their claimRef.
pub const VOLUMES_BY_CLAIM_UID: &str = "volumes-by-claim-uid";
/// Pods by the claims their volumes use, `namespace/claimName`.
pub const PODS_BY_CLAIM: &str = "pods-by-claim";

/// Objects of every resource by the uids of their owners (the garbage collector's graph).
pub const BY_OWNER: &str = "by-owner-uid";

/// The indexes the loops look objects up by, as their informers' indexers.
pub fn add_indexes(store: &Store) {
    for rid in gc::all_storage() {
        store.add_index(IndexDef {
            name: BY_OWNER,
            rid,
            keys: |v| {
                v["metadata"]["ownerReferences"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r["uid"].as_str().map(str::to_owned))
                    .collect()
            },
        });
    }
    store.add_index(IndexDef {
        name: EVENTS_BY_OBJECT,
        rid: rid("", "events"),
        keys: |e| {
            e["involvedObject"]["uid"]
                .as_str()
                .map(str::to_owned)
                .into_iter()
                .collect()
        },
    });
    store.add_index(IndexDef {
        name: VOLUMES_BY_CLAIM,
        rid: rid("", "persistentvolumes"),
        keys: |pv| {
            let r = &pv["spec"]["claimRef"];
            if r.is_null() {
                return vec![FREE_VOLUME.to_owned()];
            }
            match (r["namespace"].as_str(), r["name"].as_str()) {
                (Some(ns), Some(name)) => vec![format!("{ns}/{name}")],
                _ => Vec::new(),
            }
        },
    });
    store.add_index(IndexDef {
        name: VOLUMES_BY_CLAIM_UID,
        rid: rid("", "persistentvolumes"),
        keys: |pv| {
            pv["spec"]["claimRef"]["uid"]
                .as_str()
                .map(str::to_owned)
                .into_iter()
                .collect()
        },
    });
    store.add_index(IndexDef {
        name: PODS_BY_CLAIM,
        rid: rid("", "pods"),
        keys: |p| {
            let ns = ns_of(p);
            let mut keys: Vec<String> = p["spec"]["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
                .map(|claim| format!("{ns}/{claim}"))
                .collect();
            keys.sort();
            keys.dedup();
            keys
        },
    });
}

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

/// Records a core/v1 Event about `object`, as the named component. Like client-go's
/// recorder, a repeat of an Event already recorded (same involved object uid, reason,
/// message, source component and type) increments that Event's `count` and `lastTimestamp`
/// instead of making another.
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
    let events = rid("", "events");
    let uid = uid_of(object);
    // By the index: a scan of the namespace's events would make every event cost as much
    // as all the events before it.
    let same = api.store.indexed(events, EVENTS_BY_OBJECT, &[uid], |e| {
        ns_of(e) == ns
            && e["reason"].as_str() == Some(reason)
            && e["message"].as_str() == Some(message)
            && e["source"]["component"].as_str() == Some(component)
            && e["type"].as_str() == Some(type_)
    });
    if let Some(existing) = same.first() {
        let counted = modify(api, events, ns, name_of(existing), |e| {
            let count = e["count"].as_i64().unwrap_or(1);
            e["count"] = json!(count + 1);
            e["lastTimestamp"] = json!(now);
        });
        if counted.is_some() {
            return;
        }
    }
    let event = json!({
        "metadata": {"name": format!("{}.{:x}", name_of(object), jiff::Timestamp::now().as_nanosecond()), "namespace": ns},
        "involvedObject": {
            "kind": object["kind"], "namespace": ns_of(object), "name": name_of(object),
            "uid": uid, "apiVersion": object["apiVersion"],
            "resourceVersion": object["metadata"]["resourceVersion"],
        },
        "reason": reason, "message": message, "type": type_,
        "source": {"component": component},
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        "reportingComponent": component, "reportingInstance": "",
    });
    let _ = api.create(events, ns, event, &WriteCtx::manager(component));
}

/// A token bucket standing for one API client's rate limit (client-go's QPS and burst): each
/// write takes a token; tokens come back at `qps` per second, up to `burst`. Waiters reserve
/// their turn (tokens may go negative), so they are served in order. Never held across an
/// await: the lock only guards the arithmetic.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: std::sync::Mutex<(f64, tokio::time::Instant)>,
}

impl TokenBucket {
    pub fn new(qps: f64, burst: u32) -> TokenBucket {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps: if qps > 0.0 { qps } else { f64::MAX },
            burst,
            state: std::sync::Mutex::new((burst, tokio::time::Instant::now())),
        }
    }

    /// Takes a token if one is there now; never waits, never goes into debt.
    pub fn try_acquire(&self) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let now = tokio::time::Instant::now();
        let refill = now.duration_since(s.1).as_secs_f64() * self.qps;
        s.0 = (s.0 + refill).min(self.burst);
        s.1 = now;
        if s.0 >= 1.0 {
            s.0 -= 1.0;
            true
        } else {
            false
        }
    }

    /// Waits until a token is there, without taking it.
    pub async fn ready(&self) {
        let wait = {
            let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let tokens = s.0 + s.1.elapsed().as_secs_f64() * self.qps;
            Duration::from_secs_f64(((1.0 - tokens) / self.qps).max(0.0))
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }

    /// Waits for a token.
    pub async fn acquire(&self) {
        let wait = {
            let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            let now = tokio::time::Instant::now();
            let refill = now.duration_since(s.1).as_secs_f64() * self.qps;
            s.0 = (s.0 + refill).min(self.burst) - 1.0;
            s.1 = now;
            if s.0 >= 0.0 {
                Duration::ZERO
            } else {
                Duration::from_secs_f64(-s.0 / self.qps)
            }
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// The rate limit of the controller-manager's client, shared by the controllers that use
/// it; unlimited when empty.
#[derive(Debug, Clone, Default)]
pub struct Throttle(Option<Arc<TokenBucket>>);

impl Throttle {
    pub fn new(limit: Option<(f64, u32)>) -> Throttle {
        Throttle(limit.map(|(qps, burst)| Arc::new(TokenBucket::new(qps, burst))))
    }

    /// Waits for the right to make one write.
    pub async fn wait(&self) {
        if let Some(b) = &self.0 {
            b.acquire().await;
        }
    }

    /// Takes the right to make one write now, if there is one (always, unlimited).
    pub fn try_take(&self) -> bool {
        self.0.as_ref().is_none_or(|b| b.try_acquire())
    }

    /// Waits until `try_take` would succeed.
    pub async fn ready(&self) {
        if let Some(b) = &self.0 {
            b.ready().await;
        }
    }

    /// `modify`, waiting for the limit first, and only when `f` would change the object
    /// (a controller skips writes that change nothing).
    pub async fn modify(
        &self,
        api: &Api,
        rid: Rid,
        ns: &str,
        name: &str,
        f: impl Fn(&mut Value),
    ) -> Option<Value> {
        let cur = api.store.get(rid, ns, name)?;
        let mut next = cur.clone();
        f(&mut next);
        if next == cur {
            return Some(cur);
        }
        self.wait().await;
        modify(api, rid, ns, name, f)
    }

    /// `record_event`, waiting for the limit first.
    pub async fn event(
        &self,
        api: &Api,
        object: &Value,
        type_: &str,
        reason: &str,
        message: &str,
        component: &str,
    ) {
        self.wait().await;
        record_event(api, object, type_, reason, message, component);
    }
}

/// The changes a loop reacts to: batches of changes to `interests`, and an empty batch
/// every `tick` (for time-based work and as a resync) or after falling behind.
pub struct Feed {
    rx: tokio::sync::broadcast::Receiver<Arc<Change>>,
    interval: tokio::time::Interval,
    interests: Vec<Rid>,
    started: bool,
}

impl Feed {
    pub fn new(api: &Api, interests: Vec<Rid>, tick: Duration) -> Feed {
        Feed {
            rx: api.store.subscribe(),
            interval: tokio::time::interval(tick),
            interests,
            started: false,
        }
    }

    /// The next batch to reconcile; empty for a full resync.
    pub async fn next(&mut self) -> Vec<Arc<Change>> {
        if !self.started {
            self.started = true;
            return Vec::new();
        }
        loop {
            tokio::select! {
                msg = self.rx.recv() => {
                    let mut batch = Vec::new();
                    let mut lagged = false;
                    match msg {
                        Ok(c) => batch.push(c),
                        Err(_) => lagged = true,
                    }
                    loop {
                        match self.rx.try_recv() {
                            Ok(c) => batch.push(c),
                            Err(TryRecvError::Lagged(_)) => lagged = true,
                            Err(_) => break,
                        }
                    }
                    if lagged {
                        return Vec::new();
                    }
                    batch.retain(|c| self.interests.contains(&c.rid));
                    if !batch.is_empty() {
                        return batch;
                    }
                }
                _ = self.interval.tick() => return Vec::new(),
            }
        }
    }
}

/// Runs `reconcile` on every batch of changes to `interests`, and on its own every `tick`
/// with an empty batch (for time-based work and as a resync).
pub async fn run_loop(
    api: Arc<Api>,
    interests: Vec<Rid>,
    tick: Duration,
    mut reconcile: impl FnMut(&Api, &[Arc<Change>]),
) {
    let mut feed = Feed::new(&api, interests, tick);
    loop {
        let batch = feed.next().await;
        reconcile(&api, &batch);
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
    // One bucket: the Job controller, scheduler and collector share one client.
    let throttle = Throttle::new(opts.controller_qps);
    // The PV and expand controllers have a client (and so a limit) each, as in
    // kube-controller-manager, where each controller gets its own client.
    let pv_throttle = Throttle::new(opts.controller_qps);
    let expand_throttle = Throttle::new(opts.controller_qps);
    vec![
        tokio::spawn(namespaces::run(api.clone())),
        tokio::spawn(gc::run(api.clone(), throttle.clone())),
        tokio::spawn(pv::run(api.clone(), pv_throttle)),
        tokio::spawn(expand::run(api.clone(), expand_throttle)),
        tokio::spawn(scheduler::run(api.clone(), throttle.clone())),
        tokio::spawn(jobs::run(api, opts.pod_backoff, throttle)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_events_are_aggregated() {
        let api = Api::new(1000);
        bootstrap(&api, &[]);
        let object = json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "p", "namespace": "default", "uid": "u-1", "resourceVersion": "1"}});
        let other = json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "p", "namespace": "default", "uid": "u-2", "resourceVersion": "1"}});
        record_event(&api, &object, "Warning", "Failed", "it broke", "c");
        record_event(&api, &object, "Warning", "Failed", "it broke", "c");
        record_event(&api, &object, "Warning", "Failed", "it broke", "c");
        // Any difference in the key makes a new Event.
        record_event(&api, &object, "Warning", "Failed", "it broke again", "c");
        record_event(&api, &object, "Warning", "Other", "it broke", "c");
        record_event(&api, &object, "Normal", "Failed", "it broke", "c");
        record_event(&api, &object, "Warning", "Failed", "it broke", "d");
        record_event(&api, &other, "Warning", "Failed", "it broke", "c");
        let (events, _) = api.store.list(rid("", "events"), Some("default"), |_| true);
        assert_eq!(events.len(), 6, "{events:#?}");
        let first = events
            .iter()
            .find(|e| {
                e["involvedObject"]["uid"] == "u-1"
                    && e["reason"] == "Failed"
                    && e["message"] == "it broke"
                    && e["type"] == "Warning"
                    && e["source"]["component"] == "c"
            })
            .unwrap();
        assert_eq!(first["count"], 3);
        assert!(
            first["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("p.")
        );
        assert!(
            first["lastTimestamp"].as_str().unwrap() >= first["firstTimestamp"].as_str().unwrap()
        );
        let ones = events.iter().filter(|e| e["count"] == 1).count();
        assert_eq!(ones, 5);
    }

    #[tokio::test]
    async fn token_bucket_try_acquire_never_waits_nor_borrows() {
        let bucket = TokenBucket::new(20.0, 2);
        assert!(bucket.try_acquire());
        assert!(bucket.try_acquire());
        assert!(!bucket.try_acquire(), "the burst is spent");
        let start = tokio::time::Instant::now();
        bucket.ready().await;
        let waited = start.elapsed();
        // One token at 20/s: about 50 ms.
        assert!(waited >= Duration::from_millis(40), "{waited:?}");
        assert!(waited < Duration::from_secs(1), "{waited:?}");
        assert!(bucket.try_acquire());
        assert!(!bucket.try_acquire());
        assert!(Throttle::new(None).try_take(), "no limit: always");
    }

    // On the runtime's paused clock: the bucket's arithmetic, not the machine's load.
    #[tokio::test(start_paused = true)]
    async fn token_bucket_allows_burst_then_qps() {
        let bucket = TokenBucket::new(50.0, 5);
        let start = tokio::time::Instant::now();
        for _ in 0..5 {
            bucket.acquire().await;
        }
        assert_eq!(
            start.elapsed(),
            Duration::ZERO,
            "the burst waits for nothing"
        );
        // 10 more at 50/s: 200 ms.
        for _ in 0..10 {
            bucket.acquire().await;
        }
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(199), "{took:?}");
        assert!(took <= Duration::from_millis(210), "{took:?}");
    }
}
