//! One claim: gather what the planner needs from the stores, plan, carry out the step.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::apply::{self, Created, create_or_adopt};
use super::caches::{by_claim, by_class};
use super::configs::Resolved;
use super::context::Context;
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

/// One claim: gather what the planner needs, plan (reading the PV from the API server when
/// the plan asks), tell what the plan says, carry out its step.
pub async fn reconcile(
    cached: Arc<super::compact::Compact<PersistentVolumeClaim>>,
    ctx: Arc<Context>,
) -> crate::Result<Action> {
    ctx.ready().await;
    let Some(claim) = cached.full().map(Arc::new) else {
        return Ok(Action::await_change());
    };
    let g = match gather(claim, &ctx).await? {
        Ok(g) => g,
        Err(wait) => return Ok(wait),
    };
    let plan = decide(&g, &ctx).await?;
    announce(&g, &ctx, &plan).await;
    apply(&g, &ctx, plan).await
}

/// What one claim's plan is made from, read from the caches (and, only for a claim of ours
/// that needs it, from the API server).
struct Gathered {
    claim: Arc<PersistentVolumeClaim>,
    uid: String,
    class: String,
    class_provisioner: Option<String>,
    resolved: Resolved,
    request: Result<ClaimRequest, flex_core::claim::ClaimError>,
    jobs: Vec<Arc<Job>>,
    pods: Vec<Arc<k8s_openapi::api::core::v1::Pod>>,
    pv: Option<Arc<PersistentVolume>>,
    node: Option<NodeInfo>,
    created_attempt: Option<u32>,
    rendered: Option<Result<flex_core::rendered::Rendered, flex_core::rendered::RenderFailure>>,
    active_jobs_of_class: usize,
    hash: String,
    source: Option<flex_core::source::SourceData>,
    /// With `max-concurrent`, counting the class's active Jobs and creating the next one is
    /// one step: concurrent reconciles of the class take turns (held until applied).
    _turn: Option<tokio::sync::OwnedMutexGuard<()>>,
}

/// The planner's inputs for `claim`, or how long to wait before there is anything to plan.
async fn gather(
    claim: Arc<PersistentVolumeClaim>,
    ctx: &Context,
) -> crate::Result<Result<Gathered, Action>> {
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
    let Some(claim) = whole_if_cut_short(claim, ours, ctx).await? else {
        // Deleted (or replaced) since: its own watch event brings what follows.
        return Ok(Err(Action::await_change()));
    };
    let resolved = resolve_config(ctx, &class).await;
    let mut jobs = ctx.caches.jobs_by(&by_claim(&uid));
    jobs.retain(|j| is_provision(j));
    let pods = ctx.caches.pods_by(&by_claim(&uid));
    let pv = ctx.caches.volume(&pv_name(&uid));
    let pending = claim.spec.as_ref().is_some_and(|s| s.volume_name.is_none());
    let selected = claim.annotations().get(ANN_SELECTED_NODE);
    let node = selected
        .and_then(|name| ctx.caches.nodes.get(&ObjectRef::new(name)))
        .map(|n| NodeInfo::from_node(&n));
    // A node the scheduler chose that the node cache does not show yet (just joined): a
    // Job made now would lack its placement and the PV its node affinity.
    if selected.is_some() && node.is_none() && pending {
        return Ok(Err(Action::requeue(Duration::from_secs(2))));
    }
    let created_attempt = ctx
        .starts
        .unseen_for(&uid, |name| jobs.iter().any(|j| j.name_any() == name));
    // The PV created here a moment ago, not cached yet: its event brings the claim back.
    if ctx
        .starts
        .unseen_for(&pv_key(&uid), |_| pv.is_some())
        .is_some()
    {
        return Ok(Err(Action::requeue(Duration::from_secs(5))));
    }
    let request = ClaimRequest::from_claim(&claim);
    let ready = match (&resolved, &request) {
        (Resolved::Ready(c), Ok(req)) => Some((c.clone(), req)),
        _ => None,
    };
    let rendered = match &ready {
        Some((c, req)) if ours => render(c.clone(), req, node.clone(), opts).await,
        _ => None,
    };
    let limited = ready
        .as_ref()
        .is_some_and(|(c, _)| c.provisioner.max_concurrent.is_some());
    let _turn = match limited {
        true => Some(ctx.starts.turn(&class).await),
        false => None,
    };
    let active_jobs_of_class = match limited {
        true => active_jobs_of_class(ctx, &class),
        false => 0,
    };
    let hash = ready
        .as_ref()
        .map(|(c, req)| flex_core::inputs::inputs_hash(c, req))
        .unwrap_or_default();
    // A pending claim's data source of a kind its class lists, resolved for its Job (the
    // record of a clone's source is read from the API server until the Job exists).
    let source = match &ready {
        Some((c, req)) if ours && pending => match &req.data_source {
            Some(ds) if c.provisioner.data_sources.contains(&ds.kind_key()) => {
                Some(super::sources::resolve(ctx, req, ds).await?)
            }
            _ => None,
        },
        _ => None,
    };
    Ok(Ok(Gathered {
        claim,
        uid,
        class,
        class_provisioner,
        resolved,
        request,
        jobs,
        pods,
        pv,
        node,
        created_attempt,
        rendered,
        active_jobs_of_class,
        hash,
        source,
        _turn,
    }))
}

