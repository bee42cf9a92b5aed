//! Jobs for an action (docs/image-contract.md): one builder for provisioning and deprovisioning.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{
    Job, JobSpec, PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement,
    PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, ContainerStateTerminated, EnvVar, NodeAffinity,
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolume, Pod,
    PodSecurityContext, PodSpec, PodTemplateSpec, SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::claim::{ClaimRequest, NodeInfo};
use crate::config::{ClassConfig, PvCreator, pod_template};
use crate::isolation::SourceMount;
use crate::names::{
    ANN_CLAIM, ANN_CONFIG, ANN_STORAGE_CLASS, Action, CONTAINER_NAME, LABEL_ACTION, LABEL_ATTEMPT,
    LABEL_CLAIM_UID, LABEL_MANAGED_BY, LABEL_VOLUME, MANAGED_BY_VALUE, TERMINATION_MESSAGE_PATH,
    job_name, parameter_env_name, pv_name,
};
use crate::recipe::JobRecipe;
use crate::rendered::Rendered;

/// Default time a finished Job is kept so its logs can be read (flag `--job-ttl`).
pub const DEFAULT_JOB_TTL_SECONDS: i32 = 3600;

impl JobRecipe {
    /// The provisioning Job's: the ConfigMap's image, command and rendered arguments.
    pub fn provision(config: &ClassConfig, rendered: &Rendered, node: Option<&NodeInfo>) -> Self {
        let p = &config.provisioner;
        JobRecipe {
            namespace: p.namespace.clone(),
            config: p.source(),
            image: p.image.clone(),
            command: p.command.clone(),
            args: rendered.args.clone(),
            service_account: p.service_account.clone(),
            node_selector: p.node_selector.clone(),
            node: node.filter(|_| p.node_local).map(|n| n.name.clone()),
            pod_template: p.pod_template.clone(),
            timeout_seconds: p.timeout.as_secs(),
            retries: p.retries,
            permanent_exit_codes: p.permanent_exit_codes.clone(),
            no_api_token: p.pv_creator == PvCreator::Controller,
            volume: rendered.volume(config),
        }
    }

    /// `deprovision-image`/`-command`/`-args` where given, else the provisioning ones.
    pub fn deprovision(config: &ClassConfig, rendered: &Rendered, node: Option<&NodeInfo>) -> Self {
        let p = &config.provisioner;
        let (image, command) = (&p.deprovision_image, &p.deprovision_command);
        Self::provision(config, rendered, node).overridden(
            image,
            command,
            &rendered.deprovision_args,
        )
    }

    /// `expand-image`/`-command`/`-args` where given, else the provisioning ones.
    pub fn expand(config: &ClassConfig, rendered: &Rendered, node: Option<&NodeInfo>) -> Self {
        let p = &config.provisioner;
        let (image, command) = (&p.expand_image, &p.expand_command);
        Self::provision(config, rendered, node).overridden(image, command, &rendered.expand_args)
    }

    /// This recipe with an action's own image, command and rendered arguments where the
    /// ConfigMap gives them, else the provisioning ones.
    fn overridden(
        self,
        image: &Option<String>,
        command: &Option<Vec<String>>,
        args: &Option<Vec<String>>,
    ) -> Self {
        JobRecipe {
            image: image.clone().unwrap_or(self.image.clone()),
            command: command.clone().or(self.command.clone()),
            args: args.clone().or(self.args.clone()),
            ..self
        }
    }
}

/// Everything a claim's provisioning Job is made from.
#[derive(Debug, Clone, Copy)]
pub struct ProvisionContext<'a> {
    pub config: &'a ClassConfig,
    pub claim: &'a ClaimRequest,
    pub node: Option<&'a NodeInfo>,
    pub rendered: &'a Rendered,
    pub pv_template: &'a PersistentVolume,
    pub provisioner_name: &'a str,
    /// What the claim's data source resolved to (a clone's source volume, an object).
    pub source: Option<&'a crate::source::SourceData>,
    /// The digest of the configuration and claim ([`crate::inputs::inputs_hash`]).
    pub inputs_hash: &'a str,
}

