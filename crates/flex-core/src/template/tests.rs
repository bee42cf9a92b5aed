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

/// A context whose claim carries `n` annotations of `size` bytes each (user-controlled).
fn ctx_with_annotations(n: usize, size: usize) -> Context {
    let mut c = claim();
    c.annotations = (0..n)
        .map(|i| (format!("a{i:05}"), "x".repeat(size)))
        .collect();
    build_context(&c, &class(), None, "flex-provisioner.io/job", "pvc-u-1")
}

#[test]
fn partials_inline_partials_and_decorators_are_refused() {
    for src in [
        "{{#*inline \"me\"}}{{> me}}{{/inline}}{{> me}}",
        "{{> other}}",
        "{{#> layout}}x{{/layout}}",
        "{{*decorator}}",
    ] {
        let e = compile(src).unwrap_err();
        assert!(matches!(e, TemplateError::Unsupported(_)), "{src}: {e:?}");
        // Rendering refuses it as well, instead of recursing until the stack overflows.
        assert!(render(src, &ctx()).is_err(), "{src}");
    }
}

#[test]
fn nesting_and_size_are_bounded() {
    let deep_blocks = format!("{}x{}", "{{#if true}}".repeat(30), "{{/if}}".repeat(30));
    assert!(matches!(
        compile(&deep_blocks),
        Err(TemplateError::Limit(_))
    ));
    let deep_each = format!(
        "{}{{{{@root.claim.name}}}}{}",
        "{{#each @root.claim.annotations}}".repeat(30),
        "{{/each}}".repeat(30)
    );
    assert!(matches!(compile(&deep_each), Err(TemplateError::Limit(_))));
    let deep_subexpressions = format!(
        "{{{{{}claim.name{}}}}}",
        "(lower ".repeat(40),
        ")".repeat(40)
    );
    assert!(matches!(
        compile(&deep_subexpressions),
        Err(TemplateError::Limit(_))
    ));
    let huge = "{{claim.name}}".repeat(100_000);
    assert!(matches!(compile(&huge), Err(TemplateError::Limit(_))));
    // Eight levels are fine.
    let ok = format!("{}x{}", "{{#if true}}".repeat(8), "{{/if}}".repeat(8));
    assert_eq!(render(&ok, &ctx()).unwrap(), "x");
}

#[test]
fn output_is_bounded_while_rendering() {
    // 2,000 annotations, each nested in each: 4 million pieces if nothing stopped it.
    let c = ctx_with_annotations(2_000, 10);
    let src =
        "{{#each claim.annotations}}{{#each @root.claim.annotations}}{{this}}{{/each}}{{/each}}";
    let e = render(src, &c).unwrap_err();
    assert!(
        matches!(&e, TemplateError::Limit(m) if m.contains("over 65536 bytes")),
        "{e:?}"
    );
    // `replace` on a 200 KB annotation with an empty pattern: refused before it is built.
    let c = ctx_with_annotations(1, 200_000);
    let e = render(
        "{{replace claim.annotations.a00000 \"\" \"0123456789\"}}",
        &c,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("helper `replace` would make a value of"),
        "{e}"
    );
    // Ordinary use is untouched.
    assert_eq!(
        render("{{replace claim.name \"a\" \"o\"}}", &ctx()).unwrap(),
        "doto"
    );
}
