//! One PV: gather what the volume state machine reads, plan, and carry out its one effect
//! (a Job, or a write under its precondition). The claim is read from the API server only
//! when the plan asks, right before a decision that may destroy storage.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::caches::{by_claim, by_source, by_volume};
use super::context::{Context, action_is};
use super::{create_or_adopt, gone_is_done};
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
            .await?
        {
            return Ok(Some(cm));
        }
    }
    Ok(None)
}

/// Whether a claim other than the one at the claimRef (`at`) names `volume` in
/// `spec.volumeName`, as the API server says: the claim the record says the volume was
/// verified for, and those the cache shows naming it.
async fn named_by_claim(
    ctx: &Context,
    volume: &str,
    at: Option<&(String, String)>,
    record: Option<&ConfigMap>,
    cached: &[(String, String)],
) -> crate::Result<bool> {
    let mut candidates: Vec<(String, String)> = cached.to_vec();
    candidates.extend(record.and_then(flex_core::record::record_claim));
    candidates.retain(|c| Some(c) != at);
    candidates.sort();
    candidates.dedup();
    for (ns, n) in candidates {
        let claim = Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), &ns)
            .get_opt(&n)
            .await?;
        if claim
            .and_then(|c| c.spec?.volume_name)
            .is_some_and(|v| v == volume)
        {
            return Ok(true);
        }
    }
    Ok(false)
}