/// The provisioning Job for attempt `attempt` of a claim.
pub fn provision_job(cx: ProvisionContext<'_>, attempt: u32, ttl_seconds: i32) -> Job {
    let env = provision_env(&cx);
    let (config, claim, node, rendered, source) =
        (cx.config, cx.claim, cx.node, cx.rendered, cx.source);
    let volume = pv_name(&claim.uid);
    let class = &config.class;
    // What deprovisions the volume, kept on the Job (written only by the controller, in the
    // config namespace) for a PV whose claim is deleted before the controller verified it.
    let deprovision = JobRecipe::deprovision(config, rendered, node);
    let mut job = build(JobInput {
        action: Action::Provision,
        name: job_name(Action::Provision, &claim.uid, attempt),
        attempt,
        claim_uid: claim.uid.clone(),
        volume,
        claim_ref: format!("{}/{}", claim.namespace, claim.name),
        storage_class: class.name.clone(),
        recipe: JobRecipe::provision(config, rendered, node),
        env,
        parameters: &rendered.parameters,
        source: source.and_then(|s| s.mount()),
        ttl_seconds,
        labels: Vec::new(),
    });
    let annotations = job
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    if let Some((key, value)) = source.and_then(|s| s.annotation()) {
        annotations.insert(key.to_owned(), value);
    }
    // What the attempt is made from: a permanent failure is retried once this changes.
    annotations.insert(
        crate::inputs::ANN_INPUTS.to_owned(),
        cx.inputs_hash.to_owned(),
    );
    annotations.insert(
        crate::names::ANN_DEPROVISION_SPEC.to_owned(),
        serde_json::to_string(&deprovision).unwrap_or_default(),
    );
    annotations.insert(
        crate::names::ANN_EXPAND_SPEC.to_owned(),
        serde_json::to_string(&JobRecipe::expand(config, rendered, node)).unwrap_or_default(),
    );
    annotations.extend(report_limits(config, rendered));
    job
}

/// What a report may hold, for a claim deleted before the controller read the report
/// (plan::orphan): the class's ConfigMap may have changed by then. Only with
/// `pv-creator: controller`.
fn report_limits(config: &ClassConfig, rendered: &Rendered) -> Vec<(String, String)> {
    if config.provisioner.pv_creator != crate::config::PvCreator::Controller {
        return vec![];
    }
    let sources: Vec<&str> = config
        .provisioner
        .volume_sources
        .iter()
        .map(String::as_str)
        .collect();
    vec![
        (
            crate::names::ANN_VOLUME_SOURCES.to_owned(),
            sources.join(","),
        ),
        (
            crate::names::ANN_ALLOWED_VOLUMES.to_owned(),
            serde_json::to_string(&rendered.allowed_volumes(config)).unwrap_or_default(),
        ),
    ]
}

/// The provisioning Job's environment (docs/image-contract.md, "Environment of the container").
fn provision_env(cx: &ProvisionContext<'_>) -> Vec<(&'static str, String)> {
    let (claim, rendered) = (cx.claim, cx.rendered);
    let (name, node) = (cx.provisioner_name, claim.selected_node.clone());
    let mut env = volume_env(
        Action::Provision,
        name,
        cx.pv_template,
        &claim.requested,
        node,
    );
    env.extend([
        (
            "PV_TEMPLATE",
            serde_json::to_string(cx.pv_template).unwrap_or_default(),
        ),
        ("PARAMETERS", rendered.parameters_json()),
        ("TERMINATION_LOG", TERMINATION_MESSAGE_PATH.to_owned()),
        (
            "PV_CREATOR",
            cx.config.provisioner.pv_creator.as_str().to_owned(),
        ),
    ]);
    let directory = rendered.volume_directory.clone();
    env.into_iter()
        .chain(directory.map(|d| ("VOLUME_DIRECTORY", d)))
        .chain(cx.source.map(|s| s.env()).unwrap_or_default())
        .collect()
}

