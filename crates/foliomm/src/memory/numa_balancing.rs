//! Automatic NUMA balancing's page-table side: the scan that makes a
//! task's entries PROT_NONE so that its next access traps
//! (`task_numa_work` → `change_prot_numa`, mm/mprotect.c `prot_numa_skip`,
//! `change_huge_pmd`), and the hinting fault that maps the page back and
//! moves it to the node of the CPU that touched it if the VMA's policy
//! wants it there (mm/memory.c `do_numa_page`, `numa_migrate_check`,
//! mm/huge_memory.c `do_huge_pmd_numa_page`, mm/mempolicy.c
//! `mpol_misplaced`, mm/migrate.c `migrate_misplaced_folio`).
//!
//! Two "mapped shared?" questions are asked: the scan leaves a folio of a
//! COW mapping alone if it may be shared (or pinned), and the fault tells
//! `task_numa_fault` that a folio of a `VM_SHARED` mapping is shared
//! (`TNF_SHARED`, counted as `numa_shared_faults`).
//!
//! Differs from Linux: the scan covers the given range at once (no scan
//! window, period or `numa_scan_seq`); every model task runs on node 0,
//! so the scan of a single-threaded process skips folios already there
//! (`target_node`); the cpupid two-stage filter of
//! `should_numa_migrate_memory` always lets a task's own folio go (true
//! for a task's first faults); no memory tiering; no task or group
//! placement (`task_numa_fault` is the counters only); a huge PMD only
//! partly inside the scanned range is left alone (Linux's
//! `change_pmd_range` splits it); only anon folios move on a hinting
//! fault (Linux moves shmem and file folios too).

use super::fault::VmFault;
use super::migrate::{migrate_pages, Reason};
use crate::arch::{pmd_addr_end, pte_index, Pte, PAGE_SIZE, PMD_SIZE};
use crate::folio::Folio;
use crate::kernel::{Consumer, Kernel, Stats};
use crate::mm_types::{Mempolicy, Mm, Vma};
use crate::pgtable::{load, pte_lock_checked, pte_lockptr, store, walk_pmd, PmdSlot};
use crate::rmap;
use crate::Result;

/// The node every model task runs on (`numa_node_id()`).
const LOCAL_NODE: usize = 0;

/// `change_prot_numa` over `[start, end)` of `vma`: each present entry of
/// a folio the scan does not skip becomes PROT_NONE (`pte_modify` with
/// `PAGE_NONE`); counts `numa_pte_updates` (pages) and
/// `numa_huge_pte_updates` and shoots the range's TLB entries down.
/// Returns the pages updated.
pub fn change_prot_numa(k: &Kernel, mm: &Mm, vma: &Vma, start: u64, end: u64) -> u64 {
    let phys = &k.phys;
    let _walk = mm.pt_read();
    let mut updated = 0;
    let mut addr = start;
    while addr < end {
        let next = pmd_addr_end(addr, end);
        let Some(pmd) = walk_pmd(phys, mm.pgd, addr) else {
            addr = next;
            continue;
        };
        let e = pmd.load(phys);
        if e.huge() {
            // change_huge_pmd(MM_CP_PROT_NUMA): neither the shared-COW nor
            // the target-node test of the PTE path.
            let _pl = pte_lockptr(phys, pmd.table).lock();
            let e = pmd.load(phys);
            if e.huge() && !e.special() && e.hw_present() && addr.is_multiple_of(PMD_SIZE) && next - addr == PMD_SIZE {
                pmd.store(phys, e.modify_prot(false, false));
                updated += PMD_SIZE / PAGE_SIZE;
                Stats::inc(&k.stats.numa_huge_pte_updates);
            }
        } else if !e.is_none() {
            let table = e.pfn();
            let Some(_ptl) = pte_lock_checked(phys, pmd, table) else {
                addr = next;
                continue;
            };
            let skipped = |p: Pte| !p.hw_present() || prot_numa_skip(k, mm, vma, p);
            updated += super::change_protection::change_pte_range_batched(k, table, addr, next, skipped, |p| {
                p.modify_prot(false, false)
            });
        }
        addr = next;
    }
    if updated > 0 {
        mm.tlb.flush_range(&k.stats, start, end);
    }
    k.stats.numa_pte_updates.fetch_add(updated, crate::sync::atomic::Ordering::Relaxed);
    updated
}