pub async fn reconcile_volume(
    cached: Arc<super::compact::Compact<PersistentVolume>>,
    ctx: Arc<Context>,
) -> crate::Result<Action> {
    ctx.ready().await;
    let Some(pv) = cached.full().map(Arc::new) else {
        return Ok(Action::await_change());
    };
    let opts = &ctx.opts;
    if !flex_core::volume::provisioned_by(&pv, &opts.provisioner_name) {
        return Ok(Action::await_change());
    }
    let name = pv.name_any();
    let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.clone());
    let claim_uid = claim_ref
        .as_ref()
        .and_then(|r| r.uid.clone())
        .unwrap_or_default();
    let claim_jobs = match claim_uid.as_str() {
        "" => vec![],
        uid => ctx.caches.jobs_by(&by_claim(uid)),
    };
    let copying_jobs = ctx.caches.jobs_by(&by_source(&name));
    let volume_jobs = ctx.caches.jobs_by(&by_volume(&name));
    // The Jobs that made this volume: by its claim, and by its name (a claimRef an admin
    // cleared or re-pointed no longer names the claim they were for).
    let mut provision_jobs: Vec<&Job> = claim_jobs
        .iter()
        .chain(volume_jobs.iter())
        .map(AsRef::as_ref)
        .filter(|j| action_is(j.labels(), names::Action::Provision))
        .collect();
    provision_jobs.sort_by_key(|j| j.metadata.uid.clone());
    provision_jobs.dedup_by_key(|j| j.metadata.uid.clone());
    // A provisioning or expansion pod still at work on the volume is waited for, and so is
    // a clone's provisioning pod still copying from it.
    let provisioning = claim_jobs
        .iter()
        .filter(|j| {
            action_is(j.labels(), names::Action::Provision)
                || action_is(j.labels(), names::Action::Expand)
        })
        .chain(copying_jobs.iter())
        .any(|j| outcome(j, &[]) == JobOutcome::Running);
    let jobs: Vec<&Job> = volume_jobs
        .iter()
        .map(AsRef::as_ref)
        .filter(|j| action_is(j.labels(), names::Action::Deprovision))
        .collect();
    let mut pods = ctx.caches.pods_by(&by_volume(&name));
    pods.retain(|p| action_is(p.labels(), names::Action::Deprovision));
    let pv_uid = pv.uid().unwrap_or_default();
    // A deprovision Job created a moment ago that the watch has not delivered yet.
    if ctx
        .starts
        .unseen_for(&pv_uid, |job| jobs.iter().any(|j| j.name_any() == job))
        .is_some()
    {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    let at = claim_ref
        .as_ref()
        .and_then(|r| Some((r.namespace.clone()?, r.name.clone()?)));
    let cached = at.as_ref().and_then(|(ns, n)| ctx.caches.claim(ns, n));
    // Claims other than the one at the claimRef that name this volume (the one it was made
    // for, after a re-pointed claimRef; one an admin hands it to): from the cache first.
    let others_naming = ctx
        .caches
        .claims_naming(&name)
        .into_iter()
        .filter(|c| Some(c) != at.as_ref())
        .collect::<Vec<_>>();
    let plan_with = |pv: &PersistentVolume,
                     claim: Option<&PersistentVolumeClaim>,
                     record: Option<&ConfigMap>,
                     named_by_claim: bool,
                     confirmed: bool,
                     record_read: bool|
     -> VolumePlan {
        plan_volume(&VolumeInputs {
            pv,
            record,
            provision_jobs: provision_jobs.clone(),
            provisioner_name: &opts.provisioner_name,
            claim,
            named_by_claim,
            claim_confirmed: confirmed,
            record_read,
            provisioning,
            jobs: jobs.clone(),
            pods: pods.iter().map(AsRef::as_ref).collect(),
            retry_base: opts.retry_base,
            job_ttl_seconds: opts.job_ttl_seconds,
            now: jiff::Timestamp::now(),
        })
    };
    let mut plan = plan_with(
        &pv,
        cached.as_deref(),
        None,
        !others_naming.is_empty(),
        false,
        false,
    );
    if plan.step == VolumeStep::ReadRecord {
        // Kubernetes released the volume and it is being deleted: its claim is known gone,
        // and the record (which says what to run) is read, with the claims that may still
        // name the volume.
        let record = fetch_record(&ctx, &pv).await?;
        let named =
            named_by_claim(&ctx, &name, at.as_ref(), record.as_ref(), &others_naming).await?;
        plan = plan_with(&pv, cached.as_deref(), record.as_ref(), named, false, true);
    }
    if plan.step == VolumeStep::ConfirmClaim {
        // The PV too is read afresh: a volume cached as Released may have been re-bound
        // since (its claimRef cleared and taken by a new claim).
        let Some(fresh) = Api::<PersistentVolume>::all(ctx.client.clone())
            .get_opt(&name)
            .await?
            .filter(|p| p.metadata.uid == pv.metadata.uid)
        else {
            return Ok(Action::await_change());
        };
        let fetched = match &at {
            Some((ns, n)) => {
                Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), ns)
                    .get_opt(n)
                    .await?
            }
            None => None,
        };
        let record = fetch_record(&ctx, &fresh).await?;
        let named =
            named_by_claim(&ctx, &name, at.as_ref(), record.as_ref(), &others_naming).await?;
        plan = plan_with(&fresh, fetched.as_ref(), record.as_ref(), named, true, true);
    }
    let on = pv.object_ref(&());
    let class = pv
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .unwrap_or_default();
    ctx.tell(&on, &class, &plan.notices).await;
    let pvs: Api<PersistentVolume> = Api::all(ctx.client.clone());
    Ok(match plan.step {
        VolumeStep::Ignore => Action::await_change(),
        // Only returned before the API server was asked, and it was asked above.
        VolumeStep::ConfirmClaim | VolumeStep::ReadRecord => {
            Action::requeue(Duration::from_secs(1))
        }
        VolumeStep::Wait(wait) => Action::requeue(wait),
        VolumeStep::Patch(patch) => {
            gone_is_done(
                pvs.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await,
            )?;
            Action::await_change()
        }
        VolumeStep::KeepStorage { patch, mark_jobs } => {
            for (ns, job) in &mark_jobs {
                gone_is_done(super::mark_pv_created(&ctx, ns, job).await)?;
            }
            gone_is_done(
                pvs.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await,
            )?;
            Action::await_change()
        }
        VolumeStep::Delete {
            uid,
            resource_version,
        } => {
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version,
                }),
                ..DeleteParams::background()
            };
            gone_is_done(pvs.delete(&name, &dp).await)?;
            Action::await_change()
        }
        VolumeStep::Finish(patch) => {
            // Done already; the cache has not caught up.
            let key = format!("finished/{pv_uid}");
            if ctx.written.contains(&key) {
                return Ok(Action::await_change());
            }
            // Marked and released in one write: a restart after it never runs the Job again.
            gone_is_done(
                pvs.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await,
            )?;
            ctx.written.insert(&key);
            ctx.metrics.delete_total.with_label_values(&[&class]).inc();
            let first_job = jobs
                .iter()
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
            Action::await_change()
        }
        VolumeStep::WriteRecord(record) => {
            create_or_adopt(&ctx, record.as_ref()).await?;
            Action::requeue(Duration::from_millis(100))
        }
        VolumeStep::CreateJob(job) => {
            create_or_adopt(&ctx, job.as_ref()).await?;
            ctx.starts
                .record_for(&pv_uid, &job.name_any(), flex_core::job::attempt_of(&job));
            Action::requeue(flex_core::plan::volume::RUNNING_RECHECK)
        }
    })
}
