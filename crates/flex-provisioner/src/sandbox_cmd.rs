//! `flex-provisioner sandbox`: start the sandbox, apply files, explain how to reach it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::cli::SandboxArgs;
use crate::offline::read_documents;
use kube_sandbox::api::WriteCtx;
use kube_sandbox::resources;
use kube_sandbox::{Sandbox, SandboxError, SandboxOptions};

/// Turns the command-line arguments into options; a malformed `--image-map` is an error.
pub fn options(args: &SandboxArgs) -> Result<SandboxOptions, String> {
    let mut image_map = BTreeMap::new();
    for entry in &args.image_map {
        let (image, path) = entry
            .split_once('=')
            .ok_or_else(|| format!("--image-map {entry}: write IMAGE=PATH"))?;
        image_map.insert(image.to_owned(), PathBuf::from(path));
    }
    Ok(SandboxOptions {
        nodes: args.nodes.clone(),
        images_dir: args.images.clone(),
        image_map,
        pod_backoff: Duration::from_secs(args.pod_backoff_seconds),
        kubeconfig: args.kubeconfig_out.clone(),
        // Pods call `flex-provisioner volume create`: this very binary.
        extra_path: std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(Into::into))
            .into_iter()
            .collect(),
        port: args.port,
        auth: args.auth,
        ..Default::default()
    })
}

/// What the sandbox installs before anything else when the controller runs inside it, as
/// `kubectl apply -k deploy/` would in a cluster: the controller's and the config
/// namespace, the ServiceAccounts (the image-mode examples' Jobs run as
/// `flex-provisioner-volume-writer`), the RBAC and the admission policy (stored; the
/// sandbox does not evaluate its CEL). So `sandbox --apply configmaps/<example>.yaml` works
/// on its own.
pub const INSTALL: &[(&str, &str)] = &[
    (
        "deploy/namespace.yaml",
        include_str!("../../../deploy/namespace.yaml"),
    ),
    (
        "deploy/serviceaccounts.yaml",
        include_str!("../../../deploy/serviceaccounts.yaml"),
    ),
    (
        "deploy/rbac.yaml",
        include_str!("../../../deploy/rbac.yaml"),
    ),
    (
        "deploy/admission-policy-params.yaml",
        include_str!("../../../deploy/admission-policy-params.yaml"),
    ),
    (
        "deploy/admission-policy.yaml",
        include_str!("../../../deploy/admission-policy.yaml"),
    ),
];

/// What `--demo` applies (after `INSTALL`): the hostpath example class and a claim with a
/// pod writing to it.
pub const DEMO: &[(&str, &str)] = &[
    (
        "configmaps/hostpath.yaml",
        include_str!("../../../configmaps/hostpath.yaml"),
    ),
    (
        "examples/quickstart.yaml",
        include_str!("../../../examples/quickstart.yaml"),
    ),
];

/// Creates the objects of built-in files (`INSTALL`, `DEMO`); one line per object.
pub fn apply_builtin(sandbox: &Sandbox, files: &[(&str, &str)]) -> Vec<String> {
    let mut docs = Vec::new();
    let mut lines = Vec::new();
    for (origin, text) in files {
        match crate::offline::parse_documents(text, origin) {
            Ok(d) => docs.extend(d),
            Err(e) => lines.push(format!("error: {e}")),
        }
    }
    lines.extend(apply_documents(sandbox, docs));
    lines
}

/// Creates every object in the files, in order; returns one line per object.
pub fn apply_files(sandbox: &Sandbox, files: &[PathBuf]) -> Result<Vec<String>, flex_core::Error> {
    let mut docs = Vec::new();
    for file in files {
        docs.extend(read_documents(file)?);
    }
    Ok(apply_documents(sandbox, docs))
}

