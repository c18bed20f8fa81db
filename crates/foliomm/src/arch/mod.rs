//! x86-64 geometry: page and table sizes, the address-space limit, table
//! indices, and the page-table entry format ([`pte`]). Pure values; nothing
//! here knows of memory or locks.

pub mod pte;

pub use pte::{Pte, SwpEntry};

/// A physical frame number.
pub type Pfn = u64;

pub const PAGE_SHIFT: u32 = 12;
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;
pub const PMD_SHIFT: u32 = 21;
pub const PUD_SHIFT: u32 = 30;
pub const PGDIR_SHIFT: u32 = 39;
pub const PMD_SIZE: u64 = 1 << PMD_SHIFT;
pub const PUD_SIZE: u64 = 1 << PUD_SHIFT;
pub const PGDIR_SIZE: u64 = 1 << PGDIR_SHIFT;
/// Entries in a table of any level (`PTRS_PER_PTE` and friends).
pub const PTRS_PER_TABLE: u64 = 512;
/// Words of 8 bytes in a frame (also the number of entries of a page table).
pub const WORDS_PER_PAGE: usize = (PAGE_SIZE / 8) as usize;
/// Largest buddy order (Linux `MAX_PAGE_ORDER`): blocks of 4 MiB.
pub const MAX_PAGE_ORDER: u32 = 10;
/// Order of a PMD-sized folio (`HPAGE_PMD_ORDER`).
pub const PMD_ORDER: u32 = 9;
/// Order of a PUD-sized folio (a 1 GiB huge page, `PUD_ORDER`).
pub const PUD_ORDER: u32 = 18;
/// `TASK_SIZE` of a 4-level x86-64 address space.
pub const TASK_SIZE: u64 = (1 << 47) - 4096;

pub fn pgd_index(addr: u64) -> usize {
    ((addr >> PGDIR_SHIFT) & 511) as usize
}
pub fn pud_index(addr: u64) -> usize {
    ((addr >> PUD_SHIFT) & 511) as usize
}
pub fn pmd_index(addr: u64) -> usize {
    ((addr >> PMD_SHIFT) & 511) as usize
}
pub fn pte_index(addr: u64) -> usize {
    ((addr >> PAGE_SHIFT) & 511) as usize
}

/// End of the PMD-sized block containing `addr`, capped at `end` (`pmd_addr_end`).
pub fn pmd_addr_end(addr: u64, end: u64) -> u64 {
    ((addr | (PMD_SIZE - 1)) + 1).min(end)
}

/// End of the PUD-sized block containing `addr`, capped at `end` (`pud_addr_end`).
pub fn pud_addr_end(addr: u64, end: u64) -> u64 {
    ((addr | (PUD_SIZE - 1)) + 1).min(end)
}
