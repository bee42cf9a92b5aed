//! One bound claim that may need to grow: gather what `plan::expand` needs from the stores
//! (the record from the API server, only when a Job is due), plan, carry out the step.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::context::{Context, action_is};
use flex_core::names;
use flex_core::plan::expand::{ExpandInputs, ExpandStep, plan_expand};
use flex_core::record::read_record;

pub(super) async fn reconcile_expansion(
    claim: &PersistentVolumeClaim,
    ctx: &Context,
) -> crate::Result<Action> {
    let opts = &ctx.opts;
    let Some(volume_name) = claim.spec.as_ref().and_then(|s| s.volume_name.clone()) else {
        return Ok(Action::await_change());
    };
    let uid = claim.uid().unwrap_or_default();
    // Every claim the provisioning plan ignores comes here: only a claim bound to a volume of
    // ours in a class that allows expansion is worth scanning the Job and pod caches for
    // (the plan would ignore the others anyway).
    let Some(pv) = ctx
        .caches
        .volume(&volume_name)
        .filter(|pv| flex_core::volume::provisioned_by(pv, &opts.provisioner_name))
    else {
        return Ok(Action::await_change());
    };
    let class_allows = flex_core::claim::class_of(claim)
        .and_then(|c| ctx.caches.classes.get(&ObjectRef::new(c)))
        .and_then(|sc| sc.allow_volume_expansion)
        .unwrap_or(false);
    if !class_allows {
        return Ok(Action::await_change());
    }
    let mut jobs = ctx.caches.jobs_by(&super::caches::by_claim(&uid));
    jobs.retain(|j| action_is(j.labels(), names::Action::Expand));
    let mut pods = ctx.caches.pods_by(&super::caches::by_claim(&uid));
    pods.retain(|p| action_is(p.labels(), names::Action::Expand));
    let plan_with = |pv: Option<&PersistentVolume>, record| {
        plan_expand(ExpandInputs {
            claim,
            pv,
            provisioner_name: &opts.provisioner_name,
            class_allows,
            jobs: jobs.iter().map(AsRef::as_ref).collect(),
            pods: pods.iter().map(AsRef::as_ref).collect(),
            record,
            retry_base: opts.retry_base,
            ttl_seconds: opts.job_ttl_seconds,
            now: jiff::Timestamp::now(),
        })
    };
    let mut plan = plan_with(Some(&pv), None);
    // The record is read from the API server only when a Job is about to be built from it.
    if plan.step == ExpandStep::ReadRecord {
        let record = super::volumes::fetch_record(ctx, &pv)
            .await?
            .ok_or_else(|| flex_core::record::RecordError::missing(&pv))
            .and_then(|cm| read_record(&cm, &pv));
        plan = plan_with(Some(&pv), Some(record));
    }
    let class = flex_core::claim::class_of(claim)
        .unwrap_or_default()
        .to_owned();
    ctx.tell(&claim.object_ref(&()), &class, &plan.notices)
        .await;
    let apply = &ctx.apply;
    let claims = apply.claims(&claim.namespace().unwrap_or_default());
    let status = |patch| {
        let claims = &claims;
        async move { apply.patch_status(claims, &claim.name_any(), &patch).await }
    };
    Ok(match plan.step {
        ExpandStep::Ignore | ExpandStep::Blocked | ExpandStep::ReadRecord => Action::await_change(),
        ExpandStep::Wait(d) => Action::requeue(d),
        ExpandStep::Start { job, status: s } => {
            status(s).await?;
            apply.create_or_adopt(job.as_ref()).await?;
            Action::await_change()
        }
        ExpandStep::Finish {
            pv_patch,
            status: s,
        } => {
            if let Some(p) = pv_patch {
                apply.patch(&apply.volumes(), &volume_name, &p).await?;
            }
            status(s).await?;
            Action::await_change()
        }
        ExpandStep::Fail { status: s } => {
            status(s).await?;
            Action::await_change()
        }
    })
}
