//! One PV: deprovision a released volume of a `Delete` class with the recipe recorded on it,
//! then remove it; for `Retain`, only let a deletion complete.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::context::Context;
use super::gone_is_done;
use crate::job::{JobOutcome, deprovision_job, outcome};
use crate::names::{
    ANN_PROVISIONED_BY, FINALIZER_DEPROVISION, LABEL_ACTION, LABEL_CLAIM_UID, LABEL_VOLUME,
};
use crate::plan::volume::{ANN_DEPROVISIONED, VolumeInputs, VolumeStep, plan_volume};
use crate::plan::{Notice, reasons};
use crate::volume::recorded_recipe;

const RUNNING_RECHECK: Duration = Duration::from_secs(30);

/// Whether the claim named in claimRef exists with that uid. The cache may only say "alive",
/// and only for a PV that Kubernetes still shows bound and nobody deleted: a cache that has
/// not caught up must never make a live claim look deleted (so "gone" is always confirmed by
/// the API server), nor keep a released volume waiting for an event that already passed.
async fn claim_alive(ctx: &Context, pv: &PersistentVolume) -> crate::Result<bool> {
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return Ok(false);
    };
    let (Some(ns), Some(name)) = (r.namespace.as_deref(), r.name.as_deref()) else {
        return Ok(false);
    };
    let settled = pv.metadata.deletion_timestamp.is_none()
        && pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    let cached = settled
        && ctx
            .caches
            .claims
            .get(&ObjectRef::new(name).within(ns))
            .is_some_and(|c| c.metadata.uid == r.uid);
    if cached {
        return Ok(true);
    }
    let claim = Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await?;
    Ok(claim.is_some_and(|c| c.metadata.uid == r.uid))
}

pub async fn reconcile_volume(
    pv: Arc<PersistentVolume>,
    ctx: Arc<Context>,
) -> crate::Result<Action> {
    ctx.ready().await;
    let opts = &ctx.opts;
    if pv.annotations().get(ANN_PROVISIONED_BY) != Some(&opts.provisioner_name) {
        return Ok(Action::await_change());
    }
    let name = pv.name_any();
    let claim_uid = pv
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .and_then(|r| r.uid.clone())
        .unwrap_or_default();
    let all_jobs: Vec<Arc<Job>> = ctx.caches.jobs.iter().flat_map(|s| s.state()).collect();
    let action_is = |j: &Job, a: &str| j.labels().get(LABEL_ACTION).map(String::as_str) == Some(a);
    let provisioning = all_jobs.iter().any(|j| {
        action_is(j, "provision")
            && j.labels().get(LABEL_CLAIM_UID) == Some(&claim_uid)
            && outcome(j, &[]) == JobOutcome::Running
    });
    let jobs: Vec<&Job> = all_jobs
        .iter()
        .map(AsRef::as_ref)
        .filter(|j| action_is(j, "deprovision") && j.labels().get(LABEL_VOLUME) == Some(&name))
        .collect();
    let pods: Vec<Arc<Pod>> = ctx
        .caches
        .pods
        .iter()
        .flat_map(|s| s.state())
        .filter(|p| {
            p.labels().get(LABEL_VOLUME) == Some(&name)
                && p.labels().get(LABEL_ACTION).map(String::as_str) == Some("deprovision")
        })
        .collect();
    let plan = plan_volume(&VolumeInputs {
        pv: &pv,
        provisioner_name: &opts.provisioner_name,
        claim_alive: claim_alive(&ctx, &pv).await?,
        provisioning,
        jobs,
        pods: pods.iter().map(AsRef::as_ref).collect(),
        retry_base: opts.retry_base,
        now: jiff::Timestamp::now(),
    });
    let on = pv.object_ref(&());
    let class = pv
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .unwrap_or_default();
    ctx.tell(&on, &class, &plan.notices).await;
    let pvs: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let other_finalizers: Vec<String> = pv
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER_DEPROVISION)
        .cloned()
        .collect();
    Ok(match plan.step {
        VolumeStep::Ignore => Action::await_change(),
        VolumeStep::Running => Action::requeue(RUNNING_RECHECK),
        VolumeStep::Backoff { wait } => Action::requeue(wait),
        VolumeStep::ReleaseFinalizer => {
            let patch = json!({"metadata": {"finalizers": other_finalizers, "resourceVersion": pv.resource_version()}});
            gone_is_done(
                pvs.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await,
            )?;
            Action::await_change()
        }
        VolumeStep::DeletePv => {
            gone_is_done(pvs.delete(&name, &DeleteParams::background()).await)?;
            Action::await_change()
        }
        VolumeStep::Finish => {
            // Marked and released in one write: a restart after it never runs the Job again.
            let patch = json!({"metadata": {"annotations": {ANN_DEPROVISIONED: "true"}, "finalizers": other_finalizers,
                                            "resourceVersion": pv.resource_version()}});
            pvs.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            ctx.metrics.delete_total.with_label_values(&[&class]).inc();
            let first_job = ctx
                .caches
                .jobs
                .iter()
                .flat_map(|s| s.state())
                .filter(|j| {
                    j.labels().get(LABEL_VOLUME) == Some(&name)
                        && j.labels().get(LABEL_ACTION).map(String::as_str) == Some("deprovision")
                })
                .filter_map(|j| j.metadata.creation_timestamp.as_ref().map(|t| t.0))
                .min();
            if let Some(t) = first_job {
                let took = jiff::Timestamp::now()
                    .duration_since(t)
                    .as_secs_f64()
                    .max(0.0);
                ctx.metrics
                    .delete_duration
                    .with_label_values(&[&class])
                    .observe(took);
            }
            if pv.metadata.deletion_timestamp.is_none() {
                gone_is_done(pvs.delete(&name, &DeleteParams::background()).await)?;
            }
            Action::await_change()
        }
        VolumeStep::Start { attempt } => {
            let recipe = match recorded_recipe(&pv) {
                Ok(r) => r,
                Err(why) => {
                    let message = format!(
                        "cannot deprovision {name}: {why}; the volume is kept (delete its storage by hand, then remove the finalizer {FINALIZER_DEPROVISION})"
                    );
                    ctx.tell(
                        &on,
                        &class,
                        &[Notice::warning(
                            format!("no-recipe/{name}"),
                            reasons::VOLUME_FAILED_DELETE,
                            message,
                        )
                        .action("Deprovision")],
                    )
                    .await;
                    return Ok(Action::await_change());
                }
            };
            let job = deprovision_job(
                &pv,
                recipe,
                &opts.provisioner_name,
                attempt,
                opts.job_ttl_seconds,
            );
            let ns = job.namespace().unwrap_or_default();
            match Api::<Job>::namespaced(ctx.client.clone(), &ns)
                .create(&PostParams::default(), &job)
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
            Action::requeue(RUNNING_RECHECK)
        }
    })
}
