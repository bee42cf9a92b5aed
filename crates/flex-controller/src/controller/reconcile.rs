//! One claim: gather what the planner needs from the stores, plan, carry out the step.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::caches::{by_claim, by_class};
use super::configs::Resolved;
use super::context::Context;
use super::{create_or_adopt, gone_is_done};
use flex_core::claim::{ClaimRequest, NodeInfo};
use flex_core::job::{JobOutcome, ProvisionContext, outcome, provision_job};
use flex_core::names::{ANN_SELECTED_NODE, pv_name};
use flex_core::plan::claim::{
    ANN_ATTEMPT, ANN_GAVE_UP, ClaimInputs, ConfigState, Step, plan_claim_with,
};
use flex_core::plan::{Notice, reasons};
use flex_core::rendered::RenderRequest;

/// A running attempt is looked at again on every change of its Job, its pods and the Job
/// controller's events about it; this is only the safety net. Short, it made a long burst
/// cost each waiting claim a reconcile (and a render) every few seconds.
const RUNNING_RECHECK: Duration = Duration::from_secs(120);

fn is_provision(job: &Job) -> bool {
    super::context::action_is(job.labels(), flex_core::names::Action::Provision)
}

/// How often a claim that waits for a change is looked at anyway.
const RECHECK_BLOCKED: Duration = Duration::from_secs(60);
/// How often a claim whose data source is not usable yet is looked at: its source claim
/// binding (or an admin's grant) does not trigger it.
const RECHECK_SOURCE: Duration = Duration::from_secs(5);

