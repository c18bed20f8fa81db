//! Software TLBs and TLB flushing (arch/x86/mm/tlb.c, include/asm-generic/tlb.h).
//!
//! Every [`crate::Cpu`] owns a [`Tlb`] of cached translations with their
//! permission and dirty bits. Every address space owns an [`MmTlb`]: a flush
//! generation (x86's `mm->context.tlb_gen`), a log of the recent flush ranges,
//! and the wait that stands for the shootdown IPI.
//!
//! Protocol: a CPU uses its TLB, or walks the page tables, only inside an
//! access section ([`MmTlb::enter`]), and on entering applies every flush
//! published since it last looked. A flush publishes its range under a new
//! generation and then waits until every section that was open has closed
//! (`flush_tlb_mm_range` waiting for the IPIs to be acknowledged). So once a
//! flush returns, no CPU can use a translation it removed, and the frames and
//! page tables behind it may be freed.
//!
//! Differs from x86: CPUs apply flushes lazily at their next access (as in
//! lazy-TLB mode) rather than on interrupt, the TLB is fully associative with
//! FIFO replacement, and no global or PCID-tagged entries exist. Entries are
//! tagged with the MM's serial, which is never reused.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::sync::{Mutex, RwLock, RwLockReadGuard};

use crate::pgtable::PMD_SHIFT;
use crate::phys::Pfn;
use crate::phys::PAGE_SHIFT;
use crate::stats::Stats;

/// Flush ranges remembered per MM; a CPU further behind flushes the whole MM.
const FLUSH_LOG: usize = 64;

#[derive(Clone, Copy, Debug)]
struct FlushRange {
    gen: u64,
    start: u64,
    end: u64,
}

/// The TLB state of one address space.
pub struct MmTlb {
    /// Unique tag of the MM in TLB entries.
    pub serial: u64,
    gen: AtomicU64,
    log: Mutex<VecDeque<FlushRange>>,
    inflight: RwLock<()>,
}

impl MmTlb {
    pub fn new(serial: u64) -> MmTlb {
        MmTlb { serial, gen: AtomicU64::new(0), log: Mutex::new(VecDeque::new()), inflight: RwLock::new(()) }
    }

    /// Opens an access section: flushes wait for it to close.
    pub fn enter(&self) -> RwLockReadGuard<'_, ()> {
        self.inflight.read().unwrap()
    }

    /// `flush_tlb_mm_range`: removes `[start, end)` from every CPU's TLB
    /// before returning.
    pub fn flush_range(&self, stats: &Stats, start: u64, end: u64) {
        Stats::inc(&stats.tlb_flush);
        {
            let mut log = self.log.lock().unwrap();
            let gen = self.gen.load(Relaxed) + 1;
            log.push_back(FlushRange { gen, start, end });
            if log.len() > FLUSH_LOG {
                log.pop_front();
            }
            self.gen.store(gen, Release);
        }
        // The shootdown: wait until every section open now has closed.
        drop(self.inflight.write().unwrap());
    }

    /// `flush_tlb_mm`: the whole address space.
    pub fn flush_all(&self, stats: &Stats) {
        self.flush_range(stats, 0, u64::MAX);
    }
}

/// A cached translation.
#[derive(Clone, Copy, Debug)]
pub struct TlbEntry {
    /// First frame of the mapped page (of the 2 MiB page for a huge entry).
    pub pfn: Pfn,
    pub writable: bool,
    /// The entry already set the PTE's dirty bit (writes need no walk).
    pub dirty: bool,
    /// The frame's generation when the entry was filled.
    pub generation: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    mm: u64,
    /// Virtual page number: of a 4K page, or of a 2M page when `huge`.
    vpn: u64,
    huge: bool,
}

impl Key {
    fn base(&self) -> u64 {
        self.vpn << if self.huge { PMD_SHIFT } else { PAGE_SHIFT }
    }
    fn size(&self) -> u64 {
        1 << if self.huge { PMD_SHIFT } else { PAGE_SHIFT }
    }
}

/// One CPU's TLB.
pub struct Tlb {
    entries: HashMap<Key, TlbEntry>,
    fifo: VecDeque<Key>,
    capacity: usize,
    /// The flush generation of each MM this CPU has applied.
    seen: HashMap<u64, u64>,
}