/// Key under which a PV created here is remembered until the cache shows it.
fn pv_key(uid: &str) -> String {
    format!("pv/{uid}")
}

/// The cache holds a bounded record of each claim (see `caches::trim_claim`); a claim of
/// ours that did not fit is read whole, since its templates and the digest of its inputs
/// read every label and annotation. `None`: it is gone, or another claim has its name now.
async fn whole_if_cut_short(
    claim: Arc<PersistentVolumeClaim>,
    ours: bool,
    ctx: &Context,
) -> crate::Result<Option<Arc<PersistentVolumeClaim>>> {
    if !(ours && super::caches::is_cut_short(&claim)) {
        return Ok(Some(claim));
    }
    let uid = claim.uid();
    let whole = Api::<PersistentVolumeClaim>::namespaced(
        ctx.client.clone(),
        &claim.namespace().unwrap_or_default(),
    )
    .get_opt(&claim.name_any())
    .await?;
    Ok(whole.filter(|w| w.metadata.uid == uid).map(|mut w| {
        super::caches::trim_meta(&mut w);
        Arc::new(w)
    }))
}

/// The class's configuration; a ConfigMap's problems are reported (on it, and counted) the
/// first time its version is read.
async fn resolve_config(ctx: &Context, class: &str) -> Resolved {
    let opts = &ctx.opts;
    let (resolved, report) = ctx.configs.resolve(
        class,
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
            .with_label_values(&[class])
            .inc_by(errors);
        for p in &r.problems {
            ctx.event(&on, p.is_error(), reasons::CONFIG_INVALID, &p.to_string())
                .await;
        }
    }
    resolved
}

/// Rendering is CPU work bounded by its budget (time and bytes): it runs on a blocking
/// thread, so a hostile template or claim never stalls the reconciles of other classes.
async fn render(
    config: Arc<flex_core::config::ClassConfig>,
    request: &ClaimRequest,
    node: Option<NodeInfo>,
    opts: &super::Options,
) -> Option<Result<flex_core::rendered::Rendered, flex_core::rendered::RenderFailure>> {
    let request = RenderRequest {
        config,
        claim: request.clone(),
        node,
        provisioner_name: opts.provisioner_name.clone(),
    };
    tokio::task::spawn_blocking(move || request.render())
        .await
        .ok()
}

/// Running provisioning Jobs of a class, those created here but not cached yet included.
/// Counted only for a class with `max-concurrent`: a burst of a class without it must not
/// cost each reconcile a pass over every Job of the class.
fn active_jobs_of_class(ctx: &Context, class: &str) -> usize {
    let class_jobs = ctx.caches.jobs_by(&by_class(class));
    let cached: std::collections::HashSet<&str> = class_jobs
        .iter()
        .filter_map(|j| j.metadata.name.as_deref())
        .collect();
    class_jobs
        .iter()
        .filter(|j| outcome(j, &[]) == JobOutcome::Running)
        .count()
        + ctx.starts.unseen(class, &cached)
}