/// What every Job says of its volume, read from its PV (for provisioning, the PV it is to
/// make): `size` is the size it is to have, `node` the node it runs for.
pub(crate) fn volume_env(
    action: Action,
    provisioner_name: &str,
    pv: &PersistentVolume,
    size: &str,
    node: Option<String>,
) -> Vec<(&'static str, String)> {
    let spec = pv.spec.clone().unwrap_or_default();
    let claim = spec.claim_ref.unwrap_or_default();
    let bytes = crate::quantity::parse_bytes(size).map(|b| b.to_string());
    let joined = |v: Option<Vec<String>>| v.unwrap_or_default().join(",");
    vec![
        ("ACTION", action.as_str().to_owned()),
        ("PROVISIONER_NAME", provisioner_name.to_owned()),
        ("PV_NAME", pv.metadata.name.clone().unwrap_or_default()),
        ("PVC_NAME", claim.name.unwrap_or_default()),
        ("PVC_NAMESPACE", claim.namespace.unwrap_or_default()),
        ("PVC_UID", claim.uid.unwrap_or_default()),
        ("STORAGE_CLASS", spec.storage_class_name.unwrap_or_default()),
        (
            "RECLAIM_POLICY",
            spec.persistent_volume_reclaim_policy.unwrap_or_default(),
        ),
        ("MOUNT_OPTIONS", joined(spec.mount_options)),
        (
            "VOLUME_MODE",
            spec.volume_mode.unwrap_or_else(|| "Filesystem".into()),
        ),
        ("ACCESS_MODES", joined(spec.access_modes)),
        ("REQUESTED_BYTES", bytes.unwrap_or_default()),
        ("REQUESTED_SIZE", size.to_owned()),
        ("SELECTED_NODE", node.unwrap_or_default()),
    ]
}

/// The deprovisioning Job for attempt `attempt` of a PV we provisioned, built only from
/// its record.
pub fn deprovision_job(
    pv: &PersistentVolume,
    record: &crate::record::Record,
    provisioner_name: &str,
    attempt: u32,
    ttl_seconds: i32,
) -> Job {
    let capacity = crate::volume::storage_capacity(&pv.spec.clone().unwrap_or_default());
    volume_job(VolumeJob {
        action: Action::Deprovision,
        pv,
        recipe: record.recipe.clone(),
        parameters: &record.parameters,
        size: &capacity,
        provisioner_name,
        attempt,
        ttl_seconds,
    })
}

/// The expansion Job for attempt `attempt` of a bound volume of ours, to `size` (the claim's
/// request), built only from its record. Its name is per claim, like provisioning's.
pub fn expand_job(
    pv: &PersistentVolume,
    recipe: &JobRecipe,
    record: &crate::record::Record,
    size: &str,
    provisioner_name: &str,
    attempt: u32,
    ttl_seconds: i32,
) -> Job {
    let mut job = volume_job(VolumeJob {
        action: Action::Expand,
        pv,
        recipe: recipe.clone(),
        parameters: &record.parameters,
        size,
        provisioner_name,
        attempt,
        ttl_seconds,
    });
    let bytes = crate::quantity::parse_bytes(size)
        .map(|b| b.to_string())
        .unwrap_or_default();
    job.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(crate::names::LABEL_SIZE.to_owned(), bytes);
    job
}

/// What a Job about an existing volume is made from.
struct VolumeJob<'a> {
    action: Action,
    pv: &'a PersistentVolume,
    recipe: JobRecipe,
    parameters: &'a BTreeMap<String, String>,
    /// `REQUESTED_SIZE`: the PV's capacity, or the size to grow it to.
    size: &'a str,
    provisioner_name: &'a str,
    attempt: u32,
    ttl_seconds: i32,
}

