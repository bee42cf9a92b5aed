//! `flex-provisioner sandbox`: start the sandbox, apply files, explain how to reach it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::api::WriteCtx;
use super::resources;
use super::{Sandbox, SandboxError, SandboxOptions};
use crate::cli::SandboxArgs;
use crate::offline::read_documents;

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
        port: args.port,
        ..Default::default()
    })
}

/// Creates every object in the files, in order; returns one line per object.
pub fn apply_files(sandbox: &Sandbox, files: &[PathBuf]) -> Result<Vec<String>, crate::Error> {
    let mut lines = Vec::new();
    for file in files {
        for doc in read_documents(file)? {
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
                Err(e) => lines.push(format!("{}/{name}: {}", r.singular, e.message)),
            }
        }
    }
    Ok(lines)
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

pub async fn run(args: &SandboxArgs) -> Result<(), SandboxError> {
    let opts = options(args).map_err(SandboxError::Client)?;
    let sandbox = Sandbox::start(opts).await?;
    match apply_files(&sandbox, &args.apply) {
        Ok(lines) => lines.iter().for_each(|l| println!("{l}")),
        Err(e) => eprintln!("error: {e}"),
    }
    println!("{}", banner(&sandbox));
    let _ = tokio::signal::ctrl_c().await;
    drop(sandbox);
    Ok(())
}
