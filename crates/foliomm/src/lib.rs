//! foliomm: an executable model of the Linux memory manager's large-folio
//! machinery.
//!
//! Processes map, fault, fork, write, protect, advise, remap, unmap and
//! exit over simulated physical memory that holds real bytes, with the
//! kernel's own data structures: folios with refcounts and mapcounts, x86-64
//! page tables stored in frames, VMAs with per-VMA locks, copy-on-write with
//! reuse, zap with `mmu_gather`, shmem and hugetlb. The root of the crate is
//! the API an embedder needs: a [`Machine`] built from a [`Config`] (its
//! memory, its [`Design`] for mapcounts and the [`KernelVersion`] whose
//! behaviour it follows), address spaces ([`Mm`]) with their system calls,
//! [`Cpu`]s that access memory through a TLB and fault, observations
//! ([`PageInfo`], [`RangeInfo`]) and the invariant checker
//! ([`Machine::check`]). Every operation returns an [`Errno`] on failure,
//! never panics. The subsystems themselves, one folder per kernel concept
//! layered as [`internals::LAYERS`] lists, are in [`internals`].
//!
//! Build a machine, map memory and touch it:
//!
//! ```
//! use foliomm::{Config, Machine, MmapFlags, Prot};
//!
//! let machine = Machine::new(Config { memory: 64 << 20, ..Config::default() })?;
//! let mm = machine.new_mm()?;
//! let addr = mm.mmap(0, 1 << 20, Prot::RW, MmapFlags::default())?;
//! let mut cpu = machine.new_cpu();
//! cpu.write(&mm, addr + 4096, b"folio")?;
//! let mut back = [0; 5];
//! cpu.read(&mm, addr + 4096, &mut back)?;
//! assert_eq!(&back, b"folio");
//! // Outside any mapping: the error a SIGSEGV would be.
//! assert_eq!(cpu.write(&mm, 0x1000, b"x"), Err(foliomm::Errno::EFAULT));
//! # Ok::<(), foliomm::Errno>(())
//! ```
//!
//! Fork, and write on both sides of copy-on-write: each process keeps its
//! own bytes.
//!
//! ```
//! use foliomm::{Config, Machine, MmapFlags, Prot};
//!
//! let machine = Machine::new(Config { memory: 64 << 20, ..Config::default() })?;
//! let parent = machine.new_mm()?;
//! let addr = parent.mmap(0, 64 << 10, Prot::RW, MmapFlags::default())?;
//! let mut cpu = machine.new_cpu();
//! cpu.write(&parent, addr, b"before")?;
//! let child = parent.fork()?;
//! cpu.write(&child, addr, b"child!")?;
//! let (mut p, mut c) = ([0; 6], [0; 6]);
//! cpu.read(&parent, addr, &mut p)?;
//! cpu.read(&child, addr, &mut c)?;
//! assert_eq!((&p, &c), (b"before", b"child!"));
//! child.exit();
//! # Ok::<(), foliomm::Errno>(())
//! ```
//!
//! Observe a folio: a 2 MiB aligned write under `MADV_HUGEPAGE` gets a
//! PMD-mapped THP, as `/proc/self/pagemap` and `/proc/kpageflags` would
//! show it; the model also shows its mapcounts.
//!
//! ```
//! use foliomm::{Advice, Config, Machine, MmapFlags, Prot};
//!
//! let machine = Machine::new(Config { memory: 64 << 20, ..Config::default() })?;
//! let mm = machine.new_mm()?;
//! let addr = mm.mmap(0, 2 << 20, Prot::RW, MmapFlags::default())?; // 2 MiB-aligned (Linux 6.8+)
//! mm.madvise(addr, 2 << 20, Advice::HugePage)?;
//! machine.new_cpu().write(&mm, addr, &[1])?;
//! let page = mm.page_info(addr + 4096);
//! assert!(page.present && page.pmd_mapped);
//! assert_eq!((page.folio_order, page.folio_mapcount), (9, 1));
//! # Ok::<(), foliomm::Errno>(())
//! ```
//!
//! Choose a mapcount design and, apart from it, the Linux release whose
//! behaviour the model follows: a write to the huge zero folio allocates a
//! THP from 6.13 on, and copies one page before, whatever the design.
//!
//! ```
//! use foliomm::{Advice, Config, Design, KernelVersion, Machine, MmapFlags, Prot};
//!
//! let zero_write = |mapcount, kernel| -> foliomm::Result<u32> {
//!     let machine = Machine::new(Config { memory: 64 << 20, mapcount, kernel: Some(kernel), ..Config::default() })?;
//!     let mm = machine.new_mm()?;
//!     let addr = mm.mmap(0, 2 << 20, Prot::RW, MmapFlags::default())?;
//!     mm.madvise(addr, 2 << 20, Advice::HugePage)?;
//!     let mut cpu = machine.new_cpu();
//!     cpu.read(&mm, addr, &mut [0])?; // maps the huge zero folio
//!     cpu.write(&mm, addr, &[1])?;
//!     Ok(mm.page_info(addr).folio_order)
//! };
//! for design in [Design::Subpage, Design::MmId] {
//!     assert_eq!(zero_write(design, KernelVersion::new(6, 12))?, 0);
//!     assert_eq!(zero_write(design, KernelVersion::new(6, 13))?, 9);
//! }
//! # Ok::<(), foliomm::Errno>(())
//! ```
//!
//! Run the checker: it rebuilds every counter from a walk of the page
//! tables and returns what disagrees with what the design keeps.
//!
//! ```
//! use foliomm::{Config, Design, Machine, MmapFlags, Prot};
//!
//! for mapcount in Design::ALL.iter().copied() {
//!     let machine = Machine::new(Config { memory: 64 << 20, mapcount, ..Config::default() })?;
//!     let mm = machine.new_mm()?;
//!     let addr = mm.mmap(0, 4 << 20, Prot::RW, MmapFlags::default())?;
//!     let mut cpu = machine.new_cpu();
//!     cpu.write(&mm, addr, &vec![7; 4 << 20])?;
//!     let child = mm.fork()?;
//!     mm.munmap(addr + (1 << 20), 12 << 10)?;
//!     assert!(machine.check().is_empty(), "{mapcount}: {:?}", machine.check());
//!     child.exit();
//! }
//! # Ok::<(), foliomm::Errno>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(unsafe_code)]
#![warn(missing_docs)]