fn volume_job(v: VolumeJob<'_>) -> Job {
    let (action, pv, recipe, size) = (v.action, v.pv, v.recipe, v.size);
    let volume = pv.metadata.name.clone().unwrap_or_default();
    let spec = pv.spec.clone().unwrap_or_default();
    let claim = spec.claim_ref.clone().unwrap_or_default();
    let mut pv_json = pv.clone();
    pv_json.metadata.managed_fields = None;
    let node = recipe.node.clone();
    let mut env = volume_env(action, v.provisioner_name, pv, size, node);
    env.extend([
        (
            "PARAMETERS",
            serde_json::to_string(v.parameters).unwrap_or_default(),
        ),
        (
            "PV_JSON",
            serde_json::to_string(&pv_json).unwrap_or_default(),
        ),
        ("TERMINATION_LOG", TERMINATION_MESSAGE_PATH.to_owned()),
    ]);
    let directory = recipe.volume.as_ref().map(|v| v.directory.clone());
    let env = env
        .into_iter()
        .chain(directory.map(|d| ("VOLUME_DIRECTORY", d)))
        .collect();
    // Provisioning Jobs are named per claim; deprovisioning per volume.
    let subject = match action {
        Action::Deprovision => volume.clone(),
        _ => claim.uid.clone().unwrap_or_default(),
    };
    let mut job = build(JobInput {
        action,
        name: job_name(action, &subject, v.attempt),
        attempt: v.attempt,
        claim_uid: claim.uid.clone().unwrap_or_default(),
        volume,
        claim_ref: format!(
            "{}/{}",
            claim.namespace.unwrap_or_default(),
            claim.name.unwrap_or_default()
        ),
        storage_class: spec.storage_class_name.unwrap_or_default(),
        recipe,
        env,
        parameters: v.parameters,
        source: None,
        ttl_seconds: v.ttl_seconds,
        labels: Vec::new(),
    });
    job.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            crate::names::ANN_VOLUME_UID.to_owned(),
            pv.metadata.uid.clone().unwrap_or_default(),
        );
    job
}

pub(crate) struct JobInput<'a> {
    pub(crate) action: Action,
    pub(crate) name: String,
    pub(crate) attempt: u32,
    pub(crate) claim_uid: String,
    pub(crate) volume: String,
    pub(crate) claim_ref: String,
    pub(crate) storage_class: String,
    pub(crate) recipe: JobRecipe,
    pub(crate) env: Vec<(&'static str, String)>,
    pub(crate) parameters: &'a BTreeMap<String, String>,
    /// A clone's source directory (classes with `volume-base`).
    pub(crate) source: Option<SourceMount>,
    pub(crate) ttl_seconds: i32,
    /// Labels beyond the contract's (a snapshot's uid).
    pub(crate) labels: Vec<(String, String)>,
}

pub(crate) fn build(input: JobInput<'_>) -> Job {
    let recipe = input.recipe;
    // A snapshot's Jobs belong to no claim and to no volume of their own: without those
    // labels, no claim's or volume's plan ever counts them as its Jobs.
    let labels: BTreeMap<String, String> = [
        (LABEL_MANAGED_BY, MANAGED_BY_VALUE.to_owned()),
        (LABEL_ACTION, input.action.as_str().to_owned()),
        (LABEL_CLAIM_UID, input.claim_uid),
        (LABEL_VOLUME, input.volume),
        (LABEL_ATTEMPT, input.attempt.to_string()),
    ]
    .into_iter()
    .filter(|(_, v)| !v.is_empty())
    .map(|(k, v)| (k.to_owned(), v))
    .chain(input.labels)
    .collect();
    let annotations = BTreeMap::from([
        (ANN_CLAIM.to_owned(), input.claim_ref),
        (ANN_STORAGE_CLASS.to_owned(), input.storage_class),
        (ANN_CONFIG.to_owned(), recipe.config.clone()),
    ]);
    let ours = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels.clone()),
            annotations: Some(annotations.clone()),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            restart_policy: Some("Never".to_owned()),
            service_account_name: recipe.service_account.clone(),
            node_selector: (!recipe.node_selector.is_empty()).then(|| recipe.node_selector.clone()),
            affinity: recipe.node.as_deref().map(on_node),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".to_owned(),
                    localhost_profile: None,
                }),
                ..Default::default()
            }),
            containers: vec![container(&recipe, input.env, input.parameters)],
            ..Default::default()
        }),
    };
    let mut template = match &recipe.pod_template {
        Some(theirs) => pod_template::merge(&ours, theirs),
        None => ours,
    };
    keep_container_hardening(&mut template);
    if let Some(dir) = &recipe.volume {
        crate::isolation::mount_only(&mut template, input.action, dir, input.source.as_ref());
    }
    if recipe.no_api_token
        && let Some(spec) = template.spec.as_mut()
    {
        spec.automount_service_account_token = Some(false);
    }
    Job {
        metadata: ObjectMeta {
            name: Some(input.name),
            namespace: Some(recipe.namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(i32::try_from(recipe.retries).unwrap_or(i32::MAX)),
            active_deadline_seconds: Some(
                i64::try_from(recipe.timeout_seconds).unwrap_or(i64::MAX),
            ),
            ttl_seconds_after_finished: Some(input.ttl_seconds),
            pod_failure_policy: Some(failure_policy(&recipe)),
            template,
            ..Default::default()
        }),
        status: None,
    }
}

