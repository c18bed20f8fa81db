//! The address-space objects (include/linux/mm_types.h): [`Mm`], the VMA
//! ([`vma`]) as a shared object, the VMA tree ([`vma_tree`]), and the seam
//! through which a fault locks its VMA ([`vma_lock`]). What changes them
//! (mmap, munmap, fork...) lives above, in [`crate::mm`], and what changes
//! their page tables in [`crate::memory`].

pub mod mm;
pub mod vma;
pub mod vma_lock;
pub mod vma_tree;

pub use mm::{Mm, MmList};
pub use vma::{vm, Prot, Vma};
pub use vma_lock::FaultVma;
pub use vma_tree::Vmas;
