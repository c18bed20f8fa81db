//! Faults on a none PTE of a file mapping (mm/memory.c `do_fault` →
//! `do_read_fault` / `do_shared_fault` / `do_cow_fault`, `finish_fault`,
//! `set_pte_range`, `do_fault_around`; mm/filemap.c `filemap_map_pages`),
//! and the write-protect fault of a shared mapping (`wp_page_shared`).
//!
//! A PMD-sized folio is mapped by a PMD when the PMD is none and the VMA
//! allows it (`do_set_pmd`); another large folio by all its PTEs at once
//! when it fits the VMA and the page table (`finish_fault`).
//!
//! In a range registered with a userfaultfd, a fault on a hole goes there
//! for missing faults, on a cached page for minor ones, and pages are
//! mapped one at a time, without fault-around for write-protect and minor.
//!
//! Differs from Linux: no `page_mkwrite` (shmem has none), no readahead;
//! fault-around never skips a folio it cannot lock (Linux does, so it maps
//! a varying number of pages). A PTE of a shared writable mapping is made
//! writable at once, as shmem's `vm_page_prot` allows (no write
//! notification).

use super::fault::VmFault;
use super::huge_memory::Huge;
use crate::arch::{pte_index, Pfn, Pte, PAGE_SIZE, PMD_ORDER, PMD_SIZE, PTRS_PER_TABLE};
use crate::folio::Folio;
use crate::kernel::Stats;
use crate::mapcount::Level;
use crate::mm_types::{vm, UffdReason};
use crate::pgtable::{load, pte_lockptr, pte_range_none, store};
use crate::rmap;
use crate::shmem::{in_page_cache, Inode};
use crate::{Errno, Result};

/// `fault_around_bytes` / PAGE_SIZE: pages a read fault maps around itself.
pub const FAULT_AROUND_PAGES: u64 = 16;

/// `do_fault` for a none PTE of a file VMA: a read maps the file's page
/// (and cached neighbours); a write to a shared mapping maps it writable;
/// a write to a private mapping maps a private copy. SIGBUS past the end
/// of the file.
pub(super) fn do_fault(vmf: &VmFault, inode: &Inode) -> Result<()> {
    if !vmf.write() {
        return do_read_fault(vmf, inode);
    }
    if vmf.vma.shared() {
        return do_shared_fault(vmf, inode);
    }
    do_cow_fault(vmf, inode)
}

/// `do_read_fault`: fault-around first; if that did not map the address,
/// the page itself (allocated into the cache when a hole).
fn do_read_fault(vmf: &VmFault, inode: &Inode) -> Result<()> {
    // should_fault_around(): not where userfaultfd must see each page
    // (uffd_disable_fault_around: registered for write-protect or minor).
    let uffd = vmf.vma.flags() & (vm::UFFD_WP | vm::UFFD_MINOR) != 0;
    if FAULT_AROUND_PAGES > 1 && !uffd && do_fault_around(vmf, inode) {
        return Ok(());
    }
    let (f, pfn) = get_folio(vmf, inode)?;
    finish_fault(vmf, f, pfn)
}

/// `do_shared_fault`: the page, mapped writable and dirty.
fn do_shared_fault(vmf: &VmFault, inode: &Inode) -> Result<()> {
    let (f, pfn) = get_folio(vmf, inode)?;
    f.head().set(crate::phys::pg::DIRTY);
    finish_fault(vmf, f, pfn)
}

/// `do_cow_fault`: a private copy of the file's page (read into the cache
/// first if a hole) in a new anon folio, mapped writable; the file's folio
/// stays in the cache, unmapped here.
fn do_cow_fault(vmf: &VmFault, inode: &Inode) -> Result<()> {
    let (k, phys, table, addr) = (vmf.k, &vmf.k.phys, vmf.table, vmf.address);
    let anon_vma = vmf.mm.anon_vma_prepare(vmf.vma);
    let new = super::vmscan::alloc_folio_reclaim(k, &vmf.mm.mmlist, vmf.vma.placement(addr, 0), false)?;
    let (f, pfn) = match get_folio(vmf, inode) {
        Ok(got) => got,
        Err(e) => {
            k.folio_put_refs(new, 1);
            return Err(e);
        }
    };
    phys.copy_frame(new.pfn, pfn);
    let ptl = vmf.pte_lock();
    if ptl.is_none() || !load(phys, table, pte_index(addr)).is_none() || !in_page_cache(f) {
        drop(ptl);
        k.folio_put_refs(f, 1);
        k.folio_put_refs(new, 1);
        return Ok(());
    }
    k.folio_put_refs(f, 1);
    rmap::folio_add_new_anon_rmap(k, new, Level::Pte, vmf.mm.rmap, (anon_vma, vmf.vma.page_index(addr)));
    k.folio_add_lru_vma(new, vmf.vma.mlocked());
    let e = Pte::new(new.pfn, Pte::PRESENT | Pte::USER | Pte::ACCESSED | Pte::MKDIRTY | Pte::RW);
    store(phys, table, pte_index(addr), e);
    vmf.mm.add_anon_rss(1);
    Stats::inc(&k.stats.cow_copy);
    Ok(())
}

