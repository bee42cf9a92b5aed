//! The sandbox's object store: objects per resource, one global resourceVersion, a bounded
//! history of changes for watches (older versions answer 410 Gone), and a broadcast of
//! live changes.
//!
//! Every write runs a closure under one lock, so read-modify-write is atomic and a watch
//! can take its replay and its live subscription at the same version.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::resources::Rid;
use super::status::ApiResult;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as recorded in the history and sent to watchers.
#[derive(Debug)]
pub struct Change {
    pub rv: u64,
    pub rid: Rid,
    pub event: EventType,
    pub object: Value,
    /// The object before a modification, so selector watches can tell an object leaving
    /// their selection (sent as DELETED with this old state, like the real server).
    pub old: Option<Value>,
}

/// Changes to replay, and the live subscription that continues after them.
pub type Replay = (Vec<Arc<Change>>, broadcast::Receiver<Arc<Change>>);

/// What a write closure decides.
pub enum Write {
    /// Store this object (create or replace).
    Put(Value),
    /// Remove the object; the value is its final state for the DELETED event.
    Delete(Value),
    /// Nothing changed; the value is returned to the caller as it is stored.
    Unchanged(Value),
}

type Key = (String, String);

struct State {
    rv: u64,
    /// Watches may start from any version at or after this one.
    compacted: u64,
    objects: Vec<BTreeMap<Key, Value>>,
    history: VecDeque<Arc<Change>>,
    window: usize,
}

pub struct Store {
    state: Mutex<State>,
    tx: broadcast::Sender<Arc<Change>>,
}

/// The first resourceVersion; everything before it counts as compacted, as on a cluster
/// that has been running for a while.
const FIRST_RV: u64 = 1000;

/// Empty lists and nulls in metadata are omitted, as the real server's encoding does
/// (`obj["metadata"]["x"]` on a missing key leaves a null behind).
fn normalize(object: &mut Value) {
    if let Some(m) = object["metadata"].as_object_mut() {
        for k in ["finalizers", "ownerReferences"] {
            if m.get(k)
                .and_then(Value::as_array)
                .is_some_and(Vec::is_empty)
            {
                m.remove(k);
            }
        }
        m.retain(|_, v| !v.is_null());
    }
}

fn same_but_version(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v["metadata"].as_object_mut() {
            m.remove("resourceVersion");
        }
        v
    };
    strip(a) == strip(b)
}

