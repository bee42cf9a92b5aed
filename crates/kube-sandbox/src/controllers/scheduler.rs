//! The scheduler step: places pending pods on a node that satisfies their nodeSelector and
//! required node affinity (and their bound volumes' node affinity), holds gated pods, and for
//! pods using unbound WaitForFirstConsumer claims selects the node on the claim first and
//! waits for the claim to bind.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{Feed, Throttle, is_deleting, name_of, ns_of, rid, uid_of};
use crate::api::{Api, set_condition};
use crate::store::Write;
use crate::wellknown::ANN_SELECTED_NODE;

const COMPONENT: &str = "default-scheduler";

fn labels(v: &Value) -> serde_json::Map<String, Value> {
    v["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default()
}

fn requirement_holds(req: &Value, node: &Value, by_field: bool) -> bool {
    let key = req["key"].as_str().unwrap_or_default();
    let actual: Option<String> = if by_field {
        (key == "metadata.name").then(|| name_of(node).to_owned())
    } else {
        labels(node)
            .get(key)
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let values: Vec<&str> = req["values"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    match req["operator"].as_str().unwrap_or_default() {
        "In" => actual.is_some_and(|a| values.contains(&a.as_str())),
        "NotIn" => actual.is_none_or(|a| !values.contains(&a.as_str())),
        "Exists" => actual.is_some(),
        "DoesNotExist" => actual.is_none(),
        _ => false,
    }
}

/// A NodeSelector (terms ORed, requirements ANDed).
pub fn node_selector_matches(selector: &Value, node: &Value) -> bool {
    let terms = selector["nodeSelectorTerms"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    terms.is_empty()
        || terms.iter().any(|t| {
            t["matchExpressions"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|r| requirement_holds(r, node, false))
                && t["matchFields"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .all(|r| requirement_holds(r, node, true))
        })
}

fn fits(pod: &Value, node: &Value, volume_affinities: &[Value]) -> bool {
    let node_labels = labels(node);
    let selector_ok = pod["spec"]["nodeSelector"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| node_labels.get(k) == Some(v));
    let affinity =
        &pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
    let affinity_ok = affinity.is_null() || node_selector_matches(affinity, node);
    let volumes_ok = volume_affinities
        .iter()
        .all(|a| node_selector_matches(a, node));
    let schedulable = node["spec"]["unschedulable"] != true;
    selector_ok && affinity_ok && volumes_ok && schedulable
}

struct Scheduler {
    pods: usize,
    nodes: usize,
    claims: usize,
    volumes: usize,
    classes: usize,
    /// Pods already told they are unschedulable, so the event is sent once.
    reported: HashSet<String>,
    throttle: Throttle,
}

enum Volumes {
    Ready(Vec<Value>),
    /// Unbound WaitForFirstConsumer claims that need a node chosen.
    NeedNode(Vec<(String, String)>),
    /// Not yet; with a message when the real scheduler reports it (FailedScheduling).
    Wait(Option<String>),
}

impl Scheduler {
    fn volumes(&self, api: &Api, pod: &Value) -> Volumes {
        let ns = ns_of(pod);
        let mut affinities = Vec::new();
        let mut need = Vec::new();
        for v in pod["spec"]["volumes"].as_array().into_iter().flatten() {
            let Some(claim_name) = v["persistentVolumeClaim"]["claimName"].as_str() else {
                continue;
            };
            let Some(claim) = api.store.get(self.claims, ns, claim_name) else {
                return Volumes::Wait(Some(format!(
                    "persistentvolumeclaim \"{claim_name}\" not found"
                )));
            };
            if let Some(pv_name) = claim["spec"]["volumeName"]
                .as_str()
                .filter(|n| !n.is_empty())
            {
                if claim["status"]["phase"] != "Bound" {
                    return Volumes::Wait(None);
                }
                if let Some(pv) = api.store.get(self.volumes, "", pv_name)
                    && !pv["spec"]["nodeAffinity"]["required"].is_null()
                {
                    affinities.push(pv["spec"]["nodeAffinity"]["required"].clone());
                }
                continue;
            }
            let class = crate::claim_resize::claim_class(&claim);
            let waits = api
                .store
                .get(self.classes, "", class)
                .is_some_and(|sc| sc["volumeBindingMode"] == "WaitForFirstConsumer");
            if !waits {
                return Volumes::Wait(Some(
                    "pod has unbound immediate PersistentVolumeClaims".into(),
                ));
            }
            if claim["metadata"]["annotations"][ANN_SELECTED_NODE].is_null() {
                need.push((ns.to_owned(), claim_name.to_owned()));
            } else {
                return Volumes::Wait(None);
            }
        }
        if need.is_empty() {
            Volumes::Ready(affinities)
        } else {
            Volumes::NeedNode(need)
        }
    }

    async fn schedule(
        &mut self,
        api: &Api,
        pod: &Value,
        load: &mut std::collections::HashMap<String, usize>,
    ) {
        if pod["spec"]["schedulingGates"]
            .as_array()
            .is_some_and(|g| !g.is_empty())
        {
            return;
        }
        let (nodes, _) = api.store.list(self.nodes, None, |_| true);
        let volumes = self.volumes(api, pod);
        let affinities = match &volumes {
            Volumes::Ready(a) => a.clone(),
            Volumes::NeedNode(_) => vec![],
            Volumes::Wait(None) => return,
            Volumes::Wait(Some(why)) => {
                if self.reported.insert(uid_of(pod).to_owned()) {
                    self.throttle
                        .event(api, pod, "Warning", "FailedScheduling", why, COMPONENT)
                        .await;
                }
                return;
            }
        };
        let candidates: Vec<&Value> = nodes.iter().filter(|n| fits(pod, n, &affinities)).collect();
        let Some(node) = candidates
            .iter()
            .copied()
            .min_by_key(|n| load.get(name_of(n)).copied().unwrap_or(0))
        else {
            self.unschedulable(api, pod, nodes.len()).await;
            return;
        };
        let node = name_of(node).to_owned();
        if let Volumes::NeedNode(claims) = volumes {
            for (ns, claim) in claims {
                let node = node.clone();
                self.throttle.wait().await;
                let _ = api.store.write(self.claims, &ns, &claim, |cur, _| {
                    let Some(cur) = cur else {
                        return Ok(Write::Unchanged(Value::Null));
                    };
                    let mut next = cur.clone();
                    next["metadata"]["annotations"][ANN_SELECTED_NODE] = json!(node);
                    Ok(Write::Put(next))
                });
            }
            return;
        }
        *load.entry(node.clone()).or_default() += 1;
        self.throttle.wait().await;
        if api.bind_pod(ns_of(pod), name_of(pod), &node).is_ok()
            && let Some(p) = api.store.get(self.pods, ns_of(pod), name_of(pod))
        {
            self.reported.remove(uid_of(pod));
            self.throttle
                .event(
                    api,
                    &p,
                    "Normal",
                    "Scheduled",
                    &format!(
                        "Successfully assigned {}/{} to {node}",
                        ns_of(pod),
                        name_of(pod)
                    ),
                    COMPONENT,
                )
                .await;
        }
    }

    async fn unschedulable(&mut self, api: &Api, pod: &Value, total: usize) {
        if !self.reported.insert(uid_of(pod).to_owned()) {
            return;
        }
        let message = format!(
            "0/{total} nodes are available: {total} node(s) didn't match Pod's node affinity/selector. preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling."
        );
        let m = message.clone();
        self.throttle.wait().await;
        let _ = api
            .store
            .write(self.pods, ns_of(pod), name_of(pod), |cur, _| {
                let Some(cur) = cur else {
                    return Ok(Write::Unchanged(Value::Null));
                };
                let mut next = cur.clone();
                set_condition(
                    &mut next,
                    "PodScheduled",
                    "False",
                    Some("Unschedulable"),
                    Some(&m),
                );
                Ok(if next == *cur {
                    Write::Unchanged(next)
                } else {
                    Write::Put(next)
                })
            });
        self.throttle
            .event(api, pod, "Warning", "FailedScheduling", &message, COMPONENT)
            .await;
    }
}

pub async fn run(api: Arc<Api>, throttle: Throttle) {
    let mut s = Scheduler {
        pods: rid("", "pods"),
        nodes: rid("", "nodes"),
        claims: rid("", "persistentvolumeclaims"),
        volumes: rid("", "persistentvolumes"),
        classes: rid("storage.k8s.io", "storageclasses"),
        reported: HashSet::new(),
        throttle,
    };
    let interests = vec![s.pods, s.nodes, s.claims];
    let mut feed = Feed::new(&api, interests, Duration::from_secs(1));
    loop {
        let _changes = feed.next().await;
        let api: &Api = &api;
        {
            let (pending, _) = api.store.list(s.pods, None, |p| {
                p["spec"]["nodeName"].as_str().is_none_or(str::is_empty) && !is_deleting(p)
            });
            if pending.is_empty() {
                continue;
            }
            // How many pods each node runs, counted once per pass.
            let mut load = std::collections::HashMap::new();
            for p in api
                .store
                .list(s.pods, None, |p| p["spec"]["nodeName"].is_string())
                .0
            {
                *load
                    .entry(
                        p["spec"]["nodeName"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned(),
                    )
                    .or_default() += 1;
            }
            for pod in &pending {
                s.schedule(api, pod, &mut load).await;
            }
        }
    }
}