/// `prot_numa_skip` for a present PTE: the zero page; a KSM page; in a COW (private)
/// mapping a folio that may be pinned or mapped shared (from 6.15
/// `folio_maybe_mapped_shared`, 6.10 `folio_likely_mapped_shared`, before
/// that `page_count() != 1`: [`crate::release::KernelVersion::prot_numa_asks_refcount`]);
/// and, for a single-threaded process (`mm_users == 1`), a folio on the
/// node it runs on.
fn prot_numa_skip(k: &Kernel, mm: &Mm, vma: &Vma, p: Pte) -> bool {
    if p.special() {
        return true;
    }
    let f = Folio::containing(&k.phys, p.pfn());
    if f.test_ksm() {
        return true;
    }
    if !vma.shared() {
        let shared = if k.config.release().prot_numa_asks_refcount() {
            f.refcount() != 1
        } else {
            f.maybe_dma_pinned() || rmap::page_maybe_mapped_shared(k, f, 0)
        };
        if f.is_large() {
            k.decided(Consumer::NumaBalancing, f, shared);
        }
        if shared {
            return true;
        }
    }
    mm.users.load(crate::sync::atomic::Ordering::Relaxed) == 1 && k.phys.nid(f.pfn) == LOCAL_NODE
}

/// The entry a hinting fault restores (`pte_modify` with `vm_page_prot`,
/// and write permission where `can_change_pte_writable` allows it).
fn restored(k: &Kernel, vma: &Vma, e: Pte, page_pfn: u64) -> Pte {
    let f = Folio::containing(&k.phys, page_pfn);
    let i = if e.huge() { 0 } else { page_pfn - f.pfn };
    let can_write = super::change_protection::can_change_writable(k, vma, e, || f.test_anon() && f.anon_exclusive(i));
    e.modify_prot(vma.readable(), vma.writable() && can_write)
}

/// `numa_migrate_check` + `mpol_misplaced`: counts the hinting fault (and
/// a local one), classifies it (`TNF_SHARED` for a folio of a `VM_SHARED`
/// mapping that may be mapped shared, asked as the release asks it), and
/// names the node the folio should move to: the local node under the
/// default policy (`MPOL_F_MOF`), none under the others or if it is there.
fn migrate_check(k: &Kernel, vma: &Vma, f: Folio, i: u64) -> Option<usize> {
    Stats::inc(&k.stats.numa_hint_faults);
    let nid = k.phys.nid(f.pfn);
    if nid == LOCAL_NODE {
        Stats::inc(&k.stats.numa_hint_faults_local);
    }
    if vma.shared() {
        let shared = rmap::page_maybe_mapped_shared(k, f, i);
        if f.is_large() {
            k.decided(Consumer::NumaBalancing, f, shared);
        }
        if shared {
            Stats::inc(&k.stats.numa_shared_faults);
        }
    }
    (vma.policy() == Mempolicy::Default && nid != LOCAL_NODE && f.test_anon()).then_some(LOCAL_NODE)
}

/// `do_numa_page`: a PTE made PROT_NONE by the scan is mapped back (under
/// its lock, if it is still the one the fault saw), and a misplaced folio
/// is isolated and migrated to its node (`migrate_misplaced_folio`, no
/// split of a large one; `numa_pages_migrated`).
pub fn do_numa_page(vmf: &VmFault) -> Result<()> {
    let (k, phys, orig) = (vmf.k, &vmf.k.phys, vmf.orig);
    let idx = pte_index(vmf.address);
    let target = {
        let ptl = vmf.pte_lock();
        if ptl.is_none() || load(phys, vmf.table, idx) != orig {
            return Ok(());
        }
        store(phys, vmf.table, idx, restored(k, vmf.vma, orig, orig.pfn()));
        let f = Folio::containing(phys, orig.pfn());
        match migrate_check(k, vmf.vma, f, orig.pfn() - f.pfn) {
            Some(nid) if k.lru.isolate(f) => Some((f, nid)),
            _ => None,
        }
    };
    migrate_misplaced(k, vmf.mm, target);
    Ok(())
}

/// `do_huge_pmd_numa_page`: [`do_numa_page`] for a huge PMD.
pub fn do_huge_pmd_numa_page(vmf: &VmFault, pmd: PmdSlot) -> Result<()> {
    let (k, phys, orig) = (vmf.k, &vmf.k.phys, vmf.orig);
    let target = {
        let _pl = pte_lockptr(phys, pmd.table).lock();
        if pmd.load(phys) != orig {
            return Ok(());
        }
        pmd.store(phys, restored(k, vmf.vma, orig, orig.pfn()));
        let f = Folio::from_head(phys, orig.pfn());
        match migrate_check(k, vmf.vma, f, 0) {
            Some(nid) if k.lru.isolate(f) => Some((f, nid)),
            _ => None,
        }
    };
    migrate_misplaced(k, vmf.mm, target);
    Ok(())
}

/// `migrate_misplaced_folio` of the isolated folio, if any.
fn migrate_misplaced(k: &Kernel, mm: &Mm, target: Option<(Folio, usize)>) {
    let Some((f, nid)) = target else { return };
    let nr = f.nr_pages();
    if migrate_pages(k, &mm.mmlist, vec![f], nid, Reason::NumaMisplaced) == Ok(0) {
        k.stats.numa_pages_migrated.fetch_add(nr, crate::sync::atomic::Ordering::Relaxed);
    }
}
