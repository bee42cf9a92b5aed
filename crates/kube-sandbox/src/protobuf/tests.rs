//! Decoding enveloped protobuf bodies: what is converted, and what is refused.

use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use prost::Message;
use serde_json::json;

use super::{ProtobufError, decode, encode, is_protobuf};

fn meta(name: &str) -> Option<meta::ObjectMeta> {
    // As Go sends it: every non-pointer field present, empty.
    Some(meta::ObjectMeta {
        name: Some(name.into()),
        generate_name: Some(String::new()),
        namespace: Some(String::new()),
        self_link: Some(String::new()),
        uid: Some(String::new()),
        resource_version: Some(String::new()),
        generation: Some(0),
        creation_timestamp: Some(meta::Time::default()),
        ..Default::default()
    })
}

#[test]
fn a_config_map_becomes_the_json_kubectl_would_send() {
    let cm = core::ConfigMap {
        metadata: meta("settings"),
        data: [("a".to_owned(), "1".to_owned())].into(),
        binary_data: [("b".to_owned(), vec![0u8, 1, 2])].into(),
        immutable: None,
    };
    let v = decode(&encode("v1", "ConfigMap", &cm)).unwrap();
    assert_eq!(
        v,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings"},
            "data": {"a": "1"}, "binaryData": {"b": "AAEC"}})
    );
}

#[test]
fn pointer_fields_keep_their_zero_values() {
    let sa = core::ServiceAccount {
        metadata: meta("quiet"),
        automount_service_account_token: Some(false),
        ..Default::default()
    };
    let v = decode(&encode("v1", "ServiceAccount", &sa)).unwrap();
    assert_eq!(v["automountServiceAccountToken"], false);
}

#[test]
fn a_field_the_sandbox_does_not_convert_is_refused_not_dropped() {
    let mut m = meta("x").unwrap();
    m.managed_fields = vec![meta::ManagedFieldsEntry {
        manager: Some("someone".into()),
        ..Default::default()
    }];
    let ns = core::Namespace {
        metadata: Some(m),
        ..Default::default()
    };
    match decode(&encode("v1", "Namespace", &ns)) {
        Err(ProtobufError::UnsupportedField { kind, fields }) => {
            assert_eq!(kind, "ObjectMeta");
            assert!(fields.contains("someone"), "{fields}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let pod = core::Pod {
        metadata: meta("p"),
        spec: Some(core::PodSpec {
            volumes: vec![core::Volume {
                name: Some("v".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    let job = k8s_pb::api::batch::v1::Job {
        metadata: meta("j"),
        spec: Some(k8s_pb::api::batch::v1::JobSpec {
            template: Some(core::PodTemplateSpec {
                metadata: meta(""),
                spec: pod.spec,
            }),
            ..Default::default()
        }),
        status: None,
    };
    assert!(matches!(
        decode(&encode("batch/v1", "Job", &job)),
        Err(ProtobufError::UnsupportedField { kind, .. }) if kind == "PodSpec"
    ));
}

#[test]
fn unknown_kinds_and_bodies_without_the_envelope_are_refused() {
    let pvc = core::PersistentVolumeClaim {
        metadata: meta("c"),
        ..Default::default()
    };
    assert!(matches!(
        decode(&encode("v1", "PersistentVolumeClaim", &pvc)),
        Err(ProtobufError::UnsupportedKind { kind, .. }) if kind == "PersistentVolumeClaim"
    ));
    assert!(matches!(
        decode(&pvc.encode_to_vec()),
        Err(ProtobufError::NoMagic)
    ));
    assert!(matches!(
        decode(b"k8s\x00\xff\xff\xff"),
        Err(ProtobufError::Decode(_))
    ));
}

#[test]
fn the_media_type_is_recognised_with_parameters() {
    assert!(is_protobuf("application/vnd.kubernetes.protobuf"));
    assert!(is_protobuf(
        "application/vnd.kubernetes.protobuf; charset=utf-8"
    ));
    assert!(!is_protobuf("application/json"));
    assert!(!is_protobuf("application/cbor"));
}

#[test]
fn the_openapi_v2_document_is_a_swagger_2_document() {
    // Decoded with a message holding only gnostic's Document.swagger (field 1).
    #[derive(Clone, PartialEq, Message)]
    struct Swagger {
        #[prost(string, tag = "1")]
        swagger: String,
    }
    let doc = super::openapi_v2::document("v1.36.2");
    assert_eq!(Swagger::decode(doc.as_slice()).unwrap().swagger, "2.0");
}
