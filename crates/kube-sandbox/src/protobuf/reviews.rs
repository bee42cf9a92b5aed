//! Requests that are answered rather than stored: TokenRequest (authentication.k8s.io/v1,
//! `kubectl create token`), SelfSubjectReview (`kubectl auth whoami`) and
//! SelfSubjectAccessReview (authorization.k8s.io/v1, `kubectl auth can-i`).

use k8s_pb::api::authentication::v1 as authn;
use k8s_pb::api::authorization::v1 as authz;
use prost::Message;
use serde_json::{Value, json};

use super::ProtobufError;
use super::json::Obj;
use super::meta::{leftover, object_meta};

pub fn token_request(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut t = authn::TokenRequest::decode(raw)?;
    let mut spec = t.spec.take().unwrap_or_default();
    let bound = match spec.bound_object_ref.take() {
        Some(mut b) => {
            let v = Obj::new()
                .str("kind", b.kind.take())
                .str("apiVersion", b.api_version.take())
                .str("name", b.name.take())
                .str("uid", b.u_id.take())
                .done();
            leftover("BoundObjectReference", &b)?;
            Some(v)
        }
        None => None,
    };
    // `audiences` is required (no omitempty): written even when empty.
    let audiences: Vec<Value> = std::mem::take(&mut spec.audiences)
        .into_iter()
        .map(Value::String)
        .collect();
    let spec_json = Obj::new()
        .obj("audiences", Some(Value::Array(audiences)))
        .opt("expirationSeconds", spec.expiration_seconds.take())
        .obj("boundObjectRef", bound)
        .done();
    leftover("TokenRequestSpec", &spec)?;
    // The status is the server's answer; a client's is ignored.
    t.status = None;
    let metadata = object_meta(t.metadata.take())?;
    leftover("TokenRequest", &t)?;
    Ok(
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "metadata": metadata, "spec": spec_json}),
    )
}

fn selector_attributes(raw: Option<String>, requirements: Vec<Value>) -> Option<Value> {
    Some(
        Obj::new()
            .str("rawSelector", raw)
            .list("requirements", requirements)
            .done(),
    )
}

pub fn self_subject_access_review(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut r = authz::SelfSubjectAccessReview::decode(raw)?;
    let mut spec = r.spec.take().unwrap_or_default();
    let resource = match spec.resource_attributes.take() {
        Some(mut a) => {
            let requirement = |key: Option<String>, op: Option<String>, values: Vec<String>| {
                Obj::new()
                    .str("key", key)
                    .str("operator", op)
                    .strs("values", values)
                    .done()
            };
            let fields = match a.field_selector.take() {
                Some(mut f) => {
                    let reqs = std::mem::take(&mut f.requirements)
                        .into_iter()
                        .map(|mut q| {
                            let v = requirement(
                                q.key.take(),
                                q.operator.take(),
                                std::mem::take(&mut q.values),
                            );
                            leftover("FieldSelectorRequirement", &q).map(|()| v)
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    let raw = f.raw_selector.take();
                    leftover("FieldSelectorAttributes", &f)?;
                    selector_attributes(raw, reqs)
                }
                None => None,
            };
            let labels = match a.label_selector.take() {
                Some(mut l) => {
                    let reqs = std::mem::take(&mut l.requirements)
                        .into_iter()
                        .map(|mut q| {
                            let v = requirement(
                                q.key.take(),
                                q.operator.take(),
                                std::mem::take(&mut q.values),
                            );
                            leftover("LabelSelectorRequirement", &q).map(|()| v)
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    let raw = l.raw_selector.take();
                    leftover("LabelSelectorAttributes", &l)?;
                    selector_attributes(raw, reqs)
                }
                None => None,
            };
            let v = Obj::new()
                .str("namespace", a.namespace.take())
                .str("verb", a.verb.take())
                .str("group", a.group.take())
                .str("version", a.version.take())
                .str("resource", a.resource.take())
                .str("subresource", a.subresource.take())
                .str("name", a.name.take())
                .obj("fieldSelector", fields)
                .obj("labelSelector", labels)
                .done();
            leftover("ResourceAttributes", &a)?;
            Some(v)
        }
        None => None,
    };
    let non_resource = match spec.non_resource_attributes.take() {
        Some(mut n) => {
            let v = Obj::new()
                .str("path", n.path.take())
                .str("verb", n.verb.take())
                .done();
            leftover("NonResourceAttributes", &n)?;
            Some(v)
        }
        None => None,
    };
    leftover("SelfSubjectAccessReviewSpec", &spec)?;
    r.status = None;
    let metadata = object_meta(r.metadata.take())?;
    leftover("SelfSubjectAccessReview", &r)?;
    let spec_json = Obj::new()
        .obj("resourceAttributes", resource)
        .obj("nonResourceAttributes", non_resource)
        .done();
    Ok(
        json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "metadata": metadata, "spec": spec_json}),
    )
}

pub fn self_subject_review(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut r = authn::SelfSubjectReview::decode(raw)?;
    // The status is the answer; what a client sends in it is ignored.
    r.status = None;
    let metadata = object_meta(r.metadata.take())?;
    leftover("SelfSubjectReview", &r)?;
    Ok(
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview",
        "metadata": metadata}),
    )
}
