//! One PV: gather what the volume state machine reads, plan, and carry out its one effect
//! (a Job, or a write under its precondition). The claim is read from the API server only
//! when the plan asks, right before a decision that may destroy storage.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::caches::{by_claim, by_source, by_volume};
use super::context::{Context, action_is};
use flex_core::job::{JobOutcome, outcome};
use flex_core::names;
use flex_core::plan::volume::{VolumeInputs, VolumePlan, VolumeStep, plan_volume};

/// The PV's deprovision record, from the API server (only read when a Job may be created):
/// in the config namespaces alone, which only the controller and kube admins can write.
pub(super) async fn fetch_record(
    ctx: &Context,
    pv: &PersistentVolume,
) -> crate::Result<Option<ConfigMap>> {
    let name = flex_core::record::record_name(pv.metadata.uid.as_deref().unwrap_or_default());
    for ns in &ctx.opts.config_namespaces {
        if let Some(cm) = Api::<ConfigMap>::namespaced(ctx.client.clone(), ns)
            .get_opt(&name)
            .await
            .map_err(crate::Error::read(format!("record {ns}/{name}")))?
        {
            return Ok(Some(cm));
        }
    }
    Ok(None)
}

/// Whether a claim holds `pv` against deprovisioning (`plan::volume::claim_holds`), as the
/// API server says: the claim at the claimRef (re-created under its name), the claim the
/// record says the volume was verified for, and those the cache shows naming it.
async fn named_by_claim(
    ctx: &Context,
    pv: &PersistentVolume,
    at: Option<&(String, String)>,
    record: Option<&ConfigMap>,
    cached: &[(String, String)],
) -> crate::Result<bool> {
    let mut candidates: Vec<(String, String)> = cached.to_vec();
    candidates.extend(record.and_then(flex_core::record::record_claim));
    candidates.extend(at.cloned());
    candidates.sort();
    candidates.dedup();
    for (ns, n) in candidates {
        let claim = Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), &ns)
            .get_opt(&n)
            .await
            .map_err(crate::Error::read(format!("claim {ns}/{n}")))?;
        if claim.is_some_and(|c| flex_core::plan::volume::claim_holds(pv, &c)) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A PV that names this provisioner but is not verified (cached cut short, see
/// `caches::trim_volume`) is worth a read only when a Job of ours made it (an image-mode
/// volume whose claim went before it was verified): anyone with PV create can make such
/// PVs by the thousand, and they cost no request. `None`: nothing to do.
async fn whole_if_made_by_us(
    pv: Arc<PersistentVolume>,
    ctx: &Context,
) -> crate::Result<Option<Arc<PersistentVolume>>> {
    if !super::caches::is_volume_cut_short(&pv) {
        return Ok(Some(pv));
    }
    let name = pv.name_any();
    let made_by_us = ctx
        .caches
        .jobs_by(&by_volume(&name))
        .iter()
        .any(|j| action_is(j.labels(), names::Action::Provision));
    if !made_by_us {
        return Ok(None);
    }
    read_whole(&pv, ctx).await
}

/// A PV the cache keeps cut short, read whole from the API server (`None`: it is gone, or
/// another has its name now).
pub(super) async fn read_whole(
    pv: &PersistentVolume,
    ctx: &Context,
) -> crate::Result<Option<Arc<PersistentVolume>>> {
    let name = pv.name_any();
    let whole = ctx
        .apply
        .volumes()
        .get_opt(&name)
        .await
        .map_err(crate::Error::read(format!("volume {name}")))?;
    Ok(whole
        .filter(|w| w.metadata.uid == pv.metadata.uid)
        .map(|mut w| {
            super::caches::trim_meta(&mut w);
            Arc::new(w)
        }))
}

/// One PV of ours: gather, decide (reading the record, the claim and the PV afresh when
/// the plan asks), tell, apply.
pub async fn reconcile_volume(
    cached: Arc<super::compact::Compact<PersistentVolume>>,
    ctx: Arc<Context>,
) -> crate::Result<Action> {
    ctx.ready().await;
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
    let Some(plan) = decide(&g, &ctx).await? else {
        // The volume is gone, or another has its name now.
        return Ok(Action::await_change());
    };
    ctx.apply
        .tell(&g.pv.object_ref(&()), &g.class, &plan.notices)
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
            .filter(|j| action_is(j.labels(), names::Action::Deprovision))
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
        .filter(|j| action_is(j.labels(), names::Action::Provision))
        .cloned()
        .collect();
    provision_jobs.sort_by_key(|j| j.metadata.uid.clone());
    provision_jobs.dedup_by_key(|j| j.metadata.uid.clone());
    let provisioning = claim_jobs
        .iter()
        .filter(|j| {
            action_is(j.labels(), names::Action::Provision)
                || action_is(j.labels(), names::Action::Expand)
        })
        .chain(ctx.caches.jobs_by(&by_source(&name)).iter())
        .any(|j| outcome(j, &[]) == JobOutcome::Running);
    let mut pods = ctx.caches.pods_by(&by_volume(&name));
    pods.retain(|p| action_is(p.labels(), names::Action::Deprovision));
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

/// What the plan reads beyond the caches, once it asked for it.
#[derive(Default)]
struct Read<'r> {
    claim: Option<&'r PersistentVolumeClaim>,
    record: Option<&'r ConfigMap>,
    named_by_claim: bool,
    claim_confirmed: bool,
    record_read: bool,
}

fn plan_with(g: &Gathered, ctx: &Context, pv: &PersistentVolume, read: Read<'_>) -> VolumePlan {
    let opts = &ctx.opts;
    plan_volume(&VolumeInputs {
        pv,
        record: read.record,
        provision_jobs: g.provision_jobs.iter().map(AsRef::as_ref).collect(),
        provisioner_name: &opts.provisioner_name,
        claim: read.claim,
        named_by_claim: read.named_by_claim,
        claim_confirmed: read.claim_confirmed,
        record_read: read.record_read,
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

/// The plan from the caches; then, when it asks, again with the record (a released volume
/// being deleted: its claim is known gone), or with the claim, the PV and the record read
/// afresh (a volume cached as Released may have been re-bound since). `None`: the PV is
/// gone, or another has its name now.
async fn decide(g: &Gathered, ctx: &Context) -> crate::Result<Option<VolumePlan>> {
    let cached = Read {
        claim: g.cached_claim.as_deref(),
        named_by_claim: !g.others_naming.is_empty(),
        ..Read::default()
    };
    let mut plan = plan_with(g, ctx, &g.pv, cached);
    if plan.step == VolumeStep::ReadRecord {
        let record = fetch_record(ctx, &g.pv).await?;
        let named = named_by(g, ctx, record.as_ref()).await?;
        let read = Read {
            claim: g.cached_claim.as_deref(),
            record: record.as_ref(),
            named_by_claim: named,
            record_read: true,
            ..Read::default()
        };
        plan = plan_with(g, ctx, &g.pv, read);
    }
    if plan.step != VolumeStep::ConfirmClaim {
        return Ok(Some(plan));
    }
    let Some(fresh) = Api::<PersistentVolume>::all(ctx.client.clone())
        .get_opt(&g.name)
        .await
        .map_err(crate::Error::read(format!("PersistentVolume {}", g.name)))?
        .filter(|p| p.metadata.uid == g.pv.metadata.uid)
    else {
        return Ok(None);
    };
    let claim = match &g.at {
        Some((ns, n)) => Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), ns)
            .get_opt(n)
            .await
            .map_err(crate::Error::read(format!("claim {ns}/{n}")))?,
        None => None,
    };
    let record = fetch_record(ctx, &fresh).await?;
    let named = named_by(g, ctx, record.as_ref()).await?;
    let read = Read {
        claim: claim.as_ref(),
        record: record.as_ref(),
        named_by_claim: named,
        claim_confirmed: true,
        record_read: true,
    };
    Ok(Some(plan_with(g, ctx, &fresh, read)))
}

async fn named_by(g: &Gathered, ctx: &Context, record: Option<&ConfigMap>) -> crate::Result<bool> {
    named_by_claim(ctx, &g.pv, g.at.as_ref(), record, &g.others_naming).await
}

/// Carries out the plan's one effect.
async fn apply(g: &Gathered, ctx: &Context, step: VolumeStep) -> crate::Result<Action> {
    let (apply, pvs) = (&ctx.apply, ctx.apply.volumes());
    Ok(match step {
        VolumeStep::Ignore => Action::await_change(),
        // Only returned before the API server was asked, and it was asked in `decide`.
        VolumeStep::ConfirmClaim | VolumeStep::ReadRecord => {
            Action::requeue(Duration::from_secs(1))
        }
        VolumeStep::Wait(wait) => Action::requeue(wait),
        VolumeStep::Patch(patch) => {
            apply.patch(&pvs, &g.name, &patch).await?;
            Action::await_change()
        }
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
