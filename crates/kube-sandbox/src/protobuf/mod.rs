//! Protobuf request bodies (`application/vnd.kubernetes.protobuf`), as client-go's typed
//! clients (and so kubectl's `create namespace|configmap|secret|serviceaccount|service|
//! token|role|rolebinding|clusterrole|clusterrolebinding|deployment|job|cronjob` and
//! `auth can-i|whoami`) send them: the `k8s\0` magic, then a `runtime.Unknown` whose `raw` is
//! the object's message. Decoded with kube-rs' generated bindings (`k8s-pb`) and turned into
//! the JSON the store holds. Answers stay JSON: client-go accepts either, as it does from
//! a real server for kinds that have no protobuf form.

mod core;
mod json;
mod meta;
pub mod openapi_v2;
mod pod;
mod rbac;
mod reviews;
#[cfg(test)]
mod tests;
mod workloads;

use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;
use serde_json::Value;

/// The media type of Kubernetes protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The envelope's magic prefix (`protobuf.serializer`'s `protoEncodingPrefix`).
const MAGIC: &[u8] = b"k8s\x00";

#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    #[error("the body does not start with the Kubernetes protobuf prefix")]
    NoMagic,
    #[error("cannot decode the protobuf body: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("the sandbox cannot decode {kind} ({api_version}) from protobuf; send JSON")]
    UnsupportedKind { api_version: String, kind: String },
    #[error("the sandbox cannot decode these {kind} fields from protobuf, send JSON: {fields}")]
    UnsupportedField { kind: String, fields: String },
    #[error("the body's content encoding {0:?} is not supported")]
    ContentEncoding(String),
}

/// Whether a Content-Type names the Kubernetes protobuf encoding.
pub fn is_protobuf(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|m| m.trim().eq_ignore_ascii_case(MEDIA_TYPE))
}

/// Decodes an enveloped protobuf body into the object's JSON form.
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let rest = body.strip_prefix(MAGIC).ok_or(ProtobufError::NoMagic)?;
    let unknown = Unknown::decode(rest)?;
    if let Some(enc) = unknown.content_encoding.filter(|e| !e.is_empty()) {
        return Err(ProtobufError::ContentEncoding(enc));
    }
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let raw = unknown.raw.unwrap_or_default();
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "Namespace") => core::namespace(&raw),
        ("v1", "ConfigMap") => core::config_map(&raw),
        ("v1", "Secret") => core::secret(&raw),
        ("v1", "ServiceAccount") => core::service_account(&raw),
        ("v1", "Service") => core::service(&raw),
        ("apps/v1", "Deployment") => workloads::deployment(&raw),
        ("batch/v1", "Job") => workloads::job(&raw),
        ("batch/v1", "CronJob") => workloads::cron_job(&raw),
        ("authentication.k8s.io/v1", "TokenRequest") => reviews::token_request(&raw),
        ("authentication.k8s.io/v1", "SelfSubjectReview") => reviews::self_subject_review(&raw),
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => {
            reviews::self_subject_access_review(&raw)
        }
        ("rbac.authorization.k8s.io/v1", "Role") => rbac::role(&raw),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => rbac::cluster_role(&raw),
        ("rbac.authorization.k8s.io/v1", "RoleBinding" | "ClusterRoleBinding") => {
            rbac::role_binding(&raw, &kind)
        }
        _ => Err(ProtobufError::UnsupportedKind { api_version, kind }),
    }
}

/// Wraps a message in the envelope, as client-go does (for tests).
pub fn encode(api_version: &str, kind: &str, message: &impl Message) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(message.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = MAGIC.to_vec();
    out.extend(unknown.encode_to_vec());
    out
}
