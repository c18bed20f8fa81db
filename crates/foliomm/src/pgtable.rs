//! x86-64 4-level page tables stored in model frames: entries, index helpers,
//! walks, table allocation and the split page-table locks.
//!
//! Entry bits follow arch/x86/include/asm/pgtable_types.h. Tables are 512
//! atomic entries in a frame. Upper levels are populated under
//! `mm->page_table_lock` (`__pud_alloc`, `__pmd_alloc`); a PTE table is
//! installed under the PMD table's lock (`pmd_install`). The PTL of a PTE table
//! and the PMD lock are bit spinlocks on the table's own descriptor
//! (`ptdesc->ptl` with `USE_SPLIT_PTE_PTLOCKS`).

use std::sync::atomic::{AtomicU64, Ordering::*};

use crate::machine::Machine;
use crate::phys::{Pfn, PhysMem, PAGE_SHIFT};
use crate::sync::BitSpinLock;
use crate::Errno;

pub const PMD_SHIFT: u32 = 21;
pub const PUD_SHIFT: u32 = 30;
pub const PGDIR_SHIFT: u32 = 39;
pub const PMD_SIZE: u64 = 1 << PMD_SHIFT;
pub const PUD_SIZE: u64 = 1 << PUD_SHIFT;
pub const PGDIR_SIZE: u64 = 1 << PGDIR_SHIFT;
pub const PTRS_PER_TABLE: u64 = 512;
/// `TASK_SIZE` of a 4-level x86-64 address space.
pub const TASK_SIZE: u64 = (1 << 47) - 4096;

/// A page-table entry at any level (`pte_t`, `pmd_t`, ...).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Pte(pub u64);

impl Pte {
    pub const PRESENT: u64 = 1 << 0;
    pub const RW: u64 = 1 << 1;
    pub const USER: u64 = 1 << 2;
    pub const ACCESSED: u64 = 1 << 5;
    pub const DIRTY: u64 = 1 << 6;
    /// `_PAGE_PSE`: a huge leaf at PMD level.
    pub const PSE: u64 = 1 << 7;
    /// `_PAGE_PROTNONE` (reuses the global bit while PRESENT is clear).
    pub const PROTNONE: u64 = 1 << 8;
    /// `_PAGE_SPECIAL`: no struct page semantics (the zero pages).
    pub const SPECIAL: u64 = 1 << 9;
    pub const PFN_MASK: u64 = 0x000f_ffff_ffff_f000;

    pub const NONE: Pte = Pte(0);

    pub fn new(pfn: Pfn, flags: u64) -> Pte {
        Pte((pfn << PAGE_SHIFT) | flags)
    }
    pub fn pfn(self) -> Pfn {
        (self.0 & Self::PFN_MASK) >> PAGE_SHIFT
    }
    pub fn is_none(self) -> bool {
        self.0 == 0
    }
    /// `pte_present`: mapped, possibly PROT_NONE.
    pub fn present(self) -> bool {
        self.0 & (Self::PRESENT | Self::PROTNONE) != 0
    }
    /// Whether the MMU may use the entry (PRESENT bit set).
    pub fn hw_present(self) -> bool {
        self.0 & Self::PRESENT != 0
    }
    pub fn write(self) -> bool {
        self.0 & Self::RW != 0
    }
    pub fn dirty(self) -> bool {
        self.0 & Self::DIRTY != 0
    }
    pub fn huge(self) -> bool {
        self.0 & Self::PSE != 0
    }
    pub fn special(self) -> bool {
        self.0 & Self::SPECIAL != 0
    }
    pub fn with(self, bits: u64) -> Pte {
        Pte(self.0 | bits)
    }
    pub fn without(self, bits: u64) -> Pte {
        Pte(self.0 & !bits)
    }
    /// The entry for the next page (`pte_advance_pfn` by one).
    pub fn next_pfn(self, n: u64) -> Pte {
        Pte(self.0 + (n << PAGE_SHIFT))
    }
}

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

