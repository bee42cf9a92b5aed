//! The garbage collector: dependents whose owners are gone are deleted (or lose the dead
//! reference when another owner lives), `foregroundDeletion` owners wait for their
//! dependents, `orphan` owners release them.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{is_deleting, name_of, ns_of, uid_of};
use crate::sandbox::api::{Api, DeleteOpts};
use crate::sandbox::resources::{self, RESOURCES, Rid};
use crate::sandbox::store::Write;

fn owner_refs(v: &Value) -> Vec<Value> {
    v["metadata"]["ownerReferences"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn finalizers(v: &Value) -> Vec<String> {
    v["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_owned))
        .collect()
}

/// Whether the owner a reference names exists with that uid.
fn owner_alive(api: &Api, dependent_ns: &str, rf: &Value) -> bool {
    let Some(rid) = resources::by_kind(
        rf["apiVersion"].as_str().unwrap_or_default(),
        rf["kind"].as_str().unwrap_or_default(),
    ) else {
        return false;
    };
    let r = resources::get(rid);
    let ns = if r.namespaced { dependent_ns } else { "" };
    api.store
        .get(rid, ns, rf["name"].as_str().unwrap_or_default())
        .is_some_and(|o| uid_of(&o) == rf["uid"].as_str().unwrap_or_default())
}

fn all_storage() -> impl Iterator<Item = Rid> {
    RESOURCES
        .iter()
        .enumerate()
        .filter(|(_, r)| r.storage_of.is_none() && !r.create_only)
        .map(|(i, _)| i)
}

fn dependents_of(api: &Api, owner_uid: &str) -> Vec<(Rid, Value)> {
    let mut out = Vec::new();
    for rid in all_storage() {
        let (items, _) = api.store.list(rid, None, |v| {
            owner_refs(v)
                .iter()
                .any(|rf| rf["uid"].as_str() == Some(owner_uid))
        });
        out.extend(items.into_iter().map(|v| (rid, v)));
    }
    out
}

fn remove_owner_ref(api: &Api, rid: Rid, dep: &Value, owner_uid: &str) {
    let _ = api.store.write(rid, ns_of(dep), name_of(dep), |cur, _| {
        let Some(cur) = cur else {
            return Ok(Write::Unchanged(Value::Null));
        };
        let mut next = cur.clone();
        let refs: Vec<Value> = owner_refs(cur)
            .into_iter()
            .filter(|rf| rf["uid"].as_str() != Some(owner_uid))
            .collect();
        if let Some(m) = next["metadata"].as_object_mut() {
            if refs.is_empty() {
                m.remove("ownerReferences");
            } else {
                m.insert("ownerReferences".into(), json!(refs));
            }
        }
        Ok(Write::Put(next))
    });
}

fn remove_finalizer(api: &Api, rid: Rid, obj: &Value, f: &str) {
    let _ = api.store.write(rid, ns_of(obj), name_of(obj), |cur, _| {
        let Some(cur) = cur else {
            return Ok(Write::Unchanged(Value::Null));
        };
        let left: Vec<String> = finalizers(cur).into_iter().filter(|x| x != f).collect();
        if is_deleting(cur) && left.is_empty() {
            return Ok(Write::Delete(cur.clone()));
        }
        let mut next = cur.clone();
        next["metadata"]["finalizers"] = json!(left);
        Ok(Write::Put(next))
    });
}

fn delete(api: &Api, rid: Rid, obj: &Value, policy: &str) {
    let opts = DeleteOpts {
        propagation: Some(policy.into()),
        ..Default::default()
    };
    let _ = api.delete(rid, ns_of(obj), name_of(obj), &opts);
}

fn sweep(api: &Api) {
    for rid in all_storage() {
        let (items, _) = api
            .store
            .list(rid, None, |v| !owner_refs(v).is_empty() || is_deleting(v));
        for obj in items {
            let fins = finalizers(&obj);
            if is_deleting(&obj) && fins.iter().any(|f| f == "foregroundDeletion") {
                let deps = dependents_of(api, uid_of(&obj));
                let blocking = deps.iter().any(|(_, d)| {
                    owner_refs(d).iter().any(|rf| {
                        rf["uid"].as_str() == Some(uid_of(&obj)) && rf["blockOwnerDeletion"] == true
                    })
                });
                for (drid, d) in &deps {
                    if !is_deleting(d) {
                        delete(api, *drid, d, "Foreground");
                    }
                }
                if !blocking {
                    remove_finalizer(api, rid, &obj, "foregroundDeletion");
                }
                continue;
            }
            if is_deleting(&obj) && fins.iter().any(|f| f == "orphan") {
                for (drid, d) in dependents_of(api, uid_of(&obj)) {
                    remove_owner_ref(api, drid, &d, uid_of(&obj));
                }
                remove_finalizer(api, rid, &obj, "orphan");
                continue;
            }
            let refs = owner_refs(&obj);
            if refs.is_empty() || is_deleting(&obj) {
                continue;
            }
            let alive: Vec<&Value> = refs
                .iter()
                .filter(|rf| owner_alive(api, ns_of(&obj), rf))
                .collect();
            if alive.is_empty() {
                delete(api, rid, &obj, "Background");
            } else if alive.len() < refs.len() {
                for rf in refs.iter().filter(|rf| !alive.contains(rf)) {
                    remove_owner_ref(api, rid, &obj, rf["uid"].as_str().unwrap_or_default());
                }
            }
        }
    }
}

pub async fn run(api: Arc<Api>) {
    let interests: Vec<Rid> = all_storage().collect();
    let mut last = std::time::Instant::now();
    super::run_loop(
        api,
        interests,
        Duration::from_millis(300),
        move |api, changes| {
            // Owners and dependents come in any order; a sweep over objects with owners (or
            // being deleted) settles them all. Rate-limited so bursts cost one sweep.
            let relevant = changes.is_empty()
                || changes.iter().any(|c| {
                    is_deleting(&c.object)
                        || !owner_refs(&c.object).is_empty()
                        || c.event == crate::sandbox::store::EventType::Deleted
                });
            if relevant && last.elapsed() >= Duration::from_millis(50) {
                last = std::time::Instant::now();
                sweep(api);
            }
        },
    )
    .await;
}
