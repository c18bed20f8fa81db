//! Migration of 2 MiB hugetlb folios (mm/hugetlb.c `isolate_hugetlb`,
//! `folio_putback_hugetlb`, `move_hugetlb_state`; mm/migrate.c
//! `unmap_and_move_huge_page`; mm/rmap.c `try_to_migrate_one`'s hugetlb
//! branch): what [`super::migrate`] does differently for them.
//!
//! The rmap walk of a shared hugetlb page unshares PMD tables (seed 002's
//! "rmap-side unsharing"): each VMA whose MM reaches the page through a
//! PMD table it shares with others lets go of that table, which unmaps the
//! whole 1 GiB window in that MM; the last MM using the table keeps it, and
//! only its entry is migrated. The MMs that let go refault through the
//! table again (`huge_pmd_share`) and find the new page.
//!
//! A 1 GiB page moves only to a free pool page of the target node (no
//! temporary gigantic page is allocated for a migration, as in Linux).
//!
//! Differs from Linux: the walk unshares first and then
//! holds the tables still ([`super::folio_mappings`]) instead of doing both
//! in one pass with migration entries, so a fault between the two may share
//! the table again, which the move then sees as one mapping.

use super::hugetlb::huge_pmd_unshare;
use crate::arch::Pte;
use crate::folio::Folio;
use crate::kernel::{HugeSize, HugetlbSync, Kernel};
use crate::mm_types::MmList;
use crate::pgtable::{pte_lockptr, PmdSlot};
use crate::phys::pg;
use crate::shmem::Inode;
use crate::tlb::MmuGather;
use crate::{Errno, Result};

/// Whether `f` is a hugetlb folio.
pub(super) fn is_hugetlb(f: Folio) -> bool {
    f.head().test(pg::HUGETLB)
}

/// `isolate_hugetlb`: takes a reference on the in-use hugetlb folio `f`
/// for migration; false if it is free or isolated already.
pub(super) fn isolate_hugetlb(f: Folio) -> bool {
    if f.refcount() <= 0 || f.head().test_and_set(pg::HUGETLB_ISOLATED) {
        return false;
    }
    f.ref_add(1);
    true
}

/// `folio_putback_hugetlb`: migratable again, the isolation reference
/// dropped.
pub(super) fn putback_hugetlb(k: &Kernel, f: Folio) {
    f.head().clear(pg::HUGETLB_ISOLATED);
    k.folio_put_refs(f, 1);
}

/// `alloc_migration_target` for a hugetlb folio of `src`'s size on `nid`.
pub(super) fn alloc_target<'k>(k: &'k Kernel, src: Folio, nid: usize) -> Result<Folio<'k>> {
    let size = HugeSize::of_order(src.order()).expect("a hugetlb folio has a huge page's order");
    k.alloc_hugetlb_migration_target(size, nid)
}

/// `move_hugetlb_state` after `src` moved to `dst`: a temporary `dst` stays
/// in the pool and `src` takes its temporary state, to go back to the buddy
/// allocator when freed; a surplus page of `src`'s node counts on `dst`'s.
pub(super) fn move_hugetlb_state(k: &Kernel, src: Folio, dst: Folio) {
    if dst.head().test(pg::HUGETLB_TEMPORARY) {
        dst.head().clear(pg::HUGETLB_TEMPORARY);
        src.head().set(pg::HUGETLB_TEMPORARY);
        let size = HugeSize::of_order(src.order()).expect("a hugetlb folio");
        k.hugetlb_move_surplus(size, k.phys.nid(src.pfn), k.phys.nid(dst.pfn));
    }
    src.head().clear(pg::HUGETLB_ISOLATED);
}

/// The huge entry of `slot` as a fault may act on it: a none entry is read
/// again under the table's lock, which a migration holds while the entry
/// is cleared (where Linux leaves a migration entry for the fault to wait
/// on, `migration_entry_wait_huge`), so that a fault on a page being moved
/// does not take it for a hole and allocate another.
pub(super) fn entry_not_migrating(k: &Kernel, slot: PmdSlot) -> Pte {
    match slot.load(&k.phys) {
        e if e.is_none() => {
            let _ptl = pte_lockptr(&k.phys, slot.table).lock();
            slot.load(&k.phys)
        }
        e => e,
    }
}

/// `try_to_migrate_one`'s hugetlb branch for the page-cache hugetlb folio
/// `f` of `inode`, under `i_mmap_rwsem` for write (the caller's
/// `hugetlb_folio_mapping_lock_write`): for each VMA mapping it, in the
/// walk's order, the VMA's hugetlb lock is tried for write (under the
/// `vma-lock` design; EAGAIN if busy, the walk stopping there as Linux's
/// does) and the MM lets go of the PMD table if it shares it
/// (`huge_pmd_unshare`, the TLB of the whole window flushed). The MM left
/// alone with a table keeps it.
pub(super) fn unshare_for_migration(k: &Kernel, mmlist: &MmList, inode: &Inode, f: Folio) -> Result<()> {
    let records = inode.i_mmap.write();
    for r in records.iter() {
        let Some((addr, _)) = r.addresses(f.index(), f.index() + f.nr_pages()) else { continue };
        let Some(mm) = mmlist.get(r.mm) else { continue };
        let vma_lock = inode.i_mmap.vma_lock(r.vma).filter(|_| k.config.hugetlb_sync == HugetlbSync::VmaLock);
        let held = vma_lock.as_ref().map(|l| l.try_write());
        if held.as_ref().is_some_and(|g| g.is_err()) {
            return Err(Errno::EAGAIN);
        }
        let mut tlb = MmuGather::new(k, &mm.tlb, false);
        huge_pmd_unshare(k, &mm, &mut tlb, addr);
    }
    Ok(())
}
