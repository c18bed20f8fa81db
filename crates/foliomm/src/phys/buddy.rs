//! The buddy allocator of one zone (mm/page_alloc.c `__rmqueue_smallest`,
//! `expand`, `__free_one_page`): free lists per order `0..=MAX_PAGE_ORDER`
//! linked through the free blocks' descriptors, under one lock, without
//! watermarks or migratetypes; each node has one ([`super::node`]). The
//! per-CPU lists in front of it are in [`super::pcp`]. Node boundaries are
//! max-order aligned, so no block merges across two nodes.

use crate::arch::{Pfn, MAX_PAGE_ORDER};
use crate::sync::atomic::Ordering::*;
use crate::sync::cacheline::{self, Structure};
use crate::sync::MutexGuard;
#[cfg(test)]
use crate::Errno;

use super::{pg, PhysMem};

/// A pfn that ends a free list.
pub(super) const NO_PFN: u64 = u64::MAX;

/// Free lists of the buddy allocator (`struct free_area[]` of one zone).
pub(super) struct FreeArea {
    pub(super) head: [Pfn; MAX_PAGE_ORDER as usize + 1],
    pub(super) nr_free: [u64; MAX_PAGE_ORDER as usize + 1],
    pub(super) free_pages: u64,
}

impl FreeArea {
    /// Empty free lists.
    pub(super) fn new() -> FreeArea {
        FreeArea {
            head: [NO_PFN; MAX_PAGE_ORDER as usize + 1],
            nr_free: [0; MAX_PAGE_ORDER as usize + 1],
            free_pages: 0,
        }
    }
}

impl PhysMem {
    /// Takes a naturally aligned block of `2^order` frames off the free lists
    /// of the locked zone (`__rmqueue_smallest` + `expand`), or `None` when no
    /// block of that order or larger is free.
    pub(super) fn rmqueue(&self, zone: &mut FreeArea, order: u32) -> Option<Pfn> {
        let mut cur = (order..=MAX_PAGE_ORDER).find(|&o| zone.head[o as usize] != NO_PFN)?;
        let pfn = zone.head[cur as usize];
        self.list_del(zone, pfn, cur);
        // expand(): return the upper halves to the lower free lists.
        while cur > order {
            cur -= 1;
            self.list_add(zone, pfn + (1 << cur), cur);
        }
        Some(pfn)
    }

    /// The generation of frame `pfn`: how often it has been freed.
    pub fn generation(&self, pfn: Pfn) -> u32 {
        self.generation[pfn as usize].load(Acquire)
    }

    /// Returns a block of `2^order` frames to the free lists of the locked
    /// zone, merging it with free buddies (`__free_one_page`).
    pub(super) fn free_one_page(&self, zone: &mut FreeArea, pfn: Pfn, order: u32) {
        let (mut pfn, mut order) = (pfn, order);
        while order < MAX_PAGE_ORDER {
            let buddy = pfn ^ (1 << order);
            let bp = self.page(buddy);
            if !bp.test(pg::BUDDY) || bp.order_field() != order {
                break;
            }
            self.list_del(zone, buddy, order);
            pfn &= !(1 << order);
            order += 1;
        }
        self.list_add(zone, pfn, order);
    }

