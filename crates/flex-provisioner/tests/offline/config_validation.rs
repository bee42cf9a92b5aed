//! Every reserved key with valid and invalid values, and invalid configurations each
//! producing its own clear error.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use flex_core::config::{
    ClassConfig, Problem, ProvisionerConfig, Severity, StorageClassInfo, Verdict, parse_config_map,
    select_for_class,
};

fn verdict(cm: CmBuilder) -> (Option<ProvisionerConfig>, Vec<Problem>) {
    match parse_config_map(&cm.build(), P) {
        Verdict::Checked { config, problems } => (config.map(|c| *c), problems),
        Verdict::Ignored { reason } => panic!("ignored: {reason}"),
    }
}

fn ok(cm: CmBuilder) -> ProvisionerConfig {
    let (config, problems) = verdict(cm);
    assert!(
        problems.iter().all(|p| !p.is_error()),
        "unexpected errors: {problems:#?}"
    );
    config.expect("a configuration without errors is usable")
}

/// The single error of an invalid configuration; asserts it names `key` and says `needle`.
fn error(cm: CmBuilder, key: Option<&str>, needle: &str) -> Problem {
    let (config, problems) = verdict(cm);
    assert!(
        config.is_none(),
        "an invalid configuration must not be usable"
    );
    let errors: Vec<&Problem> = problems.iter().filter(|p| p.is_error()).collect();
    assert_eq!(errors.len(), 1, "expected one error, got {errors:#?}");
    let e = errors[0].clone();
    assert_eq!(e.key.as_deref(), key, "{e}");
    assert!(e.to_string().contains(needle), "`{needle}` not in: {e}");
    assert!(!e.fix.is_empty(), "every error says how to fix it: {e}");
    e
}

#[test]
fn defaults_of_a_minimal_configuration() {
    common::at_root();
    let c = ok(config("silver"));
    assert_eq!(c.image, "registry.example.com/prov:1.0");
    assert_eq!(c.storage_class, "silver");
    assert_eq!(c.namespace, "storage-admin");
    assert_eq!(c.timeout, Duration::from_secs(1800));
    assert_eq!(c.retries, 2);
    assert_eq!(c.max_attempts, None);
    assert_eq!(c.permanent_exit_codes, BTreeSet::from([2]));
    assert!(!c.node_local);
    assert!(c.node_selector.is_empty());
    assert!(c.service_account.is_none() && c.command.is_none() && c.args.is_none());
    assert!(c.deprovision_image.is_none() && c.pod_template.is_none());
    assert_eq!(c.max_concurrent, None);
    assert!(c.parameters.is_empty());
}

#[test]
fn every_reserved_key_with_a_valid_value() {
    common::at_root();
    let c = ok(config("silver")
        .set("plugin-name", P)
        .set("service-account-name", "iscsi-provisioner")
        .set("node-selector", "storage-net=true")
        .set("command", "[\"/bin/provision\"]")
        .set("args", "[\"--size\", \"{{claim.size.gib}}\"]")
        .set("deprovision-image", "registry.example.com/deprov:1.0")
        .set("deprovision-command", "/bin/deprovision")
        .set("deprovision-args", "[\"--volume\", \"{{volume.name}}\"]")
        .set("timeout", "10m")
        .set("retries", "5")
        .set("max-attempts", "7")
        .set("permanent-exit-codes", "2,3")
        .set("node-local", "false")
        .set("pod-template", "spec: {priorityClassName: high}")
        .set("max-concurrent", "4"));
    assert_eq!(c.service_account.as_deref(), Some("iscsi-provisioner"));
    assert_eq!(c.node_selector["storage-net"], "true");
    assert_eq!(c.command, Some(vec!["/bin/provision".to_string()]));
    assert_eq!(
        c.args,
        Some(vec!["--size".to_string(), "{{claim.size.gib}}".to_string()])
    );
    assert_eq!(
        c.deprovision_image.as_deref(),
        Some("registry.example.com/deprov:1.0")
    );
    assert_eq!(
        c.deprovision_command,
        Some(vec!["/bin/deprovision".to_string()])
    );
    assert_eq!(c.deprovision_args.as_ref().unwrap().len(), 2);
    assert_eq!(c.timeout, Duration::from_secs(600));
    assert_eq!(c.retries, 5);
    assert_eq!(c.max_attempts, Some(7));
    assert_eq!(c.permanent_exit_codes, BTreeSet::from([2, 3]));
    assert!(!c.node_local);
    assert_eq!(
        c.pod_template
            .unwrap()
            .spec
            .unwrap()
            .priority_class_name
            .as_deref(),
        Some("high")
    );
    assert_eq!(c.max_concurrent, Some(4));
    assert!(c.parameters.is_empty(), "reserved keys are not parameters");
    assert!(ok(config("silver").set("node-local", "true")).node_local);
    assert!(
        ok(config("silver").set("permanent-exit-codes", ""))
            .permanent_exit_codes
            .is_empty()
    );
}

