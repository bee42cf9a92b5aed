//! One claim: gather what the planner needs from the stores, plan, carry out the step.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::json;

use super::apply::Created;
use super::caches::{by_claim, by_class};
use super::configs::Resolved;
use super::context::Context;
use flex_core::claim::{ClaimRequest, NodeInfo};
use flex_core::job::{JobOutcome, outcome};
use flex_core::names::{ANN_SELECTED_NODE, pv_name};
use flex_core::plan::claim::{
    ANN_ATTEMPT, ANN_GAVE_UP, ClaimInputs, ConfigState, Prepared, Step, plan_claim,
};
use flex_core::plan::{Notice, reasons};

fn is_provision(job: &Job) -> bool {
    super::context::action_is(job.labels(), flex_core::names::Action::Provision)
}

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
    let (plan, _turn) = decide(&g, &ctx).await?;
    ctx.apply
        .tell_claim(&g.claim, &g.class, &plan.notices)
        .await;
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
    jobs: Vec<Arc<Job>>,
    pods: Vec<Arc<k8s_openapi::api::core::v1::Pod>>,
    pv: Option<Arc<PersistentVolume>>,
    node: Option<NodeInfo>,
    created_attempt: Option<u32>,
    /// A pending claim of ours in a class with `max-concurrent`.
    limited: bool,
}

/// The class's turn to count its running Jobs and create the next one (`max-concurrent`):
/// concurrent reconciles of the class take turns, each held from the count until its write
/// is applied.
type Turn = Option<tokio::sync::OwnedMutexGuard<()>>;

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
    // A PV under the claim's volume name that is not verified yet is cached cut short
    // (caches::trim_volume): read whole for a claim of ours, whose plan verifies it.
    let pv = match ctx.caches.volume(&pv_name(&uid)) {
        Some(pv) if ours && super::caches::is_volume_cut_short(&pv) => {
            super::volumes::read_whole(&pv, ctx).await?
        }
        cached => cached,
    };
    let pending = claim.spec.as_ref().is_some_and(|s| s.volume_name.is_none());
    let node = claim
        .annotations()
        .get(ANN_SELECTED_NODE)
        .and_then(|name| ctx.caches.nodes.get(&ObjectRef::new(name)))
        .map(|n| NodeInfo::from_node(&n));
    let created_attempt = ctx
        .apply
        .expected
        .unseen_for(&uid, |name| jobs.iter().any(|j| j.name_any() == name));
    // The PV created here a moment ago, not cached yet: its event brings the claim back.
    if ctx.apply.pv_unseen(&uid, pv.is_some()) {
        return Ok(Err(Action::requeue(Duration::from_secs(5))));
    }
    let limited = match &resolved {
        // Only a pending claim of ours can start a Job.
        Resolved::Ready(c) => ours && pending && c.provisioner.max_concurrent.is_some(),
        Resolved::Unusable(_) => false,
    };
    Ok(Ok(Gathered {
        claim,
        uid,
        class,
        class_provisioner,
        resolved,
        jobs,
        pods,
        pv,
        node,
        created_attempt,
        limited,
    }))
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
    .await
    .map_err(crate::Error::read(format!("claim {}", claim.name_any())))?;
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
            ctx.apply
                .event(&on, p.is_error(), reasons::CONFIG_INVALID, &p.to_string())
                .await;
        }
    }
    resolved
}

/// What an attempt is made from, when the planner asks for it: the templates rendered and
/// the inputs digested on the blocking pool (CPU under a budget: a hostile template never
/// stalls the reconciles of other classes), and a data source of a kind the class lists
/// resolved (the record of a clone's source is read from the API server until the Job
/// exists). `None`: nothing can be prepared (the planner asks only once its gate passed).
async fn prepare(
    g: &Gathered,
    ctx: &Context,
    node: Option<&NodeInfo>,
) -> crate::Result<Option<Prepared>> {
    let (Resolved::Ready(config), Ok(request)) = (&g.resolved, ClaimRequest::from_claim(&g.claim))
    else {
        return Ok(None);
    };
    // Only a pending claim's: a bound one's Job made its volume already.
    let pending = g
        .claim
        .spec
        .as_ref()
        .is_some_and(|s| s.volume_name.is_none());
    let source = match &request.data_source {
        Some(ds) if pending && config.provisioner.data_sources.contains(&ds.kind_key()) => {
            Some(super::sources::resolve(ctx, &request, ds).await?)
        }
        _ => None,
    };
    let (config, node) = (config.clone(), node.cloned());
    let name = ctx.opts.provisioner_name.clone();
    let work = move || Prepared::here(&config, &request, node.as_ref(), &name, source);
    // A panic while rendering is an error of its own: said on the claim (`error_policy`).
    let prepared = tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| crate::Error::Prepare {
            claim: format!(
                "{}/{}",
                g.claim.namespace().unwrap_or_default(),
                g.claim.name_any()
            ),
            message: e.to_string(),
        })?;
    Ok(Some(prepared))
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
        + ctx.apply.expected.unseen(class, &cached)
}

