//! Pod templates (core/v1 PodTemplateSpec, PodSpec, Container) from protobuf to JSON, for
//! the workloads kubectl's generators send (`create deployment|job|cronjob`). The fields
//! those generators and everyday templates use are converted; any other field that is set
//! is refused (`leftover`), never dropped.
//!
//! Go's protobuf marshalling writes non-pointer fields even when empty (`hostNetwork:
//! false`, `nodeName: ""`); they are omitted here as Go's JSON `omitempty` omits them.

use std::collections::BTreeMap;

use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use super::ProtobufError;
use super::json::Obj;
use super::meta::{leftover, object_meta};

/// Applies `f` to each item, failing on the first refusal.
pub fn each<T>(
    items: Vec<T>,
    f: impl Fn(T) -> Result<Value, ProtobufError>,
) -> Result<Vec<Value>, ProtobufError> {
    items.into_iter().map(f).collect()
}

fn quantities(m: BTreeMap<String, Quantity>) -> Option<Value> {
    (!m.is_empty()).then(|| {
        Value::Object(
            m.into_iter()
                .map(|(k, q)| (k, Value::String(q.string.unwrap_or_default())))
                .collect(),
        )
    })
}

/// An IntOrString: a number, or a string when its type says so (1).
pub fn int_or_string(v: Option<IntOrString>) -> Option<Value> {
    let v = v?;
    Some(match v.r#type {
        Some(1) => json!(v.str_val.unwrap_or_default()),
        _ => json!(v.int_val.unwrap_or_default()),
    })
}

fn port(mut p: core::ContainerPort) -> Result<Value, ProtobufError> {
    let v = Obj::new()
        .str("name", p.name.take())
        .nonzero("hostPort", p.host_port.take().map(i64::from))
        // Required, so written even when zero.
        .obj(
            "containerPort",
            Some(json!(p.container_port.take().unwrap_or_default())),
        )
        .str("protocol", p.protocol.take())
        .str("hostIP", p.host_ip.take())
        .done();
    leftover("ContainerPort", &p)?;
    Ok(v)
}

fn env(mut e: core::EnvVar) -> Result<Value, ProtobufError> {
    let v = Obj::new()
        .str("name", e.name.take())
        .str("value", e.value.take())
        .done();
    leftover("EnvVar", &e)?;
    Ok(v)
}

fn resources(r: Option<core::ResourceRequirements>) -> Result<Option<Value>, ProtobufError> {
    let Some(mut r) = r else { return Ok(None) };
    let claims = each(std::mem::take(&mut r.claims), |mut c| {
        let v = Obj::new()
            .str("name", c.name.take())
            .str("request", c.request.take())
            .done();
        leftover("ResourceClaim", &c).map(|()| v)
    })?;
    let v = Obj::new()
        .obj("limits", quantities(std::mem::take(&mut r.limits)))
        .obj("requests", quantities(std::mem::take(&mut r.requests)))
        .list("claims", claims)
        .done();
    leftover("ResourceRequirements", &r)?;
    Ok(Some(v))
}

fn container(mut c: core::Container) -> Result<Value, ProtobufError> {
    let ports = each(std::mem::take(&mut c.ports), port)?;
    let envs = each(std::mem::take(&mut c.env), env)?;
    let v = Obj::new()
        .str("name", c.name.take())
        .str("image", c.image.take())
        .strs("command", std::mem::take(&mut c.command))
        .strs("args", std::mem::take(&mut c.args))
        .str("workingDir", c.working_dir.take())
        .list("ports", ports)
        .list("env", envs)
        .obj("resources", resources(c.resources.take())?)
        .str("restartPolicy", c.restart_policy.take())
        .str("terminationMessagePath", c.termination_message_path.take())
        .str(
            "terminationMessagePolicy",
            c.termination_message_policy.take(),
        )
        .str("imagePullPolicy", c.image_pull_policy.take())
        .flag("stdin", c.stdin.take())
        .flag("stdinOnce", c.stdin_once.take())
        .flag("tty", c.tty.take())
        .done();
    leftover("Container", &c)?;
    Ok(v)
}

fn toleration(mut t: core::Toleration) -> Result<Value, ProtobufError> {
    let v = Obj::new()
        .str("key", t.key.take())
        .str("operator", t.operator.take())
        .str("value", t.value.take())
        .str("effect", t.effect.take())
        .opt("tolerationSeconds", t.toleration_seconds.take())
        .done();
    leftover("Toleration", &t)?;
    Ok(v)
}

pub fn pod_spec(s: Option<core::PodSpec>) -> Result<Value, ProtobufError> {
    let mut s = s.unwrap_or_default();
    let containers = each(std::mem::take(&mut s.containers), container)?;
    let init = each(std::mem::take(&mut s.init_containers), container)?;
    let tolerations = each(std::mem::take(&mut s.tolerations), toleration)?;
    let pull = std::mem::take(&mut s.image_pull_secrets)
        .into_iter()
        .map(|mut r| Obj::new().str("name", r.name.take()).done())
        .collect();
    let v = Obj::new()
        .list("initContainers", init)
        .obj("containers", Some(Value::Array(containers)))
        .str("restartPolicy", s.restart_policy.take())
        .opt(
            "terminationGracePeriodSeconds",
            s.termination_grace_period_seconds.take(),
        )
        .opt("activeDeadlineSeconds", s.active_deadline_seconds.take())
        .str("dnsPolicy", s.dns_policy.take())
        .map("nodeSelector", std::mem::take(&mut s.node_selector))
        .str("serviceAccountName", s.service_account_name.take())
        .str("serviceAccount", s.service_account.take())
        .opt(
            "automountServiceAccountToken",
            s.automount_service_account_token.take(),
        )
        .str("nodeName", s.node_name.take())
        .flag("hostNetwork", s.host_network.take())
        .flag("hostPID", s.host_pid.take())
        .flag("hostIPC", s.host_ipc.take())
        .list("imagePullSecrets", pull)
        .str("hostname", s.hostname.take())
        .str("subdomain", s.subdomain.take())
        .str("schedulerName", s.scheduler_name.take())
        .list("tolerations", tolerations)
        .str("priorityClassName", s.priority_class_name.take())
        .opt("priority", s.priority.take())
        .str("runtimeClassName", s.runtime_class_name.take())
        .opt("enableServiceLinks", s.enable_service_links.take())
        .str("preemptionPolicy", s.preemption_policy.take())
        .done();
    leftover("PodSpec", &s)?;
    Ok(v)
}

pub fn pod_template(t: Option<core::PodTemplateSpec>) -> Result<Value, ProtobufError> {
    let mut t = t.unwrap_or_default();
    let v = json!({
        "metadata": object_meta(t.metadata.take())?,
        "spec": pod_spec(t.spec.take())?,
    });
    leftover("PodTemplateSpec", &t)?;
    Ok(v)
}
