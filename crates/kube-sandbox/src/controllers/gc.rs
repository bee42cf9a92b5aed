//! The garbage collector: dependents whose owners are gone are deleted (or lose the dead
//! reference when another owner lives), `foregroundDeletion` owners wait for their
//! dependents, `orphan` owners release them.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{BY_OWNER, Feed, Throttle, is_deleting, name_of, ns_of, uid_of};
use crate::api::{Api, DeleteOpts};
use crate::resources::{self, RESOURCES, Rid};
use crate::store::{EventType, Write};

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

pub(super) fn all_storage() -> impl Iterator<Item = Rid> {
    RESOURCES
        .iter()
        .enumerate()
        .filter(|(_, r)| r.storage_of.is_none() && !r.create_only)
        .map(|(i, _)| i)
}

/// The objects that name `owner_uid` as an owner, by index: this runs on every deletion.
fn dependents_of(api: &Api, owner_uid: &str) -> Vec<(Rid, Value)> {
    let mut out = Vec::new();
    for rid in all_storage() {
        let items = api.store.indexed(rid, BY_OWNER, &[owner_uid], |_| true);
        out.extend(items.into_iter().map(|v| (rid, v)));
    }
    out
}

async fn remove_owner_ref(t: &Throttle, api: &Api, rid: Rid, dep: &Value, owner_uid: &str) {
    t.wait().await;
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

async fn remove_finalizer(t: &Throttle, api: &Api, rid: Rid, obj: &Value, f: &str) {
    t.wait().await;
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

async fn delete(t: &Throttle, api: &Api, rid: Rid, obj: &Value, policy: &str) {
    let opts = DeleteOpts {
        propagation: Some(policy.into()),
        ..Default::default()
    };
    t.wait().await;
    let _ = api.delete(rid, ns_of(obj), name_of(obj), &opts);
}

/// Settles one object: an owner being deleted in foreground or orphan mode, or a
/// dependent whose owners are (partly) gone.
async fn settle(t: &Throttle, api: &Api, rid: Rid, obj: &Value) {
    let fins = finalizers(obj);
    if is_deleting(obj) && fins.iter().any(|f| f == "foregroundDeletion") {
        let deps = dependents_of(api, uid_of(obj));
        let blocking = deps.iter().any(|(_, d)| {
            owner_refs(d).iter().any(|rf| {
                rf["uid"].as_str() == Some(uid_of(obj)) && rf["blockOwnerDeletion"] == true
            })
        });
        for (drid, d) in &deps {
            if !is_deleting(d) {
                delete(t, api, *drid, d, "Foreground").await;
            }
        }
        if !blocking {
            remove_finalizer(t, api, rid, obj, "foregroundDeletion").await;
        }
        return;
    }
    if is_deleting(obj) && fins.iter().any(|f| f == "orphan") {
        for (drid, d) in dependents_of(api, uid_of(obj)) {
            remove_owner_ref(t, api, drid, &d, uid_of(obj)).await;
        }
        remove_finalizer(t, api, rid, obj, "orphan").await;
        return;
    }
    let refs = owner_refs(obj);
    if refs.is_empty() || is_deleting(obj) {
        return;
    }
    let alive: Vec<&Value> = refs
        .iter()
        .filter(|rf| owner_alive(api, ns_of(obj), rf))
        .collect();
    if alive.is_empty() {
        delete(t, api, rid, obj, "Background").await;
    } else if alive.len() < refs.len() {
        for rf in refs.iter().filter(|rf| !alive.contains(rf)) {
            remove_owner_ref(t, api, rid, obj, rf["uid"].as_str().unwrap_or_default()).await;
        }
    }
}

async fn sweep(t: &Throttle, api: &Api) {
    for rid in all_storage() {
        let (items, _) = api.store.list(rid, None, |v| {
            v["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
                || is_deleting(v)
        });
        for obj in &items {
            settle(t, api, rid, obj).await;
        }
    }
}

/// The object as stored now (changes in a batch may be stale).
fn current(api: &Api, rid: Rid, obj: &Value) -> Option<Value> {
    api.store.get(rid, ns_of(obj), name_of(obj))
}

pub async fn run(api: Arc<Api>, t: Throttle) {
    let interests: Vec<Rid> = all_storage().collect();
    let mut last_sweep = std::time::Instant::now();
    let mut feed = Feed::new(&api, interests, Duration::from_millis(500));
    loop {
        let changes = feed.next().await;
        let api: &Api = &api;
        {
            if changes.is_empty() {
                // A periodic full sweep catches what the incremental path cannot see.
                if last_sweep.elapsed() >= Duration::from_secs(2) {
                    last_sweep = std::time::Instant::now();
                    sweep(&t, api).await;
                }
                continue;
            }
            for c in &changes {
                if c.event == EventType::Deleted {
                    // Its dependents may now be orphans; its owners may be waiting for it.
                    for (drid, d) in dependents_of(api, uid_of(&c.object)) {
                        settle(&t, api, drid, &d).await;
                    }
                    for rf in owner_refs(&c.object) {
                        owner_settle(&t, api, &c.object, &rf).await;
                    }
                    continue;
                }
                let added = c.event == EventType::Added;
                let due = |obj: &Value| {
                    let new_dependent = added
                        && obj["metadata"]["ownerReferences"]
                            .as_array()
                            .is_some_and(|r| !r.is_empty());
                    is_deleting(obj) || new_dependent
                };
                // Looked at in place first: most changes leave the collector nothing to do,
                // and copying every changed object would cost more than the rest.
                if api
                    .store
                    .peek(c.rid, ns_of(&c.object), name_of(&c.object), due)
                    != Some(true)
                {
                    continue;
                }
                let Some(obj) = current(api, c.rid, &c.object) else {
                    continue;
                };
                if due(&obj) {
                    settle(&t, api, c.rid, &obj).await;
                }
            }
        }
    }
}

/// A dependent went away: if its owner is being deleted in the foreground, look again.
async fn owner_settle(t: &Throttle, api: &Api, dependent: &Value, rf: &Value) {
    let Some(rid) = resources::by_kind(
        rf["apiVersion"].as_str().unwrap_or_default(),
        rf["kind"].as_str().unwrap_or_default(),
    ) else {
        return;
    };
    let ns = if resources::get(rid).namespaced {
        ns_of(dependent)
    } else {
        ""
    };
    if let Some(owner) = api
        .store
        .get(rid, ns, rf["name"].as_str().unwrap_or_default())
        && is_deleting(&owner)
    {
        settle(t, api, rid, &owner).await;
    }
}