#[test]
fn every_reserved_key_with_an_invalid_value() {
    common::at_root();
    for (key, value, needle) in [
        ("image", "", "is empty"),
        ("image", "bad image", "not a valid image reference"),
        (
            "service-account-name",
            "Bad_Name",
            "not a valid service account name",
        ),
        ("node-selector", "storage-net", "not `key=value`"),
        ("command", "/bin/provision --fast", "never split by a shell"),
        ("args", "[unclosed", "not a valid list"),
        ("deprovision-image", "a b", "not a valid image reference"),
        ("deprovision-command", "[]", "empty list"),
        ("deprovision-args", "[{a: 1}]", "not a string"),
        ("timeout", "10", "has no unit"),
        ("retries", "21", "from 0 to 20"),
        ("max-attempts", "0", "from 1 to 1000"),
        ("permanent-exit-codes", "0", "from 1 to 255"),
        ("node-local", "yes", "is not `true` or `false`"),
        ("pod-template", "spec: {nodeName: n1}", "node-selector"),
        ("max-concurrent", "-3", "from 1 to 10000"),
    ] {
        let e = error(config("silver").set(key, value), Some(key), needle);
        assert_eq!(e.severity, Severity::Error);
    }
}

/// Parameters become env vars; none may become one that changes how the container's
/// process runs (a claim's text could otherwise reach PATH or LD_PRELOAD).
#[test]
fn parameters_that_would_change_how_the_process_runs_are_refused() {
    common::at_root();
    for (key, env, why) in [
        ("path", "PATH", "shell"),
        ("ld-preload", "LD_PRELOAD", "dynamic loader"),
        ("LD_LIBRARY_PATH", "LD_LIBRARY_PATH", "dynamic loader"),
        ("home", "HOME", "shell"),
        ("shell", "SHELL", "shell"),
        ("env", "ENV", "shell"),
        ("bash-env", "BASH_ENV", "shell"),
        ("ifs", "IFS", "shell"),
        ("pythonpath", "PYTHONPATH", "runtime"),
        ("node-options", "NODE_OPTIONS", "runtime"),
        (
            "kubernetes-service-host",
            "KUBERNETES_SERVICE_HOST",
            "Kubernetes sets it",
        ),
        ("kubernetes-port", "KUBERNETES_PORT", "Kubernetes sets it"),
        ("sandbox-root", "SANDBOX_ROOT", "prefix every path"),
        ("cdpath", "CDPATH", "shell"),
        ("ps4", "PS4", "shell"),
        ("glibc-tunables", "GLIBC_TUNABLES", "runtime"),
        ("java-tool-options", "JAVA_TOOL_OPTIONS", "runtime"),
        ("https-proxy", "HTTPS_PROXY", "network traffic"),
        ("http_proxy", "HTTP_PROXY", "network traffic"),
        ("ssl-cert-file", "SSL_CERT_FILE", "which servers it trusts"),
        (
            "flex-config-namespace",
            "FLEX_CONFIG_NAMESPACE",
            "own binary",
        ),
        (
            "flex-provisioner-name",
            "FLEX_PROVISIONER_NAME",
            "own binary",
        ),
        ("rust-log", "RUST_LOG", "own binary"),
    ] {
        let e = error(
            config("silver").set(key, "/tmp/{{claim.name}}"),
            Some(key),
            &format!("gives env var `{env}`, which the container must not receive"),
        );
        assert_eq!(e.severity, Severity::Error, "{key}");
        assert!(e.to_string().contains(why), "{key}: {e}");
        assert!(e.to_string().contains("rename the parameter"), "{key}: {e}");
    }
    // The Job's own variables (ours) cannot be replaced by a parameter either.
    for env in flex_core::names::BUILTIN_ENV {
        let key = env.to_ascii_lowercase().replace('_', "-");
        if flex_core::config::keys::is_reserved(&key) {
            // `pv-creator`: the key configures what the variable tells the image.
            continue;
        }
        let (config, problems) = verdict(config("silver").set(&key, "x"));
        assert!(config.is_none(), "{key} must be refused");
        let e = problems
            .iter()
            .find(|p| p.is_error() && p.key.as_deref() == Some(key.as_str()))
            .unwrap_or_else(|| panic!("{key}: no error naming it in {problems:#?}"));
        assert!(
            e.what.contains(&format!("`{env}`, which is a built-in"))
                || e.what.contains("misspelling"),
            "{key}: {e}"
        );
        assert!(e.fix.contains("rename"), "{key}: {e}");
    }
    // Names that merely contain such a word are fine.
    let cm = config("silver")
        .set("volume-path", "/exports/{{claim.name}}")
        .set("home-dir", "x")
        .build();
    assert!(matches!(
        parse_config_map(&cm, P),
        Verdict::Checked {
            config: Some(_),
            ..
        }
    ));
}

