//! Namespace lifecycle: every namespace gets its `default` ServiceAccount and the
//! `kube-root-ca.crt` ConfigMap (created with the namespace, so a pod created right after it
//! finds its service account); a deleted namespace is emptied (pods gracefully, as their
//! kubelet stops them), then removed.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{is_deleting, name_of, rid};
use crate::api::{Api, DeleteOpts, ListOpts, WriteCtx};
use crate::resources::RESOURCES;
use crate::store::Write;

const MANAGER: &str = "kube-controller-manager";

pub fn populate(api: &Api, ns: &str) {
    let ctx = WriteCtx::manager(MANAGER);
    let _ = api.create(
        rid("", "serviceaccounts"),
        ns,
        json!({"metadata": {"name": "default"}}),
        &ctx,
    );
    let _ = api.create(
        rid("", "configmaps"),
        ns,
        json!({"metadata": {"name": "kube-root-ca.crt", "annotations": {"kubernetes.io/description": "Contains a CA bundle that can be used to verify the kube-apiserver when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."}},
               "data": {"ca.crt": "-----BEGIN CERTIFICATE-----\nkube-sandbox (plain HTTP; no CA)\n-----END CERTIFICATE-----\n"}}),
        &ctx,
    );
}

/// Deletes what is left in a terminating namespace; removes it once empty.
fn finalize(api: &Api, ns: &Value) {
    let name = name_of(ns).to_owned();
    let mut remaining = 0;
    for (i, r) in RESOURCES.iter().enumerate() {
        if !r.namespaced || r.storage_of.is_some() || r.create_only {
            continue;
        }
        let Ok(list) = api.list(i, Some(&name), &ListOpts::default()) else {
            continue;
        };
        for item in list["items"].as_array().into_iter().flatten() {
            remaining += 1;
            if !is_deleting(item) {
                // As the real namespace controller deletes: background propagation and each
                // object's own grace period, so running pods are stopped by their kubelet
                // (TERM, then KILL after their grace period) before they go.
                let opts = DeleteOpts {
                    propagation: Some("Background".into()),
                    ..Default::default()
                };
                let _ = api.delete(i, &name, name_of(item), &opts);
            }
        }
    }
    if remaining == 0 {
        let _ = api
            .store
            .write(rid("", "namespaces"), "", &name, |cur, _| match cur {
                Some(c) => Ok(Write::Delete(c.clone())),
                None => Ok(Write::Unchanged(Value::Null)),
            });
    }
}

pub async fn run(api: Arc<Api>) {
    let namespaces = rid("", "namespaces");
    super::run_loop(
        api,
        vec![namespaces],
        Duration::from_millis(500),
        |api, changes| {
            if changes.is_empty() {
                let (all, _) = api.store.list(namespaces, None, is_deleting);
                for ns in &all {
                    finalize(api, ns);
                }
            }
        },
    )
    .await;
}
