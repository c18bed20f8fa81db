//! One VMA's entry of /proc/PID/smaps (fs/proc/task_mmu.c `show_smap`):
//! its range, permissions and `VmFlags`, and its pages split as
//! `smaps_account` and `smaps_hugetlb_range` split them.
#![warn(missing_docs)]

use crate::arch::{PAGE_SIZE, PMD_SIZE};
use crate::folio::Folio;
use crate::mm_types::{vm, Mm, Vma};
use crate::pgtable::leaf_slot;
use crate::phys::pg;
use crate::rmap;

/// One VMA as `/proc/PID/smaps` shows it, sizes in KiB.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VmaInfo {
    /// `vm_start`.
    pub start: u64,
    /// `vm_end`.
    pub end: u64,
    /// The permissions and `VmFlags`, as the bits below.
    pub flags: u64,
    /// `Shared_Clean`.
    pub shared_clean_kb: u64,
    /// `Shared_Dirty`.
    pub shared_dirty_kb: u64,
    /// `Private_Clean`.
    pub private_clean_kb: u64,
    /// `Private_Dirty`.
    pub private_dirty_kb: u64,
    /// `Shared_Hugetlb`.
    pub shared_hugetlb_kb: u64,
    /// `Private_Hugetlb`.
    pub private_hugetlb_kb: u64,
    /// `Swap`: the VMA's swap entries.
    #[serde(default)]
    pub swap_kb: u64,
    /// `SwapPss`: each swap entry's share, a page over the number of
    /// references to its slot (`swp_swapcount`).
    #[serde(default)]
    pub swap_pss_kb: u64,
    /// `LazyFree`: pages `MADV_FREE` let go that reclaim could drop now
    /// (anon, not swap-backed, neither entry nor folio dirty).
    #[serde(default)]
    pub lazyfree_kb: u64,
}

impl VmaInfo {
    /// `r` in the permissions.
    pub const READ: u64 = 1;
    /// `w`.
    pub const WRITE: u64 = 2;
    /// `x`.
    pub const EXEC: u64 = 4;
    /// `s` (else `p`).
    pub const SHARED: u64 = 8;
    /// `VmFlags` `lo` (`VM_LOCKED`).
    pub const LOCKED: u64 = 16;
    /// `VmFlags` `hg` (`VM_HUGEPAGE`).
    pub const HUGEPAGE: u64 = 32;
    /// `VmFlags` `nh` (`VM_NOHUGEPAGE`).
    pub const NOHUGEPAGE: u64 = 64;
    /// `VmFlags` `dc` (`VM_DONTCOPY`).
    pub const DONTCOPY: u64 = 128;
}

impl Mm {
    /// The smaps entry of the VMA holding `addr`; None in a hole. A page
    /// is shared when its precise mapcount is 2 or more (a folio whose only
    /// reference is this mapping is private without asking), dirty when
    /// its entry or its folio is; the zero pages count nowhere. A huge
    /// page of hugetlb is shared when pagemap does not call it exclusive
    /// (see [`Mm::page_info`]) or its PMD table is shared (6.1 tests
    /// `hugetlb_pmd_shared` beside the mapcount too). Under a design without
    /// per-page mapcounts a page counts as shared when its folio may be.
    pub fn vma_info(&self, addr: u64) -> Option<VmaInfo> {
        let v = self.mmap_read_lock().find(addr)?.clone();
        let f = v.flags();
        let bits = [
            (vm::READ, VmaInfo::READ),
            (vm::WRITE, VmaInfo::WRITE),
            (vm::EXEC, VmaInfo::EXEC),
            (vm::SHARED, VmaInfo::SHARED),
            (vm::LOCKED, VmaInfo::LOCKED),
            (vm::HUGEPAGE, VmaInfo::HUGEPAGE),
            (vm::NOHUGEPAGE, VmaInfo::NOHUGEPAGE),
            (vm::DONTCOPY, VmaInfo::DONTCOPY),
        ];
        let flags = bits.iter().filter(|(b, _)| f & b != 0).fold(0, |acc, (_, bit)| acc | bit);
        let mut info = VmaInfo { start: v.start(), end: v.end(), flags, ..VmaInfo::default() };
        match v.huge_page_size() {
            Some(unit) => self.account_hugetlb(&v, unit, &mut info),
            None => self.account_pages(&v, &mut info),
        }
        Some(info)
    }

