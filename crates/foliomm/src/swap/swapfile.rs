//! A swap device (mm/swapfile.c `swap_info_struct`): its `swap_map` (how
//! many swap PTEs name each slot, and whether the swap cache holds it),
//! slot allocation in clusters, the bytes each slot stores, and the swap
//! cache (mm/swap_state.c) of folios tied to slots.
//!
//! Differs from Linux: one lock for the device (Linux locks per cluster;
//! where slots are found: [`super::cluster`]); counts have no continuation
//! pages (no 0x3f limit); slots store their bytes directly, as a
//! synchronous device such as zram does, and the swap cache is a map from
//! slot to frame.

use std::collections::{BTreeMap, HashMap};

use super::cluster::Clusters;
use crate::arch::{Pfn, SwpEntry, PAGE_SIZE};
use crate::phys::{Content, PhysMem};
use crate::sync::Mutex;
use crate::Errno;

/// One slot's `swap_map` entry: its swap count and `SWAP_HAS_CACHE`.
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
struct Slot {
    count: u32,
    has_cache: bool,
}

/// The device's state under its lock.
struct Inner {
    map: Vec<Slot>,
    data: HashMap<u64, Content>,
    /// The swap cache: slot to the frame of the page holding it, and back
    /// (`folio->swap`).
    cache: BTreeMap<u64, Pfn>,
    frames: HashMap<Pfn, u64>,
    clusters: Clusters,
    inuse: u64,
}

/// A swap device of type 0 (`swap_info[0]`), `SWP_SYNCHRONOUS_IO` as zram.
pub struct SwapDevice {
    inner: Mutex<Inner>,
    slots: u64,
}

/// The device's totals as `/proc/meminfo` shows them (in pages).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwapStats {
    /// `SwapTotal`: usable slots (the header slot 0 is not).
    pub total: u64,
    /// `SwapFree`.
    pub free: u64,
    /// `SwapCached`: pages in the swap cache.
    pub cached: u64,
}

impl SwapDevice {
    /// A device of `bytes` (`swapon` of a `mkswap`ed device): slot 0 holds
    /// the header and is never allocated.
    pub fn new(bytes: u64) -> SwapDevice {
        let slots = (bytes / PAGE_SIZE).max(1);
        let inner = Inner {
            map: vec![Slot::default(); slots as usize],
            data: HashMap::new(),
            cache: BTreeMap::new(),
            frames: HashMap::new(),
            clusters: Clusters::new(slots),
            inuse: 0,
        };
        SwapDevice { inner: Mutex::new(inner), slots }
    }

    /// `folio_alloc_swap` (`get_swap_pages` + `add_to_swap_cache`): `nr`
    /// (a power of two) free slots, naturally aligned, in a cluster serving
    /// their order ([`Clusters::alloc`]), for the folio at `pfn`, marked
    /// `SWAP_HAS_CACHE` and cached. ENOMEM when no such run is free (for a
    /// large folio: the caller splits, `THP_SWPOUT_FALLBACK`).
    pub fn alloc(&self, pfn: Pfn, nr: u64) -> Result<SwpEntry, Errno> {
        assert!(nr.is_power_of_two(), "a folio of {nr} pages");
        let s = &mut *self.inner.lock().unwrap();
        let map = &s.map;
        // Slot 0 holds the header (`SWAP_MAP_BAD`).
        let free = |o: u64| o != 0 && map[o as usize] == Slot::default();
        let first = s.clusters.alloc(nr.trailing_zeros(), free).ok_or(Errno::ENOMEM)?;
        for o in first..first + nr {
            s.map[o as usize].has_cache = true;
            s.cache.insert(o, pfn + (o - first));
            s.frames.insert(pfn + (o - first), o);
        }
        s.inuse += nr;
        Ok(SwpEntry { kind: 0, offset: first })
    }

    /// `swap_duplicate`: one more swap PTE names each of the `nr` slots.
    pub fn duplicate(&self, e: SwpEntry, nr: u64) {
        let mut s = self.inner.lock().unwrap();
        for o in e.offset..e.offset + nr {
            s.map[o as usize].count += 1;
        }
    }

    /// `swap_free_nr` / `free_swap_and_cache_nr` without the cache part:
    /// one swap PTE fewer names each of the `nr` slots; a slot nothing
    /// names any more is freed with its bytes. Returns the slots whose
    /// count dropped to 0 while the swap cache still holds them (the
    /// caller may drop those folios: `__try_to_reclaim_swap`).
    pub fn put(&self, e: SwpEntry, nr: u64) -> Vec<(u64, Pfn)> {
        let mut s = self.inner.lock().unwrap();
        let mut cached = Vec::new();
        for o in e.offset..e.offset + nr {
            let slot = &mut s.map[o as usize];
            assert!(slot.count > 0, "swap_free of an unused slot {o}");
            slot.count -= 1;
            let (count, has_cache) = (slot.count, slot.has_cache);
            if count == 0 && !has_cache {
                s.free_slot(o);
            } else if let Some(&pfn) = s.cache.get(&o).filter(|_| count == 0) {
                cached.push((o, pfn));
            }
        }
        cached
    }

    /// `__swap_count`: how many swap PTEs name the slot.
    pub fn count(&self, e: SwpEntry) -> u32 {
        self.inner.lock().unwrap().map[e.offset as usize].count
    }

    /// `swap_cache_get_folio`: the frame holding the slot, if cached.
    pub fn cached(&self, e: SwpEntry) -> Option<Pfn> {
        self.inner.lock().unwrap().cache.get(&e.offset).copied()
    }

    /// The slot the page at `pfn` holds in the swap cache (`folio->swap`
    /// and the page's index in its folio).
    pub fn entry_of(&self, pfn: Pfn) -> Option<SwpEntry> {
        self.inner.lock().unwrap().frames.get(&pfn).map(|&offset| SwpEntry { kind: 0, offset })
    }

