//! A pod's volumes as its containers see them: each at its mount path in a root of the pod's
//! own. Run as root, the sandbox starts every container in a mount namespace of its own,
//! chrooted into that root, with each volume bind-mounted as a container runtime mounts it:
//! a link inside a volume then resolves in the container, never on the host, and pods that
//! mount different volumes at one path do not share anything. Without those privileges the
//! volumes are links under the pod's root (`$SANDBOX_ROOT`), and a link inside a volume
//! resolves on the host (docs/sandbox-known-differences.md).

use std::path::{Path, PathBuf};

/// How this sandbox gives containers their volumes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Isolation {
    /// A mount namespace and a root of its own per container (needs root and util-linux).
    Namespaced,
    /// Links under a directory of the pod's own, seen by a host process.
    Linked,
}

/// CAP_SYS_CHROOT and CAP_SYS_ADMIN: what a chroot and bind mounts need.
const CAP_SYS_CHROOT: u32 = 18;
const CAP_SYS_ADMIN: u32 = 21;

impl Isolation {
    /// Namespaced when this process may mount and chroot and a trial container (the whole
    /// set-up, running `true`) starts: an older util-linux without `unshare --root`, or a
    /// host that refuses a `/proc` mount, falls back to links. Tried once per process.
    pub(super) fn of_this_process() -> Self {
        static FOUND: std::sync::OnceLock<Isolation> = std::sync::OnceLock::new();
        *FOUND.get_or_init(|| {
            let needed = (1 << CAP_SYS_ADMIN) | (1 << CAP_SYS_CHROOT);
            if super::capabilities::effective() & needed == needed && trial_starts() {
                Isolation::Namespaced
            } else {
                Isolation::Linked
            }
        })
    }
}

/// Whether a container with a root of its own starts here.
fn trial_starts() -> bool {
    let root = std::env::temp_dir().join(format!("sandbox-mount-trial-{}", std::process::id()));
    if std::fs::create_dir_all(&root).is_err() {
        return false;
    }
    let (program, args) = namespaced(
        &root,
        Path::new("/"),
        Vec::new(),
        "true",
        &[],
        &[("PATH".into(), "/usr/bin:/bin".into())],
    );
    let started = std::process::Command::new(program)
        .args(args)
        .env_clear()
        .envs(setup_env())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let _ = std::fs::remove_dir_all(&root);
    started
}

/// One volume (or one `subPath` of it) as a container sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Mount {
    /// The directory or file on the host that backs it.
    pub source: PathBuf,
    /// Where the container sees it (its `mountPath`, or a path of the host bound at the same
    /// place).
    pub target: String,
    pub read_only: bool,
}

/// The system directories a container sees read-only from the host: the sandbox has no
/// image filesystems, so a script's tools are the host's.
const SYSTEM_DIRS: &[&str] = &[
    "bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc",
];

/// Sets up the container's root in its new mount namespace (the host's system directories
/// read-only, a `/dev` of its own with the usual devices, `/proc`), then starts the
/// container's program chrooted there, in its working directory. Arguments: the root, the working
/// directory, then `ro|rw SOURCE TARGET` per mount (in order), `--`, the program and its
/// arguments. A mount target reached through a link that leaves the root is refused, as
/// runc refuses one.
const SETUP: &str = r#"set -eu
root=$1; wd=$2; shift 2
real_root=$(realpath "$root")
fail() { echo "sandbox: cannot mount $1: $2" >&2; exit 128; }
[ -d "$root" ] && [ ! -L "$root" ] || fail / "the container's root is not a directory"
for d in SYSTEM_DIRS; do
  if [ -L "/$d" ]; then
    [ -L "$root/$d" ] || ln -s "$(readlink "/$d")" "$root/$d"
  elif [ -d "/$d" ]; then
    mkdir -p "$root/$d"
    mount --rbind "/$d" "$root/$d"
    mount -o remount,bind,ro "$root/$d"
  fi
done
mkdir -p "$root/dev" "$root/proc" "$root/tmp"
mount -t tmpfs -o nosuid,mode=755 dev "$root/dev"
for n in null zero full random urandom tty; do
  : > "$root/dev/$n"
  mount --bind "/dev/$n" "$root/dev/$n"
