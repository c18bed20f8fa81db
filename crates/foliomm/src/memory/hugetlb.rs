//! hugetlb faults and PMD sharing (mm/hugetlb.c `hugetlb_fault`,
//! `hugetlb_no_page`, `hugetlb_wp`, `huge_pte_alloc`, `huge_pmd_share`,
//! `huge_pmd_unshare`; fork's copy is [`super::hugetlb_fork`]).
//!
//! A 2 MiB hugetlb page is mapped by a PMD entry, a 1 GiB one by a PUD
//! entry (its lock is the PUD table's own, where Linux takes
//! `mm->page_table_lock`). A shared mapping of 2 MiB pages whose VMA
//! covers a whole 1 GiB PUD window shares the PMD table of that window
//! with the other VMAs of the file that map the same file pages at the
//! same offset within their window, in any MM (`huge_pmd_share`): its PUD
//! points at their table and the table's `pt_share_count` grows. An
//! unmap, a protection change or a truncation that meets a shared table
//! only drops this MM's PUD entry (`huge_pmd_unshare`).
//!
//! Synchronization (5.7 to 6.0, `i_mmap_rwsem` design): a fault holds the
//! file's `i_mmap_rwsem` for read from before it looks up its PMD until it
//! is done, and the fault mutex of its file page from after; unsharing holds
//! `i_mmap_rwsem` for write, so no fault keeps a pointer into a table this
//! MM stops using.
//!
//! Private mappings' reservations (which page uses a promise, the owner
//! taking a page back from its children) are in [`super::hugetlb_resv`].
//!
//! A userfaultfd sees missing and minor faults (`hugetlb_no_page`) and
//! writes to the huge pages it write-protects.
//!
//! Differs from Linux: no uffd-wp markers, migration or poison entries.

use super::fault::FaultKind;
use crate::arch::{pmd_index, Pfn, Pte, PAGE_SIZE, PMD_SIZE, PUD_SIZE};
use crate::folio::Folio;
use crate::kernel::{HugeSize, HugetlbSync, Incident, Kernel};
use crate::mapcount::Level;
use crate::mm_types::{vm, Mm, UffdReason, Vma};
use crate::pgtable::{alloc_pmd, alloc_pud, load, pt_share_count, pte_lockptr, store, walk_pmd, walk_pud, PmdSlot};
use crate::rmap::{self, VmaRecord};
use crate::shmem::{in_page_cache, Inode};
use crate::sync::atomic::Ordering::Relaxed;
use crate::sync::cacheline::{Locked, Structure};
use crate::sync::{sim, Arc};
use crate::tlb::MmuGather;
use crate::{Errno, Result};

/// `hugetlb_fault` for an access to `addr` in the hugetlb VMA `vma`.
/// SIGBUS past the end of the file or when the pool has no page.
pub fn hugetlb_fault(mm: &Mm, vma: &Vma, addr: u64, kind: FaultKind) -> Result<()> {
    let k = &*mm.kernel;
    let inode = vma.file().expect("a hugetlb VMA maps a hugetlbfs file");
    let haddr = addr & !(inode.huge_size().expect("a hugetlbfs file").bytes() - 1);
    // The owner of a private mapping may have to take a page back from its
    // children before its COW can go on: with the fault's locks let go,
    // then once more (hugetlb_wp's retry after unmap_ref_private).
    for _ in 0..2 {
        match hugetlb_fault_locked(mm, vma, &inode, haddr, kind)? {
            None => return Ok(()),
            Some(pfn) => super::hugetlb_resv::unmap_ref_private(k, mm, vma, &inode, pfn, haddr),
        }
    }
    Err(Errno::SIGBUS)
}

/// One try of [`hugetlb_fault`] under the fault mutex and the locks PMD
/// sharing needs. Returns the page the owner of a private mapping must
/// take back from its children, if its COW found the pool empty.
fn hugetlb_fault_locked(mm: &Mm, vma: &Vma, inode: &Arc<Inode>, haddr: u64, kind: FaultKind) -> Result<Option<Pfn>> {
    let k = &*mm.kernel;
    with_fault_locks(mm, vma, inode, haddr, |walked| hugetlb_fault_walked(k, mm, vma, inode, walked, kind))
}

