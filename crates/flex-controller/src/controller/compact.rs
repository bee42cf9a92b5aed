//! Objects held in a cache as compact JSON text plus the few metadata fields the caches
//! and kube-runtime key them by, for the kinds a cluster has tens of thousands of (claims,
//! PVs). A k8s-openapi `PersistentVolume` is 3.4 KB before any of its strings (every volume
//! source type is an inline field), a claim 1 KB, and each map of annotations or labels
//! another half kilobyte node; as text, a whole bound PV is well under a kilobyte. A
//! reconcile turns the one object it needs back into the typed object (`full`).

use std::marker::PhantomData;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug)]
pub struct Compact<K> {
    /// Name, namespace, uid and resourceVersion only (what references are made of).
    meta: ObjectMeta,
    /// The whole object, as JSON (shared: the store and each consumer of the watch hold a
    /// clone).
    body: Arc<str>,
    kind: PhantomData<fn() -> K>,
}

impl<K: Resource + Serialize + DeserializeOwned> Compact<K> {
    pub fn new(object: K) -> Self {
        let m = object.meta();
        let meta = ObjectMeta {
            name: m.name.clone(),
            namespace: m.namespace.clone(),
            uid: m.uid.clone(),
            resource_version: m.resource_version.clone(),
            ..ObjectMeta::default()
        };
        // Serializing a k8s-openapi object cannot fail (no maps with non-string keys).
        let body = serde_json::to_string(&object).unwrap_or_default();
        Compact {
            meta,
            body: body.into(),
            kind: PhantomData,
        }
    }

    /// The typed object again (`None` only if the text kept here does not parse, which
    /// text written by `new` always does).
    pub fn full(&self) -> Option<K> {
        serde_json::from_str(&self.body)
            .inspect_err(|e| tracing::error!(error = %e, "a cached object does not parse"))
            .ok()
    }

    /// Only the fields `T` declares, read from the text (the rest is skipped, not built):
    /// for a look at one or two fields of every change.
    pub fn part<T: DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_str(&self.body).ok()
    }
}

impl<'de, K: Resource + Serialize + DeserializeOwned> Deserialize<'de> for Compact<K> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        K::deserialize(d).map(Compact::new)
    }
}

/// The kind, group, version and plural of a wrapper's `Resource`: those of the object `$k`
/// it holds (so its watch asks the API server for `$k`).
macro_rules! same_kind_as {
    ($k:ident) => {
        fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
            $k::kind(dt)
        }
        fn group(dt: &()) -> std::borrow::Cow<'_, str> {
            $k::group(dt)
        }
        fn version(dt: &()) -> std::borrow::Cow<'_, str> {
            $k::version(dt)
        }
        fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
            $k::plural(dt)
        }
    };
}
pub(super) use same_kind_as;

impl<K: Resource<DynamicType = ()>> Resource for Compact<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    same_kind_as!(K);
    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

/// An object its cache and every consumer of its watch share: a clone is a reference,
/// where the reflector cloned each changed Job whole for its store and the fan-out once
/// more for each of its three consumers (`wiring.rs`).
#[derive(Clone, Debug)]
pub struct Shared<K>(pub Arc<K>);

impl<K> Shared<K> {
    pub fn new(object: K) -> Self {
        Shared(Arc::new(object))
    }
}

// kube-runtime asks this of every trigger's type; nothing decodes one.
impl<'de, K: Deserialize<'de>> Deserialize<'de> for Shared<K> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        K::deserialize(d).map(Shared::new)
    }
}

impl<K> std::ops::Deref for Shared<K> {
    type Target = K;
    fn deref(&self) -> &K {
        &self.0
    }
}

impl<K: Resource<DynamicType = ()> + Clone> Resource for Shared<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    same_kind_as!(K);
    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        Arc::make_mut(&mut self.0).meta_mut()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PersistentVolume;
    use serde_json::json;

    #[test]
    fn an_object_comes_back_whole_from_less_memory() {
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pvc-1", "uid": "u", "resourceVersion": "7",
                         "annotations": {"pv.kubernetes.io/provisioned-by": "p"},
                         "finalizers": ["f"]},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                     "hostPath": {"path": "/v/pvc-1"},
                     "claimRef": {"namespace": "a", "name": "c", "uid": "cu"}},
            "status": {"phase": "Bound"}
        }))
        .unwrap();
        let compact: Compact<PersistentVolume> = Compact::new(pv.clone());
        assert_eq!(compact.full().unwrap(), pv);
        assert_eq!(compact.meta().name.as_deref(), Some("pvc-1"));
        assert_eq!(compact.meta().uid.as_deref(), Some("u"));
        assert!(
            compact.meta().annotations.is_none(),
            "kept in the text only"
        );
        let text = compact.body.len() + std::mem::size_of::<Compact<PersistentVolume>>();
        assert!(
            text * 2 < std::mem::size_of::<PersistentVolume>(),
            "{text} bytes against {}",
            std::mem::size_of::<PersistentVolume>()
        );
        // It is read from the API's JSON like the object itself.
        let read: Compact<PersistentVolume> =
            serde_json::from_value(serde_json::to_value(&pv).unwrap()).unwrap();
        assert_eq!(read.full().unwrap(), pv);
    }
}
