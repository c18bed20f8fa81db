//! How a backend call fails: the errors every layer of the seam shares
//! (the operations' replies, the backends, the interpreter).

use foliomm::Errno;

/// Why a backend call failed. Only an [`StepError::Errno`] is a result a
/// scenario can expect (`fails EINVAL`); the other two stop the run whatever
/// the step says.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// The operation failed as the kernel fails it: an errno, or `SIGBUS`
    /// (which foliomm's [`Errno`] carries as the signal a fault raised).
    #[error("{0}")]
    Errno(Errno),
    /// The backend's machinery broke (a worker died, a socket closed, a
    /// reply made no sense): the run fails.
    #[error("backend failure: {0}")]
    Machinery(Machinery),
    /// The backend cannot do this (a setting, a GUP kind, an errno foliomm
    /// does not model): the scenario is skipped on this backend.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The step would wait forever (a fault no userfaultfd handler rule
    /// answers): the scenario fails.
    #[error("the step would wait forever: {0}")]
    Hangs(String),
}

/// How a backend's machinery failed: never an errno, never expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum Machinery {
    /// The caller named a process the backend does not run.
    #[error("no process {0}")]
    NoProcess(String),
    /// The caller named a thread the backend does not run, or one it
    /// cannot start or end that way.
    #[error("thread {thread}: {why}")]
    Thread { thread: String, why: String },
    /// A file handle the backend never gave out.
    #[error("no file {0}")]
    NoFile(u64),
    /// The channel to a worker broke (it died, its socket closed).
    #[error("worker {thread}: {why}")]
    Worker { thread: String, why: String },
    /// A reply of the wrong kind for its operation.
    #[error("expected {want} in reply, got {got}")]
    Answer { want: String, got: String },
    /// The backend could not be set up (a directory, a socket, a program).
    #[error("{0}")]
    Setup(String),
}

impl From<Errno> for StepError {
    fn from(e: Errno) -> StepError {
        StepError::Errno(e)
    }
}

impl From<Machinery> for StepError {
    fn from(f: Machinery) -> StepError {
        StepError::Machinery(f)
    }
}

/// What a backend call returns.
pub type BackendResult<T> = Result<T, StepError>;