/// A self-recursive inline partial used to pass `check` and then crash the controller.
#[test]
fn templates_that_could_recurse_or_explode_are_refused_with_the_key() {
    common::at_root();
    let e = error(
        config("silver").set("export", "{{#*inline \"me\"}}{{> me}}{{/inline}}{{> me}}"),
        Some("export"),
        "which parameters may not use",
    );
    assert!(e.fix.contains("built-in blocks"), "{e}");
    let deep = format!("{}x{}", "{{#if true}}".repeat(20), "{{/if}}".repeat(20));
    let e = error(
        config("silver").set("export", &deep),
        Some("export"),
        "nested more than 8 deep",
    );
    assert!(e.fix.contains("simplify"), "{e}");
}

#[test]
fn invalid_configurations_each_have_their_own_clear_error() {
    common::at_root();
    let cases: Vec<(CmBuilder, Option<&str>, &str)> = vec![
        (config("silver").unset("image"), Some("image"), "is missing"),
        (
            config("silver").set("timeout", "ten minutes"),
            Some("timeout"),
            "unknown unit",
        ),
        (
            config("silver").set("export", "/exports/{{claim.nmae}}"),
            Some("export"),
            "unknown variable `claim.nmae`",
        ),
        (
            config("silver").set("export", "/exports/{{claim.name"),
            Some("export"),
            "template syntax error",
        ),
        (
            config("silver").set("zone", "{{shout claim.name}}"),
            Some("zone"),
            "unknown helper `shout`",
        ),
        (
            config("silver").set("pv-name", "x"),
            Some("pv-name"),
            "env var `PV_NAME`, which is a built-in",
        ),
        (
            config("silver").set("action", "x"),
            Some("action"),
            "built-in",
        ),
        (
            config("silver").set("use-nfs", "a").set("use_nfs", "b"),
            Some("use_nfs"),
            "same as parameter `use-nfs`",
        ),
        (
            config("silver").set("service-token", "23092390532lksf90kwelklfw"),
            Some("service-token"),
            "service-account-name",
        ),
        (
            config("silver").set("chap-password", "hunter2"),
            Some("chap-password"),
            "Secret",
        ),
        (
            config("silver").set("imgae", "x:1"),
            Some("imgae"),
            "misspelling of the reserved key `image`",
        ),
        (
            config("silver").set("serviceAccountName", "sa"),
            Some("serviceAccountName"),
            "`service-account-name`",
        ),
        (
            config("silver").set("pod-template", "spec: {tolerationz: []}"),
            Some("pod-template"),
            "unknown field `spec.tolerationz`",
        ),
        (
            config("silver").set("pod-template", "spec: [oops"),
            Some("pod-template"),
            "not valid YAML",
        ),
        (
            config("silver").set(
                "pod-template",
                "spec: {containers: [{env: [{name: ACTION, value: x}]}]}",
            ),
            Some("pod-template"),
            "env var `ACTION`",
        ),
        (
            config("silver").set("node-selector", "storage net=true"),
            Some("node-selector"),
            "not a valid node label key",
        ),
        (
            config("silver").set("9lives", "x"),
            Some("9lives"),
            "start the parameter name with a letter",
        ),
        (
            config("silver").label("type", None),
            None,
            "lacks the label `type: provisioner-config`",
        ),
        (
            config("silver").label("storage-class", None),
            None,
            "lacks the label `storage-class`",
        ),
        (
            config("silver").set("args", "[\"{{claim.sizee}}\"]"),
            Some("args[0]"),
            "unknown variable",
        ),
    ];
    assert!(cases.len() >= 15);
    let mut messages = BTreeSet::new();
    for (cm, key, needle) in cases {
        let e = error(cm, key, needle);
        assert!(
            messages.insert((e.what.clone(), e.fix.clone())),
            "two cases give the same error: {e}"
        );
    }
}