pub async fn reconcile(
    cached: Arc<super::compact::Compact<PersistentVolumeClaim>>,
    ctx: Arc<Context>,
) -> crate::Result<Action> {
    ctx.ready().await;
    let Some(claim) = cached.full().map(Arc::new) else {
        return Ok(Action::await_change());
    };
    let opts = &ctx.opts;
    let uid = claim.uid().unwrap_or_default();
    let class = flex_core::claim::class_of(&claim)
        .unwrap_or_default()
        .to_owned();
    let class_provisioner = ctx
        .caches
        .classes
        .get(&ObjectRef::new(&class))
        .map(|c| c.provisioner.clone());
    let ours = flex_core::plan::claim::is_ours(
        &claim,
        class_provisioner.as_deref(),
        &opts.provisioner_name,
    );
    // The cache holds a bounded record of each claim (see `caches::trim_claim`); a claim of
    // ours that did not fit is read whole, since its templates and the digest of its inputs
    // read every label and annotation.
    let claim = match ours && super::caches::is_cut_short(&claim) {
        false => claim,
        true => match Api::<PersistentVolumeClaim>::namespaced(
            ctx.client.clone(),
            &claim.namespace().unwrap_or_default(),
        )
        .get_opt(&claim.name_any())
        .await?
        {
            Some(mut whole) if whole.metadata.uid.as_deref() == Some(uid.as_str()) => {
                super::caches::trim_meta(&mut whole);
                Arc::new(whole)
            }
            // Deleted (or replaced) since: its own watch event brings what follows.
            _ => return Ok(Action::await_change()),
        },
    };
    let (resolved, report) = ctx.configs.resolve(
        &class,
        &opts.parse_options(),
        &ctx.caches.classes,
        &ctx.caches.config_maps,
        &opts.config_namespaces,
    );
    if let Some(r) = report {
        let on = r.config_map.object_ref(&());
        let errors = r.problems.iter().filter(|p| p.is_error()).count() as u64;
        ctx.metrics
            .config_errors_total
            .with_label_values(&[&class])
            .inc_by(errors);
        for p in &r.problems {
            ctx.event(&on, p.is_error(), reasons::CONFIG_INVALID, &p.to_string())
                .await;
        }
    }
    let mut jobs = ctx.caches.jobs_by(&by_claim(&uid));
    jobs.retain(|j| is_provision(j));
    let pods = ctx.caches.pods_by(&by_claim(&uid));
    let pv = ctx.caches.volume(&pv_name(&uid));
    let selected = claim.annotations().get(ANN_SELECTED_NODE);
    let node = selected
        .and_then(|name| ctx.caches.nodes.get(&ObjectRef::new(name)))
        .map(|n| NodeInfo::from_node(&n));
    // A node the scheduler chose that the node cache does not show yet (just joined): a
    // Job made now would lack its placement and the PV its node affinity.
    if selected.is_some()
        && node.is_none()
        && claim.spec.as_ref().is_some_and(|s| s.volume_name.is_none())
    {
        return Ok(Action::requeue(Duration::from_secs(2)));
    }
    let created_attempt = ctx
        .starts
        .unseen_for(&uid, |name| jobs.iter().any(|j| j.name_any() == name));
    // The PV created here a moment ago, not cached yet: its event brings the claim back.
    let pv_key = format!("pv/{uid}");
    if ctx.starts.unseen_for(&pv_key, |_| pv.is_some()).is_some() {
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    // Rendering is CPU work bounded by its budget (time and bytes): it runs on a blocking
    // thread, so a hostile template or claim never stalls the reconciles of other classes.
    let request = ClaimRequest::from_claim(&claim);
    let rendered = match (&resolved, &request) {
        (Resolved::Ready(c), Ok(req)) if ours => {
            let request = RenderRequest {
                config: c.clone(),
                claim: req.clone(),
                node: node.clone(),
                provisioner_name: opts.provisioner_name.clone(),
            };
            tokio::task::spawn_blocking(move || request.render())
                .await
                .ok()
        }
        _ => None,
    };
    // With `max-concurrent`, counting the class's active Jobs and creating the next one is
    // one step: concurrent reconciles of the class take turns.
    let limited = matches!(&resolved, Resolved::Ready(c) if c.provisioner.max_concurrent.is_some());
    let _turn = match limited {
        true => Some(ctx.starts.turn(&class).await),
        false => None,
    };
    // Only a class with `max-concurrent` counts its Jobs: a burst of a class without it
    // must not cost each reconcile a pass over every Job of the class.
    let active_jobs_of_class = match limited {
        false => 0,
        true => {
            let class_jobs = ctx.caches.jobs_by(&by_class(&class));
            let cached: std::collections::HashSet<&str> = class_jobs
                .iter()
                .filter_map(|j| j.metadata.name.as_deref())
                .collect();
            class_jobs
                .iter()
                .filter(|j| outcome(j, &[]) == JobOutcome::Running)
                .count()
                + ctx.starts.unseen(&class, &cached)
        }
    };
    let hash = match (&resolved, &request) {
        (Resolved::Ready(c), Ok(req)) => flex_core::inputs::inputs_hash(c, req),
        _ => String::new(),
    };
    let config = match &resolved {
        Resolved::Ready(c) => ConfigState::Ready(c),
        Resolved::Unusable(p) => ConfigState::Unusable(p),
    };
    // A pending claim's data source of a kind its class lists, resolved for its Job (the
    // record of a clone's source is read from the API server until the Job exists).
    let pending = claim.spec.as_ref().is_some_and(|s| s.volume_name.is_none());
    let source = match (&resolved, &request) {
        (Resolved::Ready(c), Ok(req)) if ours && pending => match &req.data_source {
            Some(ds) if c.provisioner.data_sources.contains(&ds.kind_key()) => {
                Some(super::sources::resolve(&ctx, req, ds).await?)
            }
            _ => None,
        },
        _ => None,
    };
    let plan_with = |pv: Option<&PersistentVolume>, pv_absence_confirmed: bool| {
        let inputs = ClaimInputs {
            claim: &claim,
            provisioner_name: &opts.provisioner_name,
            class_provisioner: class_provisioner.as_deref(),
            config,
            jobs: jobs.iter().map(AsRef::as_ref).collect(),
            pods: pods.iter().map(AsRef::as_ref).collect(),
            pv,
            pv_absence_confirmed,
            node: node.as_ref(),
            active_jobs_of_class,
            inputs_hash: &hash,
            retry_base: opts.retry_base,
            now: jiff::Timestamp::now(),
            source: source.as_ref(),
            created_attempt,
        };
        plan_claim_with(&inputs, rendered.clone())
    };
    let mut plan = plan_with(pv.as_deref(), false);
    // Read only at the moment of the decision: the Job succeeded and the cache has no PV.
    let fetched;
    if plan.step == Step::ConfirmPv {
        fetched = Api::<PersistentVolume>::all(ctx.client.clone())
            .get_opt(&pv_name(&uid))
            .await?;
        plan = plan_with(fetched.as_ref(), fetched.is_none());
    }
    let on = claim.object_ref(&());
    let fresh = ctx.tell(&on, &class, &plan.notices).await;
    if fresh.iter().any(|k| k.starts_with("succeeded/"))
        && let Some(created) = claim.metadata.creation_timestamp.as_ref()
    {
        let age = jiff::Timestamp::now()
            .duration_since(created.0)
            .as_secs_f64()
            .max(0.0);
        ctx.metrics
            .provision_duration
            .with_label_values(&[&class])
            .observe(age);
    }
    let claims: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &claim.namespace().unwrap_or_default());
    let claim_name = claim.name_any();
    Ok(match plan.step {
        // Provisioning has nothing to do: a bound claim may still need to grow.
        Step::Ignore => super::expansion::reconcile_expansion(&claim, &ctx).await?,
        Step::WaitForNode => Action::await_change(),
        // Only returned before the API server was asked, and it was asked above.
        Step::ConfirmPv => Action::requeue(Duration::from_secs(1)),
        // Triggers cover changes to the claim, class and ConfigMap; this is the safety net.
        Step::Blocked => Action::requeue(RECHECK_BLOCKED),
        Step::AwaitSource => Action::requeue(RECHECK_SOURCE),
        Step::Throttled => Action::requeue(Duration::from_secs(5)),
        Step::AwaitPvRemoval | Step::AwaitReport => Action::requeue(Duration::from_secs(1)),
        Step::CreatePv { pv } => {
            // A conflict: it exists already (ours from an earlier reconcile, or someone
            // else's); either way the next plan, from the cache, judges what is there.
            match Api::<PersistentVolume>::all(ctx.client.clone())
                .create(&kube::api::PostParams::default(), &pv)
                .await
            {
                Ok(_) => {
                    ctx.starts.record_for(&pv_key, &pv.name_any(), 0);
                    Action::await_change()
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    Action::requeue(Duration::from_secs(1))
                }
                Err(e) => return Err(e.into()),
            }
        }
        Step::Backoff { wait, .. } => Action::requeue(wait),
        Step::Running { attempt } => {
            starting_problems(&ctx, &on, &jobs, attempt).await;
            Action::requeue(RUNNING_RECHECK)
        }
        Step::RecordAttempt { attempt, wait } => {
            // Once, and only because the failed Job expires before the next attempt: under
            // the claim's resourceVersion, so a conflict re-plans from the fresh claim.
            let patch = json!({"metadata": {"annotations": {ANN_ATTEMPT: attempt.to_string()},
                                            "resourceVersion": claim.resource_version()}});
            gone_is_done(
                claims
                    .patch(&claim_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await,
            )?;
            Action::requeue(wait)
        }
        Step::GiveUp { attempt } => {
            // Under the claim's resourceVersion: a conflict re-plans from the fresh claim.
            let patch = json!({"metadata": {"annotations": {ANN_GAVE_UP: hash, ANN_ATTEMPT: attempt.to_string()},
                                            "resourceVersion": claim.resource_version()}});
            gone_is_done(
                claims
                    .patch(&claim_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await,
            )?;
            Action::await_change()
        }
        Step::BoundToUnverified { pv } => {
            // The same words on the PV, where an admin looks; counted once (on the claim).
            let on_pv: Vec<Notice> = plan
                .notices
                .iter()
                .map(|n| Notice {
                    key: format!("on-pv/{}", n.key),
                    ..n.clone()
                })
                .collect();
            ctx.tell(&pv, &class, &on_pv).await;
            // Said once; a change of the PV or the claim brings it back.
            Action::await_change()
        }
        Step::Provisioned { patch, record } => {
            // The record first: a volume with our finalizer but no record could never be
            // deprovisioned (it would be kept, with a warning).
            if let Some(record) = record {
                let key = format!("record/{}", record.name_any());
                if !ctx.written.contains(&key) {
                    create_or_adopt(&ctx, record.as_ref()).await?;
                    ctx.written.insert(&key);
                }
            }
            if let Some(patch) = patch {
                let pvs: Api<PersistentVolume> = Api::all(ctx.client.clone());
                gone_is_done(
                    pvs.patch(
                        &pv_name(&uid),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await,
                )?;
            }
            // A bound claim may have grown: expansion looks at it.
            super::expansion::reconcile_expansion(&claim, &ctx).await?
        }
        Step::RemoveWrongPv { uid: pv_uid } => {
            let pvs: Api<PersistentVolume> = Api::all(ctx.client.clone());
            let dp = DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    uid: Some(pv_uid),
                    resource_version: None,
                }),
                ..DeleteParams::background()
            };
            gone_is_done(pvs.delete(&pv_name(&uid), &dp).await)?;
            Action::requeue(Duration::from_secs(1))
        }
        Step::Start {
            attempt,
            rendered,
            template,
        } => {
            let Resolved::Ready(config) = &resolved else {
                return Ok(Action::await_change());
            };
            let request = request.clone()?;
            let job = provision_job(
                ProvisionContext {
                    config,
                    claim: &request,
                    node: node.as_ref(),
                    rendered: &rendered,
                    pv_template: &template,
                    provisioner_name: &opts.provisioner_name,
                    source: source.as_ref(),
                },
                attempt,
                opts.job_ttl_seconds,
            );
            let ns = job.namespace().unwrap_or_default();
            let job_name = job.name_any();
            // Already created (by an earlier run of this controller): adopted.
            create_or_adopt(&ctx, &job).await?;
            ctx.starts.record(&class, &job_name);
            ctx.starts.record_for(&uid, &job_name, attempt);
            ctx.tell(&on, &class, &[Notice::normal(
                    format!("provisioning/{uid}/{attempt}"),
                    reasons::PROVISIONING,
                    format!("External provisioner is provisioning volume for claim \"{}/{claim_name}\" (attempt {attempt}, Job {ns}/{job_name})", claim.namespace().unwrap_or_default()),
                ).about(&job).action("Provision")],
            )
            .await;
            Action::requeue(RUNNING_RECHECK)
        }
    })
}

/// A Job whose pod could not even be created (a missing ServiceAccount, a quota) leaves no
/// pod to look at; the Job controller's FailedCreate event, which the controller watches,
/// says why.
async fn starting_problems(
    ctx: &Context,
    on: &k8s_openapi::api::core::v1::ObjectReference,
    jobs: &[Arc<Job>],
    attempt: u32,
) {
    for job in jobs
        .iter()
        .filter(|j| outcome(j, &[]) == JobOutcome::Running)
    {
        let no_pods = job
            .status
            .as_ref()
            .is_none_or(|s| s.active.unwrap_or(0) == 0 && s.failed.unwrap_or(0) == 0);
        if !no_pods {
            continue;
        }
        if let Some(ev) = ctx.caches.failed_create(job) {
            let message = format!(
                "attempt {attempt}: the Job {} cannot create its pod: {}",
                job.name_any(),
                ev.message.clone().unwrap_or_default()
            );
            ctx.tell(
                on,
                "",
                &[Notice::warning(
                    format!("job-create/{}", job.uid().unwrap_or_default()),
                    reasons::POD_NOT_STARTING,
                    message,
                )
                .about(job.as_ref())
                .action("Observe")],
            )
            .await;
        }
    }
}
