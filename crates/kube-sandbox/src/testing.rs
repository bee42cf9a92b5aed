//! For test suites: starting a sandbox with small test images, and waiting for conditions.

use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::{Sandbox, SandboxOptions};

/// Test images: `<name>` -> shell script body.
pub const IMAGES: &[(&str, &str)] = &[
    ("ok", "exit 0"),
    (
        "fail",
        "echo \"fail: transient trouble\" > \"$TERMINATION_LOG\"\nexit 1",
    ),
    (
        "permanent",
        "echo \"permanent: cannot ever work\" > \"$TERMINATION_LOG\"\nexit 2",
    ),
    (
        "noisy-fail",
        "i=0\nwhile [ $i -lt 50 ]; do echo \"line $i\"; i=$((i+1)); done\necho 'last words' >&2\nexit 3",
    ),
    ("sleep", "trap 'exit 143' TERM\nsleep 60 &\nwait $!"),
    (
        "env",
        "env | sort > \"$SANDBOX_STATE/env-$HOSTNAME\"\nexit 0",
    ),
    // Leaves its termination message file as a link to $TARGET.
    (
        "link-log",
        "ln -sf \"$TARGET\" \"$TERMINATION_LOG\"\nexit 1",
    ),
    // Says what its volume at /data holds, and what a link in it named `escape` leads to;
    // leaves its name in the volume, and stays up for $HOLD seconds.
    (
        "look",
        "d=\"$SANDBOX_ROOT/data\"\n{ cat \"$d/own\"; cat \"$d/escape/secret\" 2>/dev/null || echo ' no-escape'; } > \"$TERMINATION_LOG\"\necho \"$HOSTNAME\" > \"$d/written-by-$HOSTNAME\"\nsleep \"${HOLD:-0}\"",
    ),
];

/// `IMAGES`, written once per test process: every test's sandbox reads the same scripts.
pub fn images_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| write_images(IMAGES)).clone()
}

/// A fresh directory of test images: `<name>/entrypoint` running each script body. It is
/// under the build's own scratch directory (`target/tmp`, gone with `cargo clean`), not
/// the system's temp directory, which runs of the suite would otherwise fill.
pub fn write_images(images: &[(&str, &str)]) -> PathBuf {
    let dir = scratch_dir().join(format!(
        "flex-test-images-{}-{}",
        std::process::id(),
        crate::ids::name_suffix()
    ));
    for (name, body) in images {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        let p = d.join("entrypoint");
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    dir
}

/// `target/tmp` of the build the running test binary belongs to (it runs from
/// `target/<profile>/deps/`); the system's temp directory for a binary elsewhere.
pub fn scratch_dir() -> PathBuf {
    let exe = std::env::current_exe().ok();
    let target = exe.as_deref().and_then(|e| {
        let deps = e.parent()?;
        (deps.file_name()? == "deps").then(|| deps.parent()?.parent())?
    });
    target.map_or_else(std::env::temp_dir, |t| t.join("tmp"))
}

/// A sandbox's options for tests: two nodes, the test images, a short pod backoff.
pub fn options() -> SandboxOptions {
    SandboxOptions {
        images_dir: images_dir(),
        pod_backoff: Duration::from_millis(200),
        nodes: vec!["node-a".into(), "node-b".into()],
        ..Default::default()
    }
}

/// A sandbox started with [`options`].
pub async fn start() -> Sandbox {
    Sandbox::start(options()).await.expect("sandbox starts")
}

/// A sandbox with tokens, RBAC and HTTPS on, running only `images`.
pub async fn start_with_auth(images: &[(&str, &str)]) -> Sandbox {
    Sandbox::start(SandboxOptions {
        auth: true,
        images_dir: write_images(images),
        ..options()
    })
    .await
    .expect("sandbox starts")
}

/// Polls `f` until it returns `Some`, or panics with `what` after `secs`.
pub async fn eventually<T, F, Fut>(secs: u64, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {secs}s waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The Status of a refused request; panics when the request was not refused.
pub fn status_of<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> kube::core::Status {
    match r {
        Err(kube::Error::Api(s)) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// `(code, reason)` of an API error, panicking on anything else.
pub fn api_error<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> (u16, String) {
    let s = status_of(r);
    (s.code, s.reason)
}

/// Asserts a 422 Invalid with exactly `message`, and returns the Status for more checks.
pub fn invalid<T: std::fmt::Debug>(r: Result<T, kube::Error>, message: &str) -> kube::core::Status {
    let s = status_of(r);
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{s:?}");
    assert_eq!(s.message, message);
    s
}