/// Runs `f` on the slot of `haddr`'s huge entry, allocated as
/// `huge_pte_alloc` does, with what a hugetlb fault holds meanwhile: the
/// fault mutex of the file page and, by the synchronization design, the
/// VMA's hugetlb lock or the file's `i_mmap_rwsem` for read (as
/// `hugetlb_fault` and `hugetlb_mfill_atomic_pte` do), in the design's
/// order: from 6.1 (`vma-lock`) the mutex first, then the VMA lock and the
/// allocation; from 5.7 to 6.0 (`i-mmap-rwsem`) `i_mmap_rwsem` and the
/// allocation first, then the mutex, so that a fault queued behind a
/// writer of the rwsem holds no mutex; and the reverted state (`no-lock`)
/// allocates (`huge_pmd_share` taking the rwsem inside) before the mutex.
/// The locks are let go in the reverse order; the MMs looked at after
/// them. Differs from Linux: 5.x's `hugetlb_mcopy_atomic_pte` allocated
/// under the mutex.
pub(super) fn with_fault_locks<R>(
    mm: &Mm,
    vma: &Vma,
    inode: &Inode,
    haddr: u64,
    f: impl FnOnce(&Walked) -> Result<R>,
) -> Result<R> {
    let k = &*mm.kernel;
    let size = inode.huge_size().expect("a hugetlbfs file");
    let design = k.config.hugetlb_sync;
    let lock_mutex = || {
        let mutex = k.hugetlb_fault_mutex(inode.ino, vma.page_index(haddr));
        Locked::take(Structure::FaultMutex, mutex, || mutex.lock().unwrap())
    };
    // Declared before the locks, so let go after them.
    let _other_mm;
    let _mutex_first = (design == HugetlbSync::VmaLock).then(lock_mutex);
    let vma_lock = vma.hugetlb_vma_lock().filter(|_| design == HugetlbSync::VmaLock);
    let _vma_lock = vma_lock.as_ref().map(|l| Locked::take(Structure::HugetlbVmaLock, &**l, || l.read().unwrap()));
    let i_mmap = (design == HugetlbSync::IMmapRwsem).then(|| inode.i_mmap.read());
    let pmd;
    (pmd, _other_mm) = huge_pte_alloc(k, mm, vma, inode, haddr, i_mmap.as_deref().map(|r| &**r))?;
    let _mutex_after = (design != HugetlbSync::VmaLock).then(lock_mutex);
    f(&Walked { pmd, generation: k.phys.generation(pmd.table), haddr, size })
}

/// [`hugetlb_fault_locked`] once its entry's slot is found.
fn hugetlb_fault_walked(
    k: &Kernel,
    mm: &Mm,
    vma: &Vma,
    inode: &Inode,
    walked: &Walked,
    kind: FaultKind,
) -> Result<Option<Pfn>> {
    // What the fault does under its locks beyond the accesses the model
    // counts (a new page's zeroing is charged apart).
    sim::work(sim::Work::HugetlbFault);
    let pmd = walked.pmd;
    let e = super::hugetlb_migrate::entry_not_migrating(k, pmd);
    if e.is_none() {
        return hugetlb_no_page(k, mm, vma, inode, walked, kind);
    }
    if kind == FaultKind::Write && e.uffd_wp() && vma.userfaultfd_wp() {
        return Err(super::userfaultfd::handle_userfault(k, vma, walked.haddr, true, UffdReason::WriteProtect));
    }
    if kind != FaultKind::Read && !e.write() {
        return hugetlb_wp(k, mm, vma, walked, e, kind);
    }
    let _pl = pte_lockptr(&k.phys, pmd.table).lock();
    if pmd.load(&k.phys) == e && walked.still_ours(k, mm) {
        let bits = Pte::ACCESSED | if kind == FaultKind::Write { Pte::MKDIRTY } else { 0 };
        pmd.store(&k.phys, e.with(bits));
    }
    Ok(None)
}

/// The PMD (or, for a 1 GiB page, PUD) slot a fault found, with what it
/// takes to tell, when it comes to write it, whether the table is still
/// this MM's.
pub(super) struct Walked {
    pub(super) pmd: PmdSlot,
    /// The table frame's generation when found (it moves on when freed).
    generation: u32,
    pub(super) haddr: u64,
    pub(super) size: HugeSize,
}

impl Walked {
    /// Whether the table is still the one `mm` maps `haddr` through, and
    /// was not freed (and maybe reused) since it was found; if not, the
    /// write the fault was about to make goes through a table the MM no
    /// longer uses: the seed-002 race, recorded for the checker and not
    /// made. The caller holds the table's PTL.
    pub(super) fn still_ours(&self, k: &Kernel, mm: &Mm) -> bool {
        let phys = &k.phys;
        let freed = phys.generation(self.pmd.table) != self.generation;
        let table_now = match self.size {
            HugeSize::Pmd => walk_pmd(phys, mm.pgd, self.haddr).map(|s| s.table),
            HugeSize::Pud => walk_pud(phys, mm.pgd, self.haddr).map(|(t, _)| t),
        };
        let ours = table_now == Some(self.pmd.table);
        if !freed && ours {
            return true;
        }
        let what = format!(
            "hugetlb fault at {:#x} in mm {} about to write PMD table {:#x}, which {} since the fault found it",
            self.haddr,
            mm.id,
            self.pmd.table,
            if freed { "was freed" } else { "this MM stopped using" }
        );
        k.violations.lock().unwrap().push(Incident::UseAfterFree { mm: mm.id, addr: self.haddr, what });
        false
    }
}

