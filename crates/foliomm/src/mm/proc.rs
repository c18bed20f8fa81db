//! What /proc shows of an address space (fs/proc/task_mmu.c): pagemap and
//! kpageflags of one page, smaps-style sums over a range, and the memory
//! lines of /proc/PID/status (one VMA's smaps entry: [`super::smaps`]).
#![warn(missing_docs)]

use crate::arch::{Pfn, PAGE_SIZE};
use crate::folio::Folio;
use crate::memory::clear_refs::clear_soft_dirty_vma;
use crate::mm_types::{vm, Mm};
use crate::pgtable::{leaf_slot, pt_share_count, pte_lockptr, LeafSlot};
use crate::rmap;
use crate::sync::atomic::Ordering::Relaxed;
use crate::sync::BitSpinLock;

/// `folio_average_page_mapcount`: the large folio's mapcount spread over
/// its pages, its PMD mappings counted whole (what `/proc/kpagecount` shows
/// under `CONFIG_NO_PAGE_MAPCOUNT`).
fn average_page_mapcount(k: &crate::kernel::Kernel, f: Folio) -> u64 {
    let mapcount = rmap::folio_mapcount(k, f);
    let entire = k.design.entire_mapcount(f);
    match mapcount {
        0 => 0,
        m if m <= entire => entire,
        m => (m - entire + f.nr_pages() / 2) / f.nr_pages() + entire,
    }
}

impl Mm {
    /// What `/proc/self/pagemap` and `/proc/kpageflags` say of the page at
    /// `addr`, plus the model's fields; the precision report (when on)
    /// judges its "shared" answers as one observation.
    pub fn page_info(&self, addr: u64) -> PageInfo {
        self.page_state(addr, true)
    }

    /// [`Mm::page_info`] without counting it as an observation (for traces).
    pub fn page_peek(&self, addr: u64) -> PageInfo {
        self.page_state(addr, false)
    }

    /// `clear_refs_write` of 4 (`CLEAR_REFS_SOFT_DIRTY`), under the
    /// mmap_lock for write, each VMA write-locked as the walk does
    /// (`PGWALK_WRLOCK`): every VMA loses `VM_SOFTDIRTY` (so writes to it
    /// are tracked from now on) and every entry its soft-dirty bit
    /// ([`clear_soft_dirty_vma`]); then the MM's TLB is flushed
    /// (`flush_tlb_mm`). Without `CONFIG_MEM_SOFT_DIRTY` Linux accepts the
    /// write and changes nothing.
    pub fn clear_refs_soft_dirty(&self) {
        let vmas = self.mmap_write_lock();
        if !self.kernel.config.soft_dirty {
            return;
        }
        for v in vmas.iter() {
            vmas.start_write(v);
            if v.flags() & vm::SOFTDIRTY != 0 {
                v.set_flags(v.flags() & !vm::SOFTDIRTY);
            }
            clear_soft_dirty_vma(&self.kernel, self, v);
        }
        self.tlb.flush_all(&self.kernel.stats);
    }

