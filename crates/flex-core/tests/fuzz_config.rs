//! Property-based fuzzing of what a kube admin and a claim's author control: ConfigMaps (keys,
//! values, templates built from a grammar of Handlebars fragments, hostile ones included)
//! parsed and rendered for arbitrary claims (unicode names, labels and annotations of any
//! size). Whatever the input: no panic, every value and the claim's total within budget,
//! and bounded time. The case count is fixed so CI runs it in seconds on every change.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use flex_core::claim::ClaimRequest;
use flex_core::config::{ClassConfig, StorageClassInfo, Verdict, parse_config_map};
use flex_core::quantity::Bytes;
use flex_core::rendered::render_for_claim;
use flex_core::template::{
    self, MAX_OUTPUT_BYTES, MAX_RENDER_TIME, MAX_TOTAL_OUTPUT_BYTES, TemplateError,
};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use proptest::prelude::*;

const P: &str = "flex-provisioner.io/job";

/// Rendering stops at `MAX_RENDER_TIME`; compiling a template under 16 KiB takes far less
/// than the rest. Generous so a loaded machine does not fail it; a hang would.
const BOUND: Duration = Duration::from_secs(2);

fn path() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("claim.name".to_owned()),
        Just("claim.namespace".to_owned()),
        Just("claim.uid".to_owned()),
        Just("claim.size.gib".to_owned()),
        Just("claim.accessModes".to_owned()),
        Just("claim.labels".to_owned()),
        Just("claim.annotations".to_owned()),
        Just("class.parameters".to_owned()),
        Just("class.mountOptions".to_owned()),
        Just("node.labels".to_owned()),
        Just("volume.name".to_owned()),
        Just("this".to_owned()),
        Just("@key".to_owned()),
        Just("@index".to_owned()),
        Just("../claim.name".to_owned()),
        Just("@root.claim.annotations".to_owned()),
        "[a-z]{1,3}".prop_map(|k| format!("claim.labels.{k}")),
        "[a-z]{1,3}".prop_map(|k| format!("claim.annotations.[{k}]")),
        "[a-z.@/]{1,8}",
    ]
}

fn literal() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z /.]{0,6}".prop_map(|s| format!("\"{s}\"")),
        (0u32..100_000).prop_map(|n| n.to_string()),
        Just("true".to_owned()),
        Just("\"\"".to_owned()),
    ]
}

fn helper() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "default", "lower", "upper", "trunc", "dnslabel", "replace", "join", "json", "lookup",
        "eq", "ne", "gt", "and", "or", "not", "len", "nope",
    ])
}

/// An argument: a path, a literal, or a subexpression (nested to a small depth).
fn argument() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![path(), literal()];
    leaf.prop_recursive(3, 12, 3, |inner| {
        (helper(), prop::collection::vec(inner, 0..3))
            .prop_map(|(h, args)| format!("({h} {})", args.join(" ")))
    })
}

/// A well-formed template: text, expressions, helper calls and nested blocks.
fn valid_template() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        2 => "[^{}]{0,12}",
        3 => path().prop_map(|p| format!("{{{{{p}}}}}")),
        3 => (helper(), prop::collection::vec(argument(), 1..4))
            .prop_map(|(h, a)| format!("{{{{{h} {}}}}}", a.join(" "))),
    ];
    leaf.prop_recursive(10, 64, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..4).prop_map(|v| v.concat()),
            (
                prop::sample::select(vec!["each", "if", "unless", "with"]),
                argument(),
                inner.clone(),
                prop::option::of(inner),
            )
                .prop_map(|(b, arg, body, other)| match other {
                    Some(e) => format!("{{{{#{b} {arg}}}}}{body}{{{{else}}}}{e}{{{{/{b}}}}}"),
                    None => format!("{{{{#{b} {arg}}}}}{body}{{{{/{b}}}}}"),
                }),
        ]
    })
}

/// A template, sometimes spliced with syntax errors or the constructs that are refused
/// (partials, inline partials, decorators, raw blocks).
fn template() -> impl Strategy<Value = String> {
    let junk = prop::sample::select(vec![
        "{{> me}}",
        "{{#*inline \"me\"}}{{> me}}{{/inline}}",
        "{{*decorator}}",
        "{{",
        "}}",
        "{{!-- comment --}}",
        "{{{{raw}}}}{{x}}{{{{/raw}}}}",
        "{{else}}",
        "{{/each}}",
        "{{{claim.name}}}",
        "\\{{claim.name}}",
    ]);
    prop_oneof![
        5 => valid_template(),
        1 => (valid_template(), junk, valid_template()).prop_map(|(a, j, b)| format!("{a}{j}{b}")),
        1 => "\\PC{0,24}",
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z][a-z0-9-]{0,12}",
        1 => "[a-zA-Z0-9._-]{1,24}",
        2 => prop::sample::select(vec![
            "image", "args", "command", "timeout", "retries", "node-local", "pod-template",
            "service-account-name", "node-selector", "max-attempts", "unsanitised-parameters",
            "path", "ld-preload", "home", "pv-name", "export", "directory", "imgae",
            "service-token",
            "allow-privileged",
        ])
        .prop_map(str::to_owned),
    ]
}