/// The folio orders a new shmem folio for the faulting page may take: the
/// policy's, among those whose aligned block lies inside the VMA at the
/// same alignment as in the file (`thp_vma_suitable_order`), where the
/// release checks that
/// ([`crate::release::KernelVersion::shmem_fault_fits_the_vma`]).
fn suitable_orders(vmf: &VmFault, inode: &Inode, index: u64) -> u32 {
    let vma = vmf.vma;
    let flags = vma.flags();
    let vma_flags = (flags & vm::HUGEPAGE != 0, flags & vm::NOHUGEPAGE != 0);
    let policy = inode.fault_orders(vma_flags, index);
    let checked = vmf.k.config.release().shmem_fault_fits_the_vma(inode.named());
    let fits = |o| !checked || block_fits(vmf, index, o);
    (1..=PMD_ORDER).filter(|&o| policy & (1 << o) != 0 && fits(o)).fold(0, |m, o| m | 1 << o)
}

/// Whether the aligned block of `2^order` pages around page `index`, mapped
/// at the faulting address, lies inside the VMA and starts aligned.
fn block_fits(vmf: &VmFault, index: u64, order: u32) -> bool {
    let nr = 1u64 << order;
    let first = index & !(nr - 1);
    let start = vmf.address / PAGE_SIZE * PAGE_SIZE - (index - first) * PAGE_SIZE;
    (start / PAGE_SIZE).is_multiple_of(nr) && start >= vmf.vma.start() && start + nr * PAGE_SIZE <= vmf.vma.end()
}

/// `__do_fault` → `shmem_fault`: the file's folio for the faulting page,
/// with a reference (with reclaim when memory runs out); SIGBUS past the
/// end of the file. In a range registered with a userfaultfd the fault
/// goes there first (`shmem_get_folio_gfp`): for minor faults when the
/// cache holds an entry for the page, for missing ones when it holds none.
fn get_folio<'k>(vmf: &VmFault<'k>, inode: &Inode) -> Result<(Folio<'k>, Pfn)> {
    let index = vmf.vma.page_index(vmf.address);
    if vmf.vma.userfaultfd_armed() && index < inode.nr_pages() {
        match inode.has_entry(index) {
            true if vmf.vma.userfaultfd_minor() => return Err(vmf.userfault(UffdReason::Minor)),
            false if vmf.vma.userfaultfd_missing() => return Err(vmf.userfault(UffdReason::Missing)),
            _ => {}
        }
    }
    let orders = suitable_orders(vmf, inode, index);
    match super::vmscan::retry_after_reclaim(vmf.k, &vmf.mm.mmlist, || inode.get_folio(index, orders)) {
        Ok((f, pfn)) => Ok((Folio::from_head(&vmf.k.phys, f.pfn), pfn)),
        Err(Errno::EINVAL) => Err(Errno::SIGBUS),
        Err(e) => Err(e),
    }
}

/// The PTE `set_pte_range` makes for a page of this VMA: writable for a
/// write, or in a shared writable mapping whose `vm_page_prot` allows it
/// (not while soft-dirty tracking wants write notification); dirty and
/// soft-dirty for a write.
fn file_pte(vmf: &VmFault, pfn: Pfn, write: bool) -> Pte {
    let mut bits = Pte::PRESENT | Pte::USER | Pte::ACCESSED;
    let notify = vmf.vma.soft_dirty_enabled(vmf.k.config.soft_dirty);
    if vmf.vma.shared() && vmf.vma.writable() && (write || !notify) {
        bits |= Pte::RW;
    }
    if write {
        bits |= Pte::MKDIRTY;
    }
    Pte::new(pfn, bits)
}

