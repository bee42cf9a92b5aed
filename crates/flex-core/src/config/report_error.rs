//! Why a provisioner's report (the volume source its pod wrote on exit) is refused: one
//! variant per rule of `allowed/report.rs` (`check_report`), each printing the
//! message the user and the admin see in the event, with the key an admin would change.

/// A refused report. `Display` is the text told on the claim (after "the provisioner Job
/// ... succeeded, but").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReportError {
    #[error(
        "it reported no volume source (its termination message is empty): with pv-creator controller the image must write one, e.g. with flex-provisioner volume create --source"
    )]
    Empty,
    #[error(
        "its report is not JSON ({0}): it must be one volume source such as {{\"nfs\":{{\"server\":\"…\",\"path\":\"…\"}}}}, written to the termination log on exit 0 (flex-provisioner volume create --source does it)"
    )]
    NotJson(String),
    #[error(
        "its report is not a JSON object: it must be one volume source such as {{\"nfs\":{{\"server\":\"…\",\"path\":\"…\"}}}}"
    )]
    NotAnObject,
    /// Fields the controller owns (node affinity, capacity...), joined with ", ".
    #[error(
        "its report carries {0}, which a report may not set: the PV's node affinity, capacity, access modes, reclaim policy, mount options, volume mode, claim and class come from the claim and the class, never from the image; a report holds only the volume source, such as {{\"nfs\":{{\"server\":\"…\",\"path\":\"…\"}}}}"
    )]
    SetsWhatTheControllerOwns(String),
    #[error("its report holds {count} keys ({keys}), and must hold exactly one volume source")]
    NotOneSource { count: usize, keys: String },
    #[error("its report names `{0}`, which is not a PersistentVolume source type")]
    NotASourceType(String),
    #[error(
        "its report is a `{kind}` volume, which this class does not allow (volume-sources: {allowed}); an admin adds `{kind}` to volume-sources if the image is meant to hand those out"
    )]
    TypeNotAllowed { kind: String, allowed: String },
    #[error("its report's `{0}` is not a JSON object")]
    BodyNotAnObject(String),
    #[error(
        "it reported a volume of type {kind}, and this class declares no {key}: an admin lists {lists} in {key}"
    )]
    Undeclared {
        kind: String,
        key: &'static str,
        lists: &'static str,
    },
    #[error("it reported {kind} without {field}")]
    Missing { kind: String, field: String },
    /// A field of the wrong JSON type (`what`: "that is not a string", ...).
    #[error("it reported {kind} {field} {what}")]
    WrongType {
        kind: String,
        field: String,
        what: &'static str,
    },
    /// `shown`: the value as `allowed/report.rs` shows it; `allowed`: the key's list.
    #[error("it reported {kind} {what} {shown}, which is not in {key} {allowed}")]
    NotListed {
        kind: String,
        what: &'static str,
        shown: String,
        key: &'static str,
        allowed: String,
    },
    /// `why`: what makes the path refused when it is not merely elsewhere (may be empty).
    #[error("it reported {kind} path {shown}, which is not below {key} {allowed}{why}")]
    NotBelow {
        kind: String,
        shown: String,
        key: &'static str,
        allowed: String,
        why: &'static str,
    },
    /// `namespace`: the namespace named, shown; `None`: none named.
    #[error(
        "it reported {kind} {field} {}; a secret reference in a report must name the config namespace {config_namespace}",
        match namespace { Some(ns) => format!("in namespace {ns}"), None => "without a namespace".to_owned() }
    )]
    SecretElsewhere {
        kind: String,
        field: String,
        namespace: Option<String>,
        config_namespace: String,
    },
    #[error(
        "it reported azureFile without secretNamespace; a secret reference in a report must name the config namespace {config_namespace}"
    )]
    AzureWithoutSecretNamespace { config_namespace: String },
    #[error(
        "it reported {kind} {field} {file}, a credential file on the node, which a report may not name: use secretRef, with a Secret in the config namespace {config_namespace}"
    )]
    NodeCredentialFile {
        kind: String,
        field: String,
        file: String,
        config_namespace: String,
    },
    /// A class with `volume-base`: the report is not the claim's own directory.
    #[error(
        "it reported {kind} {shown}, but a volume of this class is exactly the directory volume-directory names for its claim ({expected}), never a link or another claim's directory below the base"
    )]
    NotExact {
        kind: String,
        shown: String,
        expected: String,
    },
    /// The template with the reported source is not a PersistentVolume.
    #[error("its report does not make a valid PV: {0}")]
    NotAPv(String),
}
