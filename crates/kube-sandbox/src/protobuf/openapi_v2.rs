//! `/openapi/v2` in protobuf, which kubectl asks for (`Accept:
//! application/com.github.proto-openapi.spec.v2@v1.0+protobuf`) when it validates objects
//! on the client, e.g. the items of a `kind: List` for `apply -f`. The document is gnostic's
//! `openapi.v2.Document`; the sandbox serves no schemas, so only the few fields below are
//! declared (field numbers from gnostic's OpenAPIv2.proto). A kind without a schema is
//! not validated by kubectl, as on a server whose schema lacks it.

use prost::Message;

/// The media type kubectl asks for.
pub const ACCEPT: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
/// The media type the API server answers with.
pub const CONTENT_TYPE: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

#[derive(Clone, PartialEq, Message)]
struct Document {
    #[prost(string, tag = "1")]
    swagger: String,
    #[prost(message, optional, tag = "2")]
    info: Option<Info>,
    #[prost(message, optional, tag = "8")]
    paths: Option<Paths>,
    #[prost(message, optional, tag = "9")]
    definitions: Option<Definitions>,
}

#[derive(Clone, PartialEq, Message)]
struct Info {
    #[prost(string, tag = "1")]
    title: String,
    #[prost(string, tag = "2")]
    version: String,
}

/// No paths: tags 1 (vendor extensions) and 2 (paths) are left empty.
#[derive(Clone, PartialEq, Message)]
struct Paths {}

/// No definitions: tag 1 (additional_properties) is left empty.
#[derive(Clone, PartialEq, Message)]
struct Definitions {}

/// Whether an Accept header asks for the protobuf document.
pub fn wanted(accept: &str) -> bool {
    accept.contains("com.github.proto-openapi.spec.v2")
}

/// The document, encoded.
pub fn document(version: &str) -> Vec<u8> {
    Document {
        swagger: "2.0".into(),
        info: Some(Info {
            title: "Kubernetes".into(),
            version: version.into(),
        }),
        paths: Some(Paths {}),
        definitions: Some(Definitions {}),
    }
    .encode_to_vec()
}
