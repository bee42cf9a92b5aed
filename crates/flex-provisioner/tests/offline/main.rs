//! The offline commands and what they are built on, with no cluster: a ConfigMap's checks
//! (`check`), rendering (`render`), hostile configurations and the Jobs a class makes. One
//! binary, a module a subject; the fixtures are the `flex-testing` crate, here `common`.

use flex_testing as common;

mod config_validation;
mod golden;
mod hostile_config;
mod job_shape;
