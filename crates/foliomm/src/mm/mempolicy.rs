//! `mbind(2)` (mm/mempolicy.c `do_mbind`, `queue_pages_range`,
//! `queue_folios_pte_range`, `migrate_folio_add`, `mbind_range`): a range's
//! VMAs get a memory policy, and with `MPOL_MF_MOVE` the folios already
//! there that the policy's nodes do not hold move to them, except those
//! (maybe) mapped shared, which only `MPOL_MF_MOVE_ALL` moves. A hugetlb
//! page reached through a PMD table its MM shares also stays without
//! `MPOL_MF_MOVE_ALL` (`queue_folios_hugetlb`'s `hugetlb_pmd_shared`).
//!
//! Differs from Linux: the migration target is the policy's node for the
//! folio (the nearest of a bind policy's, the interleave node of its
//! index), taken on that node alone.

use super::vma::merge_around;
use crate::arch::{PAGE_SIZE, PMD_SIZE};
use crate::folio::Folio;
use crate::kernel::Consumer;
use crate::memory::migrate::{isolate_folio, migrate_pages, putback, Reason};
use crate::mm_types::{Mempolicy, Mm, Vmas};
use crate::pgtable::{leaf_slot, pt_share_count, pte_lockptr};
use crate::phys::NodeMask;
use crate::rmap;
use crate::sync::atomic::Ordering::Relaxed;
use crate::{Errno, Result};

/// `MPOL_MF_STRICT`: fail with EIO if a folio is not where the policy says
/// and is not moved.
pub const MPOL_MF_STRICT: u32 = 1;
/// `MPOL_MF_MOVE`: move the folios only this process maps.
pub const MPOL_MF_MOVE: u32 = 1 << 1;
/// `MPOL_MF_MOVE_ALL`: move every folio, shared or not.
pub const MPOL_MF_MOVE_ALL: u32 = 1 << 2;

/// What `queue_pages_range` asks of the folios it meets.
struct Queue<'k> {
    /// The nodes a folio may stay on (the caller's mask; empty for the
    /// default policy, under which every folio is looked at).
    nodes: NodeMask,
    flags: u32,
    policy: Mempolicy,
    /// Folios isolated, each with its target node.
    list: Vec<(Folio<'k>, usize)>,
    /// The last large folio met, which later PTEs of it skip.
    large: Option<u64>,
    /// Misplaced folios not queued.
    failed: u64,
}

impl Queue<'_> {
    /// `strictly_unmovable`: STRICT without a MOVE flag.
    fn strictly_unmovable(&self) -> bool {
        self.flags & (MPOL_MF_STRICT | MPOL_MF_MOVE | MPOL_MF_MOVE_ALL) == MPOL_MF_STRICT
    }
}

impl Mm {
    /// `mbind(start, len, mode, nodes, flags)`. EINVAL for unknown flags,
    /// an unaligned start, a range that wraps, or a mode and nodes
    /// [`Mempolicy::new`] refuses; EFAULT if the range has a hole (any
    /// range under the default policy may, but not one without a VMA);
    /// EIO with `MPOL_MF_STRICT` if a folio stays on a node the policy
    /// does not allow (without a MOVE flag, the first such folio fails the
    /// call before any VMA changes).
    pub fn mbind(&self, start: u64, len: u64, mode: u32, nodes: NodeMask, flags: u32) -> Result<()> {
        let k = &*self.kernel;
        let mut flags = flags;
        if flags & !(MPOL_MF_STRICT | MPOL_MF_MOVE | MPOL_MF_MOVE_ALL) != 0 || !start.is_multiple_of(PAGE_SIZE) {
            return Err(Errno::EINVAL);
        }
        if mode == 0 {
            flags &= !MPOL_MF_STRICT;
        }
        let len = len.checked_next_multiple_of(PAGE_SIZE).ok_or(Errno::EINVAL)?;
        let end = start.checked_add(len).ok_or(Errno::EINVAL)?;
        if end == start {
            return Ok(());
        }
        let policy = Mempolicy::new(mode, nodes, k.phys.nr_nodes())?;
        let _batches_off = (flags & (MPOL_MF_MOVE | MPOL_MF_MOVE_ALL) != 0).then(|| k.lru_cache_disable());
        let mut q = Queue { nodes, flags, policy, list: Vec::new(), large: None, failed: 0 };
        let queued = {
            let mut vmas = self.mmap_write_lock();
            self.queue_pages_range(&vmas, start, end, &mut q)
                .and_then(|_| self.mbind_range(&mut vmas, start, end, policy))
        };
        if let Err(e) = queued {
            // The folios isolated before the error go back (`putback_movable_pages`).
            putback(k, std::mem::take(&mut q.list).into_iter().map(|(f, _)| f).collect());
            return Err(e);
        }
        let mut failed = q.failed;
        let mut targets: Vec<usize> = q.list.iter().map(|&(_, n)| n).collect();
        targets.sort_unstable();
        targets.dedup();
        for nid in targets {
            let (batch, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut q.list).into_iter().partition(|&(_, n)| n == nid);
            q.list = rest;
            let folios = batch.into_iter().map(|(f, _)| f).collect();
            failed += migrate_pages(k, &self.mmlist, folios, nid, Reason::Mbind).unwrap_or(1);
        }
        if failed > 0 && flags & MPOL_MF_STRICT != 0 {
            return Err(Errno::EIO);
        }
        Ok(())
    }

