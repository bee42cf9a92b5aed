use super::*;
use crate::config::pod_template;

const TEMPLATE: &str = r#"
spec:
  volumes:
  - name: base
    hostPath: { path: /var/lib/volumes, type: DirectoryOrCreate }
  - name: scratch
    emptyDir: {}
  containers:
  - volumeMounts:
    - { name: base, mountPath: /var/lib/volumes }
    - { name: scratch, mountPath: /tmp }
"#;

fn template() -> PodTemplateSpec {
    pod_template::parse(TEMPLATE).unwrap()
}

fn dir(directory: &str) -> VolumeDirectory {
    VolumeDirectory {
        base: "base".into(),
        directory: directory.into(),
    }
}

/// (mountPath, subPath, readOnly) of every mount of the container.
fn mounts(t: &PodTemplateSpec) -> Vec<(String, Option<String>, bool)> {
    t.spec.as_ref().unwrap().containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .map(|m| {
            (
                m.mount_path.clone(),
                m.sub_path.clone(),
                m.read_only == Some(true),
            )
        })
        .collect()
}

fn owned(m: &[(&str, Option<&str>, bool)]) -> Vec<(String, Option<String>, bool)> {
    m.iter()
        .map(|(p, s, r)| ((*p).to_owned(), s.map(str::to_owned), *r))
        .collect()
}

/// Each action mounts only what it needs of the base, at the path it has below the base's
/// mount; other mounts stay.
#[test]
fn each_action_mounts_only_its_part_of_the_base() {
    for (action, expected) in [
        (
            Action::Provision,
            ("/var/lib/volumes/team-a/data-1", Some("team-a/data-1")),
        ),
        (
            Action::Expand,
            ("/var/lib/volumes/team-a/data-1", Some("team-a/data-1")),
        ),
        (
            Action::Deprovision,
            ("/var/lib/volumes/team-a", Some("team-a")),
        ),
    ] {
        let mut t = template();
        mount_only(&mut t, action, &dir("team-a/data-1"), None);
        assert_eq!(
            mounts(&t),
            owned(&[("/tmp", None, false), (expected.0, expected.1, false)]),
            "{action:?}"
        );
    }
    // A directory right in the base: its removal needs the base itself.
    let mut t = template();
    mount_only(&mut t, Action::Deprovision, &dir("data-1"), None);
    assert!(mounts(&t).contains(&("/var/lib/volumes".into(), None, false)));
}

/// A recorded recipe of the shared template whose volume is `directory` of the base.
fn recipe_in(directory: &str) -> crate::recipe::JobRecipe {
    crate::recipe::JobRecipe {
        namespace: "cfg".into(),
        config: "cfg/x".into(),
        image: "i".into(),
        command: None,
        args: None,
        service_account: None,
        node_selector: Default::default(),
        node: None,
        pod_template: Some(template()),
        timeout_seconds: 60,
        retries: 0,
        permanent_exit_codes: Default::default(),
        no_api_token: true,
        volume: Some(dir(directory)),
    }
}

/// A clone also mounts its source's directory, read-only, from the source's own base.
#[test]
fn a_clone_mounts_its_source_read_only_from_the_source_record() {
    let recipe = recipe_in("team-a/src");
    let source = source_mount(&recipe).unwrap();
    assert_eq!(source.mount_path, "/var/lib/volumes/team-a/src");
    assert_eq!(source.volume.name, SOURCE_VOLUME);
    assert_eq!(
        source.volume.host_path.as_ref().unwrap().path,
        "/var/lib/volumes"
    );
    let mut t = template();
    mount_only(
        &mut t,
        Action::Provision,
        &dir("team-a/copy"),
        Some(&source),
    );
    assert!(mounts(&t).contains(&(
        "/var/lib/volumes/team-a/src".into(),
        Some("team-a/src".into()),
        true
    )));
    assert!(!mounts(&t).contains(&("/var/lib/volumes".into(), None, false)));
    let volumes = t.spec.unwrap().volumes.unwrap();
    assert_eq!(
        volumes.iter().filter(|v| v.name == SOURCE_VOLUME).count(),
        1
    );
    // Only a provisioning Job copies from a source.
    let mut t = template();
    mount_only(&mut t, Action::Expand, &dir("team-a/copy"), Some(&source));
    assert!(!mounts(&t).iter().any(|(_, _, ro)| *ro));
    // A source of a class without volume-base has nothing to mount.
    assert_eq!(
        source_mount(&crate::recipe::JobRecipe {
            volume: None,
            ..recipe
        }),
        None
    );
}

