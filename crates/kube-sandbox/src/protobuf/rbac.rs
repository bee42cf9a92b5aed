//! rbac.authorization.k8s.io/v1 kinds (`kubectl create role|rolebinding|clusterrole|
//! clusterrolebinding`) from protobuf to JSON.

use k8s_pb::api::rbac::v1 as rbac;
use prost::Message;
use serde_json::{Value, json};

use super::ProtobufError;
use super::json::Obj;
use super::meta::{label_selector, leftover, object_meta};

fn head(kind: &str, metadata: Value) -> Obj {
    Obj::new()
        .obj("apiVersion", Some(json!("rbac.authorization.k8s.io/v1")))
        .obj("kind", Some(json!(kind)))
        .obj("metadata", Some(metadata))
}

fn rules(rules: Vec<rbac::PolicyRule>) -> Result<Vec<Value>, ProtobufError> {
    rules
        .into_iter()
        .map(|mut r| {
            // `verbs` is required (no omitempty in Go): always written.
            let verbs: Vec<Value> = std::mem::take(&mut r.verbs)
                .into_iter()
                .map(Value::String)
                .collect();
            let v = Obj::new()
                .obj("verbs", Some(Value::Array(verbs)))
                .strs("apiGroups", std::mem::take(&mut r.api_groups))
                .strs("resources", std::mem::take(&mut r.resources))
                .strs("resourceNames", std::mem::take(&mut r.resource_names))
                .strs("nonResourceURLs", std::mem::take(&mut r.non_resource_ur_ls))
                .done();
            leftover("PolicyRule", &r).map(|()| v)
        })
        .collect()
}

fn subjects(subjects: Vec<rbac::Subject>) -> Result<Vec<Value>, ProtobufError> {
    subjects
        .into_iter()
        .map(|mut s| {
            let v = Obj::new()
                .str("kind", s.kind.take())
                .str("apiGroup", s.api_group.take())
                .str("name", s.name.take())
                .str("namespace", s.namespace.take())
                .done();
            leftover("Subject", &s).map(|()| v)
        })
        .collect()
}

fn role_ref(r: Option<rbac::RoleRef>) -> Result<Value, ProtobufError> {
    let mut r = r.unwrap_or_default();
    // Every field of RoleRef is required: written even when empty, as Go's JSON does.
    let v = json!({
        "apiGroup": r.api_group.take().unwrap_or_default(),
        "kind": r.kind.take().unwrap_or_default(),
        "name": r.name.take().unwrap_or_default(),
    });
    leftover("RoleRef", &r)?;
    Ok(v)
}

pub fn role(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut r = rbac::Role::decode(raw)?;
    let out = head("Role", object_meta(r.metadata.take())?)
        .list("rules", rules(std::mem::take(&mut r.rules))?)
        .done();
    leftover("Role", &r)?;
    Ok(out)
}

pub fn cluster_role(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut r = rbac::ClusterRole::decode(raw)?;
    let aggregation = match r.aggregation_rule.take() {
        Some(mut a) => {
            let selectors = std::mem::take(&mut a.cluster_role_selectors)
                .into_iter()
                .map(label_selector)
                .collect::<Result<Vec<_>, _>>()?;
            leftover("AggregationRule", &a)?;
            Some(Obj::new().list("clusterRoleSelectors", selectors).done())
        }
        None => None,
    };
    let out = head("ClusterRole", object_meta(r.metadata.take())?)
        .list("rules", rules(std::mem::take(&mut r.rules))?)
        .obj("aggregationRule", aggregation)
        .done();
    leftover("ClusterRole", &r)?;
    Ok(out)
}

pub fn role_binding(raw: &[u8], kind: &str) -> Result<Value, ProtobufError> {
    // RoleBinding and ClusterRoleBinding have the same fields and tags.
    let mut b = rbac::RoleBinding::decode(raw)?;
    let out = head(kind, object_meta(b.metadata.take())?)
        .list("subjects", subjects(std::mem::take(&mut b.subjects))?)
        .obj("roleRef", Some(role_ref(b.role_ref.take())?))
        .done();
    leftover(kind, &b)?;
    Ok(out)
}