    /// `queue_pages_range` + `queue_pages_test_walk`: the holes checked, and
    /// with STRICT or a MOVE flag every VMA's folios looked at.
    fn queue_pages_range<'k>(&'k self, vmas: &Vmas, start: u64, end: u64, q: &mut Queue<'k>) -> Result<()> {
        let discontig_ok = q.policy == Mempolicy::Default;
        let mut reach = start;
        let mut any = false;
        for v in vmas.overlapping(start, end) {
            if v.start() > reach && !discontig_ok {
                return Err(Errno::EFAULT);
            }
            any = true;
            reach = v.end();
            if q.flags & (MPOL_MF_STRICT | MPOL_MF_MOVE | MPOL_MF_MOVE_ALL) != 0 {
                self.queue_folios(v.start().max(start), v.end().min(end), v, q)?;
            }
        }
        if !any || (reach < end && !discontig_ok) {
            return Err(Errno::EFAULT);
        }
        Ok(())
    }

    /// `queue_folios_pte_range` / `queue_folios_pmd` over `[from, to)` of
    /// `vma`: each folio mapped there not on an allowed node is queued for
    /// its target node ([`Mm::migrate_folio_add`]) or counted as failed;
    /// EIO at the first with STRICT alone.
    fn queue_folios<'k>(&'k self, from: u64, to: u64, vma: &crate::mm_types::Vma, q: &mut Queue<'k>) -> Result<()> {
        let k = &*self.kernel;
        let _walk = self.pt_read();
        let mut addr = from;
        while addr < to {
            let Some(slot) = leaf_slot(&k.phys, self.pgd, addr) else {
                addr = (addr | (PMD_SIZE - 1)) + 1;
                continue;
            };
            let huge = slot.huge();
            let next = if huge { (addr | (PMD_SIZE - 1)) + 1 } else { addr + PAGE_SIZE };
            let _ptl = pte_lockptr(&k.phys, slot.table).lock();
            let e = slot.load(&k.phys);
            if !e.present() || e.special() {
                addr = next;
                continue;
            }
            let f = Folio::containing(&k.phys, slot.page_pfn(e, addr));
            if q.large == Some(f.pfn) || q.nodes.contains(k.phys.nid(f.pfn)) {
                addr = next;
                continue;
            }
            if f.is_large() {
                q.large = Some(f.pfn);
            }
            let moving = q.flags & (MPOL_MF_MOVE | MPOL_MF_MOVE_ALL) != 0;
            let pmd_shared = vma.is_hugetlb() && pt_share_count(&k.phys, slot.table).load(Relaxed) > 0;
            if !moving || !self.migrate_folio_add(f, vma, addr, pmd_shared, q) {
                q.failed += 1;
                if q.strictly_unmovable() {
                    return Err(Errno::EIO);
                }
            }
            addr = next;
        }
        Ok(())
    }

    /// `migrate_folio_add`: without `MPOL_MF_MOVE_ALL` a folio (maybe)
    /// mapped shared stays, which is no failure (asked as the release asks
    /// it, at its first page: `page_mapcount(head)` in 6.1), and so does a
    /// hugetlb page mapped through a shared PMD table (`pmd_shared`); any
    /// other is isolated and queued for the node the policy gives its
    /// index, or false if it cannot be isolated.
    fn migrate_folio_add<'k>(
        &'k self,
        f: Folio<'k>,
        vma: &crate::mm_types::Vma,
        addr: u64,
        pmd_shared: bool,
        q: &mut Queue<'k>,
    ) -> bool {
        let k = &*self.kernel;
        if q.flags & MPOL_MF_MOVE_ALL == 0 {
            let shared = rmap::page_maybe_mapped_shared(k, f, 0);
            if f.is_large() {
                k.decided(Consumer::Migrate, f, shared);
            }
            if shared || pmd_shared {
                return true;
            }
        }
        if !isolate_folio(k, f) {
            return false;
        }
        let order = f.order();
        q.list.push((f, q.policy.placement(vma.interleave_index(addr, order), order, true).preferred));
        true
    }

    /// `mbind_range`: every VMA of `[start, end)` gets `policy`, those
    /// across its edges split first where their policy differs, and
    /// neighbours that now match merge. ENOMEM at `vm.max_map_count`.
    fn mbind_range(&self, vmas: &mut Vmas, start: u64, end: u64, policy: Mempolicy) -> Result<()> {
        for addr in [start, end] {
            if vmas.find(addr).is_some_and(|v| v.policy() != policy) {
                self.split_vma(vmas, addr)?;
            }
        }
        let mut changed = Vec::new();
        for v in vmas.overlapping(start, end) {
            if v.policy() != policy {
                vmas.start_write(v);
                v.set_policy(policy);
                changed.push(v.start());
            }
        }
        merge_around(vmas, start, end, self.kernel.config.release(), &changed);
        Ok(())
    }
}
