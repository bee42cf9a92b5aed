//! Rendering against a real context: strictness, escaping and every helper.

use std::collections::BTreeMap;

use super::*;
use crate::claim::{ClaimRequest, NodeInfo};
use crate::config::StorageClassInfo;
use crate::quantity::parse_bytes;

fn claim() -> ClaimRequest {
    ClaimRequest {
        name: "data".into(),
        namespace: "team-a".into(),
        uid: "u-1".into(),
        labels: BTreeMap::from([("team".into(), "Blue Team".into())]),
        annotations: BTreeMap::from([(
            "note".into(),
            "$(touch /tmp/pwned); \"quoted\" <b>&amp;".into(),
        )]),
        storage_class: "silver".into(),
        requested: "1536Mi".into(),
        bytes: parse_bytes("1536Mi").unwrap(),
        access_modes: vec!["ReadWriteOnce".into(), "ReadOnlyMany".into()],
        volume_mode: "Filesystem".into(),
        selected_node: Some("node-1".into()),
    }
}

fn class() -> StorageClassInfo {
    StorageClassInfo {
        name: "silver".into(),
        provisioner: "flex-provisioner.io/job".into(),
        parameters: BTreeMap::from([("tier".into(), "2".into())]),
        reclaim_policy: "Delete".into(),
        mount_options: vec!["noatime".into(), "nfsvers=4.1".into()],
        volume_binding_mode: "WaitForFirstConsumer".into(),
    }
}

fn ctx() -> Context {
    let node = NodeInfo {
        name: "node-1".into(),
        labels: BTreeMap::from([("topology.kubernetes.io/zone".into(), "west".into())]),
    };
    build_context(
        &claim(),
        &class(),
        Some(&node),
        "flex-provisioner.io/job",
        "pvc-u-1",
    )
}

fn r(src: &str) -> Result<String, TemplateError> {
    render(src, &ctx())
}

#[test]
fn renders_every_variable() {
    assert_eq!(
        r("{{claim.namespace}}/{{claim.name}} {{claim.uid}} {{volume.name}} {{provisioner.name}}")
            .unwrap(),
        "team-a/data u-1 pvc-u-1 flex-provisioner.io/job"
    );
    assert_eq!(
        r("{{claim.size.bytes}} {{claim.size.mib}} {{claim.size.gib}} {{claim.volumeMode}}")
            .unwrap(),
        "1610612736 1536 2 Filesystem"
    );
    assert_eq!(
        r("{{class.name}} {{class.parameters.tier}} {{class.reclaimPolicy}} {{class.volumeBindingMode}}").unwrap(),
        "silver 2 Delete WaitForFirstConsumer"
    );
    assert_eq!(
        r("{{node.name}} {{node.labels.[topology.kubernetes.io/zone]}}").unwrap(),
        "node-1 west"
    );
    assert_eq!(r("{{claim.labels.team}}").unwrap(), "Blue Team");
}

#[test]
fn no_html_escaping_and_user_text_passes_byte_for_byte() {
    assert_eq!(
        r("{{claim.annotations.note}}").unwrap(),
        "$(touch /tmp/pwned); \"quoted\" <b>&amp;"
    );
}

#[test]
fn strict_mode_names_the_missing_variable() {
    assert_eq!(
        r("{{claim.labels.missing}}").unwrap_err(),
        TemplateError::MissingVariable("claim.labels.missing".into())
    );
    assert_eq!(
        r("{{upper claim.labels.missing}}").unwrap_err(),
        TemplateError::MissingVariable("claim.labels.missing".into())
    );
    let no_node = build_context(&claim(), &class(), None, "p", "v");
    assert!(matches!(
        render("{{node.name}}", &no_node).unwrap_err(),
        TemplateError::MissingVariable(p) if p == "node.name"
    ));
}

#[test]
fn helpers() {
    assert_eq!(
        r("{{default claim.labels.missing \"shared\"}}").unwrap(),
        "shared"
    );
    assert_eq!(
        r("{{default claim.labels.team \"shared\"}}").unwrap(),
        "Blue Team"
    );
    assert_eq!(r("{{lower claim.labels.team}}").unwrap(), "blue team");
    assert_eq!(r("{{upper claim.name}}").unwrap(), "DATA");
    assert_eq!(r("{{trunc claim.labels.team 4}}").unwrap(), "Blue");
    assert_eq!(r("{{dnslabel claim.labels.team}}").unwrap(), "blue-team");
    assert_eq!(
        r("{{dnslabel claim.annotations.note 12}}").unwrap(),
        "touch-tmp-pw"
    );
    assert_eq!(
        r("{{dnslabel (default claim.labels.missing \"Fallback Team\")}}").unwrap(),
        "fallback-team"
    );
    assert_eq!(
        r("{{replace claim.labels.team \" \" \"_\"}}").unwrap(),
        "Blue_Team"
    );
    assert_eq!(
        r("{{join claim.accessModes \",\"}}").unwrap(),
        "ReadWriteOnce,ReadOnlyMany"
    );
    assert_eq!(
        r("{{join class.mountOptions \" \"}}").unwrap(),
        "noatime nfsvers=4.1"
    );
    assert_eq!(
        r("{{json claim.labels}}").unwrap(),
        r#"{"team":"Blue Team"}"#
    );
    assert_eq!(
        r("{{json claim.annotations.note}}").unwrap(),
        r#""$(touch /tmp/pwned); \"quoted\" <b>&amp;""#
    );
    assert_eq!(
        r("{{#if (eq class.parameters.tier \"2\")}}fast{{else}}slow{{/if}}").unwrap(),
        "fast"
    );
    assert!(
        matches!(r("{{trunc claim.name \"x\"}}").unwrap_err(), TemplateError::Render(m) if m.contains("whole number"))
    );
    assert!(
        matches!(r("{{default}}").unwrap_err(), TemplateError::Render(m) if m.contains("default"))
    );
}

#[test]
fn syntax_errors_say_where() {
    let e = compile("/exports/{{claim.name").unwrap_err();
    assert!(
        matches!(&e, TemplateError::Syntax(m) if m.contains("line 1")),
        "{e}"
    );
    assert!(matches!(
        r("{{#if x}}").unwrap_err(),
        TemplateError::Syntax(_)
    ));
}
