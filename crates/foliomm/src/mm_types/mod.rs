//! The address-space objects (include/linux/mm_types.h): [`Mm`] with its
//! mmap_lock ([`mmap_lock`]), the VMA ([`vma`]) as a shared object from a
//! machine-wide cache ([`vma_cache`]), the VMA tree ([`vma_tree`]), the
//! per-VMA lock ([`vma_lock`]) and the seam through which a fault gets its
//! VMA ([`fault_vma`]). What changes them (mmap, munmap, fork...) lives
//! above, in [`crate::mm`], and what changes their page tables in
//! [`crate::memory`].

pub mod fault_vma;
#[cfg(all(test, loom))]
mod loom_tests;
pub mod mempolicy;
pub mod mm;
pub mod mmap_lock;
pub mod userfaultfd;
pub mod vma;
pub mod vma_cache;
mod vma_layout;
pub mod vma_lock;
pub mod vma_tree;

pub use fault_vma::FaultVma;
pub use mempolicy::Mempolicy;
pub use mm::{Mm, MmList};
pub use mmap_lock::{MmapReadGuard, MmapWriteGuard};
pub use userfaultfd::{UffdMsg, UffdReason, UserfaultfdCtx};
pub use vma::{vm, Prot, Vma, VmaInit};
pub use vma_cache::VmaCache;
pub use vma_lock::{ReadFailure, VMA_LOCK_OFFSET, VMA_REF_LIMIT};
pub use vma_tree::Vmas;
