//! One claim: gather what the planner needs from the stores, decide (`drive`), carry out
//! the step.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use super::apply::Created;
use super::caches::{by_claim, by_class};
use super::configs::Resolved;
use super::context::Context;
use super::drive::Deciding;
use flex_core::claim::{ClaimRequest, NodeInfo};
use flex_core::job::{JobOutcome, outcome};
use flex_core::names::{ANN_SELECTED_NODE, Action, pv_name};
use flex_core::plan::claim::{ClaimInputs, ConfigState, Plan, Prepared, Step, plan_claim};
use flex_core::plan::{Ask, Decision};

/// One claim's provisioning: gather, decide (reading from the API server what the plan
/// asks for), tell, apply; then when to look again (`None`: on its next change).
pub async fn reconcile(
    claim: Arc<PersistentVolumeClaim>,
    ctx: Arc<Context>,
) -> crate::Result<Option<Duration>> {
    let g = match gather(claim, &ctx).await? {
        Ok(g) => g,
        Err(wait) => return Ok(wait),
    };
    let mut read = Read::default();
    let pipeline = Deciding { g: &g, ctx: &ctx };
    let Ok(plan) = super::drive::decide(&pipeline, &mut read).await? else {
        return Ok(None);
    };
    ctx.apply
        .tell_claim(&g.claim, &g.class, &plan.notices)
        .await;
    // The class's turn (`max-concurrent`) is held until the step is applied.
    let _turn = read.turn;
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
    pods: Vec<Arc<Pod>>,
    pv: Option<Arc<PersistentVolume>>,
    node: Option<NodeInfo>,
    created_attempt: Option<u32>,
    /// Running Jobs without a pod, with the Job controller's FailedCreate message.
    not_starting: Vec<(Arc<Job>, String)>,
    /// Not bound to a volume yet.
    pending: bool,
    /// A pending claim of ours in a class with `max-concurrent`.
    limited: bool,
}

/// What the plan asked for, once read.
#[derive(Default)]
struct Read {
    prepared: Option<Prepared>,
    pv: Option<Option<PersistentVolume>>,
    node: Option<Option<NodeInfo>>,
    pods: Option<Vec<Pod>>,
    /// The class's turn to count its running Jobs and create the next one
    /// (`max-concurrent`): concurrent reconciles of the class take turns, each held from
    /// the count until its write is applied, taken only once the inputs are prepared, so
    /// rendering never waits for it.
    turn: Option<tokio::sync::OwnedMutexGuard<()>>,
    active_jobs_of_class: usize,
}

/// The planner's inputs for `claim`, or how long to wait before there is anything to plan.
async fn gather(
    claim: Arc<PersistentVolumeClaim>,
    ctx: &Context,
) -> crate::Result<Result<Gathered, Option<Duration>>> {
    let uid = claim.uid().unwrap_or_default();
    let class = flex_core::claim::class_of(&claim)
        .unwrap_or_default()
        .to_owned();
    let class_provisioner =
        (ctx.caches.classes.get(&ObjectRef::new(&class))).map(|c| c.provisioner.clone());
    let name = &ctx.opts.provisioner_name;
    let ours = flex_core::plan::claim::is_ours(&claim, class_provisioner.as_deref(), name);
    // A claim of ours the cache keeps cut short (`caches::trim_claim`) is read whole: its
    // templates and the digest of its inputs read every label and annotation.
    let claim = match ours && super::caches::is_cut_short(claim.as_ref()) {
        true => super::reads::claim_whole(ctx, &claim).await?,
        false => Some(claim),
    };
    let Some(claim) = claim else {
        // Deleted (or replaced) since: its own watch event brings what follows.
        return Ok(Err(None));
    };
    let resolved = ctx.config_of(&class).await;
    let mut jobs = ctx.caches.jobs_by(&by_claim(&uid));
    jobs.retain(|j| Action::of(j.labels()) == Some(Action::Provision));
    let pods = ctx.caches.pods_by(&by_claim(&uid));
    // A PV under the claim's volume name that is not verified yet is cached cut short
    // (caches::trim_volume): read whole for a claim of ours, whose plan verifies it.
    let pv = match ctx.caches.volume(&pv_name(&uid)) {
        Some(pv) if ours && super::caches::is_cut_short(pv.as_ref()) => {
            super::reads::volume_whole(ctx, &pv).await?
        }
        cached => cached,
    };
    // The PV created here a moment ago, not cached yet: its event brings the claim back.
    if ctx.apply.pv_unseen(&uid, pv.is_some()) {
        return Ok(Err(Some(Duration::from_secs(5))));
    }
    let pending = claim.spec.as_ref().is_some_and(|s| s.volume_name.is_none());
    let node = (claim.annotations().get(ANN_SELECTED_NODE))
        .and_then(|name| ctx.caches.nodes.get(&ObjectRef::new(name)))
        .map(|n| NodeInfo::from_node(&n));
    let created_attempt =
        (ctx.apply.expected).unseen_for(&uid, |name| jobs.iter().any(|j| j.name_any() == name));
    let not_starting = jobs
        .iter()
        .filter(|j| outcome(j, &[]) == JobOutcome::Running && !super::triggers::had_pods(j))
        .filter_map(|j| Some((j.clone(), ctx.caches.failed_create(j)?.message.clone()?)))
        .collect();
    // Only a pending claim of ours can start a Job.
    let limited = matches!(&resolved, Resolved::Ready(c) if ours && pending && c.provisioner.max_concurrent.is_some());
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
        not_starting,
        pending,
        limited,
    }))
}

