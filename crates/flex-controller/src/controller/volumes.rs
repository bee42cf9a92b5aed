//! One PV: gather what the volume state machine reads, plan, and carry out its one effect
//! (a Job, or a write under its precondition). The claim is read from the API server only
//! when the plan asks, right before a decision that may destroy storage.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::caches::{by_claim, by_source, by_volume};
use super::context::Context;
use super::drive::Deciding;
use flex_core::job::{JobOutcome, outcome};
use flex_core::names;
use flex_core::plan::volume::{VolumeInputs, VolumePlan, VolumeStep, plan_volume};
use flex_core::plan::{Ask, Decision};

/// A PV that names this provisioner but is not verified (cached cut short, see
/// `caches::trim_volume`) is worth a read only when a Job of ours made it (an image-mode
/// volume whose claim went before it was verified): anyone with PV create can make such
/// PVs by the thousand, and they cost no request. `None`: nothing to do.
async fn whole_if_made_by_us(
    pv: Arc<PersistentVolume>,
    ctx: &Context,
) -> crate::Result<Option<Arc<PersistentVolume>>> {
    if !super::caches::is_cut_short(pv.as_ref()) {
        return Ok(Some(pv));
    }
    let name = pv.name_any();
    let made_by_us = ctx
        .caches
        .jobs_by(&by_volume(&name))
        .iter()
        .any(|j| names::Action::of(j.labels()) == Some(names::Action::Provision));
    if !made_by_us {
        return Ok(None);
    }
    super::reads::volume_whole(ctx, &pv).await
}

/// One PV of ours: gather, decide (reading the record, the claim and the PV afresh when
/// the plan asks), tell, apply.
pub async fn reconcile_volume(
    cached: Arc<super::compact::Compact<PersistentVolume>>,
    ctx: Arc<Context>,
) -> crate::Result<Action> {
    ctx.readiness.wait().await;
    let Some(pv) = cached.full().map(Arc::new) else {
        return Ok(Action::await_change());
    };
    if !flex_core::volume::provisioned_by(&pv, &ctx.opts.provisioner_name) {
        return Ok(Action::await_change());
    }
    let Some(pv) = whole_if_made_by_us(pv, &ctx).await? else {
        return Ok(Action::await_change());
    };
    let g = gather(pv, &ctx);
    // A deprovision Job created a moment ago that the watch has not delivered yet.
    if ctx
        .apply
        .expected
        .unseen_for(&g.pv_uid, |job| g.jobs().any(|j| j.name_any() == job))
        .is_some()
    {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let pipeline = Deciding { g: &g, ctx: &ctx };
    let Ok(plan) = super::drive::decide(&pipeline, &mut Read::default()).await? else {
        // The volume is gone, or another has its name now.
        return Ok(Action::await_change());
    };
    ctx.apply
        .tell(&g.pv.object_ref(&()), &g.class, &plan.notices, None)
        .await;
    apply(&g, &ctx, plan.step).await
}

/// What a volume's plan is made from, read from the caches.
struct Gathered {
    pv: Arc<PersistentVolume>,
    name: String,
    pv_uid: String,
    class: String,
    /// (namespace, name) of the claim at the claimRef, and that claim as cached.
    at: Option<(String, String)>,
    cached_claim: Option<Arc<PersistentVolumeClaim>>,
    /// Claims that hold this volume besides the claimRef's own (one an admin hands it to,
    /// one re-created under the claimRef's name), from the cache.
    others_naming: Vec<(String, String)>,
    /// The Jobs that made this volume: by its claim, and by its name (a claimRef an admin
    /// cleared or re-pointed no longer names the claim they were for).
    provision_jobs: Vec<Arc<Job>>,
    /// A provisioning or expansion pod still at work on the volume, or a clone's still
    /// copying from it.
    provisioning: bool,
    /// Jobs and pods under the volume's name (its deprovision Jobs among them).
    volume_jobs: Vec<Arc<Job>>,
    pods: Vec<Arc<k8s_openapi::api::core::v1::Pod>>,
}

impl Gathered {
    /// The volume's deprovision Jobs.
    fn jobs(&self) -> impl Iterator<Item = &Job> {
        self.volume_jobs
            .iter()
            .map(AsRef::as_ref)
            .filter(|j| names::Action::of(j.labels()) == Some(names::Action::Deprovision))
    }
}

fn gather(pv: Arc<PersistentVolume>, ctx: &Context) -> Gathered {
    let name = pv.name_any();
    let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.clone());
    let claim_uid = claim_ref.as_ref().and_then(|r| r.uid.clone());
    let claim_jobs = match claim_uid.as_deref() {
        None | Some("") => vec![],
        Some(uid) => ctx.caches.jobs_by(&by_claim(uid)),
    };
    let volume_jobs = ctx.caches.jobs_by(&by_volume(&name));
    let mut provision_jobs: Vec<Arc<Job>> = claim_jobs
        .iter()
        .chain(volume_jobs.iter())
        .filter(|j| names::Action::of(j.labels()) == Some(names::Action::Provision))
        .cloned()
        .collect();
    provision_jobs.sort_by_key(|j| j.metadata.uid.clone());
    provision_jobs.dedup_by_key(|j| j.metadata.uid.clone());
    let provisioning = claim_jobs
        .iter()
        .filter(|j| {
            matches!(
                names::Action::of(j.labels()),
                Some(names::Action::Provision | names::Action::Expand)
            )
        })
        .chain(ctx.caches.jobs_by(&by_source(&name)).iter())
        .any(|j| outcome(j, &[]) == JobOutcome::Running);
    let mut pods = ctx.caches.pods_by(&by_volume(&name));
    pods.retain(|p| names::Action::of(p.labels()) == Some(names::Action::Deprovision));
    let at = claim_ref
        .as_ref()
        .and_then(|r| Some((r.namespace.clone()?, r.name.clone()?)));
    let cached_claim = at.as_ref().and_then(|(ns, n)| ctx.caches.claim(ns, n));
    let others_naming = ctx
        .caches
        .claims_naming(&name)
        .into_iter()
        .filter(|(ns, n)| {
            ctx.caches
                .claim(ns, n)
                .is_some_and(|c| flex_core::plan::volume::claim_holds(&pv, &c))
        })
        .collect();
    let class = pv
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .unwrap_or_default();
    Gathered {
        pv_uid: pv.uid().unwrap_or_default(),
        pv,
        name,
        class,
        at,
        cached_claim,
        others_naming,
        provision_jobs,
        provisioning,
        volume_jobs,
        pods,
    }
}