    fn page_state(&self, addr: u64, judge: bool) -> PageInfo {
        let (vmas, _walk) = (self.mmap_read_lock(), self.pt_read());
        let k = &*self.kernel;
        let phys = &k.phys;
        let mut info = PageInfo::default();
        // pagemap_read() walks VMAs only: where none is, it reports nothing,
        // even while a munmap (under the downgraded lock) still zaps there.
        // PM_SOFT_DIRTY: the VMA's VM_SOFTDIRTY, holes too
        // (pagemap_pte_hole); a hugetlb page reports no entry's bit
        // (pagemap_hugetlb_range).
        let Some((vma_soft_dirty, hugetlb)) = vmas.find(addr).map(|v| (v.flags() & vm::SOFTDIRTY != 0, v.is_hugetlb()))
        else {
            return info;
        };
        info.soft_dirty = vma_soft_dirty;
        let Some((slot, _ptl)) = self.locked_leaf(addr) else {
            return info;
        };
        let leaf = slot.load(phys);
        // pte_to_pagemap_entry(): PM_SWAP, and nothing of a page.
        info.swapped = leaf.is_swap() && !slot.huge();
        info.uffd_wp = leaf.any_uffd_wp();
        info.soft_dirty |= k.config.soft_dirty && !hugetlb && leaf.any_soft_dirty();
        if !leaf.present() || leaf.huge() != slot.huge() {
            return info;
        }
        let pfn = slot.page_pfn(leaf, addr);
        let huge = slot.huge();
        let f = Folio::containing(phys, pfn);
        info.present = true;
        info.pfn = pfn;
        info.generation = phys.generation(pfn);
        // As smaps and PAGEMAP_SCAN show it: before 6.5 smaps hides a
        // PROT_NONE THP's PMD (`smaps_counts_protnone_pmd`), never a
        // hugetlb page's (`smaps_hugetlb_range`), and never counts the
        // huge zero page at all, which only pagemap shows (a protnone
        // entry as present).
        let seen = leaf.hw_present() || hugetlb || f.is_zero_page() || k.config.release().smaps_counts_protnone_pmd();
        info.pmd_mapped = huge && seen;
        info.pmd_shared = huge && pt_share_count(phys, slot.table).load(std::sync::atomic::Ordering::Relaxed) > 0;
        info.writable = leaf.write();
        info.zero_page = f.is_zero_page();
        info.anon = f.test_anon();
        info.ksm = f.test_ksm();
        info.folio_order = f.order();
        info.node = phys.nid(pfn) as u32;
        if !info.zero_page {
            let i = pfn - f.pfn;
            info.anon_exclusive = f.anon_exclusive(if huge { 0 } else { i });
            // kpagecount: the folio's average without per-page counts
            // (folio_average_page_mapcount, CONFIG_NO_PAGE_MAPCOUNT).
            info.mapcount = rmap::page_mapcount(k, f, i).unwrap_or_else(|| average_page_mapcount(k, f));
            info.folio_mapcount = rmap::folio_mapcount(k, f);
            info.refcount = f.refcount() as u64;
            // pagemap_pmd_range_thp() asks about pmd_page(), the head, for
            // every subpage of a PMD mapping; pte_to_pagemap_entry() about
            // the page itself (__folio_page_mapped_exclusively).
            let judged = if huge { 0 } else { i };
            info.maybe_shared = rmap::folio_maybe_mapped_shared(k, f);
            // __folio_page_mapped_exclusively(): without per-page counts,
            // whether the folio may be mapped shared.
            info.exclusive = rmap::page_mapcount(k, f, judged).map_or(!info.maybe_shared, |n| n == 1);
            info.sharers_unknown = f.is_large() && info.maybe_shared && !k.design.knows_sharers();
            if f.head().test(crate::phys::pg::HUGETLB) && k.config.release().pagemap_hugetlb_by_sharing() {
                // pagemap_hugetlb_range(): exclusive unless maybe mapped
                // shared or in a shared PMD table. 6.1 asks page_mapcount()
                // == 1 (as above), which a shared PMD table counts once.
                info.exclusive = !info.maybe_shared && !info.pmd_shared;
            }
            info.likely_shared = rmap::folio_likely_mapped_shared(k, f, i);
            if judge && f.is_large() {
                k.observe(|o| o.shared_answered(k, f, info.maybe_shared, info.likely_shared));
            }
        }
        info
    }

    /// The leaf slot of `addr` with its table's lock taken, as
    /// pagemap_pmd_range() reads entries: a zap beside the reader
    /// (MADV_DONTNEED, a munmap's) is seen before or after, never with an
    /// entry gone and its folio still being unmapped. A slot that changed
    /// before the lock was taken (a PMD split or collapse meanwhile) is
    /// looked up again, as `pte_offset_map_lock` re-checks the PMD. The
    /// caller holds the mmap_lock and a page-table read section.
    fn locked_leaf(&self, addr: u64) -> Option<(LeafSlot, BitSpinLock<'_>)> {
        let phys = &self.kernel.phys;
        loop {
            let slot = leaf_slot(phys, self.pgd, addr)?;
            let ptl = pte_lockptr(phys, slot.table).lock();
            if leaf_slot(phys, self.pgd, addr) == Some(slot) {
                return Some((slot, ptl));
            }
        }
    }

    /// The mapcount design's raw fields of the large folio mapped at `addr`
    /// (see [`crate::mapcount::MapcountDesign::fields`]); empty for a small
    /// or hugetlb folio, or nothing mapped.
    pub fn folio_fields(&self, addr: u64) -> Vec<(String, i64)> {
        let (vmas, _walk) = (self.mmap_read_lock(), self.pt_read());
        let phys = &self.kernel.phys;
        if vmas.find(addr).is_none() {
            return Vec::new();
        }
        let Some((slot, _ptl)) = self.locked_leaf(addr) else { return Vec::new() };
        let leaf = slot.load(phys);
        if !leaf.present() || leaf.huge() != slot.huge() {
            return Vec::new();
        }
        let f = Folio::containing(phys, slot.page_pfn(leaf, addr));
        if !f.is_large() || f.is_zero_page() || f.head().test(crate::phys::pg::HUGETLB) {
            return Vec::new();
        }
        self.kernel.design.fields(f)
    }

