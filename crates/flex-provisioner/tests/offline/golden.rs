//! `render` output for every example under configmaps/ against committed YAML, so a change
//! to the Job or PV shape is a reviewed diff. `UPDATE_GOLDEN=1 cargo test --test e2e golden::`
//! rewrites the files after an intended change.

use crate::common;

use std::path::{Path, PathBuf};

use flex_provisioner::offline::{RenderInput, read_documents, render_files};
use k8s_openapi::api::storage::v1::StorageClass;

fn examples() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir("configmaps")
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn class_of(example: &Path) -> StorageClass {
    read_documents(example)
        .unwrap()
        .into_iter()
        .find(|d| d.kind == "StorageClass")
        .expect("every example ships its StorageClass")
        .to_object()
        .unwrap()
}

#[test]
fn render_output_matches_the_committed_golden_files() {
    common::at_root();
    let examples = examples();
    assert!(examples.len() >= 4, "examples: {examples:?}");
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut mismatched = Vec::new();
    for example in &examples {
        let class = class_of(example);
        let waits = class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer");
        let out = render_files(&RenderInput {
            config: example.clone(),
            class: example.clone(),
            claim: "testdata/fixtures/claim.yaml".into(),
            node: waits.then(|| "testdata/fixtures/node.yaml".into()),
            provisioner_name: class.provisioner.clone(),
            attempt: 1,
            ttl_seconds: 3600,
            expand_to: None,
            snapshot: None,
        })
        .unwrap_or_else(|e| panic!("{}: {e}", example.display()));
        let golden = Path::new("testdata/golden").join(example.file_name().unwrap());
        if update {
            std::fs::write(&golden, &out).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&golden).unwrap_or_else(|_| {
            panic!("{} is missing; run with UPDATE_GOLDEN=1", golden.display())
        });
        if expected != out {
            mismatched.push(golden.display().to_string());
        }
    }
    assert!(
        mismatched.is_empty(),
        "render output changed for {mismatched:?}; review with UPDATE_GOLDEN=1 cargo test --test e2e golden:: && git diff testdata/golden"
    );
}

/// `render --action snapshot|delete-snapshot` on the shipped hostpath class: the Jobs a
/// snapshot of the fixture claim's volume would run, mounting only what each needs.
#[test]
fn the_snapshot_jobs_of_the_hostpath_class_render() {
    common::at_root();
    let render = |which| {
        render_files(&RenderInput {
            config: "configmaps/hostpath.yaml".into(),
            class: "configmaps/hostpath.yaml".into(),
            claim: "testdata/fixtures/claim.yaml".into(),
            node: Some("testdata/fixtures/node.yaml".into()),
            provisioner_name: flex_core::names::DEFAULT_PROVISIONER_NAME.into(),
            attempt: 1,
            ttl_seconds: 3600,
            expand_to: None,
            snapshot: Some(which),
        })
        .unwrap()
    };
    let job = |out: &str| -> k8s_openapi::api::batch::v1::Job {
        serde_yaml_ng::from_str(out.split("---\n").nth(1).unwrap()).unwrap()
    };
    let mounts = |j: &k8s_openapi::api::batch::v1::Job| -> Vec<(String, bool)> {
        let c = &j
            .spec
            .as_ref()
            .unwrap()
            .template
            .spec
            .as_ref()
            .unwrap()
            .containers[0];
        (c.volume_mounts.iter().flatten())
            .map(|m| {
                (
                    m.sub_path.clone().unwrap_or_default(),
                    m.read_only == Some(true),
                )
            })
            .collect()
    };
    let take = job(&render(flex_provisioner::offline::SnapshotJob::Take));
    assert!(
        take.metadata
            .name
            .as_deref()
            .unwrap()
            .starts_with("snapshot-")
    );
    let m = mounts(&take);
    assert_eq!(m.len(), 2, "{m:?}");
    assert!(m[0].0.starts_with(".snapshots/") && !m[0].1, "{m:?}");
    assert!(
        !m[1].0.starts_with(".snapshots") && m[1].1,
        "the volume, read-only: {m:?}"
    );
    let delete = job(&render(flex_provisioner::offline::SnapshotJob::Delete));
    assert!(
        delete
            .metadata
            .name
            .as_deref()
            .unwrap()
            .starts_with("delete-snapshot-")
    );
    let m = mounts(&delete);
    assert_eq!(m.len(), 1, "{m:?}");
    assert!(
        m[0].0.starts_with(".snapshots/") && m[0].0.matches('/').count() == 1,
        "{m:?}"
    );
}
