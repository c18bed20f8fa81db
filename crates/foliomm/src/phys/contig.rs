//! Gigantic blocks (mm/page_alloc.c `alloc_contig_pages`,
//! `free_contig_range`): naturally aligned runs of more than
//! `2^MAX_PAGE_ORDER` frames, more than a buddy free list holds, found by
//! scanning the zone for a run of free max-order blocks, all of which are
//! then taken off the lists; a run never crosses two nodes. 1 GiB huge
//! pages come from here.
//!
//! Differs from Linux: nothing is migrated out of the way
//! (`alloc_contig_range` migrates movable pages; here a run must be free
//! already), and there is no CMA area.

use super::{pg, PhysMem, Placement};
use crate::arch::{Pfn, MAX_PAGE_ORDER};
use crate::Errno;

impl PhysMem {
    /// Takes `2^order` free frames (order above `MAX_PAGE_ORDER`), aligned
    /// to their size and inside one node, off the free lists of the first
    /// node of `place` that has such a run, after draining the per-CPU
    /// lists. ENOMEM when none is wholly free.
    pub(super) fn alloc_contig(&self, place: Placement, order: u32) -> Result<Pfn, Errno> {
        self.drain_all_pages();
        let (nr, block) = (1u64 << order, 1usize << MAX_PAGE_ORDER);
        let free_block = |b: Pfn| {
            let p = self.page(b);
            p.test(pg::BUDDY) && p.order_field() == MAX_PAGE_ORDER
        };
        for nid in self.zonelist(place) {
            let mut zone = self.lock_zone(nid);
            let (first, end) = (self.nodes[nid].start, self.nodes[nid].start + self.nodes[nid].nr_frames);
            let found = (first.div_ceil(nr) * nr..end / nr * nr)
                .step_by(nr as usize)
                .find(|&s| (s..s + nr).step_by(block).all(free_block));
            if let Some(start) = found {
                for b in (start..start + nr).step_by(block) {
                    self.list_del(&mut zone, b, MAX_PAGE_ORDER);
                }
                return Ok(start);
            }
        }
        Err(Errno::ENOMEM)
    }

    /// Gives back a run [`PhysMem::alloc_contig`] handed out, one max-order
    /// block at a time (`free_contig_range`).
    pub(super) fn free_contig(&self, pfn: Pfn, order: u32) {
        let mut zone = self.lock_zone(self.nid(pfn));
        for b in (pfn..pfn + (1 << order)).step_by(1 << MAX_PAGE_ORDER) {
            self.free_one_page(&mut zone, b, MAX_PAGE_ORDER);
        }
    }
}