#[test]
fn a_configuration_of_another_provisioner_is_ignored_not_judged() {
    common::at_root();
    let cm = config("silver")
        .set("plugin-name", "example.com/other")
        .set("service-token", "would be an error if it were ours")
        .build();
    match parse_config_map(&cm, P) {
        Verdict::Ignored { reason } => {
            assert!(reason.contains("example.com/other"), "{reason}");
            assert!(reason.contains("--provisioner-name"), "{reason}");
        }
        other => panic!("{other:#?}"),
    }
    assert!(select_for_class("silver", P, [&cm]).unwrap().is_none());
}

#[test]
fn two_config_maps_for_one_class_is_an_error_naming_both() {
    common::at_root();
    let a = config("silver").name("ns1", "a").build();
    let b = config("silver").name("ns2", "b").build();
    let other = config("gold").build();
    let e = select_for_class("silver", P, [&a, &other, &b]).unwrap_err();
    assert!(e.what.contains("ns1/a") && e.what.contains("ns2/b"), "{e}");
    assert!(e.fix.contains("keep exactly one"));
    let chosen = select_for_class("gold", P, [&a, &other, &b])
        .unwrap()
        .unwrap();
    assert_eq!(chosen.metadata.name.as_deref(), Some("gold-config"));
    let foreign = config("silver")
        .set("plugin-name", "example.com/other")
        .build();
    assert!(
        select_for_class("silver", P, [&a, &foreign])
            .unwrap()
            .is_some()
    );
}

#[test]
fn checks_that_need_the_storage_class() {
    common::at_root();
    let join = |cm: CmBuilder, binding: &str| {
        let p = ok(cm);
        ClassConfig::new(
            p,
            StorageClassInfo::from_class(&storage_class("silver", binding)),
            P,
        )
    };
    let e = join(config("silver").set("node-local", "true"), "Immediate").unwrap_err();
    assert!(e[0].what.contains("binds Immediately"), "{e:?}");
    let e = join(
        config("silver").set("zone", "{{node.labels.[topology.kubernetes.io/zone]}}"),
        "Immediate",
    )
    .unwrap_err();
    assert_eq!(e[0].key.as_deref(), Some("zone"));
    assert!(
        join(
            config("silver").set("node-local", "true"),
            "WaitForFirstConsumer"
        )
        .is_ok()
    );
    let mut sc = storage_class("silver", "Immediate");
    sc.provisioner = "example.com/other".into();
    let e =
        ClassConfig::new(ok(config("silver")), StorageClassInfo::from_class(&sc), P).unwrap_err();
    assert!(e[0].fix.contains(P), "{e:?}");
    let e = ClassConfig::new(
        ok(config("gold")),
        StorageClassInfo::from_class(&storage_class("silver", "Immediate")),
        P,
    )
    .unwrap_err();
    assert!(e[0].what.contains("labelled for class `gold`"), "{e:?}");
}

