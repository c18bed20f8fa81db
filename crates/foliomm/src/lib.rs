//! foliomm: an executable model of the Linux memory manager's large-folio
//! machinery.
//!
//! The library is one folder per subsystem, layered bottom up as [`LAYERS`]
//! lists them; a folder uses only the folders below it (the `layering` test
//! enforces it; docs/ARCHITECTURE.md explains each). A [`Machine`] ties one
//! configuration together.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod arch;
pub mod check;
pub mod cpu;
pub mod folio;
pub mod kernel;
pub mod machine;
pub mod mapcount;
pub mod memory;
pub mod mm;
pub mod mm_types;
pub mod pgtable;
pub mod phys;
pub mod release;
pub mod rmap;
pub mod shmem;
pub mod sync;
pub mod tlb;

pub use cpu::Cpu;
pub use machine::{Config, Machine};
pub use mm::MmapFlags;
pub use mm_types::{Mm, Prot};

/// The library's folders, bottom up: each may use the ones before it and
/// itself, never one after it. The crate root (`Errno`, `Result`,
/// `xorshift`) is below them all.
pub const LAYERS: &[&str] = &[
    "release", "arch", "sync", "phys", "folio", "mapcount", "kernel", "pgtable", "rmap", "shmem", "tlb", "mm_types",
    "memory", "mm", "cpu", "check", "machine",
];

/// A Linux errno-like error returned by every memory operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum Errno {
    /// Out of model memory (`-ENOMEM`, or `VM_FAULT_OOM` for a fault).
    #[error("ENOMEM: out of memory")]
    ENOMEM,
    /// Invalid argument (`-EINVAL`).
    #[error("EINVAL: invalid argument")]
    EINVAL,
    /// Access outside any mapping (`-EFAULT`; a `SIGSEGV`/`SEGV_MAPERR` for a user access).
    #[error("EFAULT: bad address")]
    EFAULT,
    /// Access the mapping's protection forbids (`SIGSEGV`/`SEGV_ACCERR`).
    #[error("EACCES: access not permitted by the mapping's protection")]
    EACCES,
    /// Resource busy (`-EBUSY`).
    #[error("EBUSY: resource busy")]
    EBUSY,
    /// The range is already mapped (`-EEXIST`, `MAP_FIXED_NOREPLACE`).
    #[error("EEXIST: range already mapped")]
    EEXIST,
    /// An access to a file mapping past the end of the file (`SIGBUS`).
    #[error("SIGBUS: access past the end of the mapped file")]
    SIGBUS,
    /// A file would grow past the largest size (`-EFBIG`).
    #[error("EFBIG: file too large")]
    EFBIG,
}

impl Errno {
    /// The kernel's name of the error.
    pub fn name(self) -> &'static str {
        match self {
            Errno::ENOMEM => "ENOMEM",
            Errno::EINVAL => "EINVAL",
            Errno::EFAULT => "EFAULT",
            Errno::EACCES => "EACCES",
            Errno::EBUSY => "EBUSY",
            Errno::EEXIST => "EEXIST",
            Errno::SIGBUS => "SIGBUS",
            Errno::EFBIG => "EFBIG",
        }
    }

    /// Parses a kernel error name.
    pub fn from_name(s: &str) -> Option<Errno> {
        use Errno::*;
        [ENOMEM, EINVAL, EFAULT, EACCES, EBUSY, EEXIST, SIGBUS, EFBIG].into_iter().find(|e| e.name() == s)
    }
}

pub type Result<T> = std::result::Result<T, Errno>;

/// A xorshift64* generator: cheap, reproducible pseudo-random numbers from
/// `seed` for searches and benchmark access orders (not for anything that
/// needs statistical quality).
pub fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed | 1;
    move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}