/// The one container: the recipe's image and command, the contract's environment and one
/// variable per parameter, every capability dropped and no privilege escalation.
fn container(
    recipe: &JobRecipe,
    env: Vec<(&str, String)>,
    parameters: &BTreeMap<String, String>,
) -> Container {
    let env: Vec<EnvVar> = env
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .chain(
            parameters
                .iter()
                .map(|(k, v)| (parameter_env_name(k), v.clone())),
        )
        .map(|(name, value)| EnvVar {
            name,
            value: Some(value),
            value_from: None,
        })
        .collect();
    Container {
        name: CONTAINER_NAME.to_owned(),
        image: Some(recipe.image.clone()),
        command: recipe.command.clone(),
        args: recipe.args.clone(),
        env: Some(env),
        termination_message_path: Some(TERMINATION_MESSAGE_PATH.to_owned()),
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                add: None,
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The pod runs on `node`. Matching the node by field, as DaemonSets do, keeps the
/// scheduler in charge of taints and resources instead of bypassing it with nodeName.
fn on_node(node: &str) -> Affinity {
    Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_fields: Some(vec![NodeSelectorRequirement {
                        key: "metadata.name".to_owned(),
                        operator: "In".to_owned(),
                        values: Some(vec![node.to_owned()]),
                    }]),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A permanent exit code fails the Job at once; a pod evicted or preempted says nothing
/// about the request and must not use up retries.
fn failure_policy(recipe: &JobRecipe) -> PodFailurePolicy {
    let mut rules = Vec::new();
    if !recipe.permanent_exit_codes.is_empty() {
        rules.push(PodFailurePolicyRule {
            action: "FailJob".to_owned(),
            on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                container_name: Some(CONTAINER_NAME.to_owned()),
                operator: "In".to_owned(),
                values: recipe.permanent_exit_codes.iter().copied().collect(),
            }),
            on_pod_conditions: None,
        });
    }
    rules.push(PodFailurePolicyRule {
        action: "Ignore".to_owned(),
        on_exit_codes: None,
        on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
            type_: "DisruptionTarget".to_owned(),
            status: Some("True".to_owned()),
        }]),
    });
    PodFailurePolicy { rules }
}

/// A container `securityContext` in the pod-template replaces ours whole
/// (config/pod_template.rs), but what it leaves unsaid of our two hardening fields stays: a
/// template that only grants capabilities (`capabilities: {add: [CHOWN]}`) must not also
/// bring back the runtime's default set (no `drop: [ALL]`) or privilege escalation. What it
/// says is kept as said (`drop: []` drops nothing). A privileged container is left as it is:
/// it holds every capability anyway, and the API server refuses `allowPrivilegeEscalation:
/// false` beside `privileged: true` or an added CAP_SYS_ADMIN.
fn keep_container_hardening(template: &mut PodTemplateSpec) {
    let Some(container) = template
        .spec
        .as_mut()
        .and_then(|s| s.containers.iter_mut().find(|c| c.name == CONTAINER_NAME))
    else {
        return;
    };
    let sc = container
        .security_context
        .get_or_insert_with(Default::default);
    if sc.privileged == Some(true) {
        return;
    }
    let caps = sc.capabilities.get_or_insert_with(Default::default);
    if caps.drop.is_none() {
        caps.drop = Some(vec!["ALL".to_owned()]);
    }
    let sys_admin = caps.add.iter().flatten().any(|c| {
        let c = c.to_ascii_uppercase();
        c == "SYS_ADMIN" || c == "CAP_SYS_ADMIN"
    });
    if sc.allow_privilege_escalation.is_none() && !sys_admin {
        sc.allow_privilege_escalation = Some(false);
    }
}