    /// `map_count`: the VMAs of this MM (the lines of /proc/PID/maps).
    pub fn map_count(&self) -> u64 {
        self.mmap_read_lock().len() as u64
    }

    /// `VmPTE` (`mm_pgtables_bytes`) in KiB: the page tables this MM
    /// uses below its PGD, deposited ones included; a PMD table shared with
    /// other MMs counts in each (as `huge_pmd_share` counts it).
    pub fn pgtables_kb(&self) -> u64 {
        let _vmas = self.mmap_read_lock();
        let mut tables = self.deposits.lock().unwrap().len() as u64;
        crate::pgtable::walk_all(&self.kernel.phys, self.pgd, |v| {
            tables += matches!(v, crate::pgtable::Visit::Table(_)) as u64;
            true
        });
        tables * 4
    }

    /// The memory lines of `/proc/PID/status` (`task_mem`) from the MM's
    /// counters: `RssAnon`, `RssShmem`, `HugetlbPages`
    /// (`mm->hugetlb_usage`), `VmSwap`. `RssFile` is always 0: the model maps no
    /// regular files.
    pub fn status(&self) -> ProcStatus {
        let kb = |pages: &crate::sync::atomic::AtomicI64| pages.load(Relaxed).max(0) as u64 * (PAGE_SIZE / 1024);
        ProcStatus {
            rss_anon_kb: kb(&self.rss_anon),
            rss_shmem_kb: kb(&self.rss_shmem),
            hugetlb_kb: kb(&self.hugetlb_usage),
            swap_kb: kb(&self.rss_swap),
        }
    }

    /// What `/proc/self/smaps` would sum for `[start, end)`.
    pub fn range_info(&self, start: u64, end: u64) -> RangeInfo {
        let mut r = RangeInfo::default();
        let mut addr = start & !(PAGE_SIZE - 1);
        while addr < end {
            let p = self.page_state(addr, false);
            r.swap_kb += 4 * p.swapped as u64;
            // smaps_pte_entry(): the zero pages have no vm_normal_page and
            // are not counted at all.
            if p.present && !p.zero_page {
                r.rss_kb += 4;
                let huge = if p.anon { &mut r.anon_huge_kb } else { &mut r.shmem_pmd_kb };
                if p.pmd_mapped {
                    *huge += 4;
                }
                *(if p.anon { &mut r.anonymous_kb } else { &mut r.shmem_kb }) += 4;
                // Shared/private as pagemap's exclusive bit says, which both
                // backends can tell; smaps counts per page and differs for a
                // PMD-mapped THP whose head alone is shared.
                if !p.exclusive {
                    r.shared_kb += 4;
                } else {
                    r.private_kb += 4;
                }
            }
            addr += PAGE_SIZE;
        }
        r
    }
}

