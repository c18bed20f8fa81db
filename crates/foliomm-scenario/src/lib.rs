//! The foliomm workload language ([`lang`]), its interpreter ([`interp`]),
//! the operations it asks of a backend ([`op`]) and the [`backend::Backend`]
//! seam with the model behind it ([`model`]). The same scenario file is
//! meant to run on the model and on the host kernel.
#![forbid(unsafe_code)]

pub mod backend;
pub mod error;
pub mod fuzz;
pub mod interp;
pub mod lang;
pub mod model;
pub mod named_values;
pub mod observation;
pub mod op;

pub use backend::{Backend, Thread};
pub use error::{BackendResult, Machinery, StepError};
pub use interp::{run, Contention, Failure, FailureKind, Measure, Outcome, RunOptions, ThreadOps};
pub use lang::{parse, ParseError};
pub use model::ModelBackend;
pub use observation::Observation;
pub use op::{Access, Op, Peek, Reply};
