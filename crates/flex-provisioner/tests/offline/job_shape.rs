//! The Job and PV template a claim produces: env contract, placement, policies, validity.

use crate::common;

use std::process::Command;

use common::*;
use flex_core::claim::ACCESS_MODES;
use flex_core::job::deprovision_job;

fn silver() -> k8s_openapi::api::storage::v1::StorageClass {
    storage_class("silver", "Immediate")
}

#[test]
fn env_contract_for_a_filesystem_claim() {
    let cm = config("silver")
        .set("use-nfs-server", "10.10.2.4")
        .set("export", "/exports/{{claim.namespace}}/{{claim.name}}")
        .build();
    let pvc = claim("team-a", "data").size("1536Mi").build();
    let (job, pv) = produce(&cm, &silver(), &pvc, None, 1);
    assert_job_valid(&job);
    assert_pv_valid(&pv);
    let e = envs(&job);
    let uid = "3f0c1a2b-4d5e-4f60-8a7b-9c0d1e2f3a4b";
    for (k, v) in [
        ("ACTION", "provision"),
        ("PROVISIONER_NAME", P),
        ("PV_NAME", &format!("pvc-{uid}")),
        ("PVC_NAME", "data"),
        ("PVC_NAMESPACE", "team-a"),
        ("PVC_UID", uid),
        ("STORAGE_CLASS", "silver"),
        ("RECLAIM_POLICY", "Delete"),
        ("MOUNT_OPTIONS", "noatime"),
        ("VOLUME_MODE", "Filesystem"),
        ("ACCESS_MODES", "ReadWriteOnce"),
        ("REQUESTED_BYTES", "1610612736"),
        ("REQUESTED_SIZE", "1536Mi"),
        ("SELECTED_NODE", ""),
        ("USE_NFS_SERVER", "10.10.2.4"),
        ("EXPORT", "/exports/team-a/data"),
        ("TERMINATION_LOG", "/dev/termination-log"),
        ("PV_CREATOR", "controller"),
    ] {
        assert_eq!(e.get(k).map(String::as_str), Some(v), "{k}");
    }
    let params: serde_json::Value = serde_json::from_str(&e["PARAMETERS"]).unwrap();
    assert_eq!(
        params,
        serde_json::json!({"export": "/exports/team-a/data", "use-nfs-server": "10.10.2.4"})
    );
    let template: serde_json::Value = serde_json::from_str(&e["PV_TEMPLATE"]).unwrap();
    assert_eq!(template, serde_json::to_value(&pv).unwrap());
    assert!(
        !e.contains_key("PV_JSON"),
        "PV_JSON is for deprovisioning only"
    );
    let spec = pv.spec.unwrap();
    assert_eq!(spec.claim_ref.as_ref().unwrap().uid.as_deref(), Some(uid));
    assert_eq!(spec.capacity.unwrap()["storage"].0, "1536Mi");
    assert_eq!(spec.storage_class_name.as_deref(), Some("silver"));
    assert_eq!(
        spec.persistent_volume_reclaim_policy.as_deref(),
        Some("Delete")
    );
    assert_eq!(spec.mount_options, Some(vec!["noatime".to_string()]));
    assert!(spec.node_affinity.is_none());
    // Only provisioned-by: what runs later is in the controller's record, never on the PV.
    let ann = pv.metadata.annotations.unwrap();
    assert_eq!(
        ann.into_iter().collect::<Vec<_>>(),
        vec![("pv.kubernetes.io/provisioned-by".to_string(), P.to_string())]
    );
    assert_eq!(
        pv.metadata.finalizers,
        Some(vec!["flex-provisioner.io/deprovision".to_string()]),
        "the controller creates this PV (pv-creator controller)"
    );
    assert_eq!(e["PV_CREATOR"], "controller");
    let pod = job.spec.unwrap().template.spec.unwrap();
    assert_eq!(
        pod.automount_service_account_token,
        Some(false),
        "no API credentials in controller mode"
    );
}