/// One page as pagemap/kpageflags report it, plus model-only fields.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PageInfo {
    /// pagemap `PM_PRESENT`: a present leaf entry (PROT_NONE ones too) maps
    /// the page. When false, the other fields are their defaults (but
    /// `swapped` and `uffd_wp`).
    pub present: bool,
    /// pagemap `PM_SWAP`: a swap entry stands for the page (never
    /// `PM_MMAP_EXCLUSIVE` then: there is no page to judge).
    #[serde(default)]
    pub swapped: bool,
    /// pagemap's PFN field: the model frame of the page (Linux zeroes it for
    /// readers without `CAP_SYS_ADMIN`; the model always fills it).
    pub pfn: Pfn,
    /// kpageflags `KPF_ZERO_PAGE`: the shared zero page or the huge zero
    /// folio. Counts and sharing fields are then left at 0/false.
    pub zero_page: bool,
    /// `PageAnon` (kpageflags `KPF_ANON`): else a file (shmem) page.
    pub anon: bool,
    /// Mapped by a huge PMD (or, for a 1 GiB hugetlb page, PUD) entry, not a
    /// PTE (`PAGEMAP_SCAN`'s `PAGE_IS_HUGE`; pagemap has no bit for it).
    pub pmd_mapped: bool,
    /// The leaf entry's hardware write bit is set now (false while COW or
    /// write-protected). Model-only.
    pub writable: bool,
    /// `folio_order` of the folio holding the page: 0 for a small page, 9
    /// for a PMD-sized THP (kpageflags shows only `KPF_COMPOUND_HEAD`/`TAIL`,
    /// `KPF_THP`, `KPF_HUGE`).
    pub folio_order: u32,
    /// `PM_MMAP_EXCLUSIVE`: the precise mapcount is 1 of the page, or of the
    /// head page for every page of a PMD mapping (as Linux 6.18 reports it).
    pub exclusive: bool,
    /// `PageAnonExclusive` (of the head page when PMD-mapped).
    pub anon_exclusive: bool,
    /// `folio_precise_page_mapcount` of the page (what `/proc/kpagecount`
    /// shows); 0 when the design keeps no per-page counts.
    pub mapcount: u64,
    /// `folio_mapcount`: entries mapping any page of the folio (a PMD counts
    /// once).
    pub folio_mapcount: u64,
    /// `folio_ref_count`: mappings, GUP pins and other references together.
    pub refcount: u64,
    /// `folio_maybe_mapped_shared`: false only if one MM maps the folio; may
    /// be true although one does, for imprecise designs and for rmap-id
    /// while writers are at work.
    pub maybe_shared: bool,
    /// `maybe_shared` is all the design can say: it cannot tell one MM
    /// mapping the large folio many times from several (the designs before
    /// the rmap-ID ones and mm-id); `n/a` in a report.
    #[serde(default)]
    pub sharers_unknown: bool,
    /// The era's policy guess "mapped shared" (`folio_likely_mapped_shared`).
    pub likely_shared: bool,
    /// The huge entry sits in a PMD table shared with other MMs (hugetlb
    /// PMD sharing).
    #[serde(default)]
    pub pmd_shared: bool,
    /// How often the frame was freed before (model-only): the same frame
    /// with another generation is another allocation of it.
    #[serde(default)]
    pub generation: u32,
    /// The NUMA node of the page (`folio_nid`, what `move_pages` without
    /// nodes reports); 0 when not present.
    #[serde(default)]
    pub node: u32,
    /// pagemap `PM_UFFD_WP`: userfaultfd write-protects the page (mapped or
    /// swapped out).
    #[serde(default)]
    pub uffd_wp: bool,
    /// kpageflags `KPF_KSM`: a KSM page (ksmd merged it).
    #[serde(default)]
    pub ksm: bool,
    /// pagemap `PM_SOFT_DIRTY`: written since the last `clear_refs` of
    /// soft-dirty bits, or in a VMA made or not cleared since (mapped,
    /// swapped out or not there); always false without
    /// `CONFIG_MEM_SOFT_DIRTY`.
    #[serde(default)]
    pub soft_dirty: bool,
}

/// smaps-style sums over a range, in KiB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RangeInfo {
    /// `Rss`: present pages, the zero pages left out (as smaps does).
    pub rss_kb: u64,
    /// `Anonymous`: anonymous pages mapped.
    pub anonymous_kb: u64,
    /// `AnonHugePages`: anonymous pages mapped by a PMD.
    pub anon_huge_kb: u64,
    /// shmem pages mapped (`RssShmem` of the range).
    pub shmem_kb: u64,
    /// shmem pages mapped by a PMD (`ShmemPmdMapped`).
    pub shmem_pmd_kb: u64,
    /// `Shared_Clean` + `Shared_Dirty`, but judged by pagemap's
    /// `PM_MMAP_EXCLUSIVE` per page, not smaps's own mapcount test (they
    /// differ for a PMD-mapped THP whose head alone is shared).
    pub shared_kb: u64,
    /// `Private_Clean` + `Private_Dirty`, judged as `shared_kb` is.
    pub private_kb: u64,
    /// `Swap`: pages of the range swapped out.
    #[serde(default)]
    pub swap_kb: u64,
}

/// The memory lines of `/proc/PID/status` the model keeps, in KiB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProcStatus {
    /// `RssAnon`.
    pub rss_anon_kb: u64,
    /// `RssShmem`.
    pub rss_shmem_kb: u64,
    /// `HugetlbPages`.
    pub hugetlb_kb: u64,
    /// `VmSwap` (`MM_SWAPENTS`).
    #[serde(default)]
    pub swap_kb: u64,
}