#[test]
fn warnings_do_not_block() {
    common::at_root();
    let (usable, problems) = verdict(
        config("silver")
            .set("image", "registry.example.com/prov:latest")
            .set("zone", "west")
            .set("unsanitised-parameters", "zone"),
    );
    assert!(usable.is_some(), "{problems:#?}");
    let keys: Vec<_> = problems
        .iter()
        .map(|p| (p.severity, p.key.clone().unwrap_or_default()))
        .collect();
    assert!(
        keys.contains(&(Severity::Warning, "image".into())),
        "{problems:#?}"
    );
    // An opt-out that nothing needs is worth removing, but harmless.
    assert!(
        keys.contains(&(Severity::Warning, "unsanitised-parameters".into())),
        "{problems:#?}"
    );
    let sanitised =
        ok(config("silver").set("export-path", "/exports/{{dnslabel claim.annotations.dir}}"));
    assert!(sanitised.parameters.contains_key("export-path"));
    let (_, problems) =
        verdict(config("silver").set("export-path", "/exports/{{dnslabel claim.annotations.dir}}"));
    assert!(problems.is_empty(), "{problems:#?}");
}

/// A claim's labels and annotations are free text of the claim's author: put into a path
/// unsanitised, `../..` escapes the base (local-path-provisioner's CVE-2025-62878). That is
/// an error, whichever way the text gets there, unless the admin opts the key out.
#[test]
fn user_text_in_a_path_is_an_error_unless_opted_out() {
    common::at_root();
    for (key, template, path) in [
        (
            "export-path",
            "/exports/{{claim.annotations.dir}}",
            "claim.annotations.dir",
        ),
        ("directory", "{{claim.labels.team}}", "claim.labels.team"),
        (
            "subdir",
            "/x/{{default claim.labels.team \"shared\"}}",
            "claim.labels.team",
        ),
        (
            "subdir",
            "/x/{{lower claim.labels.team}}",
            "claim.labels.team",
        ),
        (
            "subdir",
            "/x/{{json claim.annotations.dir}}",
            "claim.annotations.dir",
        ),
        (
            "subdir",
            "/x/{{lookup claim.annotations \"dir\"}}",
            "claim.annotations",
        ),
        ("subdir", "/x/{{json claim}}", "claim"),
        (
            "subdir",
            "/x/{{#each claim.annotations}}{{this}}{{/each}}",
            "this",
        ),
        (
            "subdir",
            "/x/{{#each claim.labels}}{{@key}}{{/each}}",
            "@key",
        ),
        (
            "subdir",
            "/x/{{#each claim.labels as |v k|}}{{v}}{{/each}}",
            "v",
        ),
        (
            "subdir",
            "/x/{{#with claim.labels}}{{team}}{{/with}}",
            "team",
        ),
        (
            "subdir",
            "/x/{{#with claim}}{{labels.team}}{{/with}}",
            "labels.team",
        ),
        (
            "subdir",
            "/x/{{#each claim.labels}}{{#if this}}{{../claim.annotations.dir}}{{/if}}{{/each}}",
            "../claim.annotations.dir",
        ),
        (
            "base-dir",
            "{{#each @root.claim.labels}}{{this}}{{/each}}",
            "this",
        ),
    ] {
        let e = error(
            config("silver").set(key, template),
            Some(key),
            "path traversal",
        );
        assert!(e.what.contains(&format!("`{path}`")), "{template}: {e}");
        assert!(
            e.fix.contains(&format!("{{{{dnslabel {path}}}}}")),
            "{template}: {e}"
        );
        assert!(e.fix.contains("unsanitised-parameters"), "{template}: {e}");
    }
    let e = error(
        config("silver").set("args", "[\"--dir=/exports/{{claim.labels.team}}\"]"),
        Some("args[0]"),
        "path traversal",
    );
    assert!(
        e.fix.contains("list `args` in `unsanitised-parameters`"),
        "{e}"
    );

    // What cannot escape: sanitised text, tests of user text, names the API server
    // validates as DNS names, loop positions, and the admin's own class parameters.
    for template in [
        "/x/{{dnslabel claim.annotations.dir}}",
        "/x/{{dnslabel (default claim.labels.team \"shared\") 20}}",
        "/x/{{#if claim.labels.fast}}ssd{{else}}hdd{{/if}}",
        "/x/{{#if (eq claim.labels.tier \"gold\")}}gold{{/if}}",
        "/x/{{#each claim.annotations}}{{dnslabel @key}}-{{@index}}{{/each}}",
        "/x/{{len claim.annotations}}",
        "{{claim.namespace}}/{{claim.name}}-{{claim.uid}}",
        "/x/{{#each class.parameters}}{{@key}}={{this}}{{/each}}",
        "/x/{{#each claim.labels}}{{@root.claim.name}}{{/each}}",
    ] {
        let c = ok(config("silver").set("subdir", template));
        assert!(c.parameters.contains_key("subdir"), "{template}");
    }
    // Not a path: a label handed on as a value is the image's to judge.
    ok(config("silver").set("team", "{{claim.labels.team}}"));

    // The documented opt-out, per key.
    let c = ok(config("silver")
        .set("export-path", "/exports/{{claim.annotations.dir}}")
        .set("args", "[\"--dir=/x/{{claim.labels.team}}\"]")
        .set("unsanitised-parameters", "export-path, args"));
    assert!(c.parameters.contains_key("export-path"));
    assert!(!c.parameters.contains_key("unsanitised-parameters"));
    // ...which covers only the keys it lists,
    error(
        config("silver")
            .set("export-path", "/exports/{{claim.annotations.dir}}")
            .set("subdir", "/x/{{claim.labels.team}}")
            .set("unsanitised-parameters", "export-path"),
        Some("subdir"),
        "path traversal",
    );
    // ...and must name parameters that exist.
    let e = error(
        config("silver")
            .set("export-path", "/exports/{{claim.annotations.dir}}")
            .set("unsanitised-parameters", "export-path,exportpath"),
        Some("unsanitised-parameters"),
        "`exportpath`, which is not a parameter",
    );
    assert!(e.fix.contains("comma"), "{e}");
}

