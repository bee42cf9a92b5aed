//! `render`: the Job (and PV template) a claim would produce, without a cluster.

use std::path::PathBuf;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

use super::files::read_one;
use flex_core::Error;
use flex_core::claim::{ClaimRequest, NodeInfo};
use flex_core::config::{ClassConfig, ConfigErrors, StorageClassInfo, Verdict, parse_config_map};
use flex_core::job::{ProvisionContext, expand_job, provision_job};
use flex_core::names::{ANN_SELECTED_NODE, fnv1a32};
use flex_core::recipe::JobRecipe;
use flex_core::rendered::render_for_claim;
use flex_core::volume::pv_template;

pub struct RenderInput {
    pub config: PathBuf,
    pub class: PathBuf,
    pub claim: PathBuf,
    pub node: Option<PathBuf>,
    pub provisioner_name: String,
    pub attempt: u32,
    pub ttl_seconds: i32,
    /// Render the expansion Job that grows the claim's volume to this size instead.
    pub expand_to: Option<String>,
    /// Render a Job of a snapshot of the claim's volume instead.
    pub snapshot: Option<SnapshotJob>,
}

/// Which Job of a snapshot to render.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotJob {
    /// The Job that takes it (`ACTION=snapshot`).
    Take,
    /// The Job that deletes its copy (`ACTION=delete-snapshot`).
    Delete,
}

/// Reads the files and returns the YAML of the Job followed by the PV template.
pub fn render_files(input: &RenderInput) -> Result<String, Error> {
    let cm: ConfigMap = read_one(&input.config, "ConfigMap")?;
    let sc: StorageClass = read_one(&input.class, "StorageClass")?;
    let pvc: PersistentVolumeClaim = read_one(&input.claim, "PersistentVolumeClaim")?;
    let node: Option<Node> = input
        .node
        .as_ref()
        .map(|p| read_one(p, "Node"))
        .transpose()?;
    if let Some(size) = &input.expand_to {
        let job = render_expansion(
            &cm,
            &sc,
            pvc,
            node.as_ref(),
            &input.provisioner_name,
            size,
            input.attempt,
            input.ttl_seconds,
        )?;
        let mut out = format!(
            "# The Job flex-provisioner would create to grow the claim's volume to {size}\n---\n"
        );
        out.push_str(&to_yaml(&job)?);
        return Ok(out);
    }
    if let Some(which) = input.snapshot {
        let job = render_snapshot(
            &cm,
            &sc,
            pvc,
            node.as_ref(),
            &input.provisioner_name,
            which,
            input.attempt,
            input.ttl_seconds,
        )?;
        let what = match which {
            SnapshotJob::Take => "take a snapshot of the claim's volume",
            SnapshotJob::Delete => "delete that snapshot's copy",
        };
        let mut out = format!(
            "# The Job flex-provisioner would create to {what} (a VolumeSnapshot `<claim>-snapshot` of class `flex-snapshots`, with made-up uids; SOURCE_PV_JSON is the volume before the image's source is added)\n---\n"
        );
        out.push_str(&to_yaml(&job)?);
        return Ok(out);
    }
    let (job, pv) = render_objects(
        &cm,
        &sc,
        pvc,
        node.as_ref(),
        &input.provisioner_name,
        input.attempt,
        input.ttl_seconds,
    )?;
    let mut out = String::from("# The Job flex-provisioner would create\n---\n");
    out.push_str(&to_yaml(&job)?);
    out.push_str("# The PV template its pod receives in PV_TEMPLATE (the image adds the volume source)\n---\n");
    out.push_str(&to_yaml(&pv)?);
    out.push_str(&accepted(&cm, &input.provisioner_name));
    Ok(out)
}

/// What the class accepts from its image (volume types, the `allowed-*` keys, the secret
/// rule), as YAML comments after the objects, so the output still applies as it is.
fn accepted(cm: &ConfigMap, provisioner_name: &str) -> String {
    // Parsed once more: `render_objects` already refused a configuration with errors.
    let Verdict::Checked {
        config: Some(c), ..
    } = parse_config_map(cm, provisioner_name)
    else {
        return String::new();
    };
    let mut out = String::from("# What this class accepts from its image\n");
    if let Some(layout) = &c.volume_layout {
        out.push_str(&format!(
            "#   volume-base {}: exactly the claim's directory in it (volume-directory, rendered above as VOLUME_DIRECTORY), never another path; the Jobs mount only the directories their action needs\n",
            layout.base
        ));
    }
    for line in c.allowed_volumes.describe(c.pv_creator, &c.volume_sources) {
        out.push_str(&format!("#   {line}\n"));
    }
    out
}

fn to_yaml<T: serde::Serialize>(value: &T) -> Result<String, Error> {
    serde_yaml_ng::to_string(value).map_err(|e| Error::Input {
        path: "<output>".into(),
        message: e.to_string(),
    })
}