/// `finish_fault` + `set_pte_range`: maps every page of a large `f` when
/// the folio lies inside the VMA and this page table and all its PTEs are
/// none, else the page `pfn` alone, unless its PTE was filled meanwhile.
/// The fault's reference becomes a mapping's; each further page adds one.
/// Maps nothing if `f` left the cache meanwhile (the fault is retried).
fn finish_fault(vmf: &VmFault, f: Folio, pfn: Pfn) -> Result<()> {
    let (k, phys, table, addr) = (vmf.k, &vmf.k.phys, vmf.table, vmf.address);
    let nr = f.nr_pages();
    let first_addr = addr / PAGE_SIZE * PAGE_SIZE - (pfn - f.pfn) * PAGE_SIZE;
    // One page at a time in a registered VMA, for userfaultfd to see each.
    let whole = nr > 1
        && !vmf.vma.userfaultfd_armed()
        && first_addr >= vmf.vma.start()
        && first_addr + nr * PAGE_SIZE <= vmf.vma.end()
        && first_addr / PMD_SIZE == (first_addr + nr * PAGE_SIZE - 1) / PMD_SIZE;
    let ptl = vmf.pte_lock();
    if ptl.is_none() || !in_page_cache(f) {
        drop(ptl);
        k.folio_put_refs(f, 1);
        return Ok(());
    }
    if whole && pte_range_none(phys, table, pte_index(first_addr), nr as usize) {
        f.ref_add(nr as i32 - 1);
        rmap::folio_add_file_rmap(k, f, 0, nr, Level::Pte, vmf.mm.rmap);
        for i in 0..nr {
            let write = vmf.write() && f.pfn + i == pfn;
            store(phys, table, pte_index(first_addr) + i as usize, file_pte(vmf, f.pfn + i, write));
        }
        vmf.mm.add_rss(f, nr as i64);
        return Ok(());
    }
    if !load(phys, table, pte_index(addr)).is_none() {
        drop(ptl);
        k.folio_put_refs(f, 1);
        return Ok(());
    }
    rmap::folio_add_file_rmap(k, f, pfn - f.pfn, 1, Level::Pte, vmf.mm.rmap);
    store(phys, table, pte_index(addr), file_pte(vmf, pfn, vmf.write()));
    vmf.mm.add_rss(f, 1);
    Ok(())
}

/// The PMD-level part of `do_fault` while the PMD is none: the faulting
/// page's folio (cached, or allocated for a read or a shared write), mapped
/// by a PMD if it is PMD-sized and, from Linux 6.12, the VMA allows THP
/// (`do_set_pmd`, from fault-around's `filemap_map_pmd` or from
/// `finish_fault`); else the fault goes on at PTE level. A private write
/// always does.
pub(super) fn do_fault_pmd(vmf: &VmFault, inode: &Inode) -> Result<Huge> {
    // thp_vma_suitable_order(): the PMD's first page must be a PMD-aligned
    // file page, or no PMD-sized folio can sit under it.
    let haddr = vmf.address & !(PMD_SIZE - 1);
    if (vmf.write() && !vmf.vma.shared()) || !vmf.vma.page_index(haddr).is_multiple_of(1 << PMD_ORDER) {
        return Ok(Huge::Fallback);
    }
    let (f, pfn) = get_folio(vmf, inode)?;
    let at_head = pfn - f.pfn == (vmf.address - haddr) / PAGE_SIZE;
    let thp_disabled =
        vmf.vma.flags() & vm::NOHUGEPAGE != 0 && vmf.k.config.release().pmd_maps_only_where_thp_allowed();
    if f.order() != PMD_ORDER || !at_head || thp_disabled {
        vmf.k.folio_put_refs(f, 1);
        return Ok(Huge::Fallback);
    }
    // do_shared_fault()'s fault_dirty_shared_page().
    if vmf.write() {
        f.head().set(crate::phys::pg::DIRTY);
    }
    do_set_pmd(vmf, f)
}

/// `do_set_pmd`: maps the PMD-sized `f` by the none PMD of the fault,
/// writable as the PTEs would be; the fault's reference becomes the PMD's.
/// Maps nothing if `f` left the cache meanwhile.
fn do_set_pmd(vmf: &VmFault, f: Folio) -> Result<Huge> {
    let (k, phys, pmd) = (vmf.k, &vmf.k.phys, vmf.pmd);
    let _pl = pte_lockptr(phys, pmd.table).lock();
    if !pmd.load(phys).is_none() || !in_page_cache(f) {
        drop(_pl);
        k.folio_put_refs(f, 1);
        return Ok(Huge::Done);
    }
    rmap::folio_add_file_rmap(k, f, 0, 1 << PMD_ORDER, Level::Pmd, vmf.mm.rmap);
    pmd.store(phys, file_pte(vmf, f.pfn, vmf.write()).with(Pte::PSE));
    vmf.mm.add_rss(f, 1 << PMD_ORDER);
    Stats::inc(&k.stats.thp_file_mapped);
    Ok(Huge::Done)
}

