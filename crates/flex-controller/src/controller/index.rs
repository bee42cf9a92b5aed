//! Reflector stores with secondary indexes, kept by the same watch: a reconcile finds the
//! Jobs and pods of one claim, or the claims of one class, without scanning every cached
//! object (which made a burst cost O(claims x Jobs)).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

/// The index keys of an object (e.g. `claim/<uid>`); most objects have one or two.
pub type KeysOf<K> = fn(&K) -> Vec<String>;

/// An object as `namespace/name` (namespaces hold no '/'), shared by both maps: the index
/// of a cache of 50,000 claims must not cost more than the claims.
type At = Arc<str>;

fn at_of<K: Resource<DynamicType = ()>>(o: &K) -> At {
    let m = o.meta();
    format!(
        "{}/{}",
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default()
    )
    .into()
}

#[derive(Default)]
struct Maps {
    by_key: HashMap<Box<str>, HashSet<At>>,
    of_object: HashMap<At, Box<[Box<str>]>>,
}

impl Maps {
    fn remove(&mut self, at: &str) {
        for key in self.of_object.remove(at).into_iter().flatten() {
            if let Some(set) = self.by_key.get_mut(&key) {
                set.remove(at);
                if set.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        }
    }

    fn insert(&mut self, at: At, keys: Vec<String>) {
        // Most changes (a Job's status, a pod's) keep an object's keys.
        if self.of_object.get(&at).is_some_and(|old| {
            old.iter()
                .map(AsRef::as_ref)
                .eq(keys.iter().map(String::as_str))
        }) {
            return;
        }
        self.remove(&at);
        if keys.is_empty() {
            return;
        }
        let keys: Box<[Box<str>]> = keys.into_iter().map(String::into_boxed_str).collect();
        for key in &keys {
            self.by_key
                .entry(key.clone())
                .or_default()
                .insert(at.clone());
        }
        self.of_object.insert(at, keys);
    }
}

/// The keys of every object of one store, updated from the watch events that update the
/// store (a relist builds a new index and swaps it in, as the store does).
pub struct Index<K: Resource<DynamicType = ()>> {
    keys_of: KeysOf<K>,
    live: RwLock<Maps>,
    relisting: RwLock<Option<Maps>>,
}

impl<K: Resource<DynamicType = ()>> Index<K> {
    pub fn new(keys_of: KeysOf<K>) -> Self {
        Index {
            keys_of,
            live: RwLock::default(),
            relisting: RwLock::default(),
        }
    }

    pub fn apply(&self, event: &watcher::Event<K>) {
        fn write<M>(m: &RwLock<M>) -> std::sync::RwLockWriteGuard<'_, M> {
            m.write().unwrap_or_else(|e| e.into_inner())
        }
        match event {
            watcher::Event::Apply(obj) => write(&self.live).insert(at_of(obj), (self.keys_of)(obj)),
            watcher::Event::Delete(obj) => write(&self.live).remove(&at_of(obj)),
            watcher::Event::Init => *write(&self.relisting) = Some(Maps::default()),
            watcher::Event::InitApply(obj) => {
                if let Some(m) = write(&self.relisting).as_mut() {
                    m.insert(at_of(obj), (self.keys_of)(obj));
                }
            }
            watcher::Event::InitDone => {
                if let Some(fresh) = write(&self.relisting).take() {
                    *write(&self.live) = fresh;
                }
            }
        }
    }

    /// The references under `key`, as a store of `K` or of `Compact<K>` holds them.
    pub fn get<S: Resource<DynamicType = ()>>(&self, key: &str) -> Vec<ObjectRef<S>> {
        let live = self.live.read().unwrap_or_else(|e| e.into_inner());
        let Some(set) = live.by_key.get(key) else {
            return Vec::new();
        };
        set.iter()
            .map(|at| {
                let (ns, name) = at.split_once('/').unwrap_or(("", at));
                match ns {
                    "" => ObjectRef::new(name),
                    ns => ObjectRef::new(name).within(ns),
                }
            })
            .collect()
    }
}

/// A reflector store (of `S`: `K` itself, or `Compact<K>`) and the index of its objects.
#[derive(Clone)]
pub struct Indexed<K: Resource<DynamicType = ()> + Clone + 'static, S = K>
where
    S: Resource<DynamicType = ()> + Clone + 'static,
{
    pub store: Store<S>,
    pub index: Arc<Index<K>>,
}

impl<K, S> Indexed<K, S>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
    S: Resource<DynamicType = ()> + Clone + 'static,
{
    /// The cached objects under `key` (an object the store dropped since is skipped).
    pub fn by(&self, key: &str) -> Vec<Arc<S>> {
        let refs = self.index.get::<S>(key);
        refs.iter().filter_map(|r| self.store.get(r)).collect()
    }

    /// The references under `key`, as the store's type.
    pub fn refs(&self, key: &str) -> Vec<ObjectRef<S>> {
        self.index.get(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    fn cm(name: &str, class: &str) -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "n",
            "labels": {"class": class}}}))
        .unwrap()
    }

    fn keys(c: &ConfigMap) -> Vec<String> {
        c.metadata
            .labels
            .iter()
            .flatten()
            .filter(|(k, _)| *k == "class")
            .map(|(_, v)| format!("class/{v}"))
            .collect()
    }

    fn names(i: &Index<ConfigMap>, key: &str) -> Vec<String> {
        let mut n: Vec<String> = i
            .get::<ConfigMap>(key)
            .into_iter()
            .map(|r| r.name)
            .collect();
        n.sort();
        n
    }

    #[test]
    fn follows_changes_deletions_and_relists() {
        let i = Index::new(keys);
        i.apply(&watcher::Event::Apply(cm("a", "gold")));
        i.apply(&watcher::Event::Apply(cm("b", "gold")));
        assert_eq!(names(&i, "class/gold"), ["a", "b"]);
        // A changed key moves the object.
        i.apply(&watcher::Event::Apply(cm("b", "silver")));
        assert_eq!(names(&i, "class/gold"), ["a"]);
        assert_eq!(names(&i, "class/silver"), ["b"]);
        i.apply(&watcher::Event::Delete(cm("a", "gold")));
        assert!(names(&i, "class/gold").is_empty());
        // A relist replaces everything once it is complete, not before.
        i.apply(&watcher::Event::Init);
        i.apply(&watcher::Event::InitApply(cm("c", "gold")));
        assert_eq!(names(&i, "class/silver"), ["b"]);
        i.apply(&watcher::Event::InitDone);
        assert!(names(&i, "class/silver").is_empty());
        assert_eq!(names(&i, "class/gold"), ["c"]);
    }
}