#[test]
fn the_original_proposal_is_accepted_but_for_its_service_token() {
    common::at_root();
    let docs = flex_provisioner::offline::read_documents(std::path::Path::new(
        "testdata/fixtures/original-proposal-verbatim.yaml",
    ))
    .unwrap();
    let cm: k8s_openapi::api::core::v1::ConfigMap = docs[0].to_object().unwrap();
    let theirs = "kubernetes.io/flex-provisioner";
    let Verdict::Checked { config, problems } = parse_config_map(&cm, theirs) else {
        panic!("the proposal's own plugin-name must be served under that name");
    };
    assert!(config.is_none());
    let errors: Vec<_> = problems.iter().filter(|p| p.is_error()).collect();
    assert_eq!(errors.len(), 1, "{errors:#?}");
    assert_eq!(errors[0].key.as_deref(), Some("service-token"));
    assert!(errors[0].fix.contains("service-account-name"));

    let mut without_token = cm.clone();
    without_token.data.as_mut().unwrap().remove("service-token");
    let Verdict::Checked {
        config: Some(c), ..
    } = parse_config_map(&without_token, theirs)
    else {
        panic!("accepted once the token is gone");
    };
    assert_eq!(c.image, "custom/iscsi-provision");
    assert_eq!(c.service_account.as_deref(), Some("foo"));
    assert!(c.parameters.contains_key("use-nfs-server"));
    assert_eq!(
        flex_core::names::parameter_env_name("use-nfs-server"),
        "USE_NFS_SERVER",
        "the env var it is handed in"
    );
    assert_eq!(c.parameters["zone"], "west");
}