#[test]
fn image_mode_hands_the_image_a_template_without_our_finalizer_and_keeps_its_token() {
    let cm = config("silver")
        .set("pv-creator", "image")
        .set("service-account-name", "writer")
        .build();
    let (job, pv) = produce(&cm, &silver(), &claim("team-a", "data").build(), None, 1);
    assert_job_valid(&job);
    assert_eq!(env(&job, "PV_CREATOR").as_deref(), Some("image"));
    assert!(pv.metadata.finalizers.is_none(), "added once verified");
    let pod = job.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.automount_service_account_token, None);
    assert_eq!(pod.service_account_name.as_deref(), Some("writer"));
}

#[test]
fn block_mode_and_every_access_mode() {
    for mode in ACCESS_MODES {
        let pvc = claim("team-a", "raw").block().modes(&[mode]).build();
        let (job, pv) = produce(&config("silver").build(), &silver(), &pvc, None, 1);
        assert_job_valid(&job);
        assert_eq!(env(&job, "VOLUME_MODE").as_deref(), Some("Block"));
        assert_eq!(env(&job, "ACCESS_MODES").as_deref(), Some(*mode));
        let spec = pv.spec.unwrap();
        assert_eq!(spec.volume_mode.as_deref(), Some("Block"));
        assert_eq!(spec.access_modes, Some(vec![mode.to_string()]));
    }
    let pvc = claim("team-a", "multi")
        .modes(&["ReadWriteMany", "ReadOnlyMany"])
        .build();
    let (job, _) = produce(&config("silver").build(), &silver(), &pvc, None, 1);
    assert_eq!(
        env(&job, "ACCESS_MODES").as_deref(),
        Some("ReadWriteMany,ReadOnlyMany")
    );
}

#[test]
fn sizes_in_every_quantity_suffix() {
    let cm = config("silver")
        .set("gib", "{{claim.size.gib}}")
        .set("mib", "{{claim.size.mib}}")
        .build();
    for (size, bytes, mib, gib) in [
        ("1048576", 1_048_576u64, 1u64, 1u64),
        ("512Ki", 524_288, 1, 1),
        ("1536Mi", 1_610_612_736, 1536, 2),
        ("2Gi", 2_147_483_648, 2048, 2),
        ("1Ti", 1_099_511_627_776, 1_048_576, 1024),
        ("500k", 500_000, 1, 1),
        ("100M", 100_000_000, 96, 1),
        ("10G", 10_000_000_000, 9537, 10),
        ("1.5Gi", 1_610_612_736, 1536, 2),
        ("0.5Gi", 536_870_912, 512, 1),
        ("1e9", 1_000_000_000, 954, 1),
    ] {
        let pvc = claim("team-a", "sized").size(size).build();
        let (job, pv) = produce(&cm, &silver(), &pvc, None, 1);
        assert_eq!(
            env(&job, "REQUESTED_BYTES"),
            Some(bytes.to_string()),
            "{size}"
        );
        assert_eq!(env(&job, "REQUESTED_SIZE").as_deref(), Some(size));
        assert_eq!(env(&job, "MIB"), Some(mib.to_string()), "{size}");
        assert_eq!(env(&job, "GIB"), Some(gib.to_string()), "{size}");
        assert_eq!(pv.spec.unwrap().capacity.unwrap()["storage"].0, size);
    }
}

#[test]
fn wait_for_first_consumer_node_local_runs_on_the_selected_node() {
    let sc = storage_class("silver", "WaitForFirstConsumer");
    let cm = config("silver")
        .set("node-local", "true")
        .set("zone", "{{node.labels.[topology.kubernetes.io/zone]}}")
        .build();
    let pvc = claim("team-a", "data").selected_node("worker-7").build();
    let n = node("worker-7");
    let (job, pv) = produce(&cm, &sc, &pvc, Some(&n), 1);
    assert_job_valid(&job);
    assert_eq!(env(&job, "SELECTED_NODE").as_deref(), Some("worker-7"));
    assert_eq!(env(&job, "ZONE").as_deref(), Some("west-1a"));
    let pod = job.spec.unwrap().template.spec.unwrap();
    let term = &pod
        .affinity
        .unwrap()
        .node_affinity
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .unwrap()
        .node_selector_terms[0];
    let field = &term.match_fields.as_ref().unwrap()[0];
    assert_eq!(
        (field.key.as_str(), field.operator.as_str()),
        ("metadata.name", "In")
    );
    assert_eq!(field.values, Some(vec!["worker-7".to_string()]));
    assert!(pod.node_name.is_none(), "the scheduler stays in charge");
    let affinity = pv.spec.unwrap().node_affinity.unwrap().required.unwrap();
    let req = &affinity.node_selector_terms[0]
        .match_expressions
        .as_ref()
        .unwrap()[0];
    assert_eq!(req.key, "kubernetes.io/hostname");
    assert_eq!(req.values, Some(vec!["worker-7.example.com".to_string()]));
}

