//! Per-CPU page lists in front of the buddy allocator (`struct
//! per_cpu_pages`, mm/page_alloc.c): blocks of the orders a pcp list keeps
//! (up to `PAGE_ALLOC_COSTLY_ORDER`, and the THP order) are freed to the
//! freeing CPU's list and allocated from the allocating CPU's list, hottest
//! first; the zone lock is taken once per batch, to refill an empty list
//! (`rmqueue_bulk`) or to trim one past its high mark (`free_pcppages_bulk`).
//! So a CPU reuses the pages it freed, still in its cache, and CPUs meet on
//! the zone lock once per batch instead of once per page.
//!
//! Page-table pages (unmovable) have an order-0 list of their own beside
//! the movable lists of user folios, as Linux keeps a list per order and
//! migratetype (`order_to_pindex`): a page a process frees comes back to
//! its next fault, not to the page table the fault allocates first.
//!
//! Differs from Linux: a fixed batch and high mark (no `pcp->high` tuning),
//! two migratetypes (movable, and unmovable order 0), no pageblock
//! ownership (a block's type is what it was allocated as), slots indexed by the simulated CPU
//! ([`crate::sync::this_cpu`]) modulo [`NR_PCP`], and an allocation that
//! finds no free block drains every list and tries once more
//! (`drain_all_pages`, which Linux does on its reclaim path).

use std::collections::VecDeque;

use super::{PhysMem, Placement};
use crate::arch::{Pfn, MAX_PAGE_ORDER, PUD_ORDER};
use crate::sync::atomic::Ordering::*;
use crate::sync::{this_cpu, Mutex};
use crate::Errno;

/// Slots of per-CPU lists; simulated CPUs beyond share them.
pub const NR_PCP: usize = 64;
/// Pages moved to or from the zone at once (`pcp->batch` of a large zone).
const BATCH: u64 = 63;
/// Pages a CPU's lists may hold before a batch goes back (`pcp->high`).
const HIGH: u64 = 6 * BATCH;
/// `PAGE_ALLOC_COSTLY_ORDER`.
const COSTLY_ORDER: u32 = 3;
/// The THP order, which has a list of its own (`pageblock_order`).
const THP_ORDER: u32 = 9;
/// The movable lists (orders 0 to 3, the THP order), then the unmovable
/// order-0 list.
const LISTS: usize = COSTLY_ORDER as usize + 3;
const UNMOVABLE_0: usize = LISTS - 1;
const THP_LIST: usize = LISTS - 2;

/// What a block is allocated for (`MIGRATE_MOVABLE` user folios,
/// `MIGRATE_UNMOVABLE` page tables).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrateType {
    /// User memory.
    Movable,
    /// Page tables.
    Unmovable,
}

/// One CPU's lists: blocks per kept order, hottest at the front.
#[derive(Default)]
pub(super) struct PerCpuPages {
    /// Pages held, over all lists (`pcp->count`).
    count: u64,
    lists: [VecDeque<Pfn>; LISTS],
}

/// The pcp list of `order` and `kind`, if it has one (`order_to_pindex`).
fn pindex(order: u32, kind: MigrateType) -> Option<usize> {
    match (order, kind) {
        (0, MigrateType::Unmovable) => Some(UNMOVABLE_0),
        (0..=COSTLY_ORDER, _) => Some(order as usize),
        (THP_ORDER, _) => Some(THP_LIST),
        _ => None,
    }
}

fn order_of(pindex: usize) -> u32 {
    match pindex {
        THP_LIST => THP_ORDER,
        UNMOVABLE_0 => 0,
        i => i as u32,
    }
}

pub(super) fn new_lists() -> Box<[Mutex<PerCpuPages>]> {
    (0..NR_PCP).map(|_| Mutex::default()).collect()
}

impl PhysMem {
    /// Allocates a naturally aligned block of `2^order` frames on the local
    /// node, falling back to the others ([`PhysMem::alloc_pages_on`] with
    /// [`Placement::local()`]). The frames are not zeroed.
    pub fn alloc_pages(&self, order: u32) -> Result<Pfn, Errno> {
        self.alloc_pages_as(order, MigrateType::Movable)
    }

    /// [`PhysMem::alloc_pages`] for `kind` of use.
    pub fn alloc_pages_as(&self, order: u32, kind: MigrateType) -> Result<Pfn, Errno> {
        self.alloc_pages_on(Placement::local(), order, kind)
    }

    /// Allocates a naturally aligned block of `2^order` frames for `kind`
    /// of use on the first node of `place` that has one
    /// (`get_page_from_freelist` over the zonelist, `rmqueue`): from this
    /// CPU's list for the orders that have one, else from the zone; above
    /// `MAX_PAGE_ORDER` (up to a 1 GiB block), a free run of the zone
    /// (`PhysMem::alloc_contig`). ENOMEM when no allowed node has a block
    /// of that order or larger free even after draining the lists; EINVAL
    /// above the 1 GiB order. The frames are not zeroed.
    pub fn alloc_pages_on(&self, place: Placement, order: u32, kind: MigrateType) -> Result<Pfn, Errno> {
        if order > PUD_ORDER {
            return Err(Errno::EINVAL);
        }
        let pfn = self.alloc_block(place, order, kind)?;
        self.changes.block(pfn, order);
        Ok(pfn)
    }