    /// `smaps_hugetlb_range`: each mapped huge page, shared or private.
    fn account_hugetlb(&self, v: &Vma, unit: u64, info: &mut VmaInfo) {
        for addr in (v.start()..v.end()).step_by(unit as usize) {
            let p = self.page_peek(addr);
            if p.present {
                let shared = !p.exclusive || p.pmd_shared;
                *(if shared { &mut info.shared_hugetlb_kb } else { &mut info.private_hugetlb_kb }) += unit / 1024;
            }
        }
    }

    /// `smaps_pte_entry` / `smaps_pmd_entry` → `smaps_account`, page by
    /// page; a swap entry counts in `Swap` (and its share in `SwapPss`), and so does a shmem page swapped
    /// out: every one in the VMA's file range for a shared or read-only VMA
    /// (`shmem_swap_usage`), else those where no entry maps anything
    /// (`smaps_pte_hole`, the private pages being the VMA's own). Before 6.5
    /// a PROT_NONE huge PMD counts nowhere
    /// ([`crate::KernelVersion::smaps_counts_protnone_pmd`]).
    fn account_pages(&self, v: &Vma, info: &mut VmaInfo) {
        let k = &*self.kernel;
        let (_vmas, _walk) = (self.mmap_read_lock(), self.pt_read());
        let file = v.file();
        let pages = (v.end() - v.start()) / PAGE_SIZE;
        let shmem_swapped = file.as_ref().map_or(0, |inode| inode.swap_usage(v.pgoff(), pages));
        let whole = v.flags() & vm::SHARED != 0 || v.flags() & vm::WRITE == 0;
        // A private writable VMA over swapped-out pages walks its holes
        // (smaps_shmem_walk_ops), each the shmem swap in its file range.
        let holes = file.filter(|_| !whole && shmem_swapped > 0);
        if holes.is_none() {
            info.swap_kb += shmem_swapped * (PAGE_SIZE / 1024);
        }
        let hole_swap = |from: u64, to: u64| holes.as_ref().map_or(0, |i| i.partial_swap_usage(from, to));
        let mut swap_pss = 0;
        for addr in (v.start()..v.end()).step_by(PAGE_SIZE as usize) {
            let slot = leaf_slot(&k.phys, self.pgd, addr);
            let leaf = slot.as_ref().map(|s| s.load(&k.phys));
            let swap_pages = match leaf {
                // smaps_pte_hole(): no table, once per PMD's range.
                None if addr == v.start() || addr.is_multiple_of(PMD_SIZE) => {
                    let to = ((addr | (PMD_SIZE - 1)) + 1).min(v.end());
                    hole_swap(v.page_index(addr), v.page_index(to))
                }
                // smaps_pte_hole_lookup(): an empty entry, page by page.
                Some(l) if l.is_none() => hole_swap(v.page_index(addr), v.page_index(addr) + 1),
                _ => 0,
            };
            info.swap_kb += swap_pages * (PAGE_SIZE / 1024);
            let (Some(slot), Some(leaf)) = (slot, leaf) else { continue };
            if leaf.is_swap() && !slot.huge() {
                info.swap_kb += PAGE_SIZE / 1024;
                let refs = k.swap.as_ref().map_or(1, |dev| dev.count(leaf.swp_entry()).max(1));
                swap_pss += (PAGE_SIZE << PSS_SHIFT) / refs as u64;
                continue;
            }
            let hidden_protnone = slot.huge() && !leaf.hw_present() && !k.config.release().smaps_counts_protnone_pmd();
            if !leaf.present() || leaf.huge() != slot.huge() || leaf.special() || hidden_protnone {
                continue;
            }
            let pfn = slot.page_pfn(leaf, addr);
            let f = Folio::containing(&k.phys, pfn);
            if f.is_zero_page() {
                continue;
            }
            let shared = match rmap::page_mapcount(k, f, pfn - f.pfn) {
                _ if f.refcount() == 1 => false,
                Some(n) => n >= 2,
                None => rmap::folio_maybe_mapped_shared(k, f),
            };
            let dirty = leaf.dirty() || f.head().test(pg::DIRTY);
            if f.test_anon() && !f.head().test(pg::SWAPBACKED) && !dirty {
                info.lazyfree_kb += PAGE_SIZE / 1024;
            }
            let sum = match (shared, dirty) {
                (true, true) => &mut info.shared_dirty_kb,
                (true, false) => &mut info.shared_clean_kb,
                (false, true) => &mut info.private_dirty_kb,
                (false, false) => &mut info.private_clean_kb,
            };
            *sum += PAGE_SIZE / 1024;
        }
        info.swap_pss_kb = swap_pss >> (PSS_SHIFT + 10);
    }
}

/// `PSS_SHIFT`: the fixed-point shift of the proportional sums.
const PSS_SHIFT: u32 = 12;
