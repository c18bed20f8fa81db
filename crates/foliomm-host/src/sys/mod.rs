//! Safe types over the host kernel's system calls that map memory, fork
//! and time: what the benchmarks' host columns call, so that the command
//! line has no `unsafe` of its own. Callers get types whose misuse is a
//! compile error, an `io::Error` or a panic, never undefined behaviour.
//! Outside `foliomm::internals::phys`, this and the scenario worker's steps
//! (`worker`, `files`, `gup`, `procfs`) are foliomm's only `unsafe` code.

mod clock;
mod mapping;
mod workers;

pub use clock::{minor_faults, process_cpu_time, thread_cpu_time};
pub use mapping::{memfd, Advice, Map, Mapping};
pub use workers::{fork_child_that_exits, Workers};

/// Restores the default action of SIGPIPE (the Rust runtime ignores it), so
/// that a command whose reader goes away (`foliomm run | head`) ends quietly.
pub fn default_sigpipe() {
    // SAFETY: setting a signal's action to SIG_DFL has no preconditions and
    // replaces no handler of foliomm's.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}
