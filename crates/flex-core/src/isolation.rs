//! Per-volume mounts (docs/configuration.md, "Per-volume directories"): the pod of a class with
//! `volume-base` sees only the directories of the volumes its action touches, mounted by the
//! kubelet with `subPath`, never the whole base that holds every tenant's volumes. A link a
//! tenant plants in their own volume then resolves inside the container, where no other
//! tenant's directory exists.

use k8s_openapi::api::core::v1::{PodTemplateSpec, Volume, VolumeMount};

use crate::config::allowed::ExactVolume;
use crate::names::{Action, CONTAINER_NAME};
use crate::recipe::{JobRecipe, VolumeDirectory};

/// The pod volume a clone's source directory comes from: the source's own base, as its
/// record describes it (it may be another class's).
pub const SOURCE_VOLUME: &str = "flex-clone-source";

/// A clone's source directory, as the clone's pod mounts it: read-only, at the path the
/// source's own Jobs see it.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceMount {
    pub volume: Volume,
    pub mount_path: String,
    pub sub_path: String,
}

/// `base` + `/` + `rest`, without doubling a slash.
fn joined(base: &str, rest: &str) -> String {
    if rest.is_empty() {
        return base.to_owned();
    }
    format!("{}/{rest}", base.trim_end_matches('/'))
}

/// Where the provisioner container of `template` mounts volume `base`.
pub fn base_mount_path(template: &PodTemplateSpec, base: &str) -> Option<String> {
    template
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == CONTAINER_NAME)?
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == base)
        .map(|m| m.mount_path.clone())
}

/// The pod volume named `name` in `template`.
pub fn pod_volume<'a>(template: &'a PodTemplateSpec, name: &str) -> Option<&'a Volume> {
    template
        .spec
        .as_ref()?
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == name)
}

/// Exactly what a report of the volume in `dir` may name: the base's node directory or
/// export with the volume's directory below it.
pub fn exact_volume(template: &PodTemplateSpec, dir: &VolumeDirectory) -> Option<ExactVolume> {
    let volume = pod_volume(template, &dir.base)?;
    if let Some(h) = &volume.host_path {
        return Some(ExactVolume::Path(joined(&h.path, &dir.directory)));
    }
    volume.nfs.as_ref().map(|n| ExactVolume::Nfs {
        server: n.server.clone(),
        path: joined(&n.path, &dir.directory),
    })
}

/// The directory below a class's base that holds its snapshots, one per VolumeSnapshot
/// (`.snapshots/<namespace>/<uid>`). No `volume-directory` may render into it
/// (`directory_problem`), so no tenant's volume is ever one of them.
pub const SNAPSHOTS: &str = ".snapshots";

/// The directory of the snapshot `uid` of a claim in `namespace`, below the base.
pub fn snapshot_directory(namespace: &str, uid: &str) -> String {
    format!("{SNAPSHOTS}/{namespace}/{uid}")
}

/// What a snapshot's image reports as its handle when the class has `volume-base`: the
/// node directory (`hostPath` base) or `server:path` (`nfs` base) of `dir`.
pub fn exact_handle(template: &PodTemplateSpec, dir: &VolumeDirectory) -> Option<String> {
    Some(match exact_volume(template, dir)? {
        ExactVolume::Path(p) => p,
        ExactVolume::Nfs { server, path } => format!("{server}:{path}"),
    })
}

/// A clone's source mount, from the recipe recorded with the source volume (`None`: the
/// source's class had no `volume-base`, and the clone's pod gets no source mount). A
/// snapshot's recipe names the snapshot's directory: a restore copies from there, and the
/// snapshot Job itself copies from the volume's.
pub fn source_mount(recipe: &JobRecipe) -> Option<SourceMount> {
    let dir = recipe.volume.as_ref()?;
    let template = recipe.pod_template.as_ref()?;
    let mut volume = pod_volume(template, &dir.base)?.clone();
    volume.name = SOURCE_VOLUME.to_owned();
    Some(SourceMount {
        volume,
        mount_path: joined(&base_mount_path(template, &dir.base)?, &dir.directory),
        sub_path: dir.directory.clone(),
    })
}

/// Replaces the container's mount of the whole base with what `action` needs, each at the
/// path it has below the base's mount path (so an image's paths do not change): the volume
/// itself to provision or expand it (the kubelet makes a missing directory), its parent
/// directory to remove it (a mount point cannot be removed from inside), and what a clone,
/// a restore or a snapshot copies from, read-only.
pub fn mount_only(
    template: &mut PodTemplateSpec,
    action: Action,
    dir: &VolumeDirectory,
    source: Option<&SourceMount>,
) {
    let Some(spec) = template.spec.as_mut() else {
        return;
    };
    let Some(container) = spec
        .containers
        .iter_mut()
        .find(|c| c.name == CONTAINER_NAME)
    else {
        return;
    };
    let mounts = container.volume_mounts.get_or_insert_with(Vec::new);
    let Some(base_path) = mounts
        .iter()
        .find(|m| m.name == dir.base)
        .map(|m| m.mount_path.clone())
    else {
        return;
    };
    mounts.retain(|m| m.name != dir.base && m.name != SOURCE_VOLUME);
    let sub_path = match action {
        Action::Deprovision | Action::DeleteSnapshot => dir
            .directory
            .rsplit_once('/')
            .map(|(parent, _)| parent.to_owned())
            .unwrap_or_default(),
        _ => dir.directory.clone(),
    };
    mounts.push(VolumeMount {
        name: dir.base.clone(),
        mount_path: joined(&base_path, &sub_path),
        sub_path: (!sub_path.is_empty()).then_some(sub_path),
        ..Default::default()
    });
    let copies = matches!(action, Action::Provision | Action::Snapshot);
    let Some(source) = source.filter(|_| copies) else {
        return;
    };
    mounts.push(VolumeMount {
        name: SOURCE_VOLUME.to_owned(),
        mount_path: source.mount_path.clone(),
        sub_path: Some(source.sub_path.clone()),
        read_only: Some(true),
        ..Default::default()
    });
    let volumes = spec.volumes.get_or_insert_with(Vec::new);
    volumes.retain(|v| v.name != SOURCE_VOLUME);
    volumes.push(source.volume.clone());
}

/// Why a rendered `volume-directory` cannot name a volume's directory, if it cannot: it
/// must be relative and stay inside the base, one plain name per segment.
pub fn directory_problem(directory: &str) -> Option<String> {
    if directory.is_empty() {
        return Some("rendered empty; every volume needs a directory of its own".into());
    }
    if directory.len() > 1024 {
        return Some(format!(
            "rendered {} bytes; a directory name of at most 1024 is expected",
            directory.len()
        ));
    }
    if directory.starts_with('/') {
        return Some(format!(
            "rendered `{directory}`, an absolute path; it names a directory relative to the base"
        ));
    }
    if directory.split('/').next() == Some(SNAPSHOTS) {
        return Some(format!(
            "rendered `{directory}`, inside `{SNAPSHOTS}`, where the class's snapshots are kept"
        ));
    }
    if directory.chars().any(char::is_control) {
        return Some(format!(
            "rendered {directory:?}, with a control character; use dnslabel on free text"
        ));
    }
    directory
        .split('/')
        .find(|s| s.is_empty() || *s == "." || *s == "..")
        .map(|s| {
            let what = if s.is_empty() {
                "an empty segment".to_owned()
            } else {
                format!("a `{s}` segment")
            };
            format!(
                "rendered `{directory}`, with {what}; each segment must be a plain name inside the base"
            )
        })
}

#[cfg(test)]
mod tests;