impl Store {
    pub fn new(resources: usize, window: usize) -> Self {
        let (tx, _) = broadcast::channel(1 << 16);
        Store {
            state: Mutex::new(State {
                rv: FIRST_RV,
                compacted: FIRST_RV,
                objects: vec![BTreeMap::new(); resources],
                history: VecDeque::new(),
                window: window.max(1),
            }),
            tx,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent data (writes are applied at the
        // end), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    pub fn compacted_rv(&self) -> u64 {
        self.lock().compacted
    }

    pub fn get(&self, rid: Rid, ns: &str, name: &str) -> Option<Value> {
        self.lock().objects[rid]
            .get(&(ns.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Objects of a resource (in one namespace, or all), in key order, and the list version.
    pub fn list(
        &self,
        rid: Rid,
        ns: Option<&str>,
        keep: impl Fn(&Value) -> bool,
    ) -> (Vec<Value>, u64) {
        let state = self.lock();
        let map = &state.objects[rid];
        let items = match ns {
            Some(ns) => map
                .range((ns.to_owned(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|(_, v)| v)
                .filter(|v| keep(v))
                .cloned()
                .collect(),
            None => map.values().filter(|v| keep(v)).cloned().collect(),
        };
        (items, state.rv)
    }

    /// One page of a list: up to `limit` objects that `keep` accepts, in key order, after
    /// the key `after`; also how many more would follow, and the list version. Only the
    /// returned objects are copied, so paging through a large resource stays linear.
    pub fn list_page(
        &self,
        rid: Rid,
        ns: Option<&str>,
        after: Option<&(String, String)>,
        limit: Option<usize>,
        keep: impl Fn(&Value) -> bool,
    ) -> (Vec<Value>, usize, u64) {
        use std::ops::Bound;
        let state = self.lock();
        let map = &state.objects[rid];
        let lower = match (after, ns) {
            (Some(k), Some(ns)) if k.0.as_str() < ns => {
                Bound::Included((ns.to_owned(), String::new()))
            }
            (Some(k), _) => Bound::Excluded(k.clone()),
            (None, Some(ns)) => Bound::Included((ns.to_owned(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let mut matching = map
            .range((lower, Bound::Unbounded))
            .take_while(|((n, _), _)| ns.is_none_or(|ns| n == ns))
            .map(|(_, v)| v)
            .filter(|v| keep(v));
        let limit = limit.unwrap_or(usize::MAX);
        let items: Vec<Value> = matching.by_ref().take(limit).cloned().collect();
        (items, matching.count(), state.rv)
    }

    /// What `f` picks out of each object of a resource, without copying the objects.
    pub fn pick<T>(&self, rid: Rid, f: impl Fn(&Value) -> Option<T>) -> Vec<T> {
        self.lock().objects[rid].values().filter_map(f).collect()
    }

    pub fn count(&self, rid: Rid) -> usize {
        self.lock().objects[rid].len()
    }

    /// Runs `f` on the current object (if any) under the store lock and applies its decision,
    /// stamping a new resourceVersion on every real change.
    pub fn write(
        &self,
        rid: Rid,
        ns: &str,
        name: &str,
        f: impl FnOnce(Option<&Value>, u64) -> ApiResult<Write>,
    ) -> ApiResult<Value> {
        let mut state = self.lock();
        let key = (ns.to_owned(), name.to_owned());
        let current = state.objects[rid].get(&key).cloned();
        let next_rv = state.rv + 1;
        let decision = f(current.as_ref(), next_rv)?;
        let (event, mut object) = match decision {
            Write::Unchanged(v) => return Ok(v),
            // Storing what is already stored is no change: no new version, no event.
            Write::Put(mut v) => {
                normalize(&mut v);
                // Storing what is already stored is no change: no new version, no event.
                if current.as_ref().is_some_and(|c| same_but_version(c, &v)) {
                    return Ok(current.unwrap_or(v));
                }
                let event = if current.is_some() {
                    EventType::Modified
                } else {
                    EventType::Added
                };
                (event, v)
            }
            Write::Delete(mut v) => {
                normalize(&mut v);
                (EventType::Deleted, v)
            }
        };
        state.rv = next_rv;
        object["metadata"]["resourceVersion"] = json!(next_rv.to_string());
        if event == EventType::Deleted {
            state.objects[rid].remove(&key);
        } else {
            state.objects[rid].insert(key, object.clone());
        }
        let change = Arc::new(Change {
            rv: next_rv,
            rid,
            event,
            object: object.clone(),
            old: current,
        });
        state.history.push_back(change.clone());
        while state.history.len() > state.window {
            if let Some(dropped) = state.history.pop_front() {
                state.compacted = dropped.rv;
            }
        }
        let _ = self.tx.send(change);
        Ok(object)
    }

    /// The recorded changes after `from` and a live subscription that continues exactly
    /// where they end. `Err(compacted)` when `from` is older than the history.
    pub fn watch_from(&self, from: u64) -> Result<Replay, u64> {
        let state = self.lock();
        if from < state.compacted {
            return Err(state.compacted);
        }
        let replay = state
            .history
            .iter()
            .filter(|c| c.rv > from)
            .cloned()
            .collect();
        Ok((replay, self.tx.subscribe()))
    }

    /// A live subscription and the version it starts after, with the current objects.
    pub fn snapshot_and_subscribe(
        &self,
        rid: Rid,
        ns: Option<&str>,
    ) -> (Vec<Value>, u64, broadcast::Receiver<Arc<Change>>) {
        let state = self.lock();
        let items = state.objects[rid]
            .iter()
            .filter(|((n, _), _)| ns.is_none_or(|ns| ns == n))
            .map(|(_, v)| v.clone())
            .collect();
        (items, state.rv, self.tx.subscribe())
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.tx.subscribe()
    }

    /// Forgets all history: every watch from an earlier version now gets 410 Gone.
    pub fn compact(&self) {
        let mut state = self.lock();
        state.history.clear();
        state.compacted = state.rv;
    }
}