/// Issue #11: a Job never runs as the controller's own service account, and a pod-template
/// that gives the pod power over its node needs `allow-privileged: "true"`.
#[test]
fn jobs_never_run_as_the_controller_nor_privileged_without_the_opt_in() {
    use flex_core::config::{ParseOptions, parse_config_map_with};
    common::at_root();
    let e = error(
        config("silver")
            .name("flex-provisioner", "silver-config")
            .set("service-account-name", "flex-provisioner"),
        Some("service-account-name"),
        "the controller's own service account (namespace `flex-provisioner`)",
    );
    assert!(e.fix.contains("flex-provisioner-volume-writer"), "{e}");
    // The same name in another namespace is another account.
    ok(config("silver").set("service-account-name", "flex-provisioner"));
    // A controller deployed elsewhere says so.
    let options = ParseOptions {
        controller_namespace: "storage-admin".into(),
        controller_service_account: "ctl".into(),
        ..ParseOptions::new(P)
    };
    let Verdict::Checked {
        config: None,
        problems,
    } = parse_config_map_with(
        &config("silver").set("service-account-name", "ctl").build(),
        &options,
    )
    else {
        panic!("the controller's account must be refused");
    };
    assert!(
        problems[0].what.contains("`ctl` is the controller's own"),
        "{problems:#?}"
    );

    for (template, field) in [
        ("spec: {hostPID: true}", "spec.hostPID"),
        ("spec: {hostNetwork: true}", "spec.hostNetwork"),
        ("spec: {hostIPC: true}", "spec.hostIPC"),
        (
            "spec: {containers: [{securityContext: {privileged: true}}]}",
            "spec.containers[0].securityContext.privileged",
        ),
        (
            "spec: {containers: [{securityContext: {capabilities: {add: [SYS_ADMIN]}}}]}",
            "spec.containers[0].securityContext.capabilities.add (SYS_ADMIN)",
        ),
        (
            "spec: {initContainers: [{name: i, image: x, securityContext: {privileged: true}}]}",
            "spec.initContainers[0].securityContext.privileged",
        ),
        (
            "spec: {volumes: [{name: root, hostPath: {path: /}}]}",
            "spec.volumes[root].hostPath (/)",
        ),
    ] {
        let e = error(
            config("silver").set("pod-template", template),
            Some("pod-template"),
            &format!("gives the pod power over its node: {field}"),
        );
        assert!(e.fix.contains("`allow-privileged: \"true\"`"), "{e}");
        let c = ok(config("silver")
            .set("pod-template", template)
            .set("allow-privileged", "true"));
        assert!(c.allow_privileged, "{template}");
    }
    error(
        config("silver").set("allow-privileged", "yes please"),
        Some("allow-privileged"),
        "allow-privileged",
    );
    // An opt-in nothing needs is worth removing, but harmless.
    let (usable, problems) = verdict(config("silver").set("allow-privileged", "true"));
    assert!(usable.is_some());
    assert_eq!(problems.len(), 1, "{problems:#?}");
    assert_eq!(problems[0].severity, Severity::Warning);
    assert_eq!(problems[0].key.as_deref(), Some("allow-privileged"));

    // The shipped node-local examples need it and say so; without it they are refused.
    for example in ["configmaps/hostpath.yaml", "configmaps/lvm-kubectl.yaml"] {
        let docs =
            flex_provisioner::offline::read_documents(std::path::Path::new(example)).unwrap();
        let mut cm: k8s_openapi::api::core::v1::ConfigMap = docs
            .iter()
            .find(|d| d.kind == "ConfigMap")
            .unwrap()
            .to_object()
            .unwrap();
        let Verdict::Checked {
            config: Some(c),
            problems,
        } = parse_config_map(&cm, P)
        else {
            panic!("{example} must pass");
        };
        assert!(
            c.allow_privileged && problems.is_empty(),
            "{example}: {problems:#?}"
        );
        cm.data.as_mut().unwrap().remove("allow-privileged");
        let Verdict::Checked {
            config: None,
            problems,
        } = parse_config_map(&cm, P)
        else {
            panic!("{example} without the opt-in must be refused");
        };
        assert_eq!(
            problems[0].key.as_deref(),
            Some("pod-template"),
            "{example}"
        );
    }
}
