//! kube-rules: rules of the Kubernetes API that both a client and a local API server must
//! apply the same way: resource quantities (`quantity`) and object names (`names`).
//!
//! It depends on no client, server or runtime, so that the pure decision crate and the
//! sandbox can share it without depending on each other.
#![forbid(unsafe_code)]

pub mod names;
pub mod quantity;