/// The pure part of `render`: objects in, the Job and PV template out. A claim written by
/// hand has no uid; a stable one is derived from its namespace and name so output is
/// reproducible.
pub fn render_objects(
    cm: &ConfigMap,
    sc: &StorageClass,
    pvc: PersistentVolumeClaim,
    node: Option<&Node>,
    provisioner_name: &str,
    attempt: u32,
    ttl_seconds: i32,
) -> Result<(Job, PersistentVolume), Error> {
    let p = prepare(cm, sc, pvc, node, provisioner_name)?;
    let job = provision_job(
        ProvisionContext {
            config: &p.config,
            claim: &p.claim,
            node: p.node.as_ref(),
            rendered: &p.rendered,
            pv_template: &p.pv,
            provisioner_name,
            source: None,
            inputs_hash: &flex_core::inputs::inputs_hash(&p.config, &p.claim),
        },
        attempt,
        ttl_seconds,
    );
    Ok((job, p.pv))
}

/// The expansion Job for the claim's volume, grown to `size`: built, as the controller
/// does, from the record written when the volume was provisioned; the volume here is the
/// PV template (the real one also holds the image's volume source).
#[allow(clippy::too_many_arguments)]
pub fn render_expansion(
    cm: &ConfigMap,
    sc: &StorageClass,
    pvc: PersistentVolumeClaim,
    node: Option<&Node>,
    provisioner_name: &str,
    size: &str,
    attempt: u32,
    ttl_seconds: i32,
) -> Result<Job, Error> {
    let p = prepare(cm, sc, pvc, node, provisioner_name)?;
    if sc.allow_volume_expansion != Some(true) {
        return Err(Error::ConfigMismatch(format!(
            "class `{}` does not set allowVolumeExpansion: true, so its claims cannot grow",
            p.config.class.name
        )));
    }
    let to =
        flex_core::quantity::parse_bytes(size).map_err(|e| Error::ConfigMismatch(e.to_string()))?;
    if to <= p.claim.bytes {
        return Err(Error::ConfigMismatch(format!(
            "--size {size} is not more than the claim's request {}",
            p.claim.requested
        )));
    }
    let record = flex_core::record::Record {
        recipe: JobRecipe::deprovision(&p.config, &p.rendered, p.node.as_ref()),
        expand: None,
        parameters: p.rendered.parameters.clone(),
    };
    let recipe = JobRecipe::expand(&p.config, &p.rendered, p.node.as_ref());
    Ok(expand_job(
        &p.pv,
        &recipe,
        &record,
        size,
        provisioner_name,
        attempt,
        ttl_seconds,
    ))
}

/// A Job of a snapshot of the claim's volume, as if the claim had been provisioned: the
/// snapshot Job from the volume's record, or the delete-snapshot Job from the record the
/// snapshot would have.
#[allow(clippy::too_many_arguments)]
pub fn render_snapshot(
    cm: &ConfigMap,
    sc: &StorageClass,
    pvc: PersistentVolumeClaim,
    node: Option<&Node>,
    provisioner_name: &str,
    which: SnapshotJob,
    attempt: u32,
    ttl_seconds: i32,
) -> Result<Job, Error> {
    use flex_core::snapshot::jobs::{
        SnapshotJob as Taking, delete_snapshot_job, expected_handle, snapshot_job, snapshot_recipe,
    };
    use flex_core::snapshot::record::SnapshotRecord;
    use flex_core::snapshot::{VolumeSnapshot, VolumeSnapshotClass, content_for};
    let p = prepare(cm, sc, pvc, node, provisioner_name)?;
    if !p.config.provisioner.snapshots {
        return Err(Error::ConfigMismatch(format!(
            "class `{}`'s ConfigMap does not set snapshots: \"true\", so its claims are not snapshotted",
            p.config.class.name
        )));
    }
    let volume = flex_core::record::Record {
        recipe: JobRecipe::deprovision(&p.config, &p.rendered, p.node.as_ref()),
        expand: None,
        parameters: p.rendered.parameters.clone(),
    };
    let uid = format!("{}-snap", p.claim.uid);
    let snapshot: VolumeSnapshot = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{}-snapshot", p.claim.name),
                     "namespace": p.claim.namespace, "uid": uid},
        "spec": {"volumeSnapshotClassName": "flex-snapshots",
                 "source": {"persistentVolumeClaimName": p.claim.name}}
    }))
    .map_err(|e| Error::ConfigMismatch(e.to_string()))?;
    let class: VolumeSnapshotClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "flex-snapshots"}, "driver": provisioner_name,
        "deletionPolicy": "Delete"
    }))
    .map_err(|e| Error::ConfigMismatch(e.to_string()))?;
    let mut content = content_for(&snapshot, &class, &p.pv, Default::default())
        .ok_or_else(|| Error::ConfigMismatch("the made-up snapshot has no uid".into()))?;
    content.metadata.uid = Some(format!("{uid}-content"));
    Ok(match which {
        SnapshotJob::Take => snapshot_job(Taking {
            snapshot: &snapshot,
            content: &content,
            class: &class,
            pv: &p.pv,
            volume: &volume,
            provisioner_name,
            attempt,
            ttl_seconds,
        }),
        SnapshotJob::Delete => {
            let recipe = snapshot_recipe(&volume.recipe, &p.claim.namespace, &uid);
            let record = SnapshotRecord {
                snapshot: (
                    p.claim.namespace.clone(),
                    format!("{}-snapshot", p.claim.name),
                ),
                snapshot_uid: uid.clone(),
                source_pv: p.pv.clone(),
                handle: expected_handle(&recipe)
                    .unwrap_or_else(|| "<the handle its snapshot Job reported>".into()),
                restore_size: i64::try_from(p.claim.bytes.0).unwrap_or(i64::MAX),
                taken_at: Default::default(),
                recipe,
                parameters: volume.parameters.clone(),
            };
            delete_snapshot_job(&record, &content, provisioner_name, attempt, ttl_seconds)
        }
    })
}

