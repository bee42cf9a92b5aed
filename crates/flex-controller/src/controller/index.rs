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

struct Maps<K: Resource<DynamicType = ()>> {
    by_key: HashMap<String, HashSet<ObjectRef<K>>>,
    of_object: HashMap<ObjectRef<K>, Vec<String>>,
}

impl<K: Resource<DynamicType = ()>> Default for Maps<K> {
    fn default() -> Self {
        Maps {
            by_key: HashMap::new(),
            of_object: HashMap::new(),
        }
    }
}

impl<K: Resource<DynamicType = ()>> Maps<K> {
    fn remove(&mut self, at: &ObjectRef<K>) {
        for key in self.of_object.remove(at).into_iter().flatten() {
            if let Some(set) = self.by_key.get_mut(&key) {
                set.remove(at);
                if set.is_empty() {
                    self.by_key.remove(&key);
                }
            }
        }
    }

    fn insert(&mut self, at: ObjectRef<K>, keys: Vec<String>) {
        self.remove(&at);
        if keys.is_empty() {
            return;
        }
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
    live: RwLock<Maps<K>>,
    relisting: RwLock<Option<Maps<K>>>,
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
            watcher::Event::Apply(obj) => {
                write(&self.live).insert(ObjectRef::from_obj(obj), (self.keys_of)(obj))
            }
            watcher::Event::Delete(obj) => write(&self.live).remove(&ObjectRef::from_obj(obj)),
            watcher::Event::Init => {
                *self.relisting.write().unwrap_or_else(|e| e.into_inner()) = Some(Maps::default())
            }
            watcher::Event::InitApply(obj) => {
                if let Some(m) = self
                    .relisting
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_mut()
                {
                    m.insert(ObjectRef::from_obj(obj), (self.keys_of)(obj));
                }
            }
            watcher::Event::InitDone => {
                let fresh = self
                    .relisting
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                if let Some(fresh) = fresh {
                    *write(&self.live) = fresh;
                }
            }
        }
    }

    pub fn get(&self, key: &str) -> Vec<ObjectRef<K>> {
        self.live
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .by_key
            .get(key)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// A reflector store and its index.
pub struct Indexed<K: Resource<DynamicType = ()> + Clone + 'static> {
    pub store: Store<K>,
    pub index: Arc<Index<K>>,
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Clone for Indexed<K> {
    fn clone(&self) -> Self {
        Indexed {
            store: self.store.clone(),
            index: self.index.clone(),
        }
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> Indexed<K> {
    /// The cached objects under `key` (an object the store dropped since is skipped).
    pub fn by(&self, key: &str) -> Vec<Arc<K>> {
        self.index
            .get(key)
            .iter()
            .filter_map(|r| self.store.get(r))
            .collect()
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
        let mut n: Vec<String> = i.get(key).into_iter().map(|r| r.name).collect();
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