impl super::drive::Pipeline for Deciding<'_, Gathered> {
    type Read = Read;
    type Plan = Plan;

    fn plan(&self, read: &Read) -> Decision<Plan> {
        plan_claim(&inputs(self.g, self.ctx, read))
    }

    async fn answer(&self, ask: &Ask, r: &mut Read) -> crate::Result<bool> {
        let (g, ctx) = (self.g, self.ctx);
        match ask {
            Ask::Prepare => {
                // The node the plan was made with: the API server's once the plan asked.
                let node = r.node.as_ref().map_or(g.node.as_ref(), Option::as_ref);
                let Some(prepared) = prepare(g, ctx, node).await? else {
                    return Ok(false);
                };
                r.prepared = Some(prepared);
                if g.limited {
                    r.turn = Some(ctx.apply.expected.turn(&g.class).await);
                    r.active_jobs_of_class = active_jobs_of_class(ctx, &g.class);
                }
            }
            Ask::Volume => r.pv = Some(super::reads::volume(ctx, &pv_name(&g.uid)).await?),
            Ask::Pods { namespace } => {
                r.pods = Some(super::reads::claims_pods(ctx, namespace, &g.uid).await?);
            }
            Ask::Node { name } => {
                let found = super::reads::node(ctx, name).await?;
                r.node = Some(found.as_ref().map(NodeInfo::from_node));
            }
            Ask::Record | Ask::Claim | Ask::Traces | Ask::Snapshot => return Ok(false),
        }
        Ok(true)
    }
}

fn inputs<'a>(g: &'a Gathered, ctx: &'a Context, r: &'a Read) -> ClaimInputs<'a> {
    let opts = &ctx.opts;
    ClaimInputs {
        claim: &g.claim,
        provisioner_name: &opts.provisioner_name,
        class_provisioner: g.class_provisioner.as_deref(),
        config: match &g.resolved {
            Resolved::Ready(c) => ConfigState::Ready(c),
            Resolved::Unusable(p) => ConfigState::Unusable(p),
        },
        jobs: g.jobs.iter().map(AsRef::as_ref).collect(),
        pods: match &r.pods {
            Some(read) => read.iter().collect(),
            None => g.pods.iter().map(AsRef::as_ref).collect(),
        },
        pods_confirmed: r.pods.is_some(),
        pv: r.pv.as_ref().map_or(g.pv.as_deref(), Option::as_ref),
        pv_absence_confirmed: r.pv.as_ref().is_some_and(Option::is_none),
        node: r.node.as_ref().map_or(g.node.as_ref(), Option::as_ref),
        node_absence_confirmed: r.node.as_ref().is_some_and(Option::is_none),
        active_jobs_of_class: r.active_jobs_of_class,
        prepared: r.prepared.as_ref(),
        retry_base: opts.retry_base,
        job_ttl_seconds: opts.job_ttl_seconds,
        now: jiff::Timestamp::now(),
        created_attempt: g.created_attempt,
        not_starting: (g.not_starting.iter())
            .map(|(j, why)| (j.as_ref(), why.as_str()))
            .collect(),
    }
}

/// What an attempt is made from: the templates rendered and the inputs digested on the
/// blocking pool (CPU under a budget: a hostile template never stalls the reconciles of
/// other classes), and a data source of a kind the class lists resolved (the record of a
/// clone's source is read from the API server until the Job exists). `None`: nothing can
/// be prepared (the planner asks only once its gate passed).
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
    let source = match &request.data_source {
        Some(ds) if g.pending && config.provisioner.accepts_source(ds) => {
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

/// Carries out the plan's step, then looks again when the step says.
async fn apply(g: &Gathered, ctx: &Context, plan: Plan) -> crate::Result<Option<Duration>> {
    let again = plan.step.recheck();
    let apply = &ctx.apply;
    let claims = apply.claims(&g.claim.namespace().unwrap_or_default());
    let name = g.claim.name_any();
    match plan.step {
        Step::CreatePv { pv } => {
            if apply.create_pv(&pv, Some(&g.uid)).await? == Created::Existed {
                // Ours from an earlier reconcile, or someone else's: the next plan, from the
                // cache, judges what is there.
                return Ok(Some(Duration::from_secs(1)));
            }
        }
        Step::PatchClaim { patch, .. } => {
            apply.patch(&claims, &name, &patch).await?;
        }
        Step::BoundToUnverified { pv, on_pv } => apply.tell(&pv, &g.class, &on_pv, None).await,
        // The record first: a volume with our finalizer but no record could never be
        // deprovisioned (it would be kept, with a warning).
        Step::Provisioned { patch, record } => {
            if let Some(record) = record {
                let key = format!("record/{}", record.name_any());
                apply.create_once(&key, record.as_ref()).await?;
            }
            if let Some(patch) = patch {
                apply
                    .patch(&apply.volumes(), &pv_name(&g.uid), &patch)
                    .await?;
            }
        }
        Step::RemoveWrongPv { uid } => {
            apply
                .delete(&apply.volumes(), &pv_name(&g.uid), uid, None)
                .await?;
        }
        // One that exists already, from an earlier run of this controller, is adopted.
        Step::CreateJob { job, started, .. } => {
            apply.create_job(&job, &g.uid).await?;
            apply.tell_claim(&g.claim, &g.class, &[*started]).await;
        }
        // Nothing to write: the notices said it all, or it is a wait.
        Step::Wait(_) | Step::Running { .. } | Step::Backoff { .. } => {}
    }
    Ok(again)
}
