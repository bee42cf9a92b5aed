//! One bound claim that may need to grow: gather what `plan::expand` needs from the stores,
//! plan (reading the record from the API server only when a Job is due), carry out the step.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use super::context::{Context, action_is};
use flex_core::names;
use flex_core::plan::expand::{ExpandInputs, ExpandPlan, ExpandStep, plan_expand};
use flex_core::record::{RecordError, read_record};

/// A claim bound to a volume of ours in a class that allows expansion, with its expansion
/// Jobs and their pods.
struct Gathered<'c> {
    claim: &'c PersistentVolumeClaim,
    pv: Arc<PersistentVolume>,
    jobs: Vec<Arc<Job>>,
    pods: Vec<Arc<Pod>>,
    class_allows: bool,
}

pub(super) async fn reconcile_expansion(
    claim: &PersistentVolumeClaim,
    ctx: &Context,
) -> crate::Result<Action> {
    let Some(g) = gather(claim, ctx) else {
        return Ok(Action::await_change());
    };
    let plan = decide(&g, ctx).await?;
    let class = flex_core::claim::class_of(claim).unwrap_or_default();
    ctx.apply.tell_claim(claim, class, &plan.notices).await;
    apply(&g, ctx, plan.step).await
}

/// Every claim the provisioning plan ignores comes here: only a claim bound to a volume of
/// ours in a class that allows expansion is worth scanning the Job and pod caches for (the
/// plan would ignore the others anyway).
fn gather<'c>(claim: &'c PersistentVolumeClaim, ctx: &Context) -> Option<Gathered<'c>> {
    let volume = claim.spec.as_ref()?.volume_name.as_deref()?;
    let pv = ctx
        .caches
        .volume(volume)
        .filter(|pv| flex_core::volume::provisioned_by(pv, &ctx.opts.provisioner_name))?;
    let class_allows = flex_core::claim::class_of(claim)
        .and_then(|c| ctx.caches.classes.get(&ObjectRef::new(c)))
        .and_then(|sc| sc.allow_volume_expansion)
        .unwrap_or(false);
    if !class_allows {
        return None;
    }
    let uid = claim.uid().unwrap_or_default();
    let mut jobs = ctx.caches.jobs_by(&super::caches::by_claim(&uid));
    jobs.retain(|j| action_is(j.labels(), names::Action::Expand));
    let mut pods = ctx.caches.pods_by(&super::caches::by_claim(&uid));
    pods.retain(|p| action_is(p.labels(), names::Action::Expand));
    Some(Gathered {
        claim,
        pv,
        jobs,
        pods,
        class_allows,
    })
}

/// The plan, and the plan again with the volume's record once it asks for it: the record
/// is read from the API server only when a Job is about to be built from it.
async fn decide(g: &Gathered<'_>, ctx: &Context) -> crate::Result<ExpandPlan> {
    let opts = &ctx.opts;
    let plan_with = |record| {
        plan_expand(ExpandInputs {
            claim: g.claim,
            pv: Some(&g.pv),
            provisioner_name: &opts.provisioner_name,
            class_allows: g.class_allows,
            jobs: g.jobs.iter().map(AsRef::as_ref).collect(),
            pods: g.pods.iter().map(AsRef::as_ref).collect(),
            record,
            retry_base: opts.retry_base,
            ttl_seconds: opts.job_ttl_seconds,
            now: jiff::Timestamp::now(),
        })
    };
    let plan = plan_with(None);
    if plan.step != ExpandStep::ReadRecord {
        return Ok(plan);
    }
    let record = super::volumes::fetch_record(ctx, &g.pv)
        .await?
        .ok_or_else(|| RecordError::missing(&g.pv))
        .and_then(|cm| read_record(&cm, &g.pv));
    Ok(plan_with(Some(record)))
}

/// Carries out the step: the claim's resize status, the expansion Job, the PV's capacity.
async fn apply(g: &Gathered<'_>, ctx: &Context, step: ExpandStep) -> crate::Result<Action> {
    let apply = &ctx.apply;
    let name = g.claim.name_any();
    let claims = apply.claims(&g.claim.namespace().unwrap_or_default());
    match step {
        // The record was read in `decide`; asked again only when it could not be.
        ExpandStep::Ignore | ExpandStep::Blocked | ExpandStep::ReadRecord => {}
        ExpandStep::Wait(d) => return Ok(Action::requeue(d)),
        // A claim gone meanwhile gets no expansion Job.
        ExpandStep::Start { job, status } => {
            if apply.patch_status(&claims, &name, &status).await? {
                apply.create_or_adopt(job.as_ref()).await?;
            }
        }
        // A volume gone meanwhile did not grow: the claim is not told it did.
        ExpandStep::Finish { pv_patch, status } => {
            let grown = match pv_patch {
                Some(p) => apply.patch(&apply.volumes(), &g.pv.name_any(), &p).await?,
                None => true,
            };
            if grown {
                apply.patch_status(&claims, &name, &status).await?;
            }
        }
        ExpandStep::Fail { status } => {
            apply.patch_status(&claims, &name, &status).await?;
        }
    }
    Ok(Action::await_change())
}
