//! Hostile and careless ConfigMaps and claims (issue #13): each is refused by `check` or stopped
//! while rendering with a clear error naming the key, quickly, and never panics, aborts or
//! hangs the process.

use crate::common;

use std::path::PathBuf;

use common::*;
use flex_core::claim::ClaimRequest;
use flex_core::config::{Problem, Verdict, parse_config_map};
use flex_core::plan::claim::Prepared;
use flex_core::rendered::{RenderFailure, Rendered, render_for_claim};
use flex_core::template::{self, MAX_OUTPUT_BYTES, MAX_TOTAL_OUTPUT_BYTES, TemplateError};
use flex_provisioner::offline::check_files;
use k8s_openapi::api::core::v1::ConfigMap;

// How soon the budget stops these templates is a benchmark, not a test: flex-core's
// `template_budget` bench (and this crate's `check` bench for whole ConfigMaps).

fn errors_of(cm: &ConfigMap) -> Vec<Problem> {
    match parse_config_map(cm, P) {
        Verdict::Checked { config, problems } => {
            let errors: Vec<Problem> = problems.into_iter().filter(Problem::is_error).collect();
            assert_eq!(config.is_none(), !errors.is_empty());
            errors
        }
        Verdict::Ignored { reason } => panic!("ignored: {reason}"),
    }
}

/// Renders `cm` for a claim with `annotations`.
fn render_with(cm: CmBuilder, annotations: &[(String, String)]) -> Result<Rendered, RenderFailure> {
    let sc = storage_class("silver", "Immediate");
    let config = class_config(&cm.build(), &sc);
    let mut pvc = claim("team-a", "data");
    for (k, v) in annotations {
        pvc = pvc.annotation(k, v);
    }
    let claim = ClaimRequest::from_claim(&pvc.build()).unwrap();
    render_for_claim(&config, &claim, None, P)
}

fn limit_error(result: Result<Rendered, RenderFailure>, key: &str) -> String {
    let e = result.expect_err("over budget must fail");
    assert_eq!(e.key, key, "{e}");
    assert!(matches!(e.error, TemplateError::Limit(_)), "{e:?}");
    let text = e.to_string();
    assert!(text.starts_with(&format!("parameter `{key}`: ")), "{text}");
    text
}

fn annotations(n: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| (format!("example.com/a{i:04}"), format!("value-{i:04}")))
        .collect()
}

#[test]
fn nested_each_over_2000_annotations_stops_at_the_output_budget() {
    // Used to render 71 MB in 1.2 s.
    let cm = config("silver").set(
        "report",
        "{{#each claim.annotations}}{{#each @root.claim.annotations}}{{@key}}={{this}};{{/each}}{{/each}}",
    );
    let result = render_with(cm, &annotations(2000));
    let e = limit_error(result, "report");
    // The byte limit comes first on an idle machine; on a loaded one (a debug build on
    // shared CI cores) the 100 ms clock may. Either stops it, fast, naming the key.
    assert!(
        e.contains(&format!("over {MAX_OUTPUT_BYTES} bytes")) || e.contains("took over 100 ms"),
        "{e}"
    );
}

#[test]
fn nested_each_that_writes_nothing_stops_at_the_time_budget() {
    // 2000^4 iterations with no output: only the clock can stop this.
    let cm = config("silver").set(
        "report",
        "{{#each claim.annotations}}{{#each @root.claim.annotations}}{{#each @root.claim.annotations}}{{#each @root.claim.annotations}}{{#if false}}x{{/if}}{{/each}}{{/each}}{{/each}}{{/each}}",
    );
    let result = render_with(cm, &annotations(2000));
    let e = limit_error(result, "report");
    assert!(e.contains("rendering took over 100 ms"), "{e}");
}

#[test]
fn all_values_of_a_claim_share_one_output_budget() {
    let big = "x".repeat(60 * 1024);
    let mut cm = config("silver");
    for i in 1..=5 {
        cm = cm.set(&format!("p{i}"), "{{claim.annotations.big}}");
    }
    let result = render_with(cm, &[("big".into(), big)]);
    // p1..p4 fit (240 KiB), p5 would take the claim over 256 KiB.
    let e = limit_error(result, "p5");
    assert!(
        e.contains(&format!("over {MAX_TOTAL_OUTPUT_BYTES} bytes together")),
        "{e}"
    );
}

