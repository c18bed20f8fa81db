//! ksmd and `MADV_MERGEABLE` (mm/ksm.c `ksm_do_scan`,
//! `scan_get_next_rmap_item`, `cmp_and_merge_page`, `stable_tree_search`,
//! `unstable_tree_search_insert`, `try_to_merge_two_pages`, `ksm_madvise`,
//! `unmerge_ksm_pages`).
//!
//! A full scan visits every MM with a KSM slot (in the order they were
//! made), each `VM_MERGEABLE` VMA with an anon_vma, each address of it
//! mapping an anonymous page. A page equal to a KSM page merges into it; a
//! page whose checksum held since the last scan goes into the unstable
//! tree, or, if a page of the same content is there, both merge into a new
//! KSM page (the page scanned later becomes it). The unstable tree is
//! emptied at the end of every scan, so two equal pages merge in the
//! second full scan that sees them.
//!
//! Differs from Linux: a scan runs whole when a scenario asks (`ksmd N`),
//! not paced by `pages_to_scan` and `sleep_millisecs`; the unstable tree
//! is a list searched in order, not a red-black tree by content; no
//! `smart_scan` skipping (the host is run without it), no
//! `use_zero_pages`, no stable-node chains.

use std::collections::HashSet;

use crate::arch::PAGE_SIZE;
use crate::folio::Folio;
use crate::kernel::{Kernel, Stats};
use crate::memory::ksm::{break_ksm, mergeable_page, try_to_merge_one_page};
use crate::mm_types::{vm, Mm, MmList, Vmas};
use crate::phys::Content;
use crate::rmap::ksm::{Ksm, Scanned};
use crate::sync::atomic::Ordering::Relaxed;
use crate::sync::Arc;
use crate::Result;

/// `vma_ksm_compatible`: a VMA ksmd may merge in. Shared mappings and
/// hugetlb are refused (`MADV_MERGEABLE` passes over them without error).
pub fn vma_ksm_compatible(flags: u32) -> bool {
    flags & (vm::SHARED | vm::HUGETLB) == 0
}

/// The flags `MADV_MERGEABLE` gives a VMA with `flags`.
pub fn mergeable_flags(flags: u32) -> u32 {
    if vma_ksm_compatible(flags) {
        flags | vm::MERGEABLE
    } else {
        flags
    }
}

impl Mm {
    /// `unmerge_ksm_pages` over `[addr, end)` of every `VM_MERGEABLE` VMA
    /// with an anon_vma there (`MADV_UNMERGEABLE`, and mremap before it
    /// moves pages): each KSM page mapped is broken ([`break_ksm`]). The
    /// caller holds the mmap_lock.
    pub(super) fn unmerge_ksm_pages(&self, vmas: &Vmas, addr: u64, end: u64) -> Result<()> {
        for v in vmas.overlapping(addr, end).filter(|v| v.flags() & vm::MERGEABLE != 0 && v.anon_vma() != 0) {
            for a in (v.start().max(addr)..v.end().min(end)).step_by(PAGE_SIZE as usize) {
                break_ksm(&self.kernel, self, v, a)?;
            }
        }
        Ok(())
    }
}

/// `ksm_fork`: the child of a parent with a KSM slot gets one too, and
/// (before 6.15) the parent's `ksm_merging_pages`, which `dup_mm` copied.
pub(super) fn ksm_fork(parent: &Mm, child: &Mm) {
    if !parent.ksm.load(Relaxed) {
        return;
    }
    child.ksm.store(true, Relaxed);
    if !parent.kernel.config.release().ksm_fork_resets_counters() {
        let count = parent.ksm_merging_pages();
        parent.mmlist.ksm.inherited.lock().unwrap().insert(child.serial, count);
    }
}

impl Mm {
    /// `mm->ksm_merging_pages` (/proc/PID/ksm_merging_pages): this MM's
    /// rmap items in stable nodes, plus what a fork copied.
    pub fn ksm_merging_pages(&self) -> u64 {
        let ksm = &self.mmlist.ksm;
        ksm.stable.items_of(self.serial) + ksm.inherited.lock().unwrap().get(&self.serial).copied().unwrap_or(0)
    }
}

/// `passes` full scans of ksmd (`ksm/full_scans` grows by `passes`).
pub fn ksmd_scan(k: &Kernel, mmlist: &MmList, passes: u32) {
    for _ in 0..passes {
        // A full scan starts with lru_add_drain_all() (scan_get_next_rmap_item).
        k.lru_add_drain_all();
        full_scan(k, mmlist);
    }
}

