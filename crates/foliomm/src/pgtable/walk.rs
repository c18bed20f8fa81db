//! The page-table walker: lookups of the PMD slot and of the leaf slot for
//! an address, allocation of missing levels on the way (`pud_alloc`,
//! `pmd_alloc`, `__pte_alloc`), and a walk of every table and leaf.

use std::sync::atomic::AtomicU64;

use super::{load, pte_lockptr, slot, store};
use crate::arch::{
    pgd_index, pmd_index, pte_index, pud_index, Pfn, Pte, PAGE_SHIFT, PGDIR_SHIFT, PMD_SHIFT, PTRS_PER_TABLE, PUD_SHIFT,
};
use crate::kernel::Kernel;
use crate::phys::PhysMem;
use crate::sync::Mutex;
use crate::Errno;

/// A walk result: the PMD table and index that cover an address (for a
/// 1 GiB hugetlb page, the PUD table and index that map it).
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

/// Walks from the PGD to the PMD slot of `addr`, without allocating;
/// `None` when a level above has no table, or the PUD entry maps a 1 GiB
/// page itself (see [`huge_pud`]).
pub fn walk_pmd(phys: &PhysMem, pgd: Pfn, addr: u64) -> Option<PmdSlot> {
    let pgde = load(phys, pgd, pgd_index(addr));
    if pgde.is_none() {
        return None;
    }
    let pude = load(phys, pgde.pfn(), pud_index(addr));
    if pude.is_none() || pude.huge() {
        return None;
    }
    Some(PmdSlot { table: pude.pfn(), idx: pmd_index(addr) })
}

/// The PUD slot of `addr` (table and index), if the PGD has a PUD table.
pub fn walk_pud(phys: &PhysMem, pgd: Pfn, addr: u64) -> Option<(Pfn, usize)> {
    let pgde = load(phys, pgd, pgd_index(addr));
    (!pgde.is_none()).then(|| (pgde.pfn(), pud_index(addr)))
}

/// The PUD slot of `addr` if it holds a huge entry (a 1 GiB page).
pub fn huge_pud(phys: &PhysMem, pgd: Pfn, addr: u64) -> Option<PmdSlot> {
    let (table, idx) = walk_pud(phys, pgd, addr)?;
    load(phys, table, idx).huge().then_some(PmdSlot { table, idx })
}

/// The PUD slot of `addr`, allocating the PUD table if missing (`pud_alloc`).
pub fn alloc_pud(k: &Kernel, pgd: Pfn, addr: u64, ptl: &Mutex<()>) -> Result<(Pfn, usize), Errno> {
    Ok((populate(k, pgd, pgd_index(addr), ptl)?, pud_index(addr)))
}

/// Walks to the PMD slot of `addr`, allocating the PUD and PMD tables on the
/// way (`pud_alloc`, `pmd_alloc`); `ptl` is `mm->page_table_lock`.
pub fn alloc_pmd(k: &Kernel, pgd: Pfn, addr: u64, ptl: &Mutex<()>) -> Result<PmdSlot, Errno> {
    let pud = populate(k, pgd, pgd_index(addr), ptl)?;
    let pmd = populate(k, pud, pud_index(addr), ptl)?;
    Ok(PmdSlot { table: pmd, idx: pmd_index(addr) })
}

/// Returns the PTE table under a non-huge PMD slot, allocating and installing
/// it if the slot is none (`__pte_alloc` / `pmd_install`). Returns `Ok(None)`
/// if the slot holds a huge entry.
pub fn alloc_pte_table(k: &Kernel, pmd: PmdSlot) -> Result<Option<Pfn>, Errno> {
    let e = pmd.load(&k.phys);
    if e.huge() {
        return Ok(None);
    }
    if !e.is_none() {
        return Ok(Some(e.pfn()));
    }
    let table = k.alloc_table()?;
    let installed = {
        let _pl = pte_lockptr(&k.phys, pmd.table).lock();
        if pmd.load(&k.phys).is_none() {
            pmd.store(&k.phys, Pte::new(table, Pte::PRESENT | Pte::RW | Pte::USER | Pte::ACCESSED));
            true
        } else {
            false
        }
    };
    if !installed {
        k.free_table(table);
    }
    let e = pmd.load(&k.phys);
    Ok(if e.huge() { None } else { Some(e.pfn()) })
}

/// Fills a none upper-level slot with a new table under `lock`.
fn populate(k: &Kernel, table: Pfn, idx: usize, ptl: &Mutex<()>) -> Result<Pfn, Errno> {
    let e = load(&k.phys, table, idx);
    debug_assert!(!e.huge(), "a table wanted where a huge entry maps a page");
    if !e.is_none() {
        return Ok(e.pfn());
    }
    let new = k.alloc_table()?;
    let guard = ptl.lock().unwrap();
    let cur = load(&k.phys, table, idx);
    let result = if cur.is_none() {
        store(&k.phys, table, idx, Pte::new(new, Pte::PRESENT | Pte::RW | Pte::USER | Pte::ACCESSED));
        new
    } else {
        k.free_table(new);
        cur.pfn()
    };
    drop(guard);
    Ok(result)
}