/// User text: arbitrary unicode, occasionally large (annotations can be 256 KiB in all).
fn user_text() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => "\\PC{0,40}",
        1 => (0usize..60_000).prop_map(|n| "a/../".repeat(n / 5)),
        1 => Just("{{claim.name}}".repeat(200)),
    ]
}

fn claim() -> impl Strategy<Value = ClaimRequest> {
    (
        "\\PC{0,64}",
        "\\PC{0,16}",
        prop::collection::btree_map("\\PC{0,20}", user_text(), 0..6),
        prop::collection::btree_map("\\PC{0,40}", user_text(), 0..40),
        any::<u64>(),
    )
        .prop_map(
            |(name, namespace, labels, annotations, bytes)| ClaimRequest {
                name,
                namespace,
                uid: "3f0c1a2b-4d5e-4f60-8a7b-9c0d1e2f3a4b".into(),
                labels,
                annotations,
                storage_class: "fuzz".into(),
                requested: "1Gi".into(),
                bytes: Bytes(bytes),
                access_modes: vec!["ReadWriteOnce".into()],
                volume_mode: "Filesystem".into(),
                selected_node: Some("node-1".into()),
                data_source: None,
            },
        )
}

fn config_map() -> impl Strategy<Value = ConfigMap> {
    let value = prop_oneof![3 => template(), 1 => "\\PC{0,30}", 1 => Just("[\"--dir\", \"{{claim.name}}\"]".to_owned())];
    (
        prop::collection::btree_map(key(), value, 0..8),
        prop::bool::weighted(0.9),
    )
        .prop_map(|(mut data, with_image)| {
            if with_image {
                data.insert("image".into(), "registry.example.com/prov:1.0".into());
            }
            ConfigMap {
                metadata: ObjectMeta {
                    name: Some("fuzz".into()),
                    namespace: Some("storage-admin".into()),
                    labels: Some(BTreeMap::from([
                        ("type".into(), "provisioner-config".into()),
                        ("storage-class".into(), "fuzz".into()),
                    ])),
                    ..Default::default()
                },
                data: Some(data),
                ..Default::default()
            }
        })
}

fn class() -> StorageClassInfo {
    StorageClassInfo {
        name: "fuzz".into(),
        provisioner: P.into(),
        parameters: BTreeMap::from([("tier".into(), "2".into())]),
        reclaim_policy: "Delete".into(),
        mount_options: vec!["noatime".into()],
        volume_binding_mode: "WaitForFirstConsumer".into(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        // Nothing written into the source tree; a failure prints its minimal input.
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn parsing_and_rendering_never_panic_and_stay_within_budget(
        cm in config_map(),
        claim in claim(),
        raw in template(),
    ) {
        let started = Instant::now();
        let verdict = parse_config_map(&cm, P);
        prop_assert!(started.elapsed() < BOUND, "parsing took {:?}", started.elapsed());

        // Templates straight into the engine, past the ConfigMap checks: limits and the
        // engine itself must hold on their own. A panic would show as `Internal`.
        let node = flex_core::claim::NodeInfo { name: "node-1".into(), labels: BTreeMap::new(), unschedulable: false };
        let ctx = template::build_context(&claim, &class(), Some(&node), P, "pvc-x");
        let started = Instant::now();
        match template::render(&raw, &ctx) {
            Ok(out) => prop_assert!(out.len() <= MAX_OUTPUT_BYTES),
            Err(TemplateError::Internal(m)) => prop_assert!(false, "engine panicked: {m}"),
            Err(_) => {}
        }
        prop_assert!(started.elapsed() < BOUND, "rendering took {:?}", started.elapsed());

        let Verdict::Checked { config: Some(config), .. } = verdict else {
            return Ok(());
        };
        let Ok(config) = ClassConfig::new(*config, class(), P) else {
            return Ok(());
        };
        let started = Instant::now();
        let result = render_for_claim(&config, &claim, Some(&node), P);
        let took = started.elapsed();
        prop_assert!(took < MAX_RENDER_TIME + BOUND, "render_for_claim took {took:?}");
        match result {
            Ok(rendered) => {
                let values: Vec<&String> = rendered
                    .parameters
                    .values()
                    .chain(rendered.args.iter().flatten())
                    .chain(rendered.deprovision_args.iter().flatten())
                    .collect();
                prop_assert!(values.iter().all(|v| v.len() <= MAX_OUTPUT_BYTES));
                prop_assert!(values.iter().map(|v| v.len()).sum::<usize>() <= MAX_TOTAL_OUTPUT_BYTES);
            }
            Err(e) => {
                prop_assert!(!matches!(e.error, TemplateError::Internal(_)), "engine panicked: {e}");
                // Every failure names the key it came from.
                let prefix = format!("parameter `{}`", e.key);
                prop_assert!(e.to_string().starts_with(&prefix), "{}", e);
            }
        }
    }
}