#[test]
fn wait_for_first_consumer_without_node_local_does_not_pin() {
    let sc = storage_class("silver", "WaitForFirstConsumer");
    let pvc = claim("team-a", "data").selected_node("worker-7").build();
    let (job, pv) = produce(
        &config("silver").build(),
        &sc,
        &pvc,
        Some(&node("worker-7")),
        1,
    );
    assert_eq!(env(&job, "SELECTED_NODE").as_deref(), Some("worker-7"));
    assert!(job.spec.unwrap().template.spec.unwrap().affinity.is_none());
    assert!(pv.spec.unwrap().node_affinity.is_none());
}

#[test]
fn policies_placement_and_security_defaults() {
    let cm = config("silver")
        .set("timeout", "1h30m")
        .set("retries", "4")
        .set("permanent-exit-codes", "3,2")
        .set("node-selector", "storage-net=true")
        .set("service-account-name", "iscsi-provisioner")
        .set("command", "[\"/bin/provision\"]")
        .set("args", "[\"--name\", \"{{claim.name}}\"]")
        .build();
    let (job, _) = produce(&cm, &silver(), &claim("team-a", "data").build(), None, 1);
    let spec = job.spec.unwrap();
    assert_eq!(spec.active_deadline_seconds, Some(5400));
    assert_eq!(spec.backoff_limit, Some(4));
    assert_eq!(spec.ttl_seconds_after_finished, Some(3600));
    let rules = spec.pod_failure_policy.unwrap().rules;
    assert_eq!(rules[0].action, "FailJob");
    let codes = rules[0].on_exit_codes.as_ref().unwrap();
    assert_eq!(codes.values, vec![2, 3]);
    assert_eq!(codes.container_name.as_deref(), Some("provisioner"));
    assert_eq!(rules[1].action, "Ignore");
    assert_eq!(
        rules[1].on_pod_conditions.as_ref().unwrap()[0].type_,
        "DisruptionTarget"
    );
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.node_selector.unwrap()["storage-net"], "true");
    assert_eq!(
        pod.service_account_name.as_deref(),
        Some("iscsi-provisioner")
    );
    let psc = pod.security_context.unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(psc.seccomp_profile.unwrap().type_, "RuntimeDefault");
    let c = &pod.containers[0];
    assert_eq!(c.command, Some(vec!["/bin/provision".to_string()]));
    assert_eq!(c.args, Some(vec!["--name".to_string(), "data".to_string()]));
    assert_eq!(
        c.termination_message_policy.as_deref(),
        Some("FallbackToLogsOnError")
    );
    let csc = c.security_context.as_ref().unwrap();
    assert_eq!(csc.allow_privilege_escalation, Some(false));
    assert_eq!(
        csc.capabilities.as_ref().unwrap().drop,
        Some(vec!["ALL".to_string()])
    );

    let no_permanent = config("silver").set("permanent-exit-codes", "").build();
    let (job, _) = produce(
        &no_permanent,
        &silver(),
        &claim("team-a", "data").build(),
        None,
        1,
    );
    let rules = job.spec.unwrap().pod_failure_policy.unwrap().rules;
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].action, "Ignore");
}

