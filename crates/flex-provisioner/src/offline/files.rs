//! Reading Kubernetes objects from YAML files (one or more documents each).

use std::path::Path;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use flex_core::Error;

/// One YAML document of a file, with where it came from for messages.
#[derive(Debug, Clone)]
pub struct Document {
    pub path: String,
    pub kind: String,
    pub value: Value,
}

impl Document {
    pub fn to_object<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_value(self.value.clone()).map_err(|e| Error::Input {
            path: self.path.clone(),
            message: format!("not a valid {}: {e}", self.kind),
        })
    }
}

pub fn read_documents(path: &Path) -> Result<Vec<Document>, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::Input {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    parse_documents(&text, &path.display().to_string())
}

/// The documents of a YAML text; `origin` names it in messages.
pub fn parse_documents(text: &str, origin: &str) -> Result<Vec<Document>, Error> {
    let shown = origin.to_owned();
    let input_error = |message: String| Error::Input {
        path: shown.clone(),
        message,
    };
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let value =
            Value::deserialize(doc).map_err(|e| input_error(format!("not valid YAML: {e}")))?;
        if value.is_null() {
            continue;
        }
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .ok_or_else(|| input_error("a document has no `kind`".into()))?
            .to_owned();
        docs.push(Document {
            path: shown.clone(),
            kind,
            value,
        });
    }
    Ok(docs)
}

/// The one object of `kind` in a file; none or several is an error naming the file.
pub fn read_one<T: DeserializeOwned>(path: &Path, kind: &str) -> Result<T, Error> {
    let docs: Vec<Document> = read_documents(path)?
        .into_iter()
        .filter(|d| d.kind == kind)
        .collect();
    match docs.as_slice() {
        [one] => one.to_object(),
        [] => Err(Error::Input {
            path: path.display().to_string(),
            message: format!("holds no {kind}"),
        }),
        _ => Err(Error::Input {
            path: path.display().to_string(),
            message: format!(
                "holds {} objects of kind {kind}; give a file with one",
                docs.len()
            ),
        }),
    }
}
