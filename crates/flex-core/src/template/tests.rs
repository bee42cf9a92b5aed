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
        data_source: None,
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
        unschedulable: false,
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
    // A clock that cannot run out first, however slow the machine: this is about bytes.
    let mut budget = Budget::with_limits(std::time::Duration::from_secs(600), usize::MAX);
    let e = render_within(src, &c, &mut budget).unwrap_err();
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

/// Our `each` (which charges the budget) keeps Handlebars' semantics.
#[test]
fn each_behaves_as_handlebars_each() {
    assert_eq!(
        r("{{#each claim.accessModes}}{{@index}}:{{this}}{{#if @first}}!{{/if}}{{#if @last}}.{{/if}} {{/each}}").unwrap(),
        "0:ReadWriteOnce! 1:ReadOnlyMany. "
    );
    assert_eq!(
        r("{{#each claim.accessModes as |m i|}}{{i}}={{m}};{{/each}}").unwrap(),
        "0=ReadWriteOnce;1=ReadOnlyMany;"
    );
    assert_eq!(
        r("{{#each class.parameters as |v k|}}{{k}}={{v}} {{@key}} {{@index}}{{/each}}").unwrap(),
        "tier=2 tier 0"
    );
    assert_eq!(
        r("{{#each claim.labels}}{{@key}}={{this}}/{{../claim.name}}/{{@root.volume.name}}{{/each}}")
            .unwrap(),
        "team=Blue Team/data/pvc-u-1"
    );
    assert_eq!(
        r("{{#each class.parameters}}{{#with @root.claim}}{{@key}}:{{name}}{{/with}}{{/each}}")
            .unwrap(),
        "tier:data"
    );
    assert_eq!(
        r("{{#each class.mountOptions}}{{this}}{{else}}none{{/each}}").unwrap(),
        "noatimenfsvers=4.1"
    );
    let mut empty = class();
    empty.mount_options.clear();
    let c = build_context(&claim(), &empty, None, "p", "v");
    assert_eq!(
        render(
            "{{#each class.mountOptions}}{{this}}{{else}}none{{/each}}",
            &c
        )
        .unwrap(),
        "none"
    );
    assert_eq!(
        render("{{#each class.mountOptions}}x{{/each}}", &c).unwrap(),
        ""
    );
    assert_eq!(
        r("{{#each claim.labels.missing}}x{{/each}}").unwrap_err(),
        TemplateError::MissingVariable("claim.labels.missing".into())
    );
}

#[test]
fn one_budget_is_shared_by_every_render_it_is_given_to() {
    let mut budget = Budget::with_limits(MAX_RENDER_TIME, 10);
    assert_eq!(
        render_within("{{claim.name}}", &ctx(), &mut budget).unwrap(),
        "data"
    );
    assert_eq!(
        render_within("{{claim.uid}}", &ctx(), &mut budget).unwrap(),
        "u-1"
    );
    // 7 of 10 bytes spent: the next 4 do not fit.
    let e = render_within("{{claim.name}}", &ctx(), &mut budget).unwrap_err();
    assert!(
        matches!(&e, TemplateError::Limit(m) if m.contains("together")),
        "{e:?}"
    );
    assert_eq!(e.category(), "limit");
}

#[test]
fn the_time_budget_stops_loops_that_write_nothing() {
    let c = ctx_with_annotations(2_000, 1);
    let src = "{{#each claim.annotations}}{{#each @root.claim.annotations}}{{#each @root.claim.annotations}}{{/each}}{{/each}}{{/each}}";
    // How soon it stops is the `template_budget` bench's to measure.
    let e = render(src, &c).unwrap_err();
    assert!(
        matches!(&e, TemplateError::Limit(m) if m.contains("took over 100 ms")),
        "{e:?}"
    );
    // An exhausted clock also stops helpers and plain text.
    let mut spent = Budget::with_limits(std::time::Duration::ZERO, usize::MAX);
    std::thread::sleep(std::time::Duration::from_millis(1));
    let e = render_within("x", &ctx(), &mut spent).unwrap_err();
    assert!(matches!(e, TemplateError::Limit(_)), "{e:?}");
}

#[test]
fn a_panic_while_rendering_is_an_error_not_an_abort() {
    let e = contained(|| -> () { panic!("boom") }).unwrap_err();
    assert!(
        matches!(&e, TemplateError::Internal(m) if m.contains("boom") && m.contains("bug")),
        "{e:?}"
    );
    assert_eq!(e.category(), "internal");
    // The thread's budget slot is free again after a panic unwound through a render.
    let mut budget = Budget::new();
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _installed = budget::Installed::new(&mut budget);
        panic!("inside a render");
    }));
    assert_eq!(budget::charge(usize::MAX), Ok(()));
}