/// One full scan; then the rmap items of pages not seen go, with their
/// places in stable nodes (`remove_trailing_rmap_items`), and so do the
/// stable nodes whose KSM folio was freed and the counters of MMs gone.
fn full_scan(k: &Kernel, mmlist: &MmList) {
    let ksm = &mmlist.ksm;
    let mut unstable: Vec<(Arc<Mm>, u64)> = Vec::new();
    let mut seen = HashSet::new();
    let slots: Vec<Arc<Mm>> =
        mmlist.alive().into_iter().filter(|mm| mm.ksm.load(Relaxed) && !mm.has_exited()).collect();
    for mm in &slots {
        let ranges: Vec<(u64, u64)> = mm
            .vmas()
            .iter()
            .filter(|v| v.flags() & vm::MERGEABLE != 0 && v.anon_vma() != 0)
            .map(|v| (v.start(), v.end()))
            .collect();
        for addr in ranges.into_iter().flat_map(|(s, e)| (s..e).step_by(PAGE_SIZE as usize)) {
            let Some((f, i)) = mergeable_page(k, mm, addr) else { continue };
            seen.insert((mm.serial, addr));
            cmp_and_merge_page(k, (mm, addr), (f, i), &mut unstable);
        }
    }
    let mut scanned = ksm.scanned.lock().unwrap();
    scanned.retain(|&(mm, addr), s| {
        let keep = seen.contains(&(mm, addr));
        if let (false, Some(node)) = (keep, s.stable) {
            ksm.stable.remove_item(node, mm, addr);
        }
        keep
    });
    ksm.stable.prune(|id, n| kpage(k, id, n.kpfn).is_none());
    // ksm_exit(): a counter copied at fork goes with its MM's slot.
    ksm.inherited.lock().unwrap().retain(|serial, _| slots.iter().any(|mm| mm.serial == *serial));
    Stats::inc(&k.stats.ksm_full_scans);
}

/// The KSM folio at `kpfn` if it is still stable node `id`'s
/// (`ksm_get_folio`: the folio's mapping names the node).
fn kpage(k: &Kernel, id: u64, kpfn: u64) -> Option<Folio<'_>> {
    let f = Folio::containing(&k.phys, kpfn);
    (f.test_ksm() && f.head().link.load(Relaxed) == id).then_some(f)
}

/// `stable_tree_search`: the KSM folio (and its node) whose content is
/// `content`, with a reference taken.
fn stable_tree_search<'k>(k: &'k Kernel, ksm: &Ksm, content: &Content) -> Option<(Folio<'k>, u64)> {
    ksm.stable.frames().into_iter().find_map(|(id, kpfn)| {
        let f = kpage(k, id, kpfn).filter(|f| &k.phys.content(f.pfn) == content)?;
        f.try_get().then_some((f, id))
    })
}

/// The checksum ksmd keeps of a page (`calc_checksum`, xxhash in Linux).
fn checksum(content: &Content) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::hash::DefaultHasher::new();
    content.hash(&mut h);
    h.finish()
}

/// `cmp_and_merge_page` for page `i` of `f` (a reference held, which this
/// drops), mapped by `mm` at `addr`. A KSM page already in its node is
/// done; another page's checksum must have held since the last visit
/// (checked before the stable tree search from 6.10, after it before).
fn cmp_and_merge_page(
    k: &Kernel,
    (mm, addr): (&Arc<Mm>, u64),
    (f, i): (Folio, u64),
    unstable: &mut Vec<(Arc<Mm>, u64)>,
) {
    let ksm = &mm.mmlist.ksm;
    let key = (mm.serial, addr);
    let mut item = ksm.scanned.lock().unwrap().get(&key).copied().unwrap_or_default();
    let node_of_page = f.test_ksm().then(|| f.head().link.load(Relaxed));
    let page = f.pfn + i;
    let content = k.phys.content(page);
    let checksum_first = k.config.release().ksm_checksum_before_stable_search();
    let in_node = node_of_page.is_some() && node_of_page == item.stable;
    if in_node || (node_of_page.is_none() && checksum_first && checksum_changed(&mut item, ksm, key, &content)) {
        k.folio_put_refs(f, 1);
    } else {
        merge_page(k, (mm, addr), (f, i), (&mut item, &content), unstable, !checksum_first);
    }
    ksm.scanned.lock().unwrap().insert(key, item);
}

/// `remove_rmap_item_from_tree` and the checksum test: true (the page is
/// done for this scan) if the page's checksum changed since the last visit.
fn checksum_changed(item: &mut Scanned, ksm: &Ksm, (mm, addr): (u64, u64), content: &Content) -> bool {
    if let Some(old) = item.stable.take() {
        ksm.stable.remove_item(old, mm, addr);
    }
    let sum = checksum(content);
    std::mem::replace(&mut item.checksum, sum) != sum
}