/// `want_pmd_share`: a shared VMA of 2 MiB pages covering the whole PUD
/// window of `addr`.
fn want_pmd_share(vma: &Vma, addr: u64) -> bool {
    let start = addr & !(PUD_SIZE - 1);
    // uffd_disable_huge_pmd_share(): not under userfaultfd's minor or
    // write-protect modes, which must see each MM's own entries.
    let uffd = vma.flags() & (vm::UFFD_WP | vm::UFFD_MINOR) != 0;
    let fits = start >= vma.start() && start + PUD_SIZE <= vma.end();
    vma.huge_page_size() == Some(PMD_SIZE) && vma.shared() && !uffd && fits
}

/// `huge_pte_offset`: the slot of the huge entry of `addr` in `mm` for
/// pages of `size`, if the tables down to it exist.
pub(crate) fn huge_pte_offset(k: &Kernel, mm: &Mm, addr: u64, size: HugeSize) -> Option<PmdSlot> {
    match size {
        HugeSize::Pmd => walk_pmd(&k.phys, mm.pgd, addr),
        HugeSize::Pud => walk_pud(&k.phys, mm.pgd, addr).map(|(table, idx)| PmdSlot { table, idx }),
    }
}

/// `huge_pte_alloc`: the slot of `haddr`'s huge entry (its PUD slot for a
/// 1 GiB page); for a 2 MiB page first trying to share another mapping's
/// PMD table when the PUD entry is none; `i_mmap` is the file's mappings
/// when the caller holds `i_mmap_rwsem`, else it is taken for read to
/// share. Also the MM whose table was looked at, to be let go after
/// `i_mmap_rwsem` (see [`huge_pmd_share`]).
pub(super) fn huge_pte_alloc(
    k: &Kernel,
    mm: &Mm,
    vma: &Vma,
    inode: &Inode,
    haddr: u64,
    i_mmap: Option<&[VmaRecord]>,
) -> Result<(PmdSlot, Option<Arc<Mm>>)> {
    let (pud_table, pud_idx) = alloc_pud(k, mm.pgd, haddr, &mm.page_table_lock)?;
    if inode.huge_size() == Some(HugeSize::Pud) {
        return Ok((PmdSlot { table: pud_table, idx: pud_idx }, None));
    }
    let mut other = None;
    if want_pmd_share(vma, haddr) && load(&k.phys, pud_table, pud_idx).is_none() {
        other = match i_mmap {
            Some(records) => huge_pmd_share(k, mm, vma, haddr, (pud_table, pud_idx), records),
            None => huge_pmd_share(k, mm, vma, haddr, (pud_table, pud_idx), &inode.i_mmap.read()),
        };
    }
    Ok((alloc_pmd(k, mm.pgd, haddr, &mm.page_table_lock)?, other))
}

/// `huge_pmd_share`: looks through the file's other mappings for one that
/// maps the file page of `haddr` at the same offset within a PUD window it
/// covers whole, with the same flags (`page_table_shareable`), and whose MM
/// has a PMD table there; if found, this MM's PUD entry points at that
/// table and its share count grows.
fn huge_pmd_share(
    k: &Kernel,
    mm: &Mm,
    vma: &Vma,
    haddr: u64,
    pud: (u64, usize),
    i_mmap: &[VmaRecord],
) -> Option<Arc<Mm>> {
    let phys = &k.phys;
    let idx = vma.page_index(haddr);
    let me = vma.record();
    for s in i_mmap.iter().filter(|s| s.vma != me.vma && s.flags == me.flags) {
        sim::work(sim::Work::PtSteps(1));
        let Some(saddr) = idx.checked_sub(s.pgoff).map(|off| s.start + off * PAGE_SIZE) else { continue };
        let window = saddr & !(PUD_SIZE - 1);
        let covers = s.pgoff <= idx && window >= s.start && window + PUD_SIZE <= s.start + s.pages * PAGE_SIZE;
        if !covers || pmd_index(saddr) != pmd_index(haddr) {
            continue;
        }
        // The MM is handed back, to be let go once i_mmap_rwsem is: the
        // last reference to an MM exits it, which takes that lock.
        let Some(smm) = mm.mmlist.get(s.mm) else { continue };
        let Some((st, si)) = walk_pud(phys, smm.pgd, saddr) else { return Some(smm) };
        let spud = load(phys, st, si);
        if spud.is_none() || spud.huge() {
            return Some(smm);
        }
        let table = spud.pfn();
        pt_share_count(phys, table).fetch_add(1, Relaxed);
        let _ptl = mm.page_table_lock.lock().unwrap();
        if load(phys, pud.0, pud.1).is_none() {
            store(phys, pud.0, pud.1, spud);
        } else {
            pt_share_count(phys, table).fetch_sub(1, Relaxed);
        }
        return Some(smm);
    }
    None
}