pub fn apply_documents(sandbox: &Sandbox, docs: Vec<crate::offline::Document>) -> Vec<String> {
    let mut lines = Vec::new();
    {
        for doc in docs {
            let api_version = doc.value["apiVersion"].as_str().unwrap_or_default();
            let Some(rid) = resources::by_kind(api_version, &doc.kind) else {
                lines.push(format!(
                    "{}: skipped {} {api_version}: not served by the sandbox",
                    doc.path, doc.kind
                ));
                continue;
            };
            let r = resources::get(rid);
            let ns = doc.value["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_owned();
            if r.namespaced && ns != "default" {
                let ns_obj = serde_json::json!({"metadata": {"name": ns}});
                let _ = sandbox.api.create(
                    resources::find("", "v1", "namespaces").unwrap_or_default(),
                    "",
                    ns_obj,
                    &WriteCtx::manager("flex-provisioner"),
                );
            }
            let name = doc.value["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            match sandbox.api.create(
                rid,
                &ns,
                doc.value.clone(),
                &WriteCtx::manager("flex-provisioner"),
            ) {
                Ok(_) => lines.push(format!("{}/{name} created", r.singular)),
                // Applying what already exists (e.g. deploy/ again) keeps the object.
                Err(e) if e.code == 409 && e.reason == Some("AlreadyExists") => {
                    lines.push(format!("{}/{name} unchanged (already exists)", r.singular))
                }
                Err(e) => lines.push(format!("{}/{name}: {}", r.singular, e.message)),
            }
        }
    }
    lines
}

/// The text shown once the sandbox is up.
pub fn banner(sandbox: &Sandbox) -> String {
    let kc = sandbox.kubeconfig.display();
    format!(
        "flex-provisioner sandbox is running at {url}\n\
         kubeconfig: {kc}\n\n\
         Use it with kubectl:\n  export KUBECONFIG={kc}\n  kubectl get nodes,storageclasses,pvc,pv,jobs,pods -A\n\n\
         Node filesystems live under {nodes}. Press Ctrl-C to stop.\n",
        url = sandbox.url(),
        nodes = sandbox.work_dir.join("nodes").display(),
    )
}

/// Prints each claim's phase as it changes, so a user sees a claim become Bound.
async fn follow_claims(sandbox: &Sandbox) {
    let claims = resources::find("", "v1", "persistentvolumeclaims").unwrap_or_default();
    let mut rx = sandbox.api.store.subscribe();
    let mut last: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    while let Ok(c) = rx.recv().await {
        if c.rid != claims {
            continue;
        }
        let o = &c.object;
        let key = format!(
            "{}/{}",
            o["metadata"]["namespace"].as_str().unwrap_or_default(),
            o["metadata"]["name"].as_str().unwrap_or_default()
        );
        let phase = if c.event == kube_sandbox::store::EventType::Deleted {
            "Deleted".to_owned()
        } else {
            o["status"]["phase"]
                .as_str()
                .unwrap_or("Pending")
                .to_owned()
        };
        if last.get(&key) != Some(&phase) {
            let volume = o["spec"]["volumeName"]
                .as_str()
                .map(|v| format!(" (volume {v})"))
                .unwrap_or_default();
            println!("claim {key}: {phase}{volume}");
            last.insert(key, phase);
        }
    }
}

pub async fn run(args: &SandboxArgs) -> Result<(), SandboxError> {
    let opts = options(args).map_err(SandboxError::Client)?;
    let sandbox = Sandbox::start(opts).await?;
    if !args.no_controller {
        // The controller runs inside as deployed: what deploy/ creates exists too.
        apply_builtin(&sandbox, INSTALL)
            .iter()
            .for_each(|l| println!("{l}"));
    }
    let ns_rid = resources::find("", "v1", "namespaces").unwrap_or_default();
    for ns in &args.config_namespaces {
        let _ = sandbox.api.create(
            ns_rid,
            "",
            serde_json::json!({"metadata": {"name": ns}}),
            &WriteCtx::manager("flex-provisioner"),
        );
    }
    if !args.no_controller {
        let client = sandbox.client()?;
        let options = flex_controller::controller::Options {
            provisioner_name: args.common.provisioner_name.clone(),
            config_namespaces: args.config_namespaces.clone(),
            controller_namespace: flex_core::config::DEFAULT_CONTROLLER_NAMESPACE.into(),
            controller_service_account: flex_core::config::DEFAULT_CONTROLLER_SERVICE_ACCOUNT
                .into(),
            job_ttl_seconds: flex_core::job::DEFAULT_JOB_TTL_SECONDS,
            retry_base: Duration::from_secs(10),
            instance: "sandbox".into(),
            metrics_addr: None,
            leader: None,
            api_limits: None,
            snapshot_api_recheck: flex_controller::controller::SNAPSHOT_API_RECHECK,
        };
        tokio::spawn(async move {
            if let Err(e) = flex_controller::controller::run(client, options).await {
                eprintln!("error: the controller stopped: {e}");
            }
        });
    }
    if args.demo {
        apply_builtin(&sandbox, DEMO)
            .iter()
            .for_each(|l| println!("{l}"));
    }
    match apply_files(&sandbox, &args.apply) {
        Ok(lines) => lines.iter().for_each(|l| println!("{l}")),
        Err(e) => eprintln!("error: {e}"),
    }
    println!("{}", banner(&sandbox));
    tokio::select! {
        _ = follow_claims(&sandbox) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    drop(sandbox);
    Ok(())
}
