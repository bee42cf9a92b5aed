//! Workloads kubectl's generators send as protobuf (`create deployment|job|cronjob`):
//! apps/v1 Deployment, batch/v1 Job and CronJob.

use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::batch::v1 as batch;
use prost::Message;
use serde_json::{Value, json};

use super::ProtobufError;
use super::json::Obj;
use super::meta::{label_selector, leftover, object_meta};
use super::pod::pod_template;

fn head(api_version: &str, kind: &str, metadata: Value) -> Obj {
    Obj::new()
        .obj("apiVersion", Some(json!(api_version)))
        .obj("kind", Some(json!(kind)))
        .obj("metadata", Some(metadata))
}

pub fn deployment(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut d = apps::Deployment::decode(raw)?;
    let mut s = d.spec.take().unwrap_or_default();
    let strategy = match s.strategy.take() {
        Some(mut st) => {
            let v = Obj::new().str("type", st.r#type.take()).done();
            leftover("DeploymentStrategy", &st)?;
            Some(v)
        }
        None => None,
    };
    let spec = Obj::new()
        .opt("replicas", s.replicas.take())
        .obj(
            "selector",
            s.selector.take().map(label_selector).transpose()?,
        )
        .obj("template", Some(pod_template(s.template.take())?))
        .obj("strategy", strategy)
        .nonzero("minReadySeconds", s.min_ready_seconds.take().map(i64::from))
        .opt("revisionHistoryLimit", s.revision_history_limit.take())
        .flag("paused", s.paused.take())
        .opt(
            "progressDeadlineSeconds",
            s.progress_deadline_seconds.take(),
        )
        .done();
    leftover("DeploymentSpec", &s)?;
    // The status is the controller's; the server resets a client's on create.
    d.status = None;
    let out = head("apps/v1", "Deployment", object_meta(d.metadata.take())?)
        .obj("spec", Some(spec))
        .done();
    leftover("Deployment", &d)?;
    Ok(out)
}

fn job_spec(s: Option<batch::JobSpec>) -> Result<Value, ProtobufError> {
    let mut s = s.unwrap_or_default();
    let v = Obj::new()
        .opt("parallelism", s.parallelism.take())
        .opt("completions", s.completions.take())
        .opt("activeDeadlineSeconds", s.active_deadline_seconds.take())
        .opt("backoffLimit", s.backoff_limit.take())
        .opt("backoffLimitPerIndex", s.backoff_limit_per_index.take())
        .opt("maxFailedIndexes", s.max_failed_indexes.take())
        .obj(
            "selector",
            s.selector.take().map(label_selector).transpose()?,
        )
        .opt("manualSelector", s.manual_selector.take())
        .obj("template", Some(pod_template(s.template.take())?))
        .opt(
            "ttlSecondsAfterFinished",
            s.ttl_seconds_after_finished.take(),
        )
        .str("completionMode", s.completion_mode.take())
        .opt("suspend", s.suspend.take())
        .str("podReplacementPolicy", s.pod_replacement_policy.take())
        .str("managedBy", s.managed_by.take())
        .done();
    leftover("JobSpec", &s)?;
    Ok(v)
}

pub fn job(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut j = batch::Job::decode(raw)?;
    let spec = job_spec(j.spec.take())?;
    j.status = None;
    let out = head("batch/v1", "Job", object_meta(j.metadata.take())?)
        .obj("spec", Some(spec))
        .done();
    leftover("Job", &j)?;
    Ok(out)
}

pub fn cron_job(raw: &[u8]) -> Result<Value, ProtobufError> {
    let mut c = batch::CronJob::decode(raw)?;
    let mut s = c.spec.take().unwrap_or_default();
    let mut t = s.job_template.take().unwrap_or_default();
    let template = json!({
        "metadata": object_meta(t.metadata.take())?,
        "spec": job_spec(t.spec.take())?,
    });
    leftover("JobTemplateSpec", &t)?;
    let spec = Obj::new()
        .str("schedule", s.schedule.take())
        .str("timeZone", s.time_zone.take())
        .opt(
            "startingDeadlineSeconds",
            s.starting_deadline_seconds.take(),
        )
        .str("concurrencyPolicy", s.concurrency_policy.take())
        .opt("suspend", s.suspend.take())
        .obj("jobTemplate", Some(template))
        .opt(
            "successfulJobsHistoryLimit",
            s.successful_jobs_history_limit.take(),
        )
        .opt("failedJobsHistoryLimit", s.failed_jobs_history_limit.take())
        .done();
    leftover("CronJobSpec", &s)?;
    c.status = None;
    let out = head("batch/v1", "CronJob", object_meta(c.metadata.take())?)
        .obj("spec", Some(spec))
        .done();
    leftover("CronJob", &c)?;
    Ok(out)
}