#[test]
fn replace_on_a_200kb_annotation_is_refused_before_allocating() {
    // Used to ask for 6.5 GB and abort the process.
    let to = "y".repeat(8 * 1024);
    let cm = config("silver").set(
        "mangled",
        &format!("{{{{replace claim.annotations.big \"a\" \"{to}\"}}}}"),
    );
    let result = render_with(cm, &[("big".into(), "a".repeat(200_000))]);
    let e = limit_error(result, "mangled");
    assert!(e.contains("helper `replace` would make a value of"), "{e}");
    // Also when the growth comes from nesting small replacements.
    let cm = config("silver").set(
        "mangled",
        "{{replace (replace (replace claim.annotations.small \"a\" \"aaaaaaaa\") \"a\" \"aaaaaaaa\") \"a\" \"aaaaaaaa\"}}",
    );
    let result = render_with(cm, &[("small".into(), "a".repeat(1000))]);
    limit_error(result, "mangled");
}

#[test]
fn each_nested_30_deep_with_root_is_refused_by_check() {
    // Used to hang the controller.
    let deep = format!(
        "{}{{{{@key}}}}{}",
        "{{#each @root.claim.annotations}}".repeat(30),
        "{{/each}}".repeat(30)
    );
    let errors = errors_of(&config("silver").set("report", &deep).build());
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].key.as_deref(), Some("report"));
    assert!(
        errors[0].what.contains("nested more than 8 deep"),
        "{}",
        errors[0]
    );
    assert!(errors[0].fix.contains("simplify"), "{}", errors[0]);
}

#[test]
fn a_100000_expression_template_is_refused_by_size() {
    // `check` used to take more than 20 s on this (timed in the `template_budget` bench).
    let huge = "{{claim.name}}".repeat(100_000);
    let cm = config("silver").set("export", &huge).build();
    let errors = errors_of(&cm);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].key.as_deref(), Some("export"));
    assert!(
        errors[0]
            .what
            .contains("1400000 bytes; at most 16384 are allowed"),
        "{}",
        errors[0]
    );
}

#[test]
fn a_template_of_too_many_expressions_is_refused_before_parsing() {
    let many = "{{claim.name}}".repeat(template::MAX_EXPRESSIONS + 1);
    let errors = errors_of(&config("silver").set("export", &many).build());
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(
        errors[0]
            .what
            .contains("257 expressions (`{{...}}`); at most 256 are allowed"),
        "{}",
        errors[0]
    );
}

#[test]
fn a_self_recursive_inline_partial_is_refused_and_never_runs() {
    // Used to pass `check`, then abort the controller (stack overflow) on the first claim.
    let src = "{{#*inline \"me\"}}{{> me}}{{/inline}}{{> me}}";
    let errors = errors_of(&config("silver").set("export", src).build());
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert!(errors[0].what.contains("inline partials"), "{}", errors[0]);
    // Rendering refuses it too, whatever path a template takes to the engine.
    let ctx = template::build_context(
        &ClaimRequest::from_claim(&claim("team-a", "data").build()).unwrap(),
        &flex_core::config::StorageClassInfo::from_class(&storage_class("silver", "Immediate")),
        None,
        P,
        "pvc-x",
    );
    for src in [src, "{{> other}}", "{{#> layout}}x{{/layout}}"] {
        let e = template::render(src, &ctx).unwrap_err();
        assert!(matches!(e, TemplateError::Unsupported(_)), "{src}: {e:?}");
    }
}

/// The deepest nesting the parser sees from a source under the size limit must not overflow
/// a small thread stack (such as a blocking-pool thread's) while it is parsed and refused.
#[test]
fn deeply_nested_sources_are_refused_on_a_small_stack() {
    let handle = std::thread::Builder::new()
        .stack_size(512 * 1024)
        .spawn(|| {
            // As deep as the expression limit lets blocks reach the parser, and as deep as
            // the size limit lets subexpressions go.
            let n = template::MAX_EXPRESSIONS / 2;
            let blocks = format!("{}{}", "{{#if a}}".repeat(n), "{{/if}}".repeat(n));
            let n = template::MAX_SOURCE_BYTES / "(lower )".len() - 2;
            let parens = format!("{{{{lower {}x{}}}}}", "(lower ".repeat(n), ")".repeat(n));
            let mut errors = Vec::new();
            for src in [blocks, parens] {
                let cm = config("silver").set("export", &src).build();
                errors.extend(errors_of(&cm));
            }
            errors
        })
        .unwrap();
    let errors = handle.join().expect("no stack overflow or panic");
    assert_eq!(errors.len(), 2, "{errors:#?}");
    assert!(
        errors.iter().all(|e| e.what.contains("nested more than 8")),
        "{errors:#?}"
    );
}

