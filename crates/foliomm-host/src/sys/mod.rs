//! Safe types over the host kernel's system calls that map memory, fork
//! and time: what the benchmarks' host columns call, so that the command
//! line has no `unsafe` of its own. Callers get types whose misuse is a
//! compile error, an `io::Error` or a panic, never undefined behaviour.
//! The scenario worker's calls are in `scenario`, GUP references in
//! [`gup`], `PAGEMAP_SCAN` in [`pagemap_scan`]. Outside
//! `foliomm::internals::phys`, this module is foliomm's only `unsafe` code.

mod clock;
pub mod gup;
mod mapping;
mod pagemap_scan;
pub(crate) mod scenario;
mod workers;

pub use clock::{minor_faults, process_cpu_time, thread_cpu_time};
pub use mapping::{memfd, Advice, Map, Mapping};
pub use pagemap_scan::{pagemap_scan, PageRegion};
pub use workers::{fork_child_that_exits, Workers};

/// `swapon(2)` (`on`) or `swapoff(2)` of the block device at `dev`.
pub fn swap_device(dev: &std::ffi::CStr, on: bool) -> std::io::Result<()> {
    // SAFETY: a NUL-terminated path and no flags; the kernel validates both.
    let r = unsafe {
        if on {
            libc::swapon(dev.as_ptr(), 0)
        } else {
            libc::swapoff(dev.as_ptr())
        }
    };
    match r {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Restores the default action of SIGPIPE (the Rust runtime ignores it), so
/// that a command whose reader goes away (`foliomm run | head`) ends quietly.
pub fn default_sigpipe() {
    // SAFETY: setting a signal's action to SIG_DFL has no preconditions and
    // replaces no handler of foliomm's.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// Whether this program's executable lives on tmpfs or ramfs (the guest's
/// initramfs), where its own pages count as shmem (`statfs`).
pub fn program_on_shmem() -> bool {
    // SAFETY: statfs into a zeroed buffer, of a NUL-terminated path.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the kernel validates the path.
    let ok = unsafe { libc::statfs(c"/proc/self/exe".as_ptr(), &mut st) } == 0;
    // RAMFS_MAGIC, which libc does not name.
    const RAMFS_MAGIC: libc::c_long = 0x8584_58f6;
    ok && (st.f_type == libc::TMPFS_MAGIC || st.f_type == RAMFS_MAGIC)
}
