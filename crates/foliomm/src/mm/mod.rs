//! What a process asks of its address space: mmap and exit ([`mmap`]),
//! munmap and VMA split/merge ([`vma`]), [`mprotect`], [`madvise`],
//! [`mremap`], [`fork`], GUP ([`gup`]), the /proc views ([`proc`]) and
//! the truncation of a shmem file under its mappings ([`truncate`]) and
//! the [`userfaultfd`] ioctls. The
//! VMA changes happen here, under the mmap_lock; the page tables change
//! through [`crate::memory`].

pub mod file_io;
pub mod fork;
pub mod gup;
pub mod hugetlbfs_unmap;
pub mod khugepaged;
pub mod ksm;
pub mod madvise;
pub mod mempolicy;
pub mod migrate;
pub mod mlock;
pub mod mmap;
pub mod mprotect;
pub mod mremap;
pub mod numa_scan;
pub mod proc;
pub mod smaps;
pub mod split_huge_pages;
pub mod truncate;
pub mod userfaultfd;
pub mod vma;

pub use madvise::Advice;
pub use migrate::MovePages;
pub use mmap::{MmapFlags, MMAP_BASE, MMAP_MIN_ADDR};
pub use proc::{PageInfo, ProcStatus, RangeInfo};
pub use smaps::VmaInfo;

use crate::arch::{PAGE_SIZE, TASK_SIZE};
use crate::{Errno, Result};

/// `len` rounded up to whole pages; ENOMEM on overflow.
fn page_align(len: u64) -> Result<u64> {
    len.checked_add(PAGE_SIZE - 1).map(|l| l & !(PAGE_SIZE - 1)).ok_or(Errno::ENOMEM)
}

/// The end of `[start, start + len)` in whole pages: EINVAL for an
/// unaligned start, ENOMEM past `TASK_SIZE`.
fn range_end(start: u64, len: u64) -> Result<u64> {
    if !start.is_multiple_of(PAGE_SIZE) {
        return Err(Errno::EINVAL);
    }
    let end = start.checked_add(page_align(len)?).ok_or(Errno::ENOMEM)?;
    if end > TASK_SIZE {
        return Err(Errno::ENOMEM);
    }
    Ok(end)
}