#[test]
fn job_names_labels_and_attempts() {
    let pvc = claim(
        "a-namespace-whose-name-is-quite-long-indeed-yes",
        &"n".repeat(253),
    )
    .build();
    for attempt in [1, 2, 10, 999] {
        let (job, pv) = produce(&config("silver").build(), &silver(), &pvc, None, attempt);
        assert_job_valid(&job);
        assert_pv_valid(&pv);
        let name = job.metadata.name.clone().unwrap();
        assert!(name.len() <= 63, "{name}");
        let expected = if attempt == 1 {
            "provision-3f0c1a2b-4d5e-4f60-8a7b-9c0d1e2f3a4b".to_string()
        } else {
            format!("provision-3f0c1a2b-4d5e-4f60-8a7b-9c0d1e2f3a4b-{attempt}")
        };
        assert_eq!(name, expected);
        let labels = job.metadata.labels.unwrap();
        assert_eq!(labels["flex-provisioner.io/attempt"], attempt.to_string());
        assert_eq!(labels["app.kubernetes.io/managed-by"], "flex-provisioner");
        assert_eq!(labels["flex-provisioner.io/action"], "provision");
        let ann = job.metadata.annotations.unwrap();
        assert_eq!(
            ann["flex-provisioner.io/claim"],
            format!(
                "a-namespace-whose-name-is-quite-long-indeed-yes/{}",
                "n".repeat(253)
            )
        );
        assert_eq!(
            job.metadata.namespace.as_deref(),
            Some("storage-admin"),
            "Jobs run in the admin's namespace"
        );
    }
}

#[test]
fn pod_template_merge_reaches_the_job() {
    let cm = config("silver")
        .set(
            "pod-template",
            "metadata: {labels: {team: storage}}\nspec:\n  tolerations: [{key: storage, operator: Exists}]\n  imagePullSecrets: [{name: regcred}]\n  volumes: [{name: export, nfs: {server: nfs.example.com, path: /exports}}]\n  containers:\n  - volumeMounts: [{name: export, mountPath: /export}]\n    resources: {limits: {memory: 64Mi}}\n",
        )
        .build();
    let (job, _) = produce(&cm, &silver(), &claim("team-a", "data").build(), None, 1);
    assert_job_valid(&job);
    let t = job.spec.unwrap().template;
    assert_eq!(
        t.metadata.as_ref().unwrap().labels.as_ref().unwrap()["team"],
        "storage"
    );
    assert_eq!(
        t.metadata.unwrap().labels.unwrap()["flex-provisioner.io/action"],
        "provision"
    );
    let pod = t.spec.unwrap();
    assert_eq!(pod.tolerations.unwrap()[0].key.as_deref(), Some("storage"));
    assert_eq!(pod.image_pull_secrets.unwrap()[0].name, "regcred");
    assert_eq!(pod.volumes.unwrap()[0].name, "export");
    assert_eq!(
        pod.security_context.unwrap().run_as_non_root,
        Some(true),
        "kept when the fragment is silent"
    );
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some("registry.example.com/prov:1.0"));
    assert_eq!(c.volume_mounts.as_ref().unwrap()[0].mount_path, "/export");
    assert_eq!(
        c.resources.as_ref().unwrap().limits.as_ref().unwrap()["memory"].0,
        "64Mi"
    );
    assert!(
        c.env
            .as_ref()
            .unwrap()
            .iter()
            .any(|e| e.name == "PV_TEMPLATE")
    );
}