/// How a Job (and its pods) stand, as the planner needs it.
#[derive(Debug, Clone, PartialEq)]
pub enum JobOutcome {
    Running,
    Succeeded,
    Failed(Failure),
}

/// Why an attempt failed: for good (until the inputs change) or for now, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The pod failure policy failed it (a permanent exit code): no retry as it stands.
    pub permanent: bool,
    /// What users read: the failed pod's message, or the Job's condition message.
    pub message: String,
    /// When it failed (the Failed condition's transition time).
    pub at: Option<jiff::Timestamp>,
    /// It ran past its timeout (`activeDeadlineSeconds`).
    pub timed_out: bool,
}

/// What a failed pod left: `exit code N`, and its termination message, trimmed, if any.
pub fn pod_failure(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    if status.phase.as_deref() != Some("Failed") {
        return None;
    }
    let (code, message) = match terminated(pod) {
        Some(t) => (t.exit_code, t.message.unwrap_or_default().trim().to_owned()),
        None => (-1, status.message.clone().unwrap_or_default()),
    };
    Some(match message.is_empty() {
        true => format!("exit code {code}"),
        false => format!("exit code {code}: {message}"),
    })
}

pub fn outcome(job: &Job, pods: &[&Pod]) -> JobOutcome {
    let conditions = job.status.as_ref().and_then(|s| s.conditions.as_deref());
    let is_true = |t: &str| {
        conditions
            .into_iter()
            .flatten()
            .find(|c| c.type_ == t && c.status == "True")
    };
    if is_true("Complete").is_some() {
        return JobOutcome::Succeeded;
    }
    let Some(failed) = is_true("Failed") else {
        return JobOutcome::Running;
    };
    let latest_pod_message = pods
        .iter()
        .filter_map(|p| pod_failure(p).map(|f| (p.metadata.creation_timestamp.clone(), f)))
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, text)| text);
    let reason = failed.reason.clone().unwrap_or_default();
    let condition_message = failed.message.clone().unwrap_or_default();
    let message = match (reason.as_str(), latest_pod_message) {
        ("DeadlineExceeded", _) => {
            format!("the provisioner ran longer than its timeout ({condition_message})")
        }
        (_, Some(m)) => m,
        (_, None) => condition_message,
    };
    JobOutcome::Failed(Failure {
        permanent: reason == "PodFailurePolicy",
        message,
        at: failed.last_transition_time.as_ref().map(|t| t.0),
        timed_out: reason == "DeadlineExceeded",
    })
}

/// What the succeeded pod of a provisioning Job reported: its termination message, which
/// with `pv-creator: controller` holds the volume source. `None` when no succeeded pod of
/// the Job is in `pods` (not seen yet, or already removed).
pub fn report_of(job: &Job, pods: &[&Pod]) -> Option<String> {
    pods_of(job, pods).into_iter().find_map(|pod| {
        let phase = pod.status.as_ref()?.phase.as_deref();
        let t = terminated(pod).filter(|_| phase == Some("Succeeded"))?;
        (t.exit_code == 0).then(|| t.message.unwrap_or_default())
    })
}

/// How the provisioner container of `pod` ended, if it has.
fn terminated(pod: &Pod) -> Option<ContainerStateTerminated> {
    let mut statuses = pod.status.as_ref()?.container_statuses.iter().flatten();
    let ours = statuses.find(|c| c.name == CONTAINER_NAME)?;
    ours.state.as_ref()?.terminated.clone()
}

/// The attempt number a Job carries (1 when unlabelled).
pub fn attempt_of(job: &Job) -> u32 {
    job.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_ATTEMPT))
        .and_then(|a| a.parse().ok())
        .unwrap_or(1)
}