/// What the plan asked for, once read.
#[derive(Default)]
struct Read {
    /// The PV afresh ([`Ask::Claim`]).
    pv: Option<PersistentVolume>,
    /// The claim at the claimRef, from the API server ([`Ask::Claim`]).
    claim: Option<Option<PersistentVolumeClaim>>,
    record: Option<ConfigMap>,
    named_by_claim: Option<bool>,
}

impl super::drive::Pipeline for Deciding<'_, Gathered> {
    type Read = Read;
    type Plan = VolumePlan;

    fn plan(&self, read: &Read) -> Decision<VolumePlan> {
        plan_with(self.g, self.ctx, read)
    }

    /// Reads the record (a released volume being deleted: its claim is known gone), or the
    /// claim, the PV and the record afresh (a volume cached as Released may have been
    /// re-bound since). `false`: the PV is gone, or another has its name now.
    async fn answer(&self, ask: &Ask, r: &mut Read) -> crate::Result<bool> {
        let (g, ctx) = (self.g, self.ctx);
        match ask {
            Ask::Record => {}
            Ask::Claim => {
                let fresh = super::reads::volume(ctx, &g.name).await?;
                let Some(fresh) = fresh.filter(|p| p.metadata.uid == g.pv.metadata.uid) else {
                    return Ok(false);
                };
                r.pv = Some(fresh);
                r.claim = Some(match &g.at {
                    Some((ns, n)) => super::reads::claim(ctx, ns, n).await?,
                    None => None,
                });
            }
            _ => return Ok(false),
        }
        let pv = r.pv.as_ref().unwrap_or(&g.pv);
        r.record = super::reads::record(ctx, pv).await?;
        let (at, others) = (g.at.as_ref(), &g.others_naming);
        let named = super::reads::held_by_claim(ctx, &g.pv, at, r.record.as_ref(), others).await?;
        r.named_by_claim = Some(named);
        Ok(true)
    }
}

fn plan_with(g: &Gathered, ctx: &Context, r: &Read) -> Decision<VolumePlan> {
    let opts = &ctx.opts;
    plan_volume(&VolumeInputs {
        pv: r.pv.as_ref().unwrap_or(&g.pv),
        record: r.record.as_ref(),
        provision_jobs: g.provision_jobs.iter().map(AsRef::as_ref).collect(),
        provisioner_name: &opts.provisioner_name,
        claim: match &r.claim {
            Some(read) => read.as_ref(),
            None => g.cached_claim.as_deref(),
        },
        named_by_claim: r.named_by_claim.unwrap_or(!g.others_naming.is_empty()),
        claim_confirmed: r.claim.is_some(),
        record_read: r.named_by_claim.is_some(),
        provisioning: g.provisioning,
        jobs: g.jobs().collect(),
        pods: g.pods.iter().map(AsRef::as_ref).collect(),
        retry_base: opts.retry_base,
        job_ttl_seconds: opts.job_ttl_seconds,
        now: jiff::Timestamp::now(),
        node_exists: &|name| {
            ctx.caches
                .nodes
                .get(&kube::runtime::reflector::ObjectRef::new(name))
                .is_some()
        },
    })
}

/// Carries out the plan's one effect.
async fn apply(g: &Gathered, ctx: &Context, step: VolumeStep) -> crate::Result<Action> {
    let (apply, pvs) = (&ctx.apply, ctx.apply.volumes());
    Ok(match step {
        VolumeStep::Ignore => Action::await_change(),
        VolumeStep::Wait(wait) => Action::requeue(wait),
        VolumeStep::KeepStorage { patch, mark_jobs } => {
            for (ns, job) in &mark_jobs {
                apply.mark_pv_created(ns, job).await?;
            }
            apply.patch(&pvs, &g.name, &patch).await?;
            Action::await_change()
        }
        VolumeStep::Delete {
            uid,
            resource_version,
        } => {
            apply.delete(&pvs, &g.name, uid, resource_version).await?;
            Action::await_change()
        }
        VolumeStep::Finish(patch) => {
            // Marked and released in one write: a restart after it never runs the Job again.
            // Sent once: a reconcile on a cache that has not caught up yet sends nothing.
            let first_job = g
                .jobs()
                .filter_map(|j| j.metadata.creation_timestamp.as_ref().map(|t| t.0))
                .min();
            apply
                .finish_volume(&g.pv_uid, &g.name, &patch, &g.class, first_job)
                .await?;
            Action::await_change()
        }
        VolumeStep::WriteRecord(record) => {
            apply.create_or_adopt(record.as_ref()).await?;
            Action::requeue(Duration::from_millis(100))
        }
        VolumeStep::CreateJob(job) => {
            apply.create_job(&job, &g.pv_uid).await?;
            Action::requeue(flex_core::plan::volume::RUNNING_RECHECK)
        }
    })
}