    /// `swapcache_prepare` + `add_to_swap_cache` for a swap-in: the page at
    /// `pfn` holds the slot from now on. False if another swap-in got there
    /// first (the caller looks up the cache again).
    pub fn cache_add(&self, e: SwpEntry, pfn: Pfn) -> bool {
        let mut s = self.inner.lock().unwrap();
        let slot = &mut s.map[e.offset as usize];
        if slot.has_cache || slot.count == 0 {
            return false;
        }
        slot.has_cache = true;
        s.cache.insert(e.offset, pfn);
        s.frames.insert(pfn, e.offset);
        true
    }

    /// `swapcache_prepare` for a swap-in that skips the swap cache: claims
    /// the slot (`SWAP_HAS_CACHE` without a cached page) so that no other
    /// swap-in reads it meanwhile. False if it is claimed or cached already,
    /// or free.
    pub fn prepare(&self, e: SwpEntry) -> bool {
        let mut s = self.inner.lock().unwrap();
        let slot = &mut s.map[e.offset as usize];
        if slot.has_cache || slot.count == 0 {
            return false;
        }
        slot.has_cache = true;
        true
    }

    /// `swapcache_clear`: the claim of [`SwapDevice::prepare`] ends; the
    /// slot is freed if no swap entry names it.
    pub fn clear_prepared(&self, e: SwpEntry) {
        let mut s = self.inner.lock().unwrap();
        s.map[e.offset as usize].has_cache = false;
        if s.map[e.offset as usize].count == 0 {
            s.free_slot(e.offset);
        }
    }

    /// `delete_from_swap_cache` (`put_swap_folio`): the page no longer
    /// holds the slot; a slot no swap PTE names is freed with its bytes.
    pub fn cache_del(&self, e: SwpEntry) {
        let mut s = self.inner.lock().unwrap();
        if let Some(pfn) = s.cache.remove(&e.offset) {
            s.frames.remove(&pfn);
        }
        s.map[e.offset as usize].has_cache = false;
        if s.map[e.offset as usize].count == 0 {
            s.free_slot(e.offset);
        }
    }

    /// `swap_writepage` on a synchronous device: the page's bytes stored,
    /// by content class (as zram stores a same-filled page as its fill).
    pub fn write(&self, phys: &PhysMem, e: SwpEntry, pfn: Pfn) {
        let content = phys.content(pfn);
        self.inner.lock().unwrap().data.insert(e.offset, content);
    }

    /// `swap_read_folio` on a synchronous device: the slot's bytes into the
    /// page.
    pub fn read(&self, phys: &PhysMem, e: SwpEntry, pfn: Pfn) {
        let s = self.inner.lock().unwrap();
        let data = s.data.get(&e.offset).expect("a swapped-out slot holds its bytes");
        phys.set_content(pfn, data);
    }

    /// The device's totals.
    pub fn stats(&self) -> SwapStats {
        let s = self.inner.lock().unwrap();
        SwapStats { total: self.slots - 1, free: self.slots - 1 - s.inuse, cached: s.cache.len() as u64 }
    }

    /// Every slot in use: its swap count and the frame caching it (for the
    /// checker).
    pub fn slots_in_use(&self) -> Vec<(u64, u32, Option<Pfn>)> {
        let s = self.inner.lock().unwrap();
        let used = s.map.iter().enumerate().filter(|(_, m)| **m != Slot::default());
        used.map(|(o, m)| (o as u64, m.count, s.cache.get(&(o as u64)).copied())).collect()
    }
}

impl Inner {
    /// `swap_entries_free`: the slot is free again, its bytes dropped.
    fn free_slot(&mut self, o: u64) {
        self.map[o as usize] = Slot::default();
        self.data.remove(&o);
        self.inuse -= 1;
        self.clusters.free(o);
    }
}

/// The slot protocol of a swap-in that skips the swap cache
/// (`swapcache_prepare` … `swap_free_nr` … `swapcache_clear`) against a
/// zap of another entry naming the same slot and against a second swap-in:
/// whatever the interleaving, one swap-in claims the slot, and the slot is
/// freed exactly once, when neither an entry nor a claim holds it.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::sync::{thread, Arc};

    /// A device whose slot 1 two swap entries name, cached by nothing.
    fn named_twice() -> (Arc<SwapDevice>, SwpEntry) {
        let dev = Arc::new(SwapDevice::new(8 * PAGE_SIZE));
        let e = dev.alloc(0x100, 1).unwrap();
        dev.duplicate(e, 1);
        dev.duplicate(e, 1);
        dev.cache_del(e);
        (dev, e)
    }

    #[test]
    fn a_swap_in_and_a_zap_free_the_slot_once() {
        loom::model(|| {
            let (dev, e) = named_twice();
            let d = dev.clone();
            let swapin = thread::spawn(move || {
                if d.prepare(e) {
                    d.put(e, 1);
                    d.clear_prepared(e);
                }
            });
            dev.put(e, 1);
            swapin.join().unwrap();
            // Whichever put comes last (or the claim's end) frees it.
            assert!(dev.slots_in_use().is_empty(), "{:?}", dev.slots_in_use());
            assert_eq!(dev.stats().free, dev.stats().total);
        });
    }

    #[test]
    fn two_swap_ins_claim_a_slot_once() {
        loom::model(|| {
            let (dev, e) = named_twice();
            let d = dev.clone();
            let other = thread::spawn(move || d.prepare(e));
            let mine = dev.prepare(e);
            let theirs = other.join().unwrap();
            assert!(mine ^ theirs, "exactly one swap-in claims the slot");
        });
    }
}
