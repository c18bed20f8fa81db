//! Software TLBs and TLB flushing (arch/x86/mm/tlb.c, include/asm-generic/tlb.h).
//!
//! Every [`crate::cpu::Cpu`] owns a [`Tlb`] of cached translations with their
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
//! lazy-TLB mode) rather than on interrupt, the TLB is direct-mapped rather
//! than set-associative, and no global or PCID-tagged entries exist. Entries
//! are tagged with the MM's serial, which is never reused.

pub mod mmu_gather;
pub mod table_rcu;

pub use mmu_gather::MmuGather;
pub use table_rcu::TableRcu;

use std::collections::{HashMap, VecDeque};

use crate::arch::{Pfn, PAGE_SHIFT, PMD_SHIFT};
use crate::kernel::Stats;
use crate::sync::atomic::{AtomicU64, Ordering::*};
use crate::sync::{Mutex, RwLock, RwLockReadGuard};

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
    /// Page tables freed once no software walker of the MM can hold them.
    pub tables: TableRcu,
}

impl MmTlb {
    pub fn new(serial: u64) -> MmTlb {
        MmTlb {
            serial,
            gen: AtomicU64::new(0),
            log: Mutex::new(VecDeque::new()),
            inflight: RwLock::new(()),
            tables: TableRcu::new(),
        }
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

#[derive(Clone, Copy, Debug)]
struct Slot {
    /// The MM's serial; 0 marks an empty slot (serials start at 1).
    mm: u64,
    /// Virtual page number: of a 4K page, or of a 2M page in the huge array.
    vpn: u64,
    entry: TlbEntry,
}

const EMPTY: Slot = Slot { mm: 0, vpn: 0, entry: TlbEntry { pfn: 0, writable: false, dirty: false, generation: 0 } };

/// One direct-mapped array of slots for one page size.
struct Ways {
    slots: Vec<Slot>,
    shift: u32,
}

impl Ways {
    fn new(entries: usize, shift: u32) -> Ways {
        let n = if entries == 0 { 0 } else { entries.next_power_of_two() };
        Ways { slots: vec![EMPTY; n], shift }
    }
    fn index(&self, mm: u64, vpn: u64) -> usize {
        let h = (vpn ^ mm.wrapping_mul(0x9e37_79b9_7f4a_7c15)).wrapping_mul(0xff51_afd7_ed55_8ccd);
        (h >> 32) as usize & (self.slots.len() - 1)
    }
    fn get(&self, mm: u64, addr: u64) -> Option<&TlbEntry> {
        if self.slots.is_empty() {
            return None;
        }
        let vpn = addr >> self.shift;
        let s = &self.slots[self.index(mm, vpn)];
        (s.mm == mm && s.vpn == vpn).then_some(&s.entry)
    }
    fn put(&mut self, mm: u64, addr: u64, entry: TlbEntry) {
        if !self.slots.is_empty() {
            let vpn = addr >> self.shift;
            let i = self.index(mm, vpn);
            self.slots[i] = Slot { mm, vpn, entry };
        }
    }
    fn remove(&mut self, mm: u64, addr: u64) {
        if self.get(mm, addr).is_some() {
            let i = self.index(mm, addr >> self.shift);
            self.slots[i] = EMPTY;
        }
    }
    /// Empties the slots of `mm` that overlap any range; returns how many.
    fn drop_ranges(&mut self, mm: u64, ranges: &[FlushRange]) -> u64 {
        let size = 1u64 << self.shift;
        let mut n = 0;
        for s in self.slots.iter_mut().filter(|s| s.mm == mm) {
            let base = s.vpn << self.shift;
            if ranges.iter().any(|r| base < r.end && r.start < base.saturating_add(size)) {
                *s = EMPTY;
                n += 1;
            }
        }
        n
    }
    fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.mm != 0).count()
    }
}

/// One CPU's TLB: direct-mapped arrays for 4K and 2M translations (hardware
/// TLBs are set-associative; one way keeps the model's lookup to one probe).
pub struct Tlb {
    small: Ways,
    huge: Ways,
    /// The flush generation of each MM this CPU has applied.
    seen: HashMap<u64, u64>,
    /// The last (MM, generation) synced: the common case needs no hashing.
    last: (u64, u64),
}

impl Tlb {
    /// A TLB of `entries` 4K slots (rounded up to a power of two) and a
    /// sixty-fourth as many 2M slots; 0 means no TLB.
    pub fn new(entries: usize) -> Tlb {
        let huge = if entries == 0 { 0 } else { (entries / 64).max(16) };
        Tlb {
            small: Ways::new(entries, PAGE_SHIFT),
            huge: Ways::new(huge, PMD_SHIFT),
            seen: HashMap::new(),
            last: (0, 0),
        }
    }

    /// Valid entries.
    pub fn len(&self) -> usize {
        self.small.len() + self.huge.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Applies every flush of `mm` published since this CPU last looked.
    pub fn sync(&mut self, mm: &MmTlb, stats: &Stats) {
        let gen = mm.gen.load(Acquire);
        if self.last == (mm.serial, gen) {
            return;
        }
        self.last = (mm.serial, gen);
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
        let dropped = self.small.drop_ranges(mm.serial, &ranges) + self.huge.drop_ranges(mm.serial, &ranges);
        if dropped > 0 {
            Stats::inc(&stats.tlb_shootdown);
            Stats::add(&stats.tlb_entries_dropped, dropped);
        }
    }

    /// The entry translating `addr` in MM `mm`, with whether it is huge.
    pub fn lookup(&self, mm: u64, addr: u64) -> Option<(TlbEntry, bool)> {
        if let Some(e) = self.small.get(mm, addr) {
            return Some((*e, false));
        }
        self.huge.get(mm, addr).map(|e| (*e, true))
    }

    /// Caches a translation, replacing whatever shared its slot.
    pub fn insert(&mut self, mm: u64, addr: u64, huge: bool, entry: TlbEntry) {
        if huge {
            self.huge.put(mm, addr, entry)
        } else {
            self.small.put(mm, addr, entry)
        }
    }

    /// Drops the entry for `addr` (a spurious fault re-walks: `flush_tlb_page`
    /// on the local CPU only).
    pub fn remove(&mut self, mm: u64, addr: u64, huge: bool) {
        if huge {
            self.huge.remove(mm, addr)
        } else {
            self.small.remove(mm, addr)
        }
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
        // Large enough that these four translations take four slots.
        let mut tlb = Tlb::new(1 << 16);
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
    fn a_slot_holds_one_translation_and_no_tlb_holds_none() {
        let mut tlb = Tlb::new(1);
        tlb.insert(1, 0x1000, false, entry(1));
        tlb.insert(1, 0x2000, false, entry(2));
        assert_eq!(tlb.len(), 1, "one 4K slot");
        assert_eq!(tlb.lookup(1, 0x2000).unwrap().0.pfn, 2);
        assert!(tlb.lookup(1, 0x1000).is_none(), "the newer translation replaced it");
        let mut none = Tlb::new(0);
        none.insert(1, 0x1000, false, entry(1));
        assert!(none.lookup(1, 0x1000).is_none());
    }
}