/// Where the leaf entry for an address sits: a PTE slot of a PTE table, or
/// a huge PMD or PUD slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeafSlot {
    pub table: Pfn,
    pub idx: usize,
    /// Base pages the entry maps: 1 for a PTE, more for a huge PMD or PUD
    /// (it held a huge entry when looked up).
    pub pages: u64,
}

impl LeafSlot {
    pub fn entry(self, phys: &PhysMem) -> &AtomicU64 {
        slot(phys, self.table, self.idx)
    }
    /// The slot's entry now; none when a huge slot holds a table instead
    /// (the huge entry was split since the lookup: what `addr` maps is in
    /// that table, and a walk again finds it).
    pub fn load(self, phys: &PhysMem) -> Pte {
        let e = load(phys, self.table, self.idx);
        if self.huge() && !e.huge() && e.present() {
            return Pte::NONE;
        }
        e
    }
    /// Whether the slot is a huge PMD or PUD.
    pub fn huge(self) -> bool {
        self.pages > 1
    }
    /// The frame `addr` reaches through `e`, this slot's entry (for a huge
    /// entry, the page of `addr` inside it).
    pub fn page_pfn(self, e: Pte, addr: u64) -> Pfn {
        e.pfn() + ((addr >> PAGE_SHIFT) & (self.pages - 1))
    }
}

/// The slot of the leaf entry for `addr` (`follow_page_mask`'s walk, the
/// MMU's walk): a huge PUD or PMD, or the PTE slot under a table (which
/// may be none). `None` when a level above has no table.
pub fn leaf_slot(phys: &PhysMem, pgd: Pfn, addr: u64) -> Option<LeafSlot> {
    let Some(pmd) = walk_pmd(phys, pgd, addr) else {
        let pud = huge_pud(phys, pgd, addr)?;
        return Some(LeafSlot { table: pud.table, idx: pud.idx, pages: 1 << (PUD_SHIFT - PAGE_SHIFT) });
    };
    let e = pmd.load(phys);
    if e.huge() {
        Some(LeafSlot { table: pmd.table, idx: pmd.idx, pages: 1 << (PMD_SHIFT - PAGE_SHIFT) })
    } else if e.is_none() {
        None
    } else {
        Some(LeafSlot { table: e.pfn(), idx: pte_index(addr), pages: 1 })
    }
}

/// What [`walk_all`] meets.
#[derive(Clone, Copy, Debug)]
pub enum Visit {
    /// A table below the PGD (a PUD, PMD or PTE table).
    Table(Pfn),
    /// A huge PMD at `addr`.
    HugePmd { addr: u64, pte: Pte },
    /// A huge PUD (a 1 GiB hugetlb page) at `addr`.
    HugePud { addr: u64, pte: Pte },
    /// A present PTE (PROT_NONE included).
    Pte { addr: u64, pte: Pte },
    /// A swap entry in a PTE.
    Swap { addr: u64, pte: Pte },
}

/// Visits every table and every non-none leaf reachable from `pgd`, in
/// address order (`walk_page_range` over the whole address space). The
/// visitor's answer for a table says whether to walk into it; for a leaf
/// it is ignored.
pub fn walk_all(phys: &PhysMem, pgd: Pfn, mut visit: impl FnMut(Visit) -> bool) {
    for i in 0..PTRS_PER_TABLE {
        let pgde = load(phys, pgd, i as usize);
        if pgde.is_none() || !visit(Visit::Table(pgde.pfn())) {
            continue;
        }
        for j in 0..PTRS_PER_TABLE {
            let pude = load(phys, pgde.pfn(), j as usize);
            if pude.huge() {
                _ = visit(Visit::HugePud { addr: (i << PGDIR_SHIFT) | (j << PUD_SHIFT), pte: pude });
                continue;
            }
            if pude.is_none() || !visit(Visit::Table(pude.pfn())) {
                continue;
            }
            for k in 0..PTRS_PER_TABLE {
                let addr = (i << PGDIR_SHIFT) | (j << PUD_SHIFT) | (k << PMD_SHIFT);
                let pmde = load(phys, pude.pfn(), k as usize);
                if pmde.is_none() {
                    continue;
                }
                if pmde.huge() {
                    _ = visit(Visit::HugePmd { addr, pte: pmde });
                    continue;
                }
                if !visit(Visit::Table(pmde.pfn())) {
                    continue;
                }
                for l in 0..PTRS_PER_TABLE {
                    let pte = load(phys, pmde.pfn(), l as usize);
                    let addr = addr | (l << PAGE_SHIFT);
                    if pte.is_swap() {
                        _ = visit(Visit::Swap { addr, pte });
                    } else if !pte.is_none() {
                        _ = visit(Visit::Pte { addr, pte });
                    }
                }
            }
        }
    }
}