done
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
mkdir "$root/dev/shm"
mount -t proc proc "$root/proc"
while [ "$1" != -- ]; do
  mode=$1; src=$2; dst=$3; shift 3
  case "$(realpath -m "$root$dst")" in
    "$real_root"/*) ;;
    *) fail "$dst" "it leads out of the container through a link" ;;
  esac
  if [ -d "$src" ]; then
    mkdir -p "$root$dst"
  else
    mkdir -p "$(dirname "$root$dst")"
    [ -e "$root$dst" ] || : > "$root$dst"
  fi
  mount --bind "$src" "$root$dst" || fail "$dst" "the bind mount failed"
  if [ "$mode" = ro ]; then mount -o remount,bind,ro "$root$dst"; fi
done
shift
exec unshare --root "$root" --wd "$wd" -- "$@"
"#;

/// The environment the set-up runs with: none of the pod's, which reaches only its program.
pub(super) fn setup_env() -> [(&'static str, &'static str); 1] {
    [("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")]
}

/// The program and arguments that start `program` (with `args`, and `env` as its whole
/// environment) in a mount namespace of its own, chrooted into `root`, in `workdir`, with
/// `mounts` in place, sorted so that a mount inside another's path comes after it. The
/// command runs with [`setup_env`].
pub(super) fn namespaced(
    root: &Path,
    workdir: &Path,
    mut mounts: Vec<Mount>,
    program: impl AsRef<std::ffi::OsStr>,
    args: &[String],
    env: &[(String, String)],
) -> (PathBuf, Vec<String>) {
    mounts.sort_by_key(|m| Path::new(&m.target).components().count());
    let setup = SETUP.replace("SYSTEM_DIRS", &SYSTEM_DIRS.join(" "));
    let mut all = vec![
        "--mount".to_owned(),
        "--propagation".to_owned(),
        "private".to_owned(),
        "--".to_owned(),
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        setup,
        "sandbox-mounts".to_owned(),
        root.display().to_string(),
        workdir.display().to_string(),
    ];
    for m in mounts {
        all.push(if m.read_only { "ro" } else { "rw" }.to_owned());
        all.push(m.source.display().to_string());
        all.push(m.target);
    }
    all.extend(["--", "/usr/bin/env", "-i", "--"].map(str::to_owned));
    all.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
    all.push(program.as_ref().to_string_lossy().into_owned());
    all.extend(args.iter().cloned());
    (unshare().unwrap_or_else(|| PathBuf::from("unshare")), all)
}

/// Links each mount at its path under `root`, as the sandbox does when it cannot mount. A
/// path already there stays (a second container of the pod links the same volumes).
pub(super) fn link(root: &Path, mounts: &[Mount]) {
    for m in mounts {
        let target = root.join(m.target.trim_start_matches('/'));
        if target == m.source || target.symlink_metadata().is_ok() {
            continue;
        }
        if let Some(parent) = target.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let _ = std::os::unix::fs::symlink(&m.source, &target);
    }
}

fn unshare() -> Option<PathBuf> {
    ["/usr/bin/unshare", "/bin/unshare"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| super::is_executable(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mounts_are_passed_outermost_first_then_the_program_with_its_environment() {
        let m = |t: &str, ro| Mount {
            source: PathBuf::from(format!("/src{t}")),
            target: t.to_owned(),
            read_only: ro,
        };
        let (program, args) = namespaced(
            Path::new("/roots/u"),
            Path::new("/pods/u"),
            vec![m("/volumes/ns/claim", false), m("/volumes", true)],
            "/images/hostpath/entrypoint",
            &["x".into()],
            &[("ACTION".into(), "provision".into())],
        );
        assert!(program.ends_with("unshare"), "{program:?}");
        let after_script = args.iter().position(|a| a == "sandbox-mounts").unwrap();
        assert_eq!(
            args[after_script + 1..],
            [
                "/roots/u",
                "/pods/u",
                "ro",
                "/src/volumes",
                "/volumes",
                "rw",
                "/src/volumes/ns/claim",
                "/volumes/ns/claim",
                "--",
                "/usr/bin/env",
                "-i",
                "--",
                "ACTION=provision",
                "/images/hostpath/entrypoint",
                "x"
            ]
        );
        assert!(!args.iter().any(|a| a.contains("SYSTEM_DIRS")));
    }
}
