//! The sandbox's own suite: its API server through the real kube client and kubectl, its
//! controllers, authentication, validation and request accounting. One binary, a module a
//! subject.

mod common;

mod sandbox_api;
mod sandbox_auth;
mod sandbox_controllers;
mod sandbox_expansion;
mod sandbox_https;
mod sandbox_kubectl;
mod sandbox_prebound;
mod sandbox_protobuf;
mod sandbox_ratelimit;
mod sandbox_release;
mod sandbox_requests;
mod sandbox_validation;
