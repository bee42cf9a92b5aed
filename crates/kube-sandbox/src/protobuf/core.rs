//! core/v1 kinds kubectl's generators send as protobuf: Namespace, ConfigMap, Secret,
//! ServiceAccount, Service.

use k8s_pb::api::core::v1 as core;
use prost::Message;
use serde_json::{Value, json};

use super::ProtobufError;
use super::json::Obj;
use super::meta::{leftover, object_meta};

fn head(kind: &str, metadata: Value) -> Obj {
    Obj::new()
        .obj("apiVersion", Some(json!("v1")))
        .obj("kind", Some(json!(kind)))
        .obj("metadata", Some(metadata))
}

pub fn namespace(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut n = core::Namespace::decode(raw)?;
    let metadata = object_meta(n.metadata.take())?;
    let spec = match n.spec.take() {
        Some(mut s) => {
            let v = Obj::new()
                .strs("finalizers", std::mem::take(&mut s.finalizers))
                .done();
            leftover("NamespaceSpec", &s)?;
            Some(v)
        }
        None => None,
    };
    // The server sets the phase; the JSON path ignores a client's status too.
    n.status = None;
    leftover("Namespace", &n)?;
    Ok(head("Namespace", metadata).obj("spec", spec).done())
}

pub fn config_map(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut c = core::ConfigMap::decode(raw)?;
    let out = head("ConfigMap", object_meta(c.metadata.take())?)
        .opt("immutable", c.immutable.take())
        .map("data", std::mem::take(&mut c.data))
        .bytes_map("binaryData", std::mem::take(&mut c.binary_data))
        .done();
    leftover("ConfigMap", &c)?;
    Ok(out)
}

pub fn secret(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut s = core::Secret::decode(raw)?;
    let out = head("Secret", object_meta(s.metadata.take())?)
        .opt("immutable", s.immutable.take())
        .bytes_map("data", std::mem::take(&mut s.data))
        .map("stringData", std::mem::take(&mut s.string_data))
        .str("type", s.r#type.take())
        .done();
    leftover("Secret", &s)?;
    Ok(out)
}

pub fn service_account(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut a = core::ServiceAccount::decode(raw)?;
    let secrets = std::mem::take(&mut a.secrets)
        .into_iter()
        .map(|mut r| {
            let v = Obj::new()
                .str("kind", r.kind.take())
                .str("namespace", r.namespace.take())
                .str("name", r.name.take())
                .str("uid", r.uid.take())
                .str("apiVersion", r.api_version.take())
                .str("resourceVersion", r.resource_version.take())
                .str("fieldPath", r.field_path.take())
                .done();
            leftover("ObjectReference", &r).map(|()| v)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let pull = std::mem::take(&mut a.image_pull_secrets)
        .into_iter()
        .map(|mut r| Obj::new().str("name", r.name.take()).done())
        .collect();
    let out = head("ServiceAccount", object_meta(a.metadata.take())?)
        .list("secrets", secrets)
        .list("imagePullSecrets", pull)
        .opt(
            "automountServiceAccountToken",
            a.automount_service_account_token.take(),
        )
        .done();
    leftover("ServiceAccount", &a)?;
    Ok(out)
}

pub fn service(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut svc = core::Service::decode(raw)?;
    let mut s = svc.spec.take().unwrap_or_default();
    let ports = super::pod::each(std::mem::take(&mut s.ports), |mut p| {
        let v = Obj::new()
            .str("name", p.name.take())
            .str("protocol", p.protocol.take())
            .str("appProtocol", p.app_protocol.take())
            // Required, so written even when zero.
            .obj("port", Some(json!(p.port.take().unwrap_or_default())))
            .obj(
                "targetPort",
                super::pod::int_or_string(p.target_port.take()),
            )
            .nonzero("nodePort", p.node_port.take().map(i64::from))
            .done();
        leftover("ServicePort", &p).map(|()| v)
    })?;
    let spec = Obj::new()
        .list("ports", ports)
        .map("selector", std::mem::take(&mut s.selector))
        .str("clusterIP", s.cluster_ip.take())
        .strs("clusterIPs", std::mem::take(&mut s.cluster_ips))
        .str("type", s.r#type.take())
        .strs("externalIPs", std::mem::take(&mut s.external_ips))
        .str("sessionAffinity", s.session_affinity.take())
        .str("loadBalancerIP", s.load_balancer_ip.take())
        .strs(
            "loadBalancerSourceRanges",
            std::mem::take(&mut s.load_balancer_source_ranges),
        )
        .str("externalName", s.external_name.take())
        .str("externalTrafficPolicy", s.external_traffic_policy.take())
        .nonzero(
            "healthCheckNodePort",
            s.health_check_node_port.take().map(i64::from),
        )
        .flag(
            "publishNotReadyAddresses",
            s.publish_not_ready_addresses.take(),
        )
        .strs("ipFamilies", std::mem::take(&mut s.ip_families))
        .str("ipFamilyPolicy", s.ip_family_policy.take())
        .opt(
            "allocateLoadBalancerNodePorts",
            s.allocate_load_balancer_node_ports.take(),
        )
        .str("loadBalancerClass", s.load_balancer_class.take())
        .str("internalTrafficPolicy", s.internal_traffic_policy.take())
        .str("trafficDistribution", s.traffic_distribution.take())
        .done();
    leftover("ServiceSpec", &s)?;
    svc.status = None;
    let out = head("Service", object_meta(svc.metadata.take())?)
        .obj("spec", Some(spec))
        .done();
    leftover("Service", &svc)?;
    Ok(out)
}
