//! The sandbox's object store: objects per resource, one global resourceVersion, a bounded
//! history of changes for watches (older versions answer 410 Gone), and a broadcast of
//! live changes.
//!
//! Every write runs a closure under one lock, so read-modify-write is atomic and a watch
//! can take its replay and its live subscription at the same version.
//!
//! Secondary indexes (as client-go's informer indexers) keep lookups by a field, such as
//! the volumes whose claimRef names a claim, proportional to what they find rather than to
//! everything stored: the controllers look up on every change, in clusters of tens of
//! thousands of objects.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
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

/// One change, as recorded in the history and sent to watchers. Its objects are shared
/// with the store (and the next change), not copies.
#[derive(Debug)]
pub struct Change {
    pub rv: u64,
    pub rid: Rid,
    pub event: EventType,
    pub object: Arc<Value>,
    /// The object before a modification, so selector watches can tell an object leaving
    /// their selection (sent as DELETED with this old state, like the real server).
    pub old: Option<Arc<Value>>,
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

/// A secondary index over one resource: the keys each object is filed under.
#[derive(Clone, Copy)]
pub struct IndexDef {
    pub name: &'static str,
    pub rid: Rid,
    /// The keys of an object; none leaves it out of the index.
    pub keys: fn(&Value) -> Vec<String>,
}

struct Index {
    def: IndexDef,
    /// Objects (namespace, name) by key; a key with no objects is removed.
    entries: HashMap<String, BTreeSet<Key>>,
}

impl Index {
    fn file(&mut self, object: &Value, key: &Key) {
        for k in (self.def.keys)(object) {
            self.entries.entry(k).or_default().insert(key.clone());
        }
    }

    fn unfile(&mut self, object: &Value, key: &Key) {
        for k in (self.def.keys)(object) {
            if let Some(set) = self.entries.get_mut(&k) {
                set.remove(key);
                if set.is_empty() {
                    self.entries.remove(&k);
                }
            }
        }
    }
}

struct State {
    rv: u64,
    /// Watches may start from any version at or after this one.
    compacted: u64,
    /// Each object shared with the changes that carry it: a write copies it once, for
    /// the caller, rather than for the store and the history too.
    objects: Vec<BTreeMap<Key, Arc<Value>>>,
    indexes: Vec<Index>,
    history: VecDeque<Arc<Change>>,
    window: usize,
}

/// The objects as `Store::read` lends them.
pub struct Objects<'a>(&'a [BTreeMap<Key, Arc<Value>>]);

impl<'a> Objects<'a> {
    pub fn get(&self, rid: Rid, ns: &str, name: &str) -> Option<&'a Value> {
        self.0[rid]
            .get(&(ns.to_owned(), name.to_owned()))
            .map(|v| &**v)
    }

    /// The objects of a resource, in key order.
    pub fn all(&self, rid: Rid) -> impl Iterator<Item = &'a Value> + use<'a> {
        self.0[rid].values().map(|v| &**v)
    }
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

/// Whether two objects are the same but for `metadata.resourceVersion` (a missing
/// `metadata` counting as null). Compared in place: this runs on every write, and copies
/// of both objects would cost more than the comparison.
pub fn same_but_version(a: &Value, b: &Value) -> bool {
    static NULL: Value = Value::Null;
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let others = |m: &serde_json::Map<String, Value>| m.keys().filter(|k| *k != "metadata").count();
    others(a) == others(b)
        && a.iter()
            .filter(|(k, _)| *k != "metadata")
            .all(|(k, v)| b.get(k) == Some(v))
        && same_metadata(
            a.get("metadata").unwrap_or(&NULL),
            b.get("metadata").unwrap_or(&NULL),
        )
}

fn same_metadata(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return a == b;
    };
    let rest =
        |m: &serde_json::Map<String, Value>| m.keys().filter(|k| *k != "resourceVersion").count();
    rest(a) == rest(b)
        && a.iter()
            .filter(|(k, _)| *k != "resourceVersion")
            .all(|(k, v)| b.get(k) == Some(v))
}