#[test]
fn check_reports_the_hostile_config_map_and_passes_the_healthy_one() {
    let dir = std::env::temp_dir().join(format!("flex-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str, cm: CmBuilder| -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, serde_yaml_ng::to_string(&cm.build()).unwrap()).unwrap();
        path
    };
    let hostile = file(
        "hostile.yaml",
        config("hostile")
            .set("path", "/bin")
            .set("ld-preload", "/tmp/x.so")
            .set("export", "{{#*inline \"me\"}}{{> me}}{{/inline}}{{> me}}")
            .set("dir", "/exports/{{claim.annotations.dir}}"),
    );
    let healthy = file(
        "healthy.yaml",
        config("healthy").set("dir", "/exports/{{dnslabel claim.annotations.dir}}"),
    );
    let report = check_files(&[hostile, healthy], &[], P);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(report.config_maps, 2);
    assert_eq!(report.errors, 4, "{:#?}", report.lines);
    for needle in [
        "key `path`: gives env var `PATH`",
        "key `ld-preload`: gives env var `LD_PRELOAD`",
        "key `export`: the template uses decorators and inline partials",
        "key `dir`: `claim.annotations.dir` is free text",
    ] {
        assert!(
            report
                .lines
                .iter()
                .any(|l| l.contains("hostile") && l.contains(needle)),
            "`{needle}` not in {:#?}",
            report.lines
        );
    }
    assert!(
        !report.lines.iter().any(|l| l.contains("healthy")),
        "{:#?}",
        report.lines
    );
}

/// What the controller hands to `spawn_blocking` owns its inputs and gives the same result.
#[test]
fn a_render_request_moves_to_another_thread() {
    let sc = storage_class("silver", "Immediate");
    let cm = config("silver").set("export", "/exports/{{claim.namespace}}/{{claim.name}}");
    let config = std::sync::Arc::new(class_config(&cm.build(), &sc));
    let claim = ClaimRequest::from_claim(&claim("team-a", "data").build()).unwrap();
    let prepared = std::thread::spawn(move || Prepared::here(&config, &claim, None, P, None))
        .join()
        .unwrap();
    let rendered = prepared.rendered.unwrap();
    assert_eq!(rendered.parameters["export"], "/exports/team-a/data");
}

/// Parsing templates is what makes checking a ConfigMap slow, so one ConfigMap's templates
/// and parameters are bounded in all, not only one by one.
#[test]
fn a_config_map_full_of_templates_or_keys_is_refused_fast() {
    use flex_core::config::{MAX_PARAMETERS, MAX_TEMPLATE_BYTES};
    // The costliest template to parse: the most expressions, spread over the most bytes.
    let n = template::MAX_EXPRESSIONS;
    let gap = "x".repeat(template::MAX_SOURCE_BYTES / n - "{{claim.name}}".len());
    let costly = format!("{gap}{{{{claim.name}}}}").repeat(n);
    assert_eq!(costly.len(), template::MAX_SOURCE_BYTES);
    assert!(template::compile(&costly).is_ok());
    let mut cm = config("silver");
    for i in 0..60 {
        cm = cm.set(&format!("p{i:02}"), &costly);
    }
    let errors = errors_of(&cm.build());
    assert_eq!(errors.len(), 1, "reported once: {errors:#?}");
    assert_eq!(
        errors[0].key.as_deref(),
        Some("p04"),
        "the key crossing the limit"
    );
    assert!(
        errors[0]
            .what
            .contains(&format!("at most {MAX_TEMPLATE_BYTES} are allowed in all")),
        "{}",
        errors[0]
    );

    let mut cm = config("silver");
    for i in 0..=MAX_PARAMETERS {
        cm = cm.set(&format!("p{i:04}"), "{{claim.name}}");
    }
    let errors = errors_of(&cm.build());
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].key, None);
    assert!(
        errors[0].what.contains(&format!(
            "{} parameters; at most {MAX_PARAMETERS}",
            MAX_PARAMETERS + 1
        )),
        "{}",
        errors[0]
    );
    // The limit itself is fine.
    let mut cm = config("silver");
    for i in 0..MAX_PARAMETERS {
        cm = cm.set(&format!("p{i:04}"), "{{claim.name}}");
    }
    assert!(errors_of(&cm.build()).is_empty());
}