/// A report is exactly the base's node directory (or export) with the claim's directory.
#[test]
fn the_exact_volume_is_the_base_and_the_directory() {
    assert_eq!(
        exact_volume(&template(), &dir("team-a/data-1")),
        Some(ExactVolume::Path("/var/lib/volumes/team-a/data-1".into()))
    );
    let nfs = pod_template::parse(
        "spec:\n  volumes: [{name: base, nfs: {server: nfs.example, path: /exports/}}]\n",
    )
    .unwrap();
    assert_eq!(
        exact_volume(&nfs, &dir("a/b")),
        Some(ExactVolume::Nfs {
            server: "nfs.example".into(),
            path: "/exports/a/b".into()
        })
    );
    assert_eq!(
        exact_volume(
            &template(),
            &VolumeDirectory {
                base: "scratch".into(),
                ..dir("a")
            }
        ),
        None
    );
}

#[test]
fn a_rendered_directory_stays_inside_the_base() {
    assert_eq!(directory_problem("team-a/data-1"), None);
    for (bad, says) in [
        ("", "empty"),
        ("/etc", "absolute"),
        ("a/../b", "`..`"),
        ("..", "`..`"),
        ("a//b", "empty segment"),
        ("a/", "empty segment"),
        ("./a", "`.`"),
        ("a\nb", "control"),
        (".snapshots/team-a/9f1c", "snapshots are kept"),
        (".snapshots", "snapshots are kept"),
    ] {
        let why = directory_problem(bad).unwrap_or_else(|| panic!("{bad:?} accepted"));
        assert!(why.contains(says), "{bad:?}: {why}");
    }
    assert!(directory_problem(&"a".repeat(2000)).is_some());
}

/// A snapshot Job writes only its snapshot's directory and reads the volume's; a
/// delete-snapshot Job mounts the namespace's snapshot directory, to remove the one
/// snapshot's; a restore reads only the snapshot's.
#[test]
fn snapshot_jobs_mount_only_the_snapshot_and_its_volume() {
    let volume_recipe = recipe_in("team-a/data-1");
    let snapshot = dir(&snapshot_directory("team-a", "9f1c"));
    assert_eq!(snapshot.directory, ".snapshots/team-a/9f1c");
    let volume = source_mount(&volume_recipe).unwrap();
    let mut t = template();
    mount_only(&mut t, Action::Snapshot, &snapshot, Some(&volume));
    assert_eq!(
        mounts(&t),
        owned(&[
            ("/tmp", None, false),
            (
                "/var/lib/volumes/.snapshots/team-a/9f1c",
                Some(".snapshots/team-a/9f1c"),
                false
            ),
            (
                "/var/lib/volumes/team-a/data-1",
                Some("team-a/data-1"),
                true
            ),
        ])
    );
    let mut t = template();
    mount_only(&mut t, Action::DeleteSnapshot, &snapshot, None);
    assert_eq!(
        mounts(&t),
        owned(&[
            ("/tmp", None, false),
            (
                "/var/lib/volumes/.snapshots/team-a",
                Some(".snapshots/team-a"),
                false
            ),
        ])
    );
    let snapshot_recipe = crate::recipe::JobRecipe {
        volume: Some(snapshot.clone()),
        ..volume_recipe
    };
    let restore = source_mount(&snapshot_recipe).unwrap();
    assert_eq!(restore.sub_path, ".snapshots/team-a/9f1c");
    assert_eq!(
        exact_handle(&template(), &snapshot).as_deref(),
        Some("/var/lib/volumes/.snapshots/team-a/9f1c")
    );
    let nfs = pod_template::parse(
        "spec:\n  volumes: [{name: base, nfs: {server: nfs.example, path: /exports}}]\n",
    )
    .unwrap();
    assert_eq!(
        exact_handle(&nfs, &snapshot).as_deref(),
        Some("nfs.example:/exports/.snapshots/team-a/9f1c")
    );
}