    /// The zone lock of node `nid` (`zone->lock`), accounted as a write of
    /// its line.
    pub(super) fn lock_zone(&self, nid: usize) -> MutexGuard<'_, FreeArea> {
        let zone = &self.nodes[nid].zone;
        cacheline::write(Structure::ZoneLock, zone);
        zone.lock().unwrap()
    }

    /// Free frames in the buddy free lists of node `nid`.
    pub(super) fn nr_free_buddy(&self, nid: usize) -> u64 {
        self.nodes[nid].zone.lock().unwrap().free_pages
    }

    /// Free blocks per order, over every node (`/proc/buddyinfo` summed).
    pub fn buddyinfo(&self) -> Vec<u64> {
        let mut out = vec![0; MAX_PAGE_ORDER as usize + 1];
        for n in self.nodes.iter() {
            out.iter_mut().zip(n.zone.lock().unwrap().nr_free).for_each(|(o, f)| *o += f);
        }
        out
    }

    /// Every block in the buddy free lists as (pfn, order).
    pub(super) fn buddy_blocks(&self) -> Vec<(Pfn, u32)> {
        let mut out = Vec::new();
        for n in self.nodes.iter() {
            self.zone_blocks(&n.zone.lock().unwrap(), &mut out);
        }
        out
    }

    fn zone_blocks(&self, zone: &FreeArea, out: &mut Vec<(Pfn, u32)>) {
        for order in 0..=MAX_PAGE_ORDER {
            let mut pfn = zone.head[order as usize];
            let mut guard = 0;
            while pfn != NO_PFN && guard <= self.nr_frames {
                out.push((pfn, order));
                pfn = self.page(pfn).compound.load(Relaxed);
                guard += 1;
            }
        }
    }

    pub(super) fn list_add(&self, zone: &mut FreeArea, pfn: Pfn, order: u32) {
        let p = self.page(pfn);
        p.flags.store(pg::BUDDY, Relaxed);
        p.set_order_field(order);
        let old = zone.head[order as usize];
        p.compound.store(old, Relaxed);
        p.link.store(NO_PFN, Relaxed);
        if old != NO_PFN {
            self.page(old).link.store(pfn, Relaxed);
        }
        zone.head[order as usize] = pfn;
        zone.nr_free[order as usize] += 1;
        zone.free_pages += 1 << order;
    }

    pub(super) fn list_del(&self, zone: &mut FreeArea, pfn: Pfn, order: u32) {
        let p = self.page(pfn);
        let next = p.compound.load(Relaxed);
        let prev = p.link.load(Relaxed);
        if prev == NO_PFN {
            zone.head[order as usize] = next;
        } else {
            self.page(prev).compound.store(next, Relaxed);
        }
        if next != NO_PFN {
            self.page(next).link.store(prev, Relaxed);
        }
        p.flags.store(0, Relaxed);
        p.compound.store(0, Relaxed);
        p.link.store(0, Relaxed);
        zone.nr_free[order as usize] -= 1;
        zone.free_pages -= 1 << order;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buddy_splits_and_merges_back() {
        let phys = PhysMem::new(8 << 20, false).unwrap();
        assert_eq!(phys.nr_free(), 2048);
        let a = phys.alloc_pages(0).unwrap();
        let b = phys.alloc_pages(3).unwrap();
        assert_eq!(b % 8, 0, "order-3 block must be naturally aligned");
        assert_eq!(phys.nr_free(), 2048 - 9);
        phys.free_pages(a, 0);
        phys.free_pages(b, 3);
        assert_eq!(phys.nr_free(), 2048);
        assert!(phys.buddyinfo()[MAX_PAGE_ORDER as usize] < 2, "small blocks wait on the per-CPU lists");
        assert!(phys.drain_all_pages());
        assert_eq!(phys.nr_free(), 2048);
        assert_eq!(phys.buddyinfo()[MAX_PAGE_ORDER as usize], 2, "drained blocks must merge back");
    }

    #[test]
    fn a_cpu_reuses_the_page_it_freed_and_takes_the_zone_lock_once_per_batch() {
        let phys = PhysMem::new(8 << 20, false).unwrap();
        let a = phys.alloc_pages(0).unwrap();
        let held = phys.nr_free_buddy(0);
        phys.free_pages(a, 0);
        assert_eq!(phys.alloc_pages(0), Ok(a), "the hottest page comes back first");
        let batch: Vec<_> = (0..62).map(|_| phys.alloc_pages(0).unwrap()).collect();
        assert_eq!(phys.nr_free_buddy(0), held, "one refill served the batch");
        phys.alloc_pages(0).unwrap();
        assert!(phys.nr_free_buddy(0) < held, "an empty list refills from the zone");
        for pfn in batch {
            phys.free_pages(pfn, 0);
        }
    }

    #[test]
    fn init_on_free_zeroes_freed_frames_and_wins_over_poison() {
        for (init_on_free, want) in [(false, crate::phys::POISON), (true, 0)] {
            let phys = PhysMem::new(4 << 20, true).unwrap().with_init_on_free(init_on_free);
            let pfn = phys.alloc_pages(0).unwrap();
            phys.fill(pfn, 0, crate::arch::PAGE_SIZE as usize, 0x5a);
            phys.free_pages(pfn, 0);
            assert_eq!(phys.read_byte(pfn, 100), want, "init_on_free {init_on_free}");
        }
    }

    #[test]
    fn exhaustion_is_enomem() {
        let phys = PhysMem::new(4 << 20, false).unwrap();
        let big = phys.alloc_pages(MAX_PAGE_ORDER).unwrap();
        assert_eq!(phys.alloc_pages(0), Err(Errno::ENOMEM));
        phys.free_pages(big, MAX_PAGE_ORDER);
        assert!(phys.alloc_pages(0).is_ok());
    }

    #[test]
    fn bytes_round_trip() {
        let phys = PhysMem::new(4 << 20, false).unwrap();
        phys.write_bytes(5, 3, b"hello, frames");
        let mut buf = [0u8; 13];
        phys.read_bytes(5, 3, &mut buf);
        assert_eq!(&buf, b"hello, frames");
        phys.copy_frame(6, 5);
        assert_eq!(phys.read_byte(6, 4), b'e');
        let z = phys.alloc_pages_zeroed(MAX_PAGE_ORDER).unwrap();
        phys.fill(z + 3, 0, 4096, 0xee);
        let g = phys.generation(z + 3);
        phys.free_pages(z, MAX_PAGE_ORDER);
        assert_eq!(phys.generation(z + 3), g + 1, "freeing moves the generation on");
        let again = phys.alloc_pages_zeroed(MAX_PAGE_ORDER).unwrap();
        assert_eq!(again, z);
        assert_eq!(phys.read_byte(z + 3, 17), 0, "zeroed allocation clears old bytes");
    }
}