/// The entry slot `idx` of table `table`.
pub fn slot(phys: &PhysMem, table: Pfn, idx: usize) -> &AtomicU64 {
    phys.word(table, idx)
}

pub fn load(phys: &PhysMem, table: Pfn, idx: usize) -> Pte {
    Pte(slot(phys, table, idx).load(Acquire))
}

pub fn store(phys: &PhysMem, table: Pfn, idx: usize, pte: Pte) {
    slot(phys, table, idx).store(pte.0, Release)
}

/// The lock of a page-table page: its split PTL, or the PMD lock of a PMD table.
pub fn table_lock(phys: &PhysMem, table: Pfn) -> BitSpinLock<'_> {
    BitSpinLock::lock(&phys.page(table).flags, 0)
}

/// A walk result: the PMD table and index that cover an address.
#[derive(Clone, Copy, Debug)]
pub struct PmdSlot {
    pub table: Pfn,
    pub idx: usize,
}

impl PmdSlot {
    pub fn load(self, phys: &PhysMem) -> Pte {
        load(phys, self.table, self.idx)
    }
    pub fn store(self, phys: &PhysMem, pte: Pte) {
        store(phys, self.table, self.idx, pte)
    }
}

/// Walks from the PGD to the PMD slot of `addr`, without allocating.
pub fn walk_pmd(phys: &PhysMem, pgd: Pfn, addr: u64) -> Option<PmdSlot> {
    let pgde = load(phys, pgd, pgd_index(addr));
    if pgde.is_none() {
        return None;
    }
    let pude = load(phys, pgde.pfn(), pud_index(addr));
    if pude.is_none() {
        return None;
    }
    Some(PmdSlot { table: pude.pfn(), idx: pmd_index(addr) })
}

/// Walks to the PMD slot of `addr`, allocating the PUD and PMD tables on the
/// way (`pud_alloc`, `pmd_alloc`); `ptl` is `mm->page_table_lock`.
pub fn alloc_pmd(m: &Machine, pgd: Pfn, addr: u64, ptl: &std::sync::Mutex<()>) -> Result<PmdSlot, Errno> {
    let pud = populate(m, pgd, pgd_index(addr), ptl)?;
    let pmd = populate(m, pud, pud_index(addr), ptl)?;
    Ok(PmdSlot { table: pmd, idx: pmd_index(addr) })
}

/// Returns the PTE table under a non-huge PMD slot, allocating and installing
/// it if the slot is none (`__pte_alloc` / `pmd_install`). Returns `Ok(None)`
/// if the slot holds a huge entry.
pub fn alloc_pte_table(m: &Machine, pmd: PmdSlot) -> Result<Option<Pfn>, Errno> {
    let e = pmd.load(&m.phys);
    if e.huge() {
        return Ok(None);
    }
    if !e.is_none() {
        return Ok(Some(e.pfn()));
    }
    let table = m.alloc_table()?;
    let installed = {
        let _pl = table_lock(&m.phys, pmd.table);
        if pmd.load(&m.phys).is_none() {
            pmd.store(&m.phys, Pte::new(table, Pte::PRESENT | Pte::RW | Pte::USER | Pte::ACCESSED));
            true
        } else {
            false
        }
    };
    if !installed {
        m.free_table(table);
    }
    let e = pmd.load(&m.phys);
    Ok(if e.huge() { None } else { Some(e.pfn()) })
}

/// Fills a none upper-level slot with a new table under `lock`.
fn populate(m: &Machine, table: Pfn, idx: usize, ptl: &std::sync::Mutex<()>) -> Result<Pfn, Errno> {
    let e = load(&m.phys, table, idx);
    if !e.is_none() {
        return Ok(e.pfn());
    }
    let new = m.alloc_table()?;
    let guard = ptl.lock().unwrap();
    let cur = load(&m.phys, table, idx);
    let result = if cur.is_none() {
        store(&m.phys, table, idx, Pte::new(new, Pte::PRESENT | Pte::RW | Pte::USER | Pte::ACCESSED));
        new
    } else {
        m.free_table(new);
        cur.pfn()
    };
    drop(guard);
    Ok(result)
}
