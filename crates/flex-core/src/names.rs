//! Names, label and annotation keys, and the validation rules the API server applies to them.
//!
//! Every object we generate must pass API validation, so the rules live here once and the
//! builders call them instead of trusting their inputs.

/// The provisioner name used when `--provisioner-name` is not given.
pub const DEFAULT_PROVISIONER_NAME: &str = "flex-provisioner.io/job";
/// Prefix of every label, annotation and finalizer we own.
pub const PREFIX: &str = "flex-provisioner.io/";

pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "flex-provisioner";
pub const LABEL_ACTION: &str = "flex-provisioner.io/action";
pub const LABEL_CLAIM_UID: &str = "flex-provisioner.io/claim-uid";
pub const LABEL_VOLUME: &str = "flex-provisioner.io/volume";
pub const LABEL_ATTEMPT: &str = "flex-provisioner.io/attempt";
/// On expansion Jobs: the size in bytes the Job grows the volume to.
pub const LABEL_SIZE: &str = "flex-provisioner.io/size";

pub const ANN_CLAIM: &str = "flex-provisioner.io/claim";
pub const ANN_STORAGE_CLASS: &str = "flex-provisioner.io/storage-class";
pub const ANN_CONFIG: &str = "flex-provisioner.io/config";
/// Everything else a deprovision Job needs (command, args, placement, pod-template...), so
/// that deprovisioning never depends on the ConfigMap still existing unchanged.
pub const ANN_DEPROVISION_SPEC: &str = "flex-provisioner.io/deprovision-spec";
/// The expansion recipe, rendered with the provisioning Job: the volume's record is made
/// from what the Job was given, never from the claim as it is when the PV is verified.
pub const ANN_EXPAND_SPEC: &str = "flex-provisioner.io/expand-spec";
/// On a `pv-creator: controller` provisioning Job: the controller is creating (or created)
/// the PV from its report. Written before the PV, so that a volume retained and deleted
/// later is never created again from the same Job (plan::orphan).
pub const ANN_PV_CREATED: &str = "flex-provisioner.io/pv-created";
/// On a clone's provisioning Job: the source volume, kept from deprovisioning while it runs.
pub const ANN_SOURCE_VOLUME: &str = "flex-provisioner.io/source-volume";
/// On a `pv-creator: controller` provisioning Job: the volume source types its report may name.
pub const ANN_VOLUME_SOURCES: &str = "flex-provisioner.io/volume-sources";
/// On a `pv-creator: controller` provisioning Job: what its report may name
/// (`config::AllowedVolumes` as JSON), for the same reason.
pub const ANN_ALLOWED_VOLUMES: &str = "flex-provisioner.io/allowed-volumes";
pub const FINALIZER_DEPROVISION: &str = "flex-provisioner.io/deprovision";
/// On a deprovision Job: the uid of the PV it is for. A PV re-created under the same name
/// (a wrong PV removed, then the right one) must never take an old Job's success as its own.
pub const ANN_VOLUME_UID: &str = "flex-provisioner.io/volume-uid";
/// On the Jobs of one snapshot, and its record: the VolumeSnapshot's uid.
pub const LABEL_SNAPSHOT_UID: &str = "flex-provisioner.io/snapshot-uid";
/// On a snapshot Job: `namespace/name` of its VolumeSnapshot.
pub const ANN_SNAPSHOT: &str = "flex-provisioner.io/snapshot";
/// On snapshot and delete-snapshot Jobs: the VolumeSnapshotContent they work for, and its
/// uid (a content re-created under the same name never takes an old Job as its own).
pub const ANN_CONTENT: &str = "flex-provisioner.io/content";
pub const ANN_CONTENT_UID: &str = "flex-provisioner.io/content-uid";
/// On a restore's provisioning Job: the snapshot's content it copies from.
pub const ANN_SOURCE_SNAPSHOT: &str = "flex-provisioner.io/source-snapshot";
/// On a deprovision record ConfigMap (see `record`).
pub const LABEL_RECORD: &str = "flex-provisioner.io/record";

/// Annotations written by Kubernetes that provisioners read (same keys as the sig-storage library).
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
pub const ANN_STORAGE_PROVISIONER_BETA: &str = "volume.beta.kubernetes.io/storage-provisioner";
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
pub const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";

/// ConfigMap discovery labels (docs/configuration.md).
pub const LABEL_CONFIG_TYPE: &str = "type";
pub const CONFIG_TYPE_VALUE: &str = "provisioner-config";
pub const LABEL_CONFIG_CLASS: &str = "storage-class";