/// The pods a Job owns, among `pods`.
pub fn pods_of<'a>(job: &Job, pods: &[&'a Pod]) -> Vec<&'a Pod> {
    let uid = job.metadata.uid.as_deref().unwrap_or_default();
    pods.iter()
        .copied()
        .filter(|p| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.uid == uid)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The provisioner container's securityContext in a Job built with `pod_template`.
    fn container_security(pod_template: Option<&str>) -> SecurityContext {
        let recipe = JobRecipe {
            namespace: "flex-provisioner-config".into(),
            config: "flex-provisioner-config/hostpath".into(),
            image: "hostpath:1".into(),
            command: None,
            args: None,
            service_account: None,
            node_selector: BTreeMap::new(),
            node: None,
            pod_template: pod_template.map(|t| pod_template::parse(t).unwrap()),
            timeout_seconds: 60,
            retries: 1,
            permanent_exit_codes: std::collections::BTreeSet::new(),
            no_api_token: true,
            volume: None,
        };
        let job = build(JobInput {
            action: Action::Deprovision,
            name: "job".into(),
            attempt: 1,
            claim_uid: "uid".into(),
            volume: "pvc-uid".into(),
            claim_ref: "default/data".into(),
            storage_class: "local".into(),
            recipe,
            env: Vec::new(),
            parameters: &BTreeMap::new(),
            source: None,
            ttl_seconds: 60,
            labels: Vec::new(),
        });
        let pod = job.spec.unwrap().template.spec.unwrap();
        pod.containers[0].security_context.clone().unwrap()
    }

    fn caps(sc: &SecurityContext) -> (Option<Vec<String>>, Option<Vec<String>>) {
        let c = sc.capabilities.clone().unwrap_or_default();
        (c.drop, c.add)
    }

    fn strings(v: &[&str]) -> Option<Vec<String>> {
        Some(v.iter().map(|s| (*s).to_owned()).collect())
    }

    #[test]
    fn without_a_container_security_context_ours_is_kept() {
        for template in [None, Some("spec: {securityContext: {runAsUser: 0}}")] {
            let sc = container_security(template);
            assert_eq!(sc.allow_privilege_escalation, Some(false), "{template:?}");
            assert_eq!(caps(&sc), (strings(&["ALL"]), None), "{template:?}");
        }
    }

    #[test]
    fn granted_capabilities_keep_drop_all_and_no_escalation() {
        // As configmaps/hostpath.yaml says it, and with only the `add` list.
        for template in [
            "spec: {containers: [{securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL], add: [CHOWN, DAC_OVERRIDE, FOWNER, FSETID]}}}]}",
            "spec: {containers: [{securityContext: {capabilities: {add: [CHOWN, DAC_OVERRIDE, FOWNER, FSETID]}}}]}",
        ] {
            let sc = container_security(Some(template));
            assert_eq!(sc.allow_privilege_escalation, Some(false), "{template}");
            assert_eq!(
                caps(&sc),
                (
                    strings(&["ALL"]),
                    strings(&["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"])
                ),
                "{template}"
            );
        }
        // Another field alone keeps both hardening fields too.
        let sc = container_security(Some(
            "spec: {containers: [{securityContext: {readOnlyRootFilesystem: true}}]}",
        ));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(caps(&sc), (strings(&["ALL"]), None));
    }

    #[test]
    fn what_the_template_says_is_kept_as_said() {
        let sc = container_security(Some(
            "spec: {containers: [{securityContext: {allowPrivilegeEscalation: true, capabilities: {drop: [], add: [NET_ADMIN]}}}]}",
        ));
        assert_eq!(sc.allow_privilege_escalation, Some(true));
        assert_eq!(caps(&sc), (strings(&[]), strings(&["NET_ADMIN"])));
        // The API server refuses allowPrivilegeEscalation: false beside these.
        let sc = container_security(Some(
            "spec: {containers: [{securityContext: {privileged: true}}]}",
        ));
        assert_eq!(sc.privileged, Some(true));
        assert_eq!(sc.allow_privilege_escalation, None);
        assert_eq!(sc.capabilities, None);
        let sc = container_security(Some(
            "spec: {containers: [{securityContext: {capabilities: {add: [CAP_SYS_ADMIN]}}}]}",
        ));
        assert_eq!(sc.allow_privilege_escalation, None);
        assert_eq!(caps(&sc), (strings(&["ALL"]), strings(&["CAP_SYS_ADMIN"])));
    }
}
