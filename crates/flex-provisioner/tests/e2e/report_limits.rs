//! A provisioner image's report is untrusted (`pv-creator: controller`): a volume outside
//! what its class declares (`allowed-paths`, `allowed-nfs-servers`, `allowed-csi-drivers`,
//! Secrets only in the config namespace) gets no PV, one Job and a Warning naming the key.

use crate::common;

use common::provisioning::*;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Api, ListParams};
use serde_json::json;

/// What a compromised or buggy image reports, by name.
const REPORTS: &[(&str, &str, &str)] = &[
    ("root", "local", "which is not below allowed-paths"),
    ("outside", "local", "which is not below allowed-paths"),
    ("dotdot", "local", "which is not below allowed-paths"),
    (
        "nfs-elsewhere",
        "nfs",
        "which is not in allowed-nfs-servers",
    ),
    (
        "csi-secret",
        "csi",
        "a secret reference in a report must name the config namespace",
    ),
    (
        "with-affinity",
        "nodeAffinity",
        "which a report may not set",
    ),
];

/// The report-writing image: its `KIND` parameter says which report it writes.
fn script() -> String {
    r#"case "$KIND" in
  root) r='{"local":{"path":"/"}}' ;;
  outside) r='{"local":{"path":"/etc/flex"}}' ;;
  dotdot) r='{"local":{"path":"/volumes/../etc"}}' ;;
  nfs-elsewhere) r='{"nfs":{"server":"evil.example.com","path":"/volumes/x"}}' ;;
  csi-secret) r='{"csi":{"driver":"d.example.com","volumeHandle":"h","nodePublishSecretRef":{"name":"admin-token","namespace":"kube-system"}}}' ;;
  with-affinity) r='{"local":{"path":"/volumes/x"},"nodeAffinity":{"required":{"nodeSelectorTerms":[]}}}' ;;
esac
printf '%s' "$r" > "$TERMINATION_LOG""#
        .into()
}

#[tokio::test]
async fn a_report_outside_the_class_declaration_gets_no_pv_and_one_job() {
    let dir = std::env::temp_dir().join(format!(
        "flex-report-images-{}-{}",
        std::process::id(),
        kube_sandbox::ids::name_suffix()
    ));
    let entry = dir.join("reporter").join("entrypoint");
    std::fs::create_dir_all(entry.parent().unwrap()).unwrap();
    std::fs::write(&entry, format!("#!/bin/sh\nset -eu\n{}\n", script())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o755)).unwrap();
    let sb = sandbox_with(|mut o| {
        o.image_map.insert("reporter".into(), entry.clone());
        o
    })
    .await
    .owning(dir);
    let _c = controller(&sb);
    for (kind, _, _) in REPORTS {
        class(
            &sb,
            kind,
            "Immediate",
            "reporter",
            json!({"kind": kind, "volume-sources": "local,nfs,csi",
                   "allowed-paths": "/volumes", "allowed-nfs-servers": "nfs.example.com",
                   "allowed-nfs-paths": "/volumes", "allowed-csi-drivers": "d.example.com"}),
        )
        .await;
        claim(&sb, kind, kind).await;
    }
    for (kind, source, refusal) in REPORTS {
        let m = wait_event(&sb, kind, "ProvisioningFailed", refusal, 60).await;
        assert!(m.contains(source), "{kind}: {m}");
        assert!(m.contains("no PersistentVolume is created"), "{kind}: {m}");
    }
    // Permanent: the image would report the same again, so no second Job.
    for (kind, _, _) in REPORTS {
        given_up(&sb, kind, 30).await;
    }
    let by_claim = provision_jobs_by_claim(&sb).await;
    assert_eq!(by_claim.len(), REPORTS.len());
    assert!(
        by_claim.values().all(|jobs| jobs.len() == 1),
        "{by_claim:?}"
    );
    let pvs = Api::<PersistentVolume>::all(sb.client().unwrap())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(pvs.items.is_empty(), "no PV for any refused report");
}