/// `hugetlb_zap_begin` .. `hugetlb_zap_end`: runs `f` with what unsharing
/// the PMD tables of the VMA `v` needs held, if it is hugetlb: its VMA lock
/// for write (under `vma-lock`, while it is linked), then its file's
/// `i_mmap_rwsem` for write.
pub(crate) fn with_unshare_locks<R>(k: &Kernel, v: &Vma, f: impl FnOnce() -> R) -> R {
    let file = v.file().filter(|_| v.is_hugetlb());
    let vma_lock = v.hugetlb_vma_lock().filter(|_| k.config.hugetlb_sync == HugetlbSync::VmaLock);
    let _vma_lock = vma_lock.as_ref().map(|l| Locked::take(Structure::HugetlbVmaLock, &**l, || l.write().unwrap()));
    let _i_mmap = file.as_ref().map(|f| f.i_mmap.write());
    f()
}

/// `huge_pmd_unshare`: if the PMD table of `addr` in `mm` is shared, this
/// MM stops using it (its PUD entry is cleared, the share count drops, the
/// TLB forgets the whole window) and true is returned: the caller skips the
/// window. The caller holds the file's `i_mmap_rwsem` for write.
pub(crate) fn huge_pmd_unshare(k: &Kernel, mm: &Mm, tlb: &mut MmuGather, addr: u64) -> bool {
    let phys = &k.phys;
    let Some((pud_table, pud_idx)) = walk_pud(phys, mm.pgd, addr) else { return false };
    let pude = load(phys, pud_table, pud_idx);
    if pude.is_none() || pude.huge() || pt_share_count(phys, pude.pfn()).load(Relaxed) == 0 {
        return false;
    }
    let _ptl = mm.page_table_lock.lock().unwrap();
    store(phys, pud_table, pud_idx, Pte::NONE);
    pt_share_count(phys, pude.pfn()).fetch_sub(1, Relaxed);
    tlb.remove_tlb_entries(addr & !(PUD_SIZE - 1), PUD_SIZE / PAGE_SIZE);
    true
}

/// `hugetlb_no_page`: maps the file's huge page (a shared mapping, or a
/// private one reading a cached page), or a new anonymous huge page (a
/// private mapping), by the none PMD slot `pmd`. A private write to the
/// file's page copies it (`hugetlb_wp`).
fn hugetlb_no_page(
    k: &Kernel,
    mm: &Mm,
    vma: &Vma,
    inode: &Inode,
    walked: &Walked,
    kind: FaultKind,
) -> Result<Option<Pfn>> {
    let phys = &k.phys;
    let (pmd, haddr, nr) = (walked.pmd, walked.haddr, walked.size.pages());
    let index = vma.page_index(haddr);
    super::hugetlb_resv::resv_unmapped(vma)?;
    // A userfaultfd sees a missing page (not in the cache, inside i_size)
    // or, for minor faults, a cached one.
    if vma.userfaultfd_armed() {
        let reason = match inode.has_entry(index) {
            false if index >= inode.nr_pages() => return Err(Errno::SIGBUS),
            false => vma.userfaultfd_missing().then_some(UffdReason::Missing),
            true => vma.userfaultfd_minor().then_some(UffdReason::Minor),
        };
        if let Some(reason) = reason {
            return Err(super::userfaultfd::handle_userfault(k, vma, haddr, kind == FaultKind::Write, reason));
        }
    }
    let (f, anon) = if vma.shared() {
        (inode.hugetlb_get_folio(index, vma.huge_placement(index, walked.size.order()))?, false)
    } else if let Some((f, _)) = inode.get_cached(index) {
        (Folio::from_head(phys, f.pfn), false)
    } else {
        if index >= inode.nr_pages() {
            return Err(Errno::SIGBUS);
        }
        let f = super::hugetlb_resv::alloc_private(k, vma, index, walked.size, true).map_err(|_| Errno::SIGBUS)?;
        k.zero_huge_folio(f);
        (Folio::from_head(phys, f.pfn), true)
    };
    let anon_vma = anon.then(|| mm.anon_vma_prepare(vma));
    let _pl = pte_lockptr(phys, pmd.table).lock();
    // A shared page truncated away meanwhile is not mapped (the fault is
    // retried and finds the new size).
    if !pmd.load(phys).is_none() || !walked.still_ours(k, mm) || (!anon && !in_page_cache(f)) {
        k.folio_put_refs(f, 1);
        return Ok(None);
    }
    let writable = vma.writable() && (vma.shared() || (anon && kind == FaultKind::Write));
    let mut bits = Pte::PRESENT | Pte::USER | Pte::PSE | Pte::ACCESSED;
    if writable {
        bits |= Pte::RW | Pte::MKDIRTY;
    }
    match anon_vma {
        Some(av) => rmap::folio_add_new_anon_rmap(k, f, Level::Pmd, mm.rmap, (av, index)),
        None => rmap::folio_add_file_rmap(k, f, 0, nr, Level::Pmd, mm.rmap),
    }
    pmd.store(phys, Pte::new(f.pfn, bits));
    mm.add_rss(f, nr as i64);
    drop(_pl);
    if kind == FaultKind::Write && !vma.shared() && !anon {
        return hugetlb_wp(k, mm, vma, walked, pmd.load(phys), kind);
    }
    Ok(None)
}

