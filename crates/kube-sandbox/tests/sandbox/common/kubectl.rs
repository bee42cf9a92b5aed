//! Running the real kubectl against a sandbox's kubeconfig. kubectl is required: a test
//! using this fails (it does not skip) when kubectl is not installed.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What one kubectl run gave: exit code, stdout, stderr.
#[derive(Debug, Clone)]
pub struct Run {
    pub rc: i32,
    pub out: String,
    pub err: String,
}

pub fn kubectl_blocking(kubeconfig: &Path, args: &[String], stdin: Option<&str>) -> Run {
    use std::io::Write;
    let mut child = Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect(
            "kubectl must be installed for this test (Debian: apt-get install kubernetes-client)",
        );
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    Run {
        rc: out.status.code().unwrap_or(-1),
        out: String::from_utf8_lossy(&out.stdout).into_owned(),
        err: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs kubectl off the async runtime (the sandbox answers on it); `args` split at
/// whitespace.
pub async fn kubectl(kubeconfig: &Path, args: &str, stdin: Option<&str>) -> Run {
    let args: Vec<&str> = args.split_whitespace().collect();
    kubectl_args(kubeconfig, &args, stdin).await
}

/// Runs kubectl off the async runtime with these exact arguments.
pub async fn kubectl_args(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> Run {
    let kc: PathBuf = kubeconfig.to_owned();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let stdin = stdin.map(str::to_owned);
    tokio::task::spawn_blocking(move || kubectl_blocking(&kc, &args, stdin.as_deref()))
        .await
        .unwrap()
}

/// Runs kubectl and insists it succeeds; returns stdout.
pub async fn ok(kubeconfig: &Path, args: &str, stdin: Option<&str>) -> String {
    let r = kubectl(kubeconfig, args, stdin).await;
    assert_eq!(r.rc, 0, "kubectl {args} failed: {}{}", r.out, r.err);
    r.out
}
