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