/// `hugetlb_wp`: a write (or unshare) to a read-only huge PMD. A shared
/// mapping's entry becomes writable; an anonymous page only this MM maps
/// is reused; otherwise the page is copied into a new anonymous huge page,
/// a copy of the page cache's using the owner's reservation, a copy of an
/// anonymous page made outside it. When the pool has none: the owner of
/// the mapping copying an anonymous page returns that page, to be taken
/// back from its children; anyone else gets SIGBUS.
fn hugetlb_wp(k: &Kernel, mm: &Mm, vma: &Vma, walked: &Walked, orig: Pte, kind: FaultKind) -> Result<Option<Pfn>> {
    let phys = &k.phys;
    let (pmd, haddr, size) = (walked.pmd, walked.haddr, walked.size);
    let old = Folio::from_head(phys, orig.pfn());
    {
        let _pl = pte_lockptr(phys, pmd.table).lock();
        if pmd.load(phys) != orig || !walked.still_ours(k, mm) {
            return Ok(None);
        }
        // An anon page this MM alone maps is reused, and becomes exclusive
        // again (`folio_move_anon_rmap`).
        let sole = old.test_anon() && rmap::folio_mapcount(k, old) == 1;
        if sole {
            old.set_anon_exclusive(0, true);
        }
        if vma.shared() || sole || (old.test_anon() && old.anon_exclusive(0)) {
            if kind == FaultKind::Write {
                pmd.store(phys, orig.with(Pte::RW | Pte::MKDIRTY | Pte::ACCESSED));
            }
            return Ok(None);
        }
    }
    let anon_vma = mm.anon_vma_prepare(vma);
    let from_cache = !old.test_anon();
    let new = match super::hugetlb_resv::alloc_private(k, vma, vma.page_index(haddr), size, from_cache) {
        Ok(new) => new,
        Err(_) if !from_cache && vma.hugetlb_resv().is_some() => return Ok(Some(old.pfn)),
        Err(_) => return Err(Errno::SIGBUS),
    };
    (0..size.pages()).for_each(|i| phys.copy_frame(new.pfn + i, old.pfn + i));
    let _pl = pte_lockptr(phys, pmd.table).lock();
    if pmd.load(phys) != orig || !walked.still_ours(k, mm) {
        k.folio_put_refs(new, 1);
        return Ok(None);
    }
    rmap::folio_remove_rmap(k, old, 0, size.pages(), Level::Pmd, mm.rmap);
    rmap::folio_add_new_anon_rmap(k, new, Level::Pmd, mm.rmap, (anon_vma, vma.page_index(haddr)));
    let w = if kind == FaultKind::Write { Pte::RW | Pte::MKDIRTY } else { 0 };
    pmd.store(phys, Pte::new(new.pfn, Pte::PRESENT | Pte::USER | Pte::PSE | Pte::ACCESSED | w));
    mm.tlb.flush_range(&k.stats, haddr, haddr + size.bytes());
    k.folio_put_refs(old, 1);
    Ok(None)
}