/// The plan, and the plan again with the API server's answer when it asks whether the PV
/// exists (read only at the moment of that decision: the Job succeeded and the cache has
/// no PV).
async fn decide(g: &Gathered, ctx: &Context) -> crate::Result<flex_core::plan::claim::Plan> {
    let opts = &ctx.opts;
    let config = match &g.resolved {
        Resolved::Ready(c) => ConfigState::Ready(c),
        Resolved::Unusable(p) => ConfigState::Unusable(p),
    };
    let plan_with = |pv: Option<&PersistentVolume>, pv_absence_confirmed: bool| {
        let inputs = ClaimInputs {
            claim: &g.claim,
            provisioner_name: &opts.provisioner_name,
            class_provisioner: g.class_provisioner.as_deref(),
            config,
            jobs: g.jobs.iter().map(AsRef::as_ref).collect(),
            pods: g.pods.iter().map(AsRef::as_ref).collect(),
            pv,
            pv_absence_confirmed,
            node: g.node.as_ref(),
            active_jobs_of_class: g.active_jobs_of_class,
            inputs_hash: &g.hash,
            retry_base: opts.retry_base,
            now: jiff::Timestamp::now(),
            source: g.source.as_ref(),
            created_attempt: g.created_attempt,
        };
        plan_claim_with(&inputs, g.rendered.clone())
    };
    let plan = plan_with(g.pv.as_deref(), false);
    if plan.step != Step::ConfirmPv {
        return Ok(plan);
    }
    let fetched = Api::<PersistentVolume>::all(ctx.client.clone())
        .get_opt(&pv_name(&g.uid))
        .await?;
    Ok(plan_with(fetched.as_ref(), fetched.is_none()))
}

/// Tells the plan's notices on the claim; a first success is timed.
async fn announce(g: &Gathered, ctx: &Context, plan: &flex_core::plan::claim::Plan) {
    let on = g.claim.object_ref(&());
    let fresh = ctx.tell(&on, &g.class, &plan.notices).await;
    if fresh.contains(&flex_core::plan::NoticeKind::Provisioned)
        && let Some(created) = g.claim.metadata.creation_timestamp.as_ref()
    {
        let age = jiff::Timestamp::now()
            .duration_since(created.0)
            .as_secs_f64()
            .max(0.0);
        ctx.metrics
            .provision_duration
            .with_label_values(&[&g.class])
            .observe(age);
    }
}

/// Carries out the plan's step.
async fn apply(
    g: &Gathered,
    ctx: &Context,
    plan: flex_core::plan::claim::Plan,
) -> crate::Result<Action> {
    Ok(match plan.step {
        // Provisioning has nothing to do: a bound claim may still need to grow.
        Step::Ignore => super::expansion::reconcile_expansion(&g.claim, ctx).await?,
        Step::WaitForNode => Action::await_change(),
        // Only returned before the API server was asked, and it was asked in `decide`.
        Step::ConfirmPv => Action::requeue(Duration::from_secs(1)),
        // Triggers cover changes to the claim, class and ConfigMap; this is the safety net.
        Step::Blocked => Action::requeue(RECHECK_BLOCKED),
        Step::AwaitSource => Action::requeue(RECHECK_SOURCE),
        Step::Throttled => Action::requeue(Duration::from_secs(5)),
        Step::AwaitPvRemoval | Step::AwaitReport => Action::requeue(Duration::from_secs(1)),
        Step::CreatePv { pv } => create_pv(g, ctx, &pv).await?,
        Step::Backoff { wait, .. } => Action::requeue(wait),
        Step::Running { attempt } => {
            starting_problems(ctx, &g.claim.object_ref(&()), &g.jobs, attempt).await;
            Action::requeue(RUNNING_RECHECK)
        }
        Step::RecordAttempt { attempt, wait } => {
            // Once, and only because the failed Job expires before the next attempt.
            let annotations = json!({ANN_ATTEMPT: attempt.to_string()});
            annotate_claim(g, ctx, annotations).await?;
            Action::requeue(wait)
        }
        Step::GiveUp { attempt } => {
            let annotations = json!({ANN_GAVE_UP: g.hash, ANN_ATTEMPT: attempt.to_string()});
            annotate_claim(g, ctx, annotations).await?;
            Action::await_change()
        }
        Step::BoundToUnverified { pv } => {
            // The same words on the PV, where an admin looks; counted once (on the claim).
            let on_pv: Vec<Notice> = plan
                .notices
                .iter()
                .map(|n| Notice {
                    key: format!("on-pv/{}", n.key),
                    kind: flex_core::plan::NoticeKind::Other,
                    ..n.clone()
                })
                .collect();
            ctx.tell(&pv, &g.class, &on_pv).await;
            // Said once; a change of the PV or the claim brings it back.
            Action::await_change()
        }
        Step::Provisioned { patch, record } => {
            bookkeeping(g, ctx, patch, record).await?;
            // A bound claim may have grown: expansion looks at it.
            super::expansion::reconcile_expansion(&g.claim, ctx).await?
        }
        Step::RemoveWrongPv { uid: pv_uid } => {
            let pvs: Api<PersistentVolume> = Api::all(ctx.client.clone());
            apply::delete(&pvs, &pv_name(&g.uid), pv_uid, None).await?;
            Action::requeue(Duration::from_secs(1))
        }
        Step::Start {
            attempt,
            rendered,
            template,
        } => start(g, ctx, attempt, &rendered, &template).await?,
    })
}

