//! The foliomm workload language ([`lang`]), its interpreter ([`interp`]) and
//! the [`backend::Backend`] seam with the model behind it ([`model`]). The
//! same scenario file is meant to run on the model and on the host kernel.

pub mod backend;
pub mod fuzz;
pub mod interp;
pub mod lang;
pub mod model;

pub use backend::{Access, Backend, BackendResult, Observation, Peek, StepError, Thread};
pub use interp::{run, Failure, FailureKind, Measure, Outcome, RunOptions, ThreadOps};
pub use lang::{parse, ParseError};
pub use model::ModelBackend;