impl Store {
    pub fn new(resources: usize, window: usize) -> Self {
        let (tx, _) = broadcast::channel(1 << 16);
        Store {
            state: Mutex::new(State {
                rv: FIRST_RV,
                compacted: FIRST_RV,
                objects: vec![BTreeMap::new(); resources],
                indexes: Vec::new(),
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
            .map(|v| Value::clone(v))
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
                .map(|(_, v)| &**v)
                .filter(|v| keep(v))
                .cloned()
                .collect(),
            None => map
                .values()
                .map(|v| &**v)
                .filter(|v| keep(v))
                .cloned()
                .collect(),
        };
        (items, state.rv)
    }

    /// One page of a list: up to `limit` objects that `keep` accepts, in key order, after
    /// the key `after`; also whether more would follow (1) or not (0), and the list version.
    /// Only the returned objects are copied, and the rest is looked into only as far as
    /// its first match, so paging through a large resource stays linear.
    pub fn list_page(
        &self,
        rid: Rid,
        ns: Option<&str>,
        after: Option<&(String, String)>,
        limit: Option<usize>,
        keep: impl Fn(&Value) -> bool,
    ) -> (Vec<Value>, usize, u64) {
        self.list_page_counting(rid, ns, after, limit, keep, false)
    }

    /// `list_page`; with `count_rest`, for a list without selectors (whose `keep` accepts
    /// everything, which is when Kubernetes reports `remainingItemCount`), the number of
    /// objects after the page, counted on the key range alone. Asking `keep` of every
    /// remaining object on each page made a paged list of N objects cost N squared over the
    /// page size.
    pub fn list_page_counting(
        &self,
        rid: Rid,
        ns: Option<&str>,
        after: Option<&(String, String)>,
        limit: Option<usize>,
        keep: impl Fn(&Value) -> bool,
        count_rest: bool,
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
        let mut range = map
            .range((lower, Bound::Unbounded))
            .take_while(|((n, _), _)| ns.is_none_or(|ns| n == ns));
        let limit = limit.unwrap_or(usize::MAX);
        let mut items = Vec::new();
        for (_, v) in range.by_ref() {
            if items.len() == limit {
                // This one is the first of the rest.
                if count_rest {
                    return (items, 1 + range.count(), state.rv);
                }
                let first = usize::from(keep(v));
                let rest = if first == 1 {
                    1
                } else {
                    usize::from(range.any(|(_, v)| keep(v)))
                };
                return (items, rest, state.rv);
            }
            if keep(v) {
                items.push((**v).clone());
            }
        }
        (items, 0, state.rv)
    }

    /// Adds a secondary index, filed with the objects already stored.
    pub fn add_index(&self, def: IndexDef) {
        let mut state = self.lock();
        let mut index = Index {
            def,
            entries: HashMap::new(),
        };
        for (key, object) in &state.objects[def.rid] {
            index.file(object, key);
        }
        state
            .indexes
            .retain(|i| (i.def.name, i.def.rid) != (def.name, def.rid));
        state.indexes.push(index);
    }

    /// Objects of `rid` that its index `name` files under any of `keys`, that `keep`
    /// accepts, in key order (as `list` gives them), each once.
    ///
    /// # Panics
    ///
    /// When no such index was added: a mistake of the caller, not of the data.
    pub fn indexed(
        &self,
        rid: Rid,
        name: &str,
        keys: &[&str],
        keep: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        let state = self.lock();
        let index = state
            .indexes
            .iter()
            .find(|i| i.def.name == name && i.def.rid == rid)
            .unwrap_or_else(|| panic!("no index {name} of resource {rid}"));
        let found: BTreeSet<&Key> = keys
            .iter()
            .filter_map(|k| index.entries.get(*k))
            .flatten()
            .collect();
        let objects = &state.objects[index.def.rid];
        found
            .into_iter()
            .filter_map(|k| objects.get(k))
            .map(|v| &**v)
            .filter(|v| keep(v))
            .cloned()
            .collect()
    }

    /// Runs `f` with read access to everything stored, under the lock: for a scan that
    /// looks at other objects for each object, without copying any.
    pub fn read<T>(&self, f: impl FnOnce(Objects<'_>) -> T) -> T {
        f(Objects(&self.lock().objects))
    }

    /// What `f` reads of one object, without copying it.
    pub fn peek<T>(
        &self,
        rid: Rid,
        ns: &str,
        name: &str,
        f: impl FnOnce(&Value) -> T,
    ) -> Option<T> {
        self.lock().objects[rid]
            .get(&(ns.to_owned(), name.to_owned()))
            .map(|v| f(v))
    }

    /// What `f` picks out of each object of a resource, without copying the objects.
    pub fn pick<T>(&self, rid: Rid, f: impl Fn(&Value) -> Option<T>) -> Vec<T> {
        self.lock().objects[rid]
            .values()
            .filter_map(|v| f(v))
            .collect()
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
        // The caller's copy is made once the lock is released.
        self.write_shared(rid, ns, name, f)
            .map(Arc::unwrap_or_clone)
    }

    /// `write`, answering the object as the store shares it: for callers that only read
    /// the answer, or ignore it, and so need no copy of their own.
    pub fn write_shared(
        &self,
        rid: Rid,
        ns: &str,
        name: &str,
        f: impl FnOnce(Option<&Value>, u64) -> ApiResult<Write>,
    ) -> ApiResult<Arc<Value>> {
        let mut state = self.lock();
        let key = (ns.to_owned(), name.to_owned());
        let next_rv = state.rv + 1;
        // The stored object is lent to `f`, not copied: most writes are decided on it alone.
        let current = state.objects[rid].get(&key).map(|v| &**v);
        let existed = current.is_some();
        let decision = f(current, next_rv)?;
        let (event, mut object) = match decision {
            Write::Unchanged(v) => return Ok(Arc::new(v)),
            Write::Put(mut v) => {
                normalize(&mut v);
                // Storing what is already stored is no change: no new version, no event.
                if let Some(c) = state.objects[rid].get(&key)
                    && same_but_version(c, &v)
                {
                    return Ok(c.clone());
                }
                let event = if existed {
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
        let State {
            objects, indexes, ..
        } = &mut *state;
        for index in indexes.iter_mut().filter(|i| i.def.rid == rid) {
            if let Some(old) = objects[rid].get(&key) {
                index.unfile(old, &key);
            }
            if event != EventType::Deleted {
                index.file(&object, &key);
            }
        }
        // The replaced object moves into the change, for selector watches.
        let object = Arc::new(object);
        let old = if event == EventType::Deleted {
            objects[rid].remove(&key)
        } else {
            objects[rid].insert(key, object.clone())
        };
        let change = Arc::new(Change {
            rv: next_rv,
            rid,
            event,
            object: object.clone(),
            old,
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
            .map(|(_, v)| Value::clone(v))
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