/// `do_fault_around` + `filemap_map_pages`: maps every uptodate page
/// already in the cache in the aligned block of [`FAULT_AROUND_PAGES`]
/// around the fault, clipped to the VMA, the page table and the file, where
/// the PTE is none, each folio's run of pages as one batch (one rmap call,
/// one reference and RSS update: `filemap_map_folio_range`); from Linux
/// 6.18 a folio that meets the window is mapped whole when it lies inside
/// the VMA and this page table ([`KernelVersion::maps_whole_folio_around`];
/// every foliomm file is shmem, which 6.18 maps whole even across
/// `i_size`). Returns true if the faulting address got mapped.
///
/// [`KernelVersion::maps_whole_folio_around`]: crate::release::KernelVersion::maps_whole_folio_around
fn do_fault_around(vmf: &VmFault, inode: &Inode) -> bool {
    let (k, phys, vma) = (vmf.k, &vmf.k.phys, vmf.vma);
    let nr = FAULT_AROUND_PAGES;
    let pte_off = pte_index(vmf.address) as u64;
    let vma_off = (vmf.address - vma.start()) / PAGE_SIZE;
    let vma_pages = (vma.end() - vma.start()) / PAGE_SIZE;
    let from = (pte_off & !(nr - 1)).max(pte_off - pte_off.min(vma_off));
    let to = (from + nr).min(PTRS_PER_TABLE).min(pte_off + vma_pages - vma_off);
    // The file page at entry `i`; the window starts inside the VMA, so
    // it never precedes the VMA's first page.
    let base = vma.page_index(vmf.address);
    let index_at = |i: u64| if i >= pte_off { base + (i - pte_off) } else { base - (pte_off - i) };
    let whole_folios = k.config.release().maps_whole_folio_around();
    // The table's first entry maps this address (one table: one PMD range).
    let table_start = vmf.address & !(PMD_SIZE - 1);
    let file_pages = inode.nr_pages();
    let Some(_ptl) = vmf.pte_lock() else { return false };
    let mut mapped_fault = false;
    let mut i = from;
    while i < to && index_at(i) < file_pages {
        let index = index_at(i);
        let Some((f, pfn)) = inode.get_cached(index) else {
            i += 1;
            continue;
        };
        let f = Folio::from_head(phys, f.pfn);
        let (first, n) = (pfn - f.pfn, f.nr_pages());
        // The folio's first page's entry and address, were it mapped whole.
        let lo = i.checked_sub(first).filter(|lo| lo + n <= PTRS_PER_TABLE);
        let within_vma = |lo: u64| {
            let addr0 = table_start + lo * PAGE_SIZE;
            addr0 >= vma.start() && addr0 + n * PAGE_SIZE <= vma.end()
        };
        // filemap_map_folio_range(): the whole folio, or its pages from
        // here on within the window and the file.
        let (start, end) = match lo.filter(|&lo| whole_folios && n > 1 && within_vma(lo)) {
            Some(lo) => (lo, lo + n),
            None => (i, to.min(i + n - first).min(i + file_pages - index)),
        };
        let mapped = map_none_runs(vmf, f, f.pfn + (start + first - i), start, end);
        if mapped == 0 {
            k.folio_put_refs(f, 1);
        } else {
            f.ref_add(mapped as i32 - 1);
        }
        mapped_fault |= (start..end).contains(&pte_off) && !load(phys, vmf.table, pte_off as usize).is_none();
        i = end.max(i + 1);
    }
    mapped_fault
}

/// Maps the pages of `f` from frame `pfn` at entries `start..end` of the
/// fault's table where the PTE is none, each run of none entries as one
/// batch (one rmap call and RSS update); returns how many it mapped. The
/// caller holds the PTL and takes the references.
fn map_none_runs(vmf: &VmFault, f: Folio, pfn: Pfn, start: u64, end: u64) -> u64 {
    let (k, phys, table) = (vmf.k, &vmf.k.phys, vmf.table);
    let mut mapped = 0;
    let mut j = start;
    while j < end {
        let run = (j..end).take_while(|&e| load(phys, table, e as usize).is_none()).count() as u64;
        if run == 0 {
            j += 1;
            continue;
        }
        let at = pfn + (j - start);
        rmap::folio_add_file_rmap(k, f, at - f.pfn, run, Level::Pte, vmf.mm.rmap);
        for e in 0..run {
            store(phys, table, (j + e) as usize, file_pte(vmf, at + e, false));
        }
        vmf.mm.add_rss(f, run as i64);
        mapped += run;
        j += run;
    }
    mapped
}

/// `wp_page_shared` → `wp_page_reuse`: a write to a read-only PTE of a
/// shared mapping makes it writable and dirty in place.
pub(super) fn wp_page_shared(vmf: &VmFault) -> Result<()> {
    let (phys, table, orig) = (&vmf.k.phys, vmf.table, vmf.orig);
    let idx = pte_index(vmf.address);
    let ptl = vmf.pte_lock();
    if ptl.is_some() && load(phys, table, idx) == orig {
        Folio::containing(phys, orig.pfn()).head().set(crate::phys::pg::DIRTY);
        store(phys, table, idx, orig.with(Pte::ACCESSED | Pte::MKDIRTY | Pte::RW));
    }
    Ok(())
}
