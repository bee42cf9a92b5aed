//! The offline commands a kube admin runs before anything reaches a cluster: `render` shows
//! the Job and PV a claim would produce, `check` validates ConfigMaps.

mod check;
mod files;
mod render;

pub use check::{CheckReport, check_files, check_files_with};
pub use files::{Document, parse_documents, read_documents};
pub use render::{RenderInput, SnapshotJob, render_files, render_objects};