/// The rest of `cmp_and_merge_page`: into a KSM page of the same content,
/// else (the checksum tested here when `check_sum`) with an equal page of
/// the unstable tree, else into it.
fn merge_page(
    k: &Kernel,
    (mm, addr): (&Arc<Mm>, u64),
    (f, i): (Folio, u64),
    (item, content): (&mut Scanned, &Content),
    unstable: &mut Vec<(Arc<Mm>, u64)>,
    check_sum: bool,
) {
    let ksm = &mm.mmlist.ksm;
    let key = (mm.serial, addr);
    let page = f.pfn + i;
    if let Some(old) = item.stable.take() {
        ksm.stable.remove_item(old, mm.serial, addr);
    }
    if let Some((kf, node)) = stable_tree_search(k, ksm, content) {
        item.stable = try_to_merge_with_ksm_page(k, (mm, addr), (f, i), Some((kf, node)));
        k.folio_put_refs(kf, 1);
    } else if check_sum && checksum_changed(item, ksm, key, content) {
        k.folio_put_refs(f, 1);
    } else if let Some(tree) = unstable_tree_search(k, unstable, page, content) {
        item.stable = try_to_merge_two_pages(k, (mm, addr), (f, i), tree);
    } else {
        if !unstable.iter().any(|(m, a)| (m.serial, *a) == key) {
            unstable.push((mm.clone(), addr));
        }
        k.folio_put_refs(f, 1);
    }
}

/// A page of the unstable tree, by its MM and address, with its folio and
/// page there (a reference held).
type TreePage<'k> = (Arc<Mm>, u64, (Folio<'k>, u64));

/// `unstable_tree_search_insert`'s search: the first page of the unstable
/// tree whose content is `content`; none if the tree maps `page` itself
/// somewhere (a fork's page is not merged with itself).
fn unstable_tree_search<'k>(
    k: &'k Kernel,
    unstable: &[(Arc<Mm>, u64)],
    page: u64,
    content: &Content,
) -> Option<TreePage<'k>> {
    for (tmm, taddr) in unstable {
        let Some((tf, ti)) = mergeable_page(k, tmm, *taddr) else { continue };
        if tf.pfn + ti != page && &k.phys.content(tf.pfn + ti) == content {
            return Some((tmm.clone(), *taddr, (tf, ti)));
        }
        k.folio_put_refs(tf, 1);
        if tf.pfn + ti == page {
            return None;
        }
    }
    None
}

/// `try_to_merge_with_ksm_page`: under `mm`'s mmap_lock for read, the VMA
/// at `addr` if still mergeable (`find_mergeable_vma`), and the page
/// merged there ([`try_to_merge_one_page`], which the reference on `f`
/// goes with). Returns the stable node it joined.
fn try_to_merge_with_ksm_page(
    k: &Kernel,
    (mm, addr): (&Mm, u64),
    (f, i): (Folio, u64),
    kpage: Option<(Folio, u64)>,
) -> Option<u64> {
    let vmas = mm.mmap_read_lock();
    match vmas.find(addr).filter(|v| v.flags() & vm::MERGEABLE != 0 && v.anon_vma() != 0) {
        Some(v) => try_to_merge_one_page(k, (mm, v, addr), (f, i), kpage).ok(),
        None => {
            k.folio_put_refs(f, 1);
            None
        }
    }
}

/// `try_to_merge_two_pages` and `stable_tree_insert`: page `i` of `f`
/// (mapped by `mm` at `addr`) becomes a KSM page, and the unstable tree's
/// page merges into it; if that fails the first is broken again
/// (`break_cow`). The tree page's reference is held meanwhile, so two
/// pages of one large folio cannot split it to merge; it is split
/// afterwards instead, for the next scan (`cmp_and_merge_page`'s `split`).
/// Returns the new stable node.
fn try_to_merge_two_pages(k: &Kernel, (mm, addr): (&Mm, u64), (f, i): (Folio, u64), tree: TreePage) -> Option<u64> {
    let page = f.pfn + i;
    let (tmm, taddr, (tf, ti)) = tree;
    let same_folio = f.is_large() && tf.pfn == f.pfn;
    let Some(node) = try_to_merge_with_ksm_page(k, (mm, addr), (f, i), None) else {
        k.folio_put_refs(tf, 1);
        let f = Folio::containing(&k.phys, page);
        if same_folio && f.is_large() && f.try_get() {
            let _ = crate::memory::split::split_folio_to_order(k, &mm.mmlist, f, 0, 1, None);
            k.folio_put_refs(f, 1);
        }
        return None;
    };
    let kf = Folio::containing(&k.phys, page);
    let joined = match kf.try_get() {
        true => {
            let joined = try_to_merge_with_ksm_page(k, (&tmm, taddr), (tf, ti), Some((kf, node)));
            k.folio_put_refs(kf, 1);
            joined
        }
        false => {
            k.folio_put_refs(tf, 1);
            None
        }
    };
    if joined.is_some() {
        let ksm = &mm.mmlist.ksm;
        ksm.scanned.lock().unwrap().entry((tmm.serial, taddr)).or_insert_with(Scanned::default).stable = Some(node);
        return Some(node);
    }
    mm.mmlist.ksm.stable.remove_item(node, mm.serial, addr);
    let vmas = mm.mmap_read_lock();
    if let Some(v) = vmas.find(addr) {
        let _ = break_ksm(k, mm, v, addr);
    }
    None
}