#[test]
fn deprovision_job_is_built_from_the_pv_records_alone() {
    let sc = storage_class("silver", "WaitForFirstConsumer");
    let cm = config("silver")
        .set("node-local", "true")
        .set("deprovision-image", "registry.example.com/deprov:2.0")
        .set(
            "deprovision-args",
            "[\"--path\", \"/exports/{{claim.name}}\"]",
        )
        .set("export", "/exports/{{claim.name}}")
        .set("pod-template", "spec: {volumes: [{name: v, emptyDir: {}}]}")
        .set("timeout", "7m")
        .build();
    let pvc = claim("team-a", "data").selected_node("worker-7").build();
    let (provision, mut pv) = produce(&cm, &sc, &pvc, Some(&node("worker-7")), 1);
    // The ConfigMap is gone from here on: only the PV (as the API server returns it) is used.
    pv.metadata.managed_fields = Some(vec![Default::default()]);
    pv.spec.as_mut().unwrap().host_path = Some(k8s_openapi::api::core::v1::HostPathVolumeSource {
        path: "/volumes/data".into(),
        type_: None,
    });
    // The record the controller wrote when it verified the volume, from the deprovision
    // recipe and parameters it computed for the claim (also kept on the provisioning Job).
    pv.metadata.uid = Some("pv-uid-1".into());
    let recipe = serde_json::from_str(
        &provision.metadata.annotations.as_ref().unwrap()["flex-provisioner.io/deprovision-spec"],
    )
    .unwrap();
    let record_cm = flex_core::record::build_record(
        &pv,
        &recipe,
        None,
        &env(&provision, "PARAMETERS").unwrap(),
    )
    .unwrap();
    let record = flex_core::record::read_record(&record_cm, &pv).unwrap();
    assert_eq!(record.parameters["export"], "/exports/data");
    let job = deprovision_job(&pv, &record, P, 3, 600);
    assert_job_valid(&job);
    assert_eq!(
        job.metadata.name.as_deref(),
        Some("deprovision-pvc-3f0c1a2b-4d5e-4f60-8a7b-9c0d1e2f3a4b-3")
    );
    assert_eq!(job.metadata.namespace.as_deref(), Some("storage-admin"));
    let e = envs(&job);
    assert_eq!(e["ACTION"], "deprovision");
    assert_eq!(e["EXPORT"], "/exports/data");
    assert_eq!(e["PVC_NAME"], "data");
    assert_eq!(e["PVC_NAMESPACE"], "team-a");
    assert_eq!(e["REQUESTED_BYTES"], "1073741824");
    assert_eq!(e["SELECTED_NODE"], "worker-7");
    assert!(!e.contains_key("PV_TEMPLATE"));
    let pv_json: serde_json::Value = serde_json::from_str(&e["PV_JSON"]).unwrap();
    assert_eq!(pv_json["spec"]["hostPath"]["path"], "/volumes/data");
    assert!(pv_json["metadata"].get("managedFields").is_none());
    let spec = job.spec.unwrap();
    assert_eq!(spec.active_deadline_seconds, Some(420));
    assert_eq!(spec.ttl_seconds_after_finished, Some(600));
    assert_eq!(
        spec.template
            .metadata
            .as_ref()
            .unwrap()
            .labels
            .as_ref()
            .unwrap()["flex-provisioner.io/action"],
        "deprovision"
    );
    let pod = spec.template.spec.unwrap();
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some("registry.example.com/deprov:2.0"));
    assert_eq!(
        c.args,
        Some(vec!["--path".to_string(), "/exports/data".to_string()])
    );
    assert_eq!(pod.volumes.unwrap()[0].name, "v");
    assert!(
        pod.affinity.is_some(),
        "node-local volumes are cleaned on their node"
    );
}

#[test]
fn user_text_reaches_the_pod_byte_for_byte_and_never_a_shell() {
    let marker = std::env::temp_dir().join(format!("flex-pwned-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let evil = format!(
        "$(touch {}); \"quoted\" `id` 'single' \\ {{{{x}}}}\n;rm -rf /",
        marker.display()
    );
    let cm = config("silver")
        .set("note", "{{claim.annotations.note}}")
        .set("args", "[\"{{claim.annotations.note}}\"]")
        .build();
    let pvc = claim("team-a", "data").annotation("note", &evil).build();
    let (job, _) = produce(&cm, &silver(), &pvc, None, 1);
    assert_eq!(env(&job, "NOTE").as_deref(), Some(evil.as_str()));
    let c = container(&job);
    assert_eq!(c.args, Some(vec![evil.clone()]), "one argv entry, unsplit");
    let params: serde_json::Value =
        serde_json::from_str(&env(&job, "PARAMETERS").unwrap()).unwrap();
    assert_eq!(params["note"], evil.as_str());

    // Hand the container's env and argv to real processes, as a kubelet would (exec, no shell).
    let out = Command::new("printenv")
        .arg("NOTE")
        .env_clear()
        .envs(envs(&job))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), format!("{evil}\n"));
    let out = Command::new("printf")
        .arg("%s")
        .args(c.args.clone().unwrap())
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), evil);
    // A defensive shell script that quotes its variables treats it as data too.
    let out = Command::new("sh")
        .args(["-c", "printf '%s' \"$NOTE\""])
        .env_clear()
        .envs(envs(&job))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), evil);
    assert!(!marker.exists(), "the value was executed");
}