    /// [`PhysMem::alloc_pages_on`] without the record of changes.
    fn alloc_block(&self, place: Placement, order: u32, kind: MigrateType) -> Result<Pfn, Errno> {
        if order > MAX_PAGE_ORDER {
            return self.alloc_contig(place, order);
        }
        for attempt in 0..2 {
            for nid in self.zonelist(place) {
                if let Some(pfn) =
                    self.alloc_pcp(nid, order, kind).or_else(|| self.rmqueue(&mut self.lock_zone(nid), order))
                {
                    return Ok(pfn);
                }
            }
            if attempt == 0 && !self.drain_all_pages() {
                break;
            }
        }
        Err(Errno::ENOMEM)
    }

    /// `rmqueue_pcplist`: the hottest block of this CPU's list on node
    /// `nid`, refilled with a batch from the node's zone when empty.
    fn alloc_pcp(&self, nid: usize, order: u32, kind: MigrateType) -> Option<Pfn> {
        let i = pindex(order, kind)?;
        let mut pcp = self.nodes[nid].pcp[this_cpu() % NR_PCP].lock().unwrap();
        if pcp.lists[i].is_empty() {
            let mut zone = self.lock_zone(nid);
            for _ in 0..(BATCH >> order).max(1) {
                let Some(pfn) = self.rmqueue(&mut zone, order) else { break };
                pcp.lists[i].push_back(pfn);
                pcp.count += 1 << order;
            }
        }
        let pfn = pcp.lists[i].pop_front()?;
        pcp.count -= 1 << order;
        Some(pfn)
    }

    /// Frees a block of `2^order` frames (`free_frozen_pages`) to its node:
    /// to this CPU's list for the orders that have one, trimming it by a
    /// batch past its high mark; else to the zone, merging with free
    /// buddies. The caller has reset the descriptors. Each frame's
    /// generation moves on, and with `init_on_free` its bytes become 0
    /// (counted as zeroing work), else with poisoning [`super::POISON`].
    pub fn free_pages(&self, pfn: Pfn, order: u32) {
        self.free_pages_as(pfn, order, MigrateType::Movable)
    }

    /// [`PhysMem::free_pages`] of a block allocated for `kind`.
    pub fn free_pages_as(&self, pfn: Pfn, order: u32, kind: MigrateType) {
        self.changes.block(pfn, order);
        let nr = 1u64 << order;
        if self.init_on_free {
            self.reset_frames(pfn, nr, 0);
            (0..nr).for_each(|_| crate::sync::sim::work(crate::sync::sim::Work::ZeroPage));
        } else if self.poison {
            self.reset_frames(pfn, nr, super::POISON);
        }
        for p in pfn..pfn + nr {
            // Only the frame's owner frees it: a plain increment will do
            // (a locked add per frame was a fifth of a 2M folio's munmap).
            let generation = &self.generation[p as usize];
            generation.store(generation.load(Relaxed).wrapping_add(1), Release);
        }
        if order > MAX_PAGE_ORDER {
            return self.free_contig(pfn, order);
        }
        let nid = self.nid(pfn);
        let Some(i) = pindex(order, kind) else {
            return self.free_one_page(&mut self.lock_zone(nid), pfn, order);
        };
        let mut pcp = self.nodes[nid].pcp[this_cpu() % NR_PCP].lock().unwrap();
        pcp.lists[i].push_front(pfn);
        pcp.count += 1 << order;
        if pcp.count >= HIGH {
            self.free_pcppages_bulk(nid, &mut pcp, BATCH);
        }
    }

    /// Returns at least `pages` pages of `pcp` (a list of node `nid`) to
    /// the node's zone, coldest first, taking from each list in turn.
    fn free_pcppages_bulk(&self, nid: usize, pcp: &mut PerCpuPages, pages: u64) {
        let mut zone = self.lock_zone(nid);
        let mut freed = 0;
        while freed < pages && pcp.count > 0 {
            for i in 0..LISTS {
                if let Some(pfn) = pcp.lists[i].pop_back() {
                    let order = order_of(i);
                    self.free_one_page(&mut zone, pfn, order);
                    pcp.count -= 1 << order;
                    freed += 1 << order;
                }
            }
        }
    }

    /// Returns every CPU's lists on every node to the zones
    /// (`drain_all_pages`); true if that freed anything.
    pub fn drain_all_pages(&self) -> bool {
        let mut any = false;
        for (nid, node) in self.nodes.iter().enumerate() {
            for slot in node.pcp.iter() {
                let mut pcp = slot.lock().unwrap();
                any |= pcp.count > 0;
                let all = pcp.count;
                self.free_pcppages_bulk(nid, &mut pcp, all);
            }
        }
        any
    }

    /// Number of free frames, in the zones and on the per-CPU lists.
    pub fn nr_free(&self) -> u64 {
        (0..self.nodes.len()).map(|nid| self.nr_free_node(nid)).sum()
    }

    /// Free frames of node `nid` (`NR_FREE_PAGES` of its zone and its
    /// per-CPU lists).
    pub fn nr_free_node(&self, nid: usize) -> u64 {
        let pcp: u64 = self.nodes[nid].pcp.iter().map(|s| s.lock().unwrap().count).sum();
        self.nr_free_buddy(nid) + pcp
    }

    /// Every free block as (pfn, order): the zones' free lists, then the
    /// per-CPU lists. Exact only while no CPU allocates or frees.
    pub fn free_blocks(&self) -> Vec<(Pfn, u32)> {
        let mut out = self.buddy_blocks();
        for slot in self.nodes.iter().flat_map(|n| n.pcp.iter()) {
            let pcp = slot.lock().unwrap();
            for (i, list) in pcp.lists.iter().enumerate() {
                out.extend(list.iter().map(|&pfn| (pfn, order_of(i))));
            }
        }
        out
    }
}