/// Name of the single container in every Job we create.
pub const CONTAINER_NAME: &str = "provisioner";
pub const TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";

/// Environment variables every Job's container gets (docs/image-contract.md, "Environment of the container"). A parameter or a
/// `pod-template` env entry may not reuse these names.
pub const BUILTIN_ENV: &[&str] = &[
    "ACTION",
    "PROVISIONER_NAME",
    "PV_NAME",
    "PVC_NAME",
    "PVC_NAMESPACE",
    "PVC_UID",
    "STORAGE_CLASS",
    "RECLAIM_POLICY",
    "MOUNT_OPTIONS",
    "VOLUME_MODE",
    "ACCESS_MODES",
    "REQUESTED_BYTES",
    "REQUESTED_SIZE",
    "SELECTED_NODE",
    "PV_TEMPLATE",
    "PARAMETERS",
    "PV_JSON",
    "TERMINATION_LOG",
    "PV_CREATOR",
    "SOURCE_PV_JSON",
    "SOURCE_PARAMETERS",
    "DATA_SOURCE_JSON",
    "VOLUME_DIRECTORY",
    "KUBECONFIG",
    "SNAPSHOT_NAME",
    "SNAPSHOT_NAMESPACE",
    "SNAPSHOT_UID",
    "SNAPSHOT_CONTENT_NAME",
    "SNAPSHOT_DIRECTORY",
    "SNAPSHOT_CLASS",
    "SNAPSHOT_PARAMETERS",
    "SNAPSHOT_HANDLE",
    "SNAPSHOT_CONTENT_JSON",
];

/// Which step a Job performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Provision,
    Deprovision,
    Expand,
    /// Copies a volume into a snapshot (a VolumeSnapshot of a claim of ours).
    Snapshot,
    /// Removes a snapshot's copy (its VolumeSnapshotContent deleted, policy `Delete`).
    DeleteSnapshot,
}

impl Action {
    /// The action an object's labels name (`flex-provisioner.io/action`), if any.
    pub fn of(labels: &std::collections::BTreeMap<String, String>) -> Option<Action> {
        match labels.get(LABEL_ACTION)?.as_str() {
            "provision" => Some(Action::Provision),
            "deprovision" => Some(Action::Deprovision),
            "expand" => Some(Action::Expand),
            "snapshot" => Some(Action::Snapshot),
            "delete-snapshot" => Some(Action::DeleteSnapshot),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Action::Provision => "provision",
            Action::Deprovision => "deprovision",
            Action::Expand => "expand",
            Action::Snapshot => "snapshot",
            Action::DeleteSnapshot => "delete-snapshot",
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The PV name for a claim: `pvc-<uid>`, the convention of the sig-storage library.
pub fn pv_name(claim_uid: &str) -> String {
    format!("pvc-{claim_uid}")
}

/// `provision-<claim uid>` / `deprovision-<pv name>`, with `-<attempt>` from the second
/// attempt on. Always a valid DNS label of at most 63 characters: an over-long subject is
/// shortened and made unique again with a hash of the full name.
pub fn job_name(action: Action, subject: &str, attempt: u32) -> String {
    let suffix = if attempt > 1 {
        format!("-{attempt}")
    } else {
        String::new()
    };
    let full = format!("{}-{}{}", action.as_str(), subject, suffix);
    let sanitized = sanitize_dns_label(&full, usize::MAX);
    if sanitized.len() <= MAX_DNS_LABEL && sanitized == full {
        return full;
    }
    let hash = format!("{:08x}", fnv1a32(full.as_bytes()));
    let keep = MAX_DNS_LABEL - hash.len() - 1 - suffix.len();
    let head = sanitize_dns_label(&format!("{}-{}", action.as_str(), subject), keep);
    format!("{head}-{hash}{suffix}")
}

/// Lower-case, replace every character a DNS label cannot hold with `-`, collapse runs of
/// `-`, trim them from both ends and cut to `max` characters. Empty input gives `x` so the
/// result is always a usable label.
pub fn sanitize_dns_label(input: &str, max: usize) -> String {
    let mut out = String::with_capacity(input.len().min(max));
    for c in input.chars().flat_map(char::to_lowercase) {
        // Lower-cased already: an ASCII letter left is a small one.
        let c = Some(c).filter(char::is_ascii_alphanumeric).unwrap_or('-');
        if c == '-' && (out.is_empty() || out.ends_with('-')) {
            continue;
        }
        out.push(c);
    }
    out.truncate(max.min(MAX_DNS_LABEL));
    while out.ends_with('-') {
        out.pop();
    }
    if out.is_empty() {
        out.push('x');
    }
    out
}

/// FNV-1a: a tiny stable hash, enough to keep shortened names distinct.
pub fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(*b)).wrapping_mul(0x0100_0193)
    })
}

