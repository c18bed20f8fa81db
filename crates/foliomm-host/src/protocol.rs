//! What the controller and a worker thread say to each other, one JSON line
//! each way per operation on the thread's own socket: the controller sends a
//! [`Call`] (the scenario's [`Op`] itself, with the thread it is for), the
//! worker answers an [`Answer`]. A worker thread's first line is its [`Hello`].

use foliomm::Errno;
use foliomm_scenario::{Op, Reply};

/// The first line a worker thread sends when it connects: who it is.
#[derive(serde::Serialize, serde::Deserialize, Debug)]
pub struct Hello {
    pub name: String,
}

/// An operation sent to a worker thread. `tid` is the thread the operation
/// is for: the receiving thread's own, except for [`Op::SpawnThread`],
/// which thread 0 performs for the new thread `tid`.
#[derive(serde::Serialize, serde::Deserialize, Debug)]
pub struct Call {
    pub tid: u32,
    pub op: Op,
}

/// A worker's answer: what the operation replied, or why it failed.
pub type Answer = Result<Reply, Refused>;

/// Why the kernel refused an operation, as the worker saw it.
#[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq, Eq)]
pub enum Refused {
    /// An errno foliomm models (or SIGBUS, which a fault raised).
    Errno(Errno),
    /// A system call failed with an errno foliomm does not model.
    OsError(i32),
    /// The kernel does not show what was asked (why, in words).
    Unobservable(String),
    /// The step would have waited forever (why, in words): a fault no
    /// userfaultfd handler rule answers.
    Hangs(String),
}

impl From<std::io::Error> for Refused {
    /// An OS error as the model's errno, or its raw number when foliomm
    /// does not model it.
    fn from(e: std::io::Error) -> Refused {
        let n = e.raw_os_error().unwrap_or(0);
        Errno::from_number(n).map_or(Refused::OsError(n), Refused::Errno)
    }
}

/// The answer to a system call that returns nothing.
pub fn done(r: std::io::Result<()>) -> Answer {
    r.map(|()| Reply::Done).map_err(Refused::from)
}

/// The answer to a system call that returns an address, a count or a
/// descriptor.
pub fn value(r: std::io::Result<u64>) -> Answer {
    r.map(Reply::Value).map_err(Refused::from)
}
