//! One bound claim that may need to grow: gather what `plan::expand` needs from the stores
//! (the record from the API server, only when a Job is due), plan, carry out the step.

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use super::context::Context;
use super::create_or_adopt;
use crate::names::{LABEL_ACTION, LABEL_CLAIM_UID};
use crate::plan::expand::{ExpandInputs, ExpandStep, plan_expand};
use crate::record::read_record;

pub(super) async fn reconcile_expansion(
    claim: &PersistentVolumeClaim,
    ctx: &Context,
) -> crate::Result<Action> {
    let opts = &ctx.opts;
    let Some(volume_name) = claim.spec.as_ref().and_then(|s| s.volume_name.clone()) else {
        return Ok(Action::await_change());
    };
    let uid = claim.uid().unwrap_or_default();
    let pv = ctx.caches.volumes.get(&ObjectRef::new(&volume_name));
    let class_allows = claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .and_then(|c| ctx.caches.classes.get(&ObjectRef::new(c)))
        .and_then(|sc| sc.allow_volume_expansion)
        .unwrap_or(false);
    let jobs: Vec<Arc<Job>> = ctx
        .caches
        .jobs
        .iter()
        .flat_map(|s| s.state())
        .filter(|j| {
            j.labels().get(LABEL_ACTION).map(String::as_str) == Some("expand")
                && j.labels().get(LABEL_CLAIM_UID) == Some(&uid)
        })
        .collect();
    let pods: Vec<Arc<Pod>> = ctx
        .caches
        .pods
        .iter()
        .flat_map(|s| s.state())
        .filter(|p| {
            p.labels().get(LABEL_ACTION).map(String::as_str) == Some("expand")
                && p.labels().get(LABEL_CLAIM_UID) == Some(&uid)
        })
        .collect();
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
    let mut plan = plan_with(pv.as_deref(), None);
    // The record is read from the API server only when a Job is about to be built from it.
    let fetched;
    if plan.step == ExpandStep::ReadRecord
        && let Some(pv) = pv.as_deref()
    {
        let record = super::volumes::fetch_record(ctx, pv)
            .await?
            .ok_or_else(|| "its deprovision record is missing".to_owned())
            .and_then(|cm| read_record(&cm, pv));
        fetched = pv.clone();
        plan = plan_with(Some(&fetched), Some(record));
    }
    let class = claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .unwrap_or_default();
    ctx.tell(&claim.object_ref(&()), &class, &plan.notices)
        .await;
    let claims: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &claim.namespace().unwrap_or_default());
    let status = |patch| async move {
        claims
            .patch_status(
                &claim.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
    };
    Ok(match plan.step {
        ExpandStep::Ignore | ExpandStep::Blocked | ExpandStep::ReadRecord => Action::await_change(),
        ExpandStep::Wait(d) => Action::requeue(d),
        ExpandStep::Start { job, status: s } => {
            status(s).await?;
            create_or_adopt(ctx, job.as_ref()).await?;
            Action::await_change()
        }
        ExpandStep::Finish {
            pv_patch,
            status: s,
        } => {
            if let Some(p) = pv_patch {
                Api::<PersistentVolume>::all(ctx.client.clone())
                    .patch(&volume_name, &PatchParams::default(), &Patch::Merge(&p))
                    .await?;
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