impl Tlb {
    pub fn new(capacity: usize) -> Tlb {
        Tlb { entries: HashMap::new(), fifo: VecDeque::new(), capacity, seen: HashMap::new() }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Applies every flush of `mm` published since this CPU last looked.
    pub fn sync(&mut self, mm: &MmTlb, stats: &Stats) {
        let gen = mm.gen.load(Acquire);
        let seen = *self.seen.entry(mm.serial).or_insert(gen);
        if seen == gen {
            return;
        }
        self.seen.insert(mm.serial, gen);
        let ranges: Vec<FlushRange> = {
            let log = mm.log.lock().unwrap();
            let complete = log.front().is_some_and(|f| f.gen <= seen + 1);
            if complete {
                log.iter().filter(|f| f.gen > seen && f.gen <= gen).copied().collect()
            } else {
                vec![FlushRange { gen, start: 0, end: u64::MAX }]
            }
        };
        let before = self.entries.len();
        self.entries.retain(|k, _| {
            k.mm != mm.serial || !ranges.iter().any(|r| k.base() < r.end && r.start < k.base() + k.size())
        });
        let dropped = (before - self.entries.len()) as u64;
        if dropped > 0 {
            Stats::inc(&stats.tlb_shootdown);
            Stats::add(&stats.tlb_entries_dropped, dropped);
            let entries = &self.entries;
            self.fifo.retain(|k| entries.contains_key(k));
        }
    }

    /// The entry translating `addr` in MM `mm`, with whether it is huge.
    pub fn lookup(&self, mm: u64, addr: u64) -> Option<(TlbEntry, bool)> {
        let small = Key { mm, vpn: addr >> PAGE_SHIFT, huge: false };
        if let Some(e) = self.entries.get(&small) {
            return Some((*e, false));
        }
        let huge = Key { mm, vpn: addr >> PMD_SHIFT, huge: true };
        self.entries.get(&huge).map(|e| (*e, true))
    }

    /// Caches a translation; the oldest entry makes room when full.
    pub fn insert(&mut self, mm: u64, addr: u64, huge: bool, entry: TlbEntry) {
        if self.capacity == 0 {
            return;
        }
        let vpn = addr >> if huge { PMD_SHIFT } else { PAGE_SHIFT };
        let key = Key { mm, vpn, huge };
        if self.entries.insert(key, entry).is_none() {
            self.fifo.push_back(key);
            while self.entries.len() > self.capacity {
                let Some(old) = self.fifo.pop_front() else { break };
                self.entries.remove(&old);
            }
        }
    }

    /// Drops the entry for `addr` (a spurious fault re-walks: `flush_tlb_page`
    /// on the local CPU only).
    pub fn remove(&mut self, mm: u64, addr: u64, huge: bool) {
        let vpn = addr >> if huge { PMD_SHIFT } else { PAGE_SHIFT };
        self.entries.remove(&Key { mm, vpn, huge });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(pfn: Pfn) -> TlbEntry {
        TlbEntry { pfn, writable: true, dirty: true, generation: 0 }
    }

    #[test]
    fn flush_removes_only_its_range_and_mm() {
        let stats = Stats::default();
        let (a, b) = (MmTlb::new(1), MmTlb::new(2));
        let mut tlb = Tlb::new(16);
        tlb.sync(&a, &stats);
        tlb.sync(&b, &stats);
        tlb.insert(1, 0x1000, false, entry(5));
        tlb.insert(1, 0x5000, false, entry(6));
        tlb.insert(2, 0x1000, false, entry(7));
        tlb.insert(1, 0x20_0000, true, entry(512));
        a.flush_range(&stats, 0x1000, 0x2000);
        assert!(tlb.lookup(1, 0x1000).is_some(), "not applied before the next sync");
        tlb.sync(&a, &stats);
        assert!(tlb.lookup(1, 0x1000).is_none());
        assert!(tlb.lookup(1, 0x5000).is_some());
        assert_eq!(tlb.lookup(2, 0x1000).unwrap().0.pfn, 7, "another MM is untouched");
        assert!(tlb.lookup(1, 0x20_1000).unwrap().1, "a huge entry covers its 2M");
        a.flush_range(&stats, 0x3f_f000, 0x40_0000);
        tlb.sync(&a, &stats);
        assert!(tlb.lookup(1, 0x20_0000).is_none(), "a range touching the 2M page drops it");
    }

    #[test]
    fn a_cpu_far_behind_flushes_everything_of_that_mm() {
        let stats = Stats::default();
        let a = MmTlb::new(1);
        let mut tlb = Tlb::new(16);
        tlb.sync(&a, &stats);
        tlb.insert(1, 0x9000, false, entry(5));
        for _ in 0..FLUSH_LOG + 5 {
            a.flush_range(&stats, 0x1000, 0x2000);
        }
        tlb.sync(&a, &stats);
        assert!(tlb.is_empty(), "the log lost ranges, so the whole MM is flushed");
    }

    #[test]
    fn capacity_evicts_oldest() {
        let mut tlb = Tlb::new(2);
        for i in 0..3 {
            tlb.insert(1, i << 12, false, entry(i));
        }
        assert_eq!(tlb.len(), 2);
        assert!(tlb.lookup(1, 0).is_none());
    }
}
