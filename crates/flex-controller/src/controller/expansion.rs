//! One claim that may need to grow, its own pipeline beside provisioning: gather what
//! `plan::expand` needs from the stores, decide (`drive`: the record is read from the API
//! server only when a Job is due), tell, carry out the step.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use super::context::Context;
use super::drive::Deciding;
use flex_core::names::Action;
use flex_core::plan::expand::{ExpandInputs, ExpandPlan, ExpandStep, plan_expand};
use flex_core::plan::{Ask, Decision};
use flex_core::record::{Record, RecordError, read_record};

/// A claim bound to a volume of ours in a class that allows expansion, with its expansion
/// Jobs and their pods.
struct Gathered {
    claim: Arc<PersistentVolumeClaim>,
    pv: Arc<PersistentVolume>,
    jobs: Vec<Arc<Job>>,
    pods: Vec<Arc<Pod>>,
}

/// The record, once the plan asked for it.
type Read = Option<Result<Record, RecordError>>;

/// One claim's expansion; then when to look again (`None`: on its next change).
pub async fn reconcile(
    claim: Arc<PersistentVolumeClaim>,
    ctx: Arc<Context>,
) -> crate::Result<Option<Duration>> {
    let Some(g) = gather(claim, &ctx) else {
        return Ok(None);
    };
    let pipeline = Deciding { g: &g, ctx: &ctx };
    let Ok(plan) = super::drive::decide(&pipeline, &mut None).await? else {
        return Ok(None);
    };
    let class = flex_core::claim::class_of(&g.claim).unwrap_or_default();
    ctx.apply.tell_claim(&g.claim, class, &plan.notices).await;
    apply(&g, &ctx, plan.step).await
}

impl super::drive::Pipeline for Deciding<'_, Gathered> {
    type Read = Read;
    type Plan = ExpandPlan;

    fn plan(&self, record: &Read) -> Decision<ExpandPlan> {
        let (g, opts) = (self.g, &self.ctx.opts);
        plan_expand(ExpandInputs {
            claim: &g.claim,
            pv: Some(&g.pv),
            provisioner_name: &opts.provisioner_name,
            class_allows: true,
            jobs: g.jobs.iter().map(AsRef::as_ref).collect(),
            pods: g.pods.iter().map(AsRef::as_ref).collect(),
            record: record.clone(),
            retry_base: opts.retry_base,
            ttl_seconds: opts.job_ttl_seconds,
            now: jiff::Timestamp::now(),
        })
    }

    async fn answer(&self, ask: &Ask, r: &mut Read) -> crate::Result<bool> {
        let pv = &self.g.pv;
        if *ask != Ask::Record {
            return Ok(false);
        }
        let record = super::reads::record(self.ctx, pv).await?;
        let record = record.ok_or_else(|| RecordError::missing(pv));
        *r = Some(record.and_then(|cm| read_record(&cm, pv)));
        Ok(true)
    }
}

/// Only a claim bound to a volume of ours in a class that allows expansion is worth
/// scanning the Job and pod caches for (the plan would ignore the others anyway).
fn gather(claim: Arc<PersistentVolumeClaim>, ctx: &Context) -> Option<Gathered> {
    let volume = claim.spec.as_ref()?.volume_name.as_deref()?;
    // The class first: a cached PV is parsed from its text to be read.
    let class_allows = flex_core::claim::class_of(&claim)
        .and_then(|c| ctx.caches.classes.get(&ObjectRef::new(c)))
        .and_then(|sc| sc.allow_volume_expansion)
        .unwrap_or(false);
    if !class_allows {
        return None;
    }
    let pv = ctx
        .caches
        .volume(volume)
        .filter(|pv| flex_core::volume::provisioned_by(pv, &ctx.opts.provisioner_name))?;
    let uid = claim.uid().unwrap_or_default();
    let mut jobs = ctx.caches.jobs_by(&super::caches::by_claim(&uid));
    jobs.retain(|j| Action::of(j.labels()) == Some(Action::Expand));
    let mut pods = ctx.caches.pods_by(&super::caches::by_claim(&uid));
    pods.retain(|p| Action::of(p.labels()) == Some(Action::Expand));
    Some(Gathered {
        claim,
        pv,
        jobs,
        pods,
    })
}

/// Carries out the step: the claim's resize status, the expansion Job, the PV's capacity.
async fn apply(g: &Gathered, ctx: &Context, step: ExpandStep) -> crate::Result<Option<Duration>> {
    let apply = &ctx.apply;
    let name = g.claim.name_any();
    let claims = apply.claims(&g.claim.namespace().unwrap_or_default());
    match step {
        ExpandStep::Ignore | ExpandStep::Blocked => {}
        ExpandStep::Wait(d) => return Ok(Some(d)),
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
    Ok(None)
}