/// What both renderings start from: the checked configuration, the claim (with a stable
/// uid when it has none) and its rendered parameters and PV template.
struct Prepared {
    config: ClassConfig,
    claim: ClaimRequest,
    node: Option<NodeInfo>,
    rendered: flex_core::rendered::Rendered,
    pv: PersistentVolume,
}

fn prepare(
    cm: &ConfigMap,
    sc: &StorageClass,
    mut pvc: PersistentVolumeClaim,
    node: Option<&Node>,
    provisioner_name: &str,
) -> Result<Prepared, Error> {
    let provisioner = match parse_config_map(cm, provisioner_name) {
        Verdict::Ignored { reason } => return Err(Error::ConfigIgnored(reason)),
        Verdict::Checked {
            config: Some(c), ..
        } => *c,
        Verdict::Checked { problems, .. } => {
            return Err(ConfigErrors {
                origin: object_ref(
                    cm.metadata.namespace.as_deref(),
                    cm.metadata.name.as_deref(),
                ),
                problems,
            }
            .into());
        }
    };
    let class = StorageClassInfo::from_class(sc);
    let config = ClassConfig::new(provisioner, class, provisioner_name).map_err(|problems| {
        Error::Config(ConfigErrors {
            origin: object_ref(
                cm.metadata.namespace.as_deref(),
                cm.metadata.name.as_deref(),
            ),
            problems,
        })
    })?;
    // A claim without a class gets the cluster's default class; here that is the one given.
    let spec = pvc.spec.get_or_insert_with(Default::default);
    if spec.storage_class_name.is_none() {
        spec.storage_class_name = sc.metadata.name.clone();
    }
    let meta = &mut pvc.metadata;
    let namespace = meta
        .namespace
        .get_or_insert_with(|| "default".into())
        .clone();
    let name = meta.name.clone().unwrap_or_default();
    meta.uid.get_or_insert_with(|| {
        let h = fnv1a32(format!("{namespace}/{name}").as_bytes());
        format!("00000000-0000-4000-8000-0000{h:08x}")
    });
    let node_info = node.map(NodeInfo::from_node);
    if let Some(n) = &node_info {
        meta.annotations
            .get_or_insert_with(Default::default)
            .entry(ANN_SELECTED_NODE.into())
            .or_insert_with(|| n.name.clone());
    }
    if config.class.waits_for_consumer()
        && node_info.is_none()
        && (config.provisioner.node_local || !config.provisioner.node_users.is_empty())
    {
        return Err(Error::ConfigMismatch(format!(
            "class `{}` waits for the first consumer and this configuration uses the selected node; pass --node NODE.yaml",
            config.class.name
        )));
    }
    let claim = ClaimRequest::from_claim(&pvc)?;
    if claim.storage_class != config.class.name {
        return Err(Error::ConfigMismatch(format!(
            "the claim asks for class `{}`, but the StorageClass given is `{}`",
            claim.storage_class, config.class.name
        )));
    }
    let rendered = render_for_claim(&config, &claim, node_info.as_ref(), provisioner_name)?;
    let pv = pv_template(&config, &claim, node_info.as_ref(), provisioner_name);
    Ok(Prepared {
        config,
        claim,
        node: node_info,
        rendered,
        pv,
    })
}

fn object_ref(namespace: Option<&str>, name: Option<&str>) -> String {
    format!(
        "{}/{}",
        namespace.unwrap_or("default"),
        name.unwrap_or_default()
    )
}
