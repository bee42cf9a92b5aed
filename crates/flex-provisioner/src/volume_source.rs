//! `volume source`: one field of a clone's source volume (`SOURCE_PV_JSON`), for images
//! written in shell, which have no JSON parser of their own.

use serde_json::Value;

/// Which field of the source volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SourceField {
    /// The path of its `local`, `hostPath` or `nfs` source.
    Path,
    /// The server of its `nfs` source.
    Server,
    /// The node its node affinity pins it to (empty when it has none).
    Node,
    /// The `fsType` of its `local` source (empty for a raw block volume).
    FsType,
}

/// The field, or why the volume has none (which an image treats as permanent).
pub fn field(pv_json: &str, field: SourceField) -> Result<String, String> {
    let pv: Value =
        serde_json::from_str(pv_json).map_err(|e| format!("SOURCE_PV_JSON is not JSON: {e}"))?;
    let spec = &pv["spec"];
    let value = match field {
        SourceField::Path => ["local", "hostPath", "nfs"]
            .iter()
            .find_map(|t| spec[*t]["path"].as_str())
            .ok_or("the source volume has no local, hostPath or nfs path")?,
        SourceField::Server => spec["nfs"]["server"]
            .as_str()
            .ok_or("the source volume is not an nfs volume")?,
        SourceField::Node => spec["nodeAffinity"]["required"]["nodeSelectorTerms"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|t| t["matchExpressions"].as_array().into_iter().flatten())
            .find(|e| e["key"] == "kubernetes.io/hostname" && e["operator"] == "In")
            .and_then(|e| e["values"][0].as_str())
            .unwrap_or_default(),
        SourceField::FsType => spec["local"]["fsType"].as_str().unwrap_or_default(),
    };
    // Printed for a shell to read: one line, nothing it could take for more.
    if value.chars().any(char::is_control) {
        return Err("the source volume's field holds control characters".into());
    }
    Ok(value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_of_local_and_nfs_volumes() {
        let local = r#"{"spec":{"local":{"path":"/v/a"},"nodeAffinity":{"required":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"In","values":["node-a"]}]}]}}}}"#;
        assert_eq!(field(local, SourceField::Path).unwrap(), "/v/a");
        assert_eq!(field(local, SourceField::Node).unwrap(), "node-a");
        assert_eq!(field(local, SourceField::FsType).unwrap(), "");
        assert!(field(local, SourceField::Server).is_err());
        let nfs = r#"{"spec":{"nfs":{"server":"10.0.0.5","path":"/exports/x"}}}"#;
        assert_eq!(field(nfs, SourceField::Server).unwrap(), "10.0.0.5");
        assert_eq!(field(nfs, SourceField::Path).unwrap(), "/exports/x");
        assert_eq!(field(nfs, SourceField::Node).unwrap(), "");
        assert!(
            field(
                r#"{"spec":{"hostPath":{"path":"/a\nb"}}}"#,
                SourceField::Path
            )
            .is_err()
        );
        assert!(field("not json", SourceField::Path).is_err());
    }
}