pub use kube_rules::names::{MAX_DNS_LABEL, MAX_DNS_SUBDOMAIN, is_dns_label, is_dns_subdomain};

/// A label value: at most 63 characters of `[A-Za-z0-9_.-]`, starting and ending alphanumeric.
pub fn is_label_value(s: &str) -> bool {
    if s.is_empty() {
        return true;
    }
    s.len() <= MAX_DNS_LABEL
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
}

/// A qualified label key: `[prefix/]name`, prefix a DNS subdomain, name like a non-empty label value.
pub fn is_label_key(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    prefix.is_none_or(is_dns_subdomain) && !name.is_empty() && is_label_value(name)
}

/// An environment variable name as the API server accepts it (`[-._a-zA-Z][-._a-zA-Z0-9]*`).
pub fn is_env_name(s: &str) -> bool {
    let mut bytes = s.bytes();
    match bytes.next() {
        Some(b) if b.is_ascii_alphabetic() || matches!(b, b'-' | b'.' | b'_') => {}
        _ => return false,
    }
    bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

/// The env name of a parameter key: upper-cased, every character other than A-Z and 0-9
/// turned into `_` (`use-nfs-server` becomes `USE_NFS_SERVER`).
pub fn parameter_env_name(key: &str) -> String {
    let upper = key.chars().map(|c| c.to_ascii_uppercase());
    // Upper-cased already: an ASCII letter left is a capital.
    upper
        .map(|c| Some(c).filter(char::is_ascii_alphanumeric).unwrap_or('_'))
        .collect()
}

/// Environment variables that change how the container's process runs rather than what it
/// is told: the shell's and the dynamic loader's controls, language runtimes' code paths,
/// and what Kubernetes itself sets. A parameter (whose value may come from a claim) must
/// never become one of them; returns why, for the error.
pub fn process_env_reason(env: &str) -> Option<&'static str> {
    const SHELL: &[&str] = &[
        "PATH",
        "HOME",
        "SHELL",
        "ENV",
        "BASH_ENV",
        "IFS",
        "CDPATH",
        "PS1",
        "PS2",
        "PS4",
        "PROMPT_COMMAND",
        "BASH_XTRACEFD",
        "ZDOTDIR",
        "GLOBIGNORE",
        "SHELLOPTS",
        "BASHOPTS",
        "TMPDIR",
        "HOSTNAME",
        "USER",
        "LOGNAME",
    ];
    const RUNTIMES: &[&str] = &[
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "PYTHONHOME",
        "PERL5LIB",
        "PERL5OPT",
        "RUBYOPT",
        "RUBYLIB",
        "NODE_OPTIONS",
        "NODE_PATH",
        "JAVA_TOOL_OPTIONS",
        "GCONV_PATH",
        "LOCPATH",
        "NLSPATH",
        "GLIBC_TUNABLES",
        "CLASSPATH",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "PERLLIB",
        "PERL5DB",
        "PYTHONUSERBASE",
        "PYTHONINSPECT",
        "PYTHONWARNINGS",
        "NODE_EXTRA_CA_CERTS",
    ];
    // Where the process's network traffic goes and whom it trusts: a claim could send the
    // image's API calls (with its service account token) through a proxy of its choosing.
    const NETWORK: &[&str] = &[
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "NO_PROXY",
        "FTP_PROXY",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "CURL_CA_BUNDLE",
        "REQUESTS_CA_BUNDLE",
        "HOSTALIASES",
        "LOCALDOMAIN",
        "RES_OPTIONS",
        "RESOLV_HOST_CONF",
    ];
    // What our own binary reads (`flex-provisioner volume create` runs in images).
    const OURS: &[&str] = &[
        "POD_NAME",
        "RUST_LOG",
        "RUST_BACKTRACE",
        "RUST_LIB_BACKTRACE",
    ];
    if SHELL.contains(&env) {
        Some("it controls how the shell finds and runs programs")
    } else if env.starts_with("LD_") || env.starts_with("DYLD_") {
        Some("it controls the dynamic loader (which libraries every program loads)")
    } else if RUNTIMES.contains(&env) {
        Some("it makes a language runtime load or run other code")
    } else if env.starts_with("KUBERNETES_") {
        Some("Kubernetes sets it for every container (how a pod finds the API server)")
    } else if NETWORK.contains(&env) {
        Some("it decides where the process's network traffic goes or which servers it trusts")
    } else if env.starts_with("FLEX_") || OURS.contains(&env) {
        Some("flex-provisioner's own binary reads it (`volume create` runs in images)")
    } else if env.starts_with("SANDBOX_") {
        Some("the shipped images prefix every path with it (the sandbox's node root)")
    } else if env.starts_with("BASH_FUNC_") {
        Some("it controls how the shell finds and runs programs (an exported function)")
    } else {
        None
    }
}