/// Creates the PV from the Job's verified report. A conflict: it exists already (ours from
/// an earlier reconcile, or someone else's); either way the next plan, from the cache,
/// judges what is there.
async fn create_pv(g: &Gathered, ctx: &Context, pv: &PersistentVolume) -> crate::Result<Action> {
    let made = Api::<PersistentVolume>::all(ctx.client.clone())
        .create(&kube::api::PostParams::default(), pv)
        .await;
    Ok(match apply::created(made)? {
        Created::New => {
            ctx.starts.record_for(&pv_key(&g.uid), &pv.name_any(), 0);
            Action::await_change()
        }
        Created::Existed => Action::requeue(Duration::from_secs(1)),
    })
}

/// Writes annotations on the claim, under the resourceVersion the plan was made from: a
/// conflict re-plans from the fresh claim.
async fn annotate_claim(
    g: &Gathered,
    ctx: &Context,
    annotations: serde_json::Value,
) -> crate::Result<()> {
    let claims: Api<PersistentVolumeClaim> =
        Api::namespaced(ctx.client.clone(), &g.claim.namespace().unwrap_or_default());
    let patch = json!({"metadata": {"annotations": annotations,
                                    "resourceVersion": g.claim.resource_version()}});
    apply::patch(&claims, &g.claim.name_any(), &patch).await
}

/// A verified volume's record and PV bookkeeping. The record first: a volume with our
/// finalizer but no record could never be deprovisioned (it would be kept, with a warning).
async fn bookkeeping(
    g: &Gathered,
    ctx: &Context,
    patch: Option<serde_json::Value>,
    record: Option<Box<k8s_openapi::api::core::v1::ConfigMap>>,
) -> crate::Result<()> {
    if let Some(record) = record {
        let key = format!("record/{}", record.name_any());
        if !ctx.written.contains(&key) {
            create_or_adopt(&ctx.client, record.as_ref()).await?;
            ctx.written.insert(&key);
        }
    }
    if let Some(patch) = patch {
        let pvs: Api<PersistentVolume> = Api::all(ctx.client.clone());
        apply::patch(&pvs, &pv_name(&g.uid), &patch).await?;
    }
    Ok(())
}

/// Creates attempt `attempt`'s Job (one that exists already, from an earlier run of this
/// controller, is adopted) and says so on the claim.
async fn start(
    g: &Gathered,
    ctx: &Context,
    attempt: u32,
    rendered: &flex_core::rendered::Rendered,
    template: &PersistentVolume,
) -> crate::Result<Action> {
    let Resolved::Ready(config) = &g.resolved else {
        return Ok(Action::await_change());
    };
    let request = g.request.clone()?;
    let job = provision_job(
        ProvisionContext {
            config,
            claim: &request,
            node: g.node.as_ref(),
            rendered,
            pv_template: template,
            provisioner_name: &ctx.opts.provisioner_name,
            source: g.source.as_ref(),
        },
        attempt,
        ctx.opts.job_ttl_seconds,
    );
    let ns = job.namespace().unwrap_or_default();
    let job_name = job.name_any();
    create_or_adopt(&ctx.client, &job).await?;
    ctx.starts.record(&g.class, &job_name);
    ctx.starts.record_for(&g.uid, &job_name, attempt);
    let (uid, claim_ns, claim_name) = (&g.uid, &request.namespace, &request.name);
    let notice = Notice::normal(
        format!("provisioning/{uid}/{attempt}"),
        reasons::PROVISIONING,
        format!("External provisioner is provisioning volume for claim \"{claim_ns}/{claim_name}\" (attempt {attempt}, Job {ns}/{job_name})"),
    )
    .about(&job)
    .action("Provision");
    ctx.tell(&g.claim.object_ref(&()), &g.class, &[notice])
        .await;
    Ok(Action::requeue(RUNNING_RECHECK))
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