/// The subsystems, one folder per kernel concept: what the root re-exports
/// is built from them. A folder uses only itself and the folders before it
/// in [`internals::LAYERS`] (the `layering` test checks it; docs/ARCHITECTURE.md
/// explains each). Public for tools that look inside (the scenario
/// interpreter, the benchmarks, the tests), not a stable API.
#[allow(missing_docs)]
#[path = "."]
pub mod internals {
    pub mod arch;
    pub mod check;
    pub mod cpu;
    pub mod folio;
    pub mod ipc;
    pub mod kernel;
    pub mod machine;
    pub mod mapcount;
    pub mod memory;
    pub mod mm;
    pub mod mm_types;
    pub mod pgtable;
    #[allow(unsafe_code)] // the frame arena: the model's only unsafe code
    pub mod phys;
    pub mod release;
    pub mod rmap;
    pub mod shmem;
    pub mod swap;
    pub mod sync;
    pub mod tlb;

    /// The library's folders, bottom up: each may use the ones before it and
    /// itself, never one after it. The crate root (`Errno`, `Result`,
    /// `xorshift`) is below them all.
    pub const LAYERS: &[&str] = &[
        "release", "arch", "sync", "phys", "folio", "mapcount", "swap", "kernel", "pgtable", "rmap", "shmem", "tlb",
        "mm_types", "memory", "mm", "ipc", "cpu", "check", "machine",
    ];

    pub use crate::xorshift;
}

pub(crate) use internals::{
    arch, check, cpu, folio, ipc, kernel, machine, mapcount, memory, mm, mm_types, pgtable, phys, release, rmap, shmem,
    swap, sync, tlb,
};