/// The plan; when it asks for more (what an attempt is made from, or whether the PV
/// exists, read only at the moment of that decision: the Job succeeded and the cache has
/// no PV), the plan again with it. Each is asked for at most once. A plan that may start
/// a Job of a `max-concurrent` class is made in the class's turn (returned: held until
/// applied), taken only once the inputs are prepared, so rendering never waits for it.
async fn decide(
    g: &Gathered,
    ctx: &Context,
) -> crate::Result<(flex_core::plan::claim::Plan, Turn)> {
    let opts = &ctx.opts;
    let config = match &g.resolved {
        Resolved::Ready(c) => ConfigState::Ready(c),
        Resolved::Unusable(p) => ConfigState::Unusable(p),
    };
    let plan_with = |prepared: Option<&Prepared>,
                     read: Option<&Option<PersistentVolume>>,
                     node_read: Option<&Option<NodeInfo>>,
                     pods_read: Option<&Vec<Pod>>,
                     active_jobs_of_class: usize| {
        let inputs = ClaimInputs {
            claim: &g.claim,
            provisioner_name: &opts.provisioner_name,
            class_provisioner: g.class_provisioner.as_deref(),
            config,
            jobs: g.jobs.iter().map(AsRef::as_ref).collect(),
            pods: match pods_read {
                Some(read) => read.iter().collect(),
                None => g.pods.iter().map(AsRef::as_ref).collect(),
            },
            pods_confirmed: pods_read.is_some(),
            pv: read.map_or(g.pv.as_deref(), Option::as_ref),
            pv_absence_confirmed: read.is_some_and(Option::is_none),
            node: node_read.map_or(g.node.as_ref(), Option::as_ref),
            node_absence_confirmed: node_read.is_some_and(Option::is_none),
            active_jobs_of_class,
            prepared,
            retry_base: opts.retry_base,
            job_ttl_seconds: opts.job_ttl_seconds,
            now: jiff::Timestamp::now(),
            created_attempt: g.created_attempt,
        };
        plan_claim(&inputs)
    };
    let (mut prepared, mut read, mut node_read, mut turn, mut active) = (None, None, None, None, 0);
    let mut pods_read: Option<Vec<Pod>> = None;
    loop {
        // No Job is started without what it is made from: until then the count is not read.
        let plan = plan_with(
            prepared.as_ref(),
            read.as_ref(),
            node_read.as_ref(),
            pods_read.as_ref(),
            active,
        );
        match plan.step {
            Step::Prepare if prepared.is_none() => {
                // The node the plan was made with: the API server's once the plan asked.
                let node = node_read.as_ref().map_or(g.node.as_ref(), Option::as_ref);
                match prepare(g, ctx, node).await? {
                    Some(p) => {
                        prepared = Some(p);
                        if g.limited {
                            turn = Some(ctx.apply.expected.turn(&g.class).await);
                            active = active_jobs_of_class(ctx, &g.class);
                        }
                    }
                    None => return Ok((plan, turn)),
                }
            }
            Step::ConfirmPv if read.is_none() => {
                let pvs = Api::<PersistentVolume>::all(ctx.client.clone());
                let name = pv_name(&g.uid);
                let what = format!("PersistentVolume {name}");
                read = Some(pvs.get_opt(&name).await.map_err(crate::Error::read(what))?);
            }
            Step::ConfirmReport { ref namespace } if pods_read.is_none() => {
                pods_read = Some(claims_pods(ctx, namespace, &g.uid).await?);
            }
            Step::ConfirmNode { ref name } if node_read.is_none() => {
                let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(ctx.client.clone());
                let what = format!("Node {name}");
                let found = nodes
                    .get_opt(name)
                    .await
                    .map_err(crate::Error::read(what))?;
                node_read = Some(found.as_ref().map(NodeInfo::from_node));
            }
            _ => return Ok((plan, turn)),
        }
    }
}

/// The pods of the claim's Jobs in `namespace`, as the API server has them (trimmed as the
/// pod cache keeps them).
pub(super) async fn claims_pods(
    ctx: &Context,
    namespace: &str,
    uid: &str,
) -> crate::Result<Vec<Pod>> {
    if namespace.is_empty() {
        return Ok(Vec::new());
    }
    let pods = Api::<Pod>::namespaced(ctx.client.clone(), namespace);
    let selector = format!("{}={uid}", flex_core::names::LABEL_CLAIM_UID);
    let list = pods
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .map_err(crate::Error::read(format!(
            "the pods of claim uid {uid} in {namespace}"
        )))?;
    Ok(list
        .items
        .into_iter()
        .map(|mut p| {
            super::caches::trim_pod(&mut p);
            p
        })
        .collect())
}