type Meta = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// An annotation of an object, if it is set.
pub fn annotation<'a>(meta: &'a Meta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// A label of an object, if it is set.
pub fn label<'a>(meta: &'a Meta, key: &str) -> Option<&'a str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_names_for_uuids_are_kept_verbatim() {
        let uid = "0f8c1f2e-8d0c-4a5e-9c3b-2f7a6e1d4b9a";
        assert_eq!(
            job_name(Action::Provision, uid, 1),
            format!("provision-{uid}")
        );
        assert_eq!(
            job_name(Action::Provision, uid, 12),
            format!("provision-{uid}-12")
        );
        let pv = pv_name(uid);
        let d = job_name(Action::Deprovision, &pv, 3);
        assert_eq!(d, format!("deprovision-pvc-{uid}-3"));
        assert!(is_dns_label(&d));
    }

    #[test]
    fn job_names_never_exceed_63_and_stay_distinct() {
        let long_a = format!("{}-a", "v".repeat(240));
        let long_b = format!("{}-b", "v".repeat(240));
        for attempt in [1, 2, 99, 12345, u32::MAX] {
            let a = job_name(Action::Deprovision, &long_a, attempt);
            let b = job_name(Action::Deprovision, &long_b, attempt);
            assert!(a.len() <= 63, "{a}");
            assert!(is_dns_label(&a), "{a}");
            assert_ne!(a, b);
            if attempt > 1 {
                assert!(a.ends_with(&format!("-{attempt}")));
            }
        }
        let odd = job_name(Action::Deprovision, "My_PV.Name", 1);
        assert!(is_dns_label(&odd), "{odd}");
        assert_ne!(odd, job_name(Action::Deprovision, "my-pv-name", 1));
    }

    #[test]
    fn sanitizing_gives_valid_labels() {
        assert_eq!(sanitize_dns_label("Team A/../etc", 63), "team-a-etc");
        assert_eq!(sanitize_dns_label("---", 63), "x");
        assert_eq!(sanitize_dns_label("", 63), "x");
        assert_eq!(sanitize_dns_label("abcdef", 3), "abc");
        assert_eq!(sanitize_dns_label("ab-cdef", 3), "ab");
        assert_eq!(sanitize_dns_label("Ünïcode", 63), "n-code");
        assert!(sanitize_dns_label(&"a".repeat(300), 1000).len() == 63);
    }

    #[test]
    fn validators_follow_the_api_server() {
        assert!(is_dns_label("a-1"));
        assert!(!is_dns_label("A"));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(is_dns_subdomain("iscsi.provisioner"));
        assert!(!is_dns_subdomain("a..b"));
        assert!(is_label_key("topology.kubernetes.io/zone"));
        assert!(is_label_key("storage-net"));
        assert!(!is_label_key("bad key"));
        assert!(!is_label_key("/x"));
        assert!(!is_label_key("Example.com/x"));
        assert!(is_label_value(""));
        assert!(is_label_value("true"));
        assert!(!is_label_value("-x"));
        assert!(!is_label_value("a b"));
        assert!(is_env_name("USE_NFS_SERVER"));
        assert!(!is_env_name("1ABC"));
        assert!(!is_env_name(""));
    }

    #[test]
    fn parameter_env_names() {
        assert_eq!(parameter_env_name("use-nfs-server"), "USE_NFS_SERVER");
        assert_eq!(parameter_env_name("zone"), "ZONE");
        assert_eq!(parameter_env_name("a.b/c"), "A_B_C");
        assert_eq!(parameter_env_name("päth"), "P_TH");
    }
}
