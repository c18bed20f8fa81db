//! The page-table side of mm/memory.c and its neighbours, kept in one folder
//! because they call one another as in Linux: the fault path ([`fault`] with
//! [`anon`], [`file`](mod@file) and [`wp`]), PMD-mapped THP ([`huge_memory`]),
//! hugetlb pages and PMD sharing ([`hugetlb`], at fork [`hugetlb_fork`]) and private hugetlb
//! reservations ([`hugetlb_resv`]), zap and
//! `free_pgtables` ([`zap`]), fork's copy ([`copy_page_range`]), mprotect's
//! [`change_protection`], soft-dirty's [`clear_refs`], mremap's [`move_page_tables`] and [`userfaultfd`]'s
//! faults and resolving ioctls. Every function
//! works on one MM's page tables; the VMA changes around them live above, in
//! [`crate::mm`].

pub mod anon;
pub mod change_protection;
pub mod clear_refs;
pub mod copy_page_range;
pub mod fault;
pub mod file;
pub mod folio_mappings;
pub mod huge_memory;
pub mod hugetlb;
pub mod hugetlb_fork;
pub mod hugetlb_migrate;
pub mod hugetlb_resv;
pub mod hugetlb_userfaultfd;
pub mod khugepaged;
pub mod ksm;
pub mod madvise_cold;
pub mod madvise_free;
pub mod migrate;
pub mod move_page_tables;
pub mod numa_balancing;
pub mod rmap_lazyfree;
pub mod rmap_walk;
pub mod split;
pub mod swap;
pub mod uffd_move;
pub mod userfaultfd;
pub mod vmscan;
mod vmscan_lazyfree;
pub mod wp;
pub mod zap;

pub use fault::{handle_fault, handle_mm_fault, FaultKind, VmFault};