/// Carries out the plan's step, then looks again when the step says (a bound claim goes on
/// to expansion).
async fn apply(
    g: &Gathered,
    ctx: &Context,
    plan: flex_core::plan::claim::Plan,
) -> crate::Result<Action> {
    let again = plan
        .step
        .recheck()
        .map_or_else(Action::await_change, Action::requeue);
    match plan.step {
        // Provisioning has nothing to do: a bound claim may still need to grow.
        Step::Ignore => return super::expansion::reconcile_expansion(&g.claim, ctx).await,
        Step::CreatePv { pv } => {
            if ctx.apply.create_pv(&pv, Some(&g.uid)).await? == Created::Existed {
                // Ours from an earlier reconcile, or someone else's: the next plan, from the
                // cache, judges what is there.
                return Ok(Action::requeue(Duration::from_secs(1)));
            }
        }
        Step::Running { attempt } => {
            starting_problems(ctx, &g.claim.object_ref(&()), &g.jobs, attempt).await;
        }
        Step::Reschedule { patch } => {
            let claims = ctx.apply.claims(&g.claim.namespace().unwrap_or_default());
            ctx.apply
                .patch(&claims, &g.claim.name_any(), &patch)
                .await?;
        }
        Step::RecordAttempt { attempt, .. } => {
            // Once, and only because the failed Job expires before the next attempt.
            let annotations = json!({ANN_ATTEMPT: attempt.to_string()});
            annotate_claim(g, ctx, annotations).await?;
        }
        Step::GiveUp {
            attempt,
            inputs_hash,
        } => {
            let annotations = json!({ANN_GAVE_UP: inputs_hash, ANN_ATTEMPT: attempt.to_string()});
            annotate_claim(g, ctx, annotations).await?;
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
            ctx.apply.tell(&pv, &g.class, &on_pv).await;
        }
        Step::Provisioned { patch, record } => {
            bookkeeping(g, ctx, patch, record).await?;
            // A bound claim may have grown: expansion looks at it.
            return super::expansion::reconcile_expansion(&g.claim, ctx).await;
        }
        Step::RemoveWrongPv { uid } => {
            let pvs = ctx.apply.volumes();
            ctx.apply.delete(&pvs, &pv_name(&g.uid), uid, None).await?;
        }
        Step::CreateJob { attempt, job } => start(g, ctx, attempt, &job).await?,
        // Nothing to write: a wait, a read asked for in `decide` and made there, or what
        // could not be prepared.
        Step::WaitForNode
        | Step::AwaitNode
        | Step::Prepare
        | Step::ConfirmPv
        | Step::ConfirmReport { .. }
        | Step::ConfirmNode { .. }
        | Step::Blocked
        | Step::AwaitSource { .. }
        | Step::Throttled
        | Step::AwaitPvRemoval
        | Step::AwaitReport
        | Step::Backoff { .. } => {}
    }
    Ok(again)
}

/// Writes annotations on the claim, under the resourceVersion the plan was made from: a
/// conflict re-plans from the fresh claim.
async fn annotate_claim(
    g: &Gathered,
    ctx: &Context,
    annotations: serde_json::Value,
) -> crate::Result<()> {
    let claims = ctx.apply.claims(&g.claim.namespace().unwrap_or_default());
    let patch = json!({"metadata": {"annotations": annotations,
                                    "resourceVersion": g.claim.resource_version()}});
    ctx.apply
        .patch(&claims, &g.claim.name_any(), &patch)
        .await?;
    Ok(())
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
        ctx.apply.create_once(&key, record.as_ref()).await?;
    }
    if let Some(patch) = patch {
        let pvs = ctx.apply.volumes();
        ctx.apply.patch(&pvs, &pv_name(&g.uid), &patch).await?;
    }
    Ok(())
}

/// Creates attempt `attempt`'s Job (one that exists already, from an earlier run of this
/// controller, is adopted) and says so on the claim.
async fn start(g: &Gathered, ctx: &Context, attempt: u32, job: &Job) -> crate::Result<()> {
    let ns = job.namespace().unwrap_or_default();
    let job_name = job.name_any();
    ctx.apply.create_job(job, &g.uid).await?;
    let (uid, claim_ns, claim_name) = (&g.uid, g.claim.namespace(), g.claim.name_any());
    let claim_ns = claim_ns.unwrap_or_default();
    let notice = Notice::normal(
        format!("provisioning/{uid}/{attempt}"),
        reasons::PROVISIONING,
        format!("External provisioner is provisioning volume for claim \"{claim_ns}/{claim_name}\" (attempt {attempt}, Job {ns}/{job_name})"),
    )
    .about(job)
    .action("Provision");
    ctx.apply.tell_claim(&g.claim, &g.class, &[notice]).await;
    Ok(())
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
            ctx.apply
                .tell(
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