pub use check::{Violation, ViolationKind};
pub use cpu::Cpu;
pub use folio::thp::{ShmemHuge, ShmemMode, ThpMode};
pub use machine::{Config, DebugSwitches, HugeSize, HugetlbSync, Machine, VmaLayout, VmaLockDesign, ZapStrategy};
pub use mapcount::{CompoundLock, Design, RmapIdStage};
pub use mm::{Advice, MmapFlags, PageInfo, RangeInfo};
pub use mm_types::{Mm, Prot};
pub use release::KernelVersion;
pub use shmem::Inode;

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
    /// A seal or a missing permission forbids the change (`-EPERM`).
    #[error("EPERM: operation not permitted")]
    EPERM,
    /// No data or hole past the offset (`-ENXIO`, `lseek`).
    #[error("ENXIO: no such offset")]
    ENXIO,
    /// No such name or object (`-ENOENT`).
    #[error("ENOENT: no such file or object")]
    ENOENT,
    /// Try again: the object is busy for now (`-EAGAIN`, a failed folio split).
    #[error("EAGAIN: try again")]
    EAGAIN,
    /// No such device: a NUMA node without memory (`-ENODEV`, `move_pages`).
    #[error("ENODEV: no such device (node)")]
    ENODEV,
    /// I/O error: `mbind` with `MPOL_MF_STRICT` left a page where the
    /// policy does not allow it (`-EIO`).
    #[error("EIO: a page is not where the policy puts it")]
    EIO,
    /// Not an errno: the fault was handed to a userfaultfd
    /// (`handle_userfault`, `VM_FAULT_RETRY`). The thread waits for the
    /// handler; in foliomm its caller plays the handler (reads the
    /// message from the VMA's [`internals::mm_types::UserfaultfdCtx`],
    /// answers it) and retries the access.
    #[error("the fault waits for its userfaultfd handler")]
    Userfault,
}

/// Each errno with its kernel name and its number on x86-64 Linux (0 for
/// SIGBUS, a signal rather than an errno).
const ERRNOS: [(Errno, &str, i32); 14] = {
    use Errno::*;
    [
        (ENOMEM, "ENOMEM", 12),
        (EINVAL, "EINVAL", 22),
        (EFAULT, "EFAULT", 14),
        (EACCES, "EACCES", 13),
        (EBUSY, "EBUSY", 16),
        (EEXIST, "EEXIST", 17),
        (SIGBUS, "SIGBUS", 0),
        (EFBIG, "EFBIG", 27),
        (EPERM, "EPERM", 1),
        (ENXIO, "ENXIO", 6),
        (ENOENT, "ENOENT", 2),
        (EAGAIN, "EAGAIN", 11),
        (ENODEV, "ENODEV", 19),
        (EIO, "EIO", 5),
    ]
};

impl Errno {
    /// The kernel's name of the error.
    pub fn name(self) -> &'static str {
        if self == Errno::Userfault {
            return "userfault";
        }
        ERRNOS.iter().find(|e| e.0 == self).map_or("?", |e| e.1)
    }

    /// Parses a kernel error name.
    pub fn from_name(s: &str) -> Option<Errno> {
        ERRNOS.iter().find(|e| e.1 == s).map(|e| e.0)
    }

    /// The errno's number (`ENOMEM` is 12); 0 for SIGBUS.
    pub fn number(self) -> i32 {
        ERRNOS.iter().find(|e| e.0 == self).map_or(0, |e| e.2)
    }

    /// The errno of a number, if foliomm models it.
    pub fn from_number(n: i32) -> Option<Errno> {
        ERRNOS.iter().find(|e| e.2 == n && n != 0).map(|e| e.0)
    }
}

/// The result of a memory operation.
pub type Result<T> = std::result::Result<T, Errno>;

/// A xorshift64* generator: cheap, reproducible pseudo-random numbers from
/// `seed` for searches and benchmark access orders (not for anything that
/// needs statistical quality).
#[doc(hidden)]
pub fn xorshift(seed: u64) -> impl FnMut() -> u64 {
    let mut state = seed | 1;
    move || {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        state.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}
