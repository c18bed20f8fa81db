//! Simulated physical memory: a frame arena holding real bytes, the memmap of
//! page descriptors, and a buddy allocator for orders `0..=MAX_PAGE_ORDER`.
//!
//! Models `mm/page_alloc.c` (`__rmqueue_smallest`, `expand`, `__free_one_page`)
//! with a single zone under one lock and no per-CPU lists, watermarks or
//! migratetypes. The arena is reserved from the host with `MAP_NORESERVE`, so
//! frames that are never touched cost no host memory.
//!
//! Every word of the arena is accessed as an `AtomicU64`: page tables live in
//! frames and are updated concurrently, and user data may be written by several
//! threads at once, exactly as on hardware. This module holds the project's only
//! `unsafe` code.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering::*};
use std::sync::Mutex;

use crate::Errno;

pub const PAGE_SHIFT: u32 = 12;
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;
/// Words of 8 bytes in a frame (also the number of entries of a page table).
pub const WORDS_PER_PAGE: usize = (PAGE_SIZE / 8) as usize;
/// Largest buddy order (Linux `MAX_PAGE_ORDER`): blocks of 4 MiB.
pub const MAX_PAGE_ORDER: u32 = 10;
/// Order of a PMD-sized folio on x86-64.
pub const PMD_ORDER: u32 = 9;

/// A physical frame number.
pub type Pfn = u64;
const NO_PFN: u64 = u64::MAX;

/// Page descriptor flag bits (`enum pageflags`), stored in [`Page::flags`].
pub mod pg {
    /// `PG_locked`: the folio lock; on a page-table page, its split PTL.
    pub const LOCKED: u64 = 1 << 0;
    /// `PG_head`: first page of a large folio.
    pub const HEAD: u64 = 1 << 1;
    /// The page is a tail of a large folio (Linux encodes this in `compound_head`).
    pub const TAIL: u64 = 1 << 2;
    /// `PageAnon`: `folio->mapping` has `FOLIO_MAPPING_ANON` set.
    pub const ANON: u64 = 1 << 3;
    /// `PG_anon_exclusive`: this page is exclusive to one MM (per page).
    pub const ANON_EXCLUSIVE: u64 = 1 << 4;
    /// `PG_dirty`.
    pub const DIRTY: u64 = 1 << 5;
    /// `PageBuddy`: first page of a free block in the buddy allocator.
    pub const BUDDY: u64 = 1 << 6;
    /// `PageTable`: the frame is a page table.
    pub const TABLE: u64 = 1 << 7;
    /// The frame is (part of) the shared zero page or the huge zero folio.
    pub const ZERO: u64 = 1 << 8;
    /// `PG_swapbacked`.
    pub const SWAPBACKED: u64 = 1 << 9;
    /// `PG_partially_mapped` (on the second page): queued for deferred split.
    pub const PARTIALLY_MAPPED: u64 = 1 << 10;
    /// Bits 56..63 hold an order: of a free block on its first page, of a
    /// large folio on its second page (`folio->_flags_1`).
    pub const ORDER_SHIFT: u32 = 56;
    pub const ORDER_MASK: u64 = 0xff << ORDER_SHIFT;
}

/// One `struct page`: 64 bytes, one cache line, all fields atomic.
///
/// The meaning of `compound`, `link`, `w` and `ids` depends on the role of the
/// page, as Linux overlays its unions: on a free block they link the buddy free
/// list; on a tail page `compound` names the head; on the second page of a large
/// folio `w` and `ids` hold the mapcount design's fields (`_large_mapcount`,
/// `_entire_mapcount`, `_mm_id[]`, ...).
#[repr(C, align(64))]
#[derive(Default)]
pub struct Page {
    pub flags: AtomicU64,
    /// `_refcount` (unbiased); only meaningful on a head or small page.
    pub refcount: AtomicI32,
    /// `_mapcount`, raw (biased by -1: -1 means unmapped).
    pub mapcount: AtomicI32,
    /// Tail page: pfn of the head. Free block: next block in its free list.
    pub compound: AtomicU64,
    /// Free block: previous block in its free list. Anon folio head: the
    /// `anon_vma` identity (`folio->mapping`).
    pub link: AtomicU64,
    /// Design-specific 32-bit counters (second page of a large folio).
    pub w: [AtomicI32; 6],
    /// Design-specific word (second page: `_mm_ids` with its lock and shared bits).
    pub ids: AtomicU64,
}

impl Page {
    pub fn test(&self, bit: u64) -> bool {
        self.flags.load(Relaxed) & bit != 0
    }
    pub fn set(&self, bit: u64) {
        self.flags.fetch_or(bit, Relaxed);
    }
    pub fn clear(&self, bit: u64) {
        self.flags.fetch_and(!bit, Relaxed);
    }
    pub fn order_field(&self) -> u32 {
        ((self.flags.load(Relaxed) & pg::ORDER_MASK) >> pg::ORDER_SHIFT) as u32
    }
    fn set_order_field(&self, order: u32) {
        let f = self.flags.load(Relaxed) & !pg::ORDER_MASK;
        self.flags.store(f | ((order as u64) << pg::ORDER_SHIFT), Relaxed);
    }
}

/// The host memory behind the frames.
struct Arena {
    base: NonNull<AtomicU64>,
    bytes: usize,
}

// SAFETY: the arena is only ever accessed through `&AtomicU64`, which is Sync.
unsafe impl Send for Arena {}
// SAFETY: as above; no non-atomic access to the arena exists.
unsafe impl Sync for Arena {}

impl Arena {
    fn new(bytes: usize) -> Result<Arena, Errno> {
        // SAFETY: an anonymous private mapping with no address hint has no
        // preconditions; the result is checked against MAP_FAILED.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Errno::ENOMEM);
        }
        // Host THPs for the arena make first touch of model frames cheap; the
        // host may ignore the advice, which only costs speed.
        // SAFETY: advice on exactly the mapping just made; it changes no contents.
        unsafe {
            libc::madvise(p, bytes, libc::MADV_HUGEPAGE);
        }
        let base = NonNull::new(p.cast::<AtomicU64>()).ok_or(Errno::ENOMEM)?;
        Ok(Arena { base, bytes })
    }

    fn word(&self, index: usize) -> &AtomicU64 {
        assert!(index < self.bytes / 8, "frame arena index out of range");
        // SAFETY: index is in bounds (checked above); the mapping is readable,
        // writable, 8-byte aligned (page aligned), zero-filled on first touch
        // (a valid AtomicU64), and lives as long as `self`.
        unsafe { &*self.base.as_ptr().add(index) }
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: base/bytes describe exactly the mapping made in `new`, and no
        // reference into it outlives `self`.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.bytes);
        }
    }
}

/// Free lists of the buddy allocator (`struct free_area[]` of one zone).
struct FreeArea {
    head: [Pfn; MAX_PAGE_ORDER as usize + 1],
    nr_free: [u64; MAX_PAGE_ORDER as usize + 1],
    free_pages: u64,
}

/// Physical memory: arena, memmap and buddy allocator.
pub struct PhysMem {
    arena: Arena,
    memmap: Box<[Page]>,
    nr_frames: u64,
    zone: Mutex<FreeArea>,
    /// Per-frame generation, bumped whenever the frame is freed: a TLB entry
    /// remembers it, so a use after free is recognised (model-only).
    generation: Box<[std::sync::atomic::AtomicU32]>,
    /// Fill freed frames with [`POISON`] (`page_poisoning` / `init_on_free`).
    poison: bool,
}

/// The byte freed frames are filled with when poisoning is on (`PAGE_POISON`).
pub const POISON: u8 = 0xaa;

impl PhysMem {
    /// Creates `bytes` of model RAM (rounded down to whole 4 MiB blocks), all
    /// free; `poison` fills every freed frame with [`POISON`].
    pub fn new(bytes: u64, poison: bool) -> Result<PhysMem, Errno> {
        let block = PAGE_SIZE << MAX_PAGE_ORDER;
        let nr_frames = (bytes / block) * (block / PAGE_SIZE);
        if nr_frames == 0 {
            return Err(Errno::EINVAL);
        }
        let arena = Arena::new((nr_frames * PAGE_SIZE) as usize)?;
        let memmap = (0..nr_frames).map(|_| Page::default()).collect();
        let phys = PhysMem {
            arena,
            memmap,
            nr_frames,
            zone: Mutex::new(FreeArea {
                head: [NO_PFN; MAX_PAGE_ORDER as usize + 1],
                nr_free: [0; MAX_PAGE_ORDER as usize + 1],
                free_pages: 0,
            }),
            generation: (0..nr_frames).map(|_| Default::default()).collect(),
            poison,
        };
        {
            let mut zone = phys.zone.lock().unwrap();
            for pfn in (0..nr_frames).step_by(1 << MAX_PAGE_ORDER) {
                phys.list_add(&mut zone, pfn, MAX_PAGE_ORDER);
            }
        }
        Ok(phys)
    }

    pub fn nr_frames(&self) -> u64 {
        self.nr_frames
    }

    /// The descriptor of `pfn` (`pfn_to_page`).
    pub fn page(&self, pfn: Pfn) -> &Page {
        &self.memmap[pfn as usize]
    }

    /// Word `idx` (0..512) of frame `pfn`: a page-table entry or 8 data bytes.
    pub fn word(&self, pfn: Pfn, idx: usize) -> &AtomicU64 {
        debug_assert!(idx < WORDS_PER_PAGE);
        self.arena.word(pfn as usize * WORDS_PER_PAGE + idx)
    }

    /// Allocates like [`PhysMem::alloc_pages`] and zeroes the block
    /// (`__GFP_ZERO`, `clear_page`).
    pub fn alloc_pages_zeroed(&self, order: u32) -> Result<Pfn, Errno> {
        let pfn = self.alloc_pages(order)?;
        let start = pfn as usize * WORDS_PER_PAGE;
        let bytes = (PAGE_SIZE as usize) << order;
        assert!(start * 8 + bytes <= self.arena.bytes);
        // SAFETY: the block was just taken off the free lists, so this thread
        // owns it: no page table maps it and no other thread can reach it
        // without a model bug. The range is inside the arena (checked above),
        // and zero bytes are a valid AtomicU64. A bulk store is used because
        // zeroing is the real work of a fault.
        unsafe {
            std::ptr::write_bytes(self.arena.base.as_ptr().add(start).cast::<u8>(), 0, bytes);
        }
        Ok(pfn)
    }

    /// Copies frame `src` to frame `dst` (`copy_user_highpage`).
    pub fn copy_frame(&self, dst: Pfn, src: Pfn) {
        for i in 0..WORDS_PER_PAGE {
            let v = self.word(src, i).load(Relaxed);
            self.word(dst, i).store(v, Relaxed);
        }
    }

    /// Reads byte `off` (0..4096) of frame `pfn`.
    pub fn read_byte(&self, pfn: Pfn, off: usize) -> u8 {
        let w = self.word(pfn, off / 8).load(Relaxed);
        (w >> ((off % 8) * 8)) as u8
    }

    /// Reads `buf.len()` bytes from frame `pfn` starting at `off`.
    pub fn read_bytes(&self, pfn: Pfn, off: usize, buf: &mut [u8]) {
        for (i, b) in buf.iter_mut().enumerate() {
            *b = self.read_byte(pfn, off + i);
        }
    }

    /// Writes `data` into frame `pfn` at `off`; whole aligned words are stored
    /// at once, partial words with an atomic read-modify-write.
    pub fn write_bytes(&self, pfn: Pfn, off: usize, data: &[u8]) {
        let mut i = 0;
        while i < data.len() {
            let pos = off + i;
            if pos.is_multiple_of(8) && data.len() - i >= 8 {
                let v = u64::from_le_bytes(data[i..i + 8].try_into().unwrap());
                self.word(pfn, pos / 8).store(v, Relaxed);
                i += 8;
            } else {
                self.write_byte(pfn, pos, data[i]);
                i += 1;
            }
        }
    }

    /// Writes one byte of frame `pfn`.
    pub fn write_byte(&self, pfn: Pfn, off: usize, val: u8) {
        let shift = (off % 8) * 8;
        let word = self.word(pfn, off / 8);
        let mut cur = word.load(Relaxed);
        loop {
            let new = (cur & !(0xffu64 << shift)) | ((val as u64) << shift);
            match word.compare_exchange_weak(cur, new, Relaxed, Relaxed) {
                Ok(_) => return,
                Err(x) => cur = x,
            }
        }
    }

    /// Fills `len` bytes of frame `pfn` from `off` with `val` (`memset`).
    pub fn fill(&self, pfn: Pfn, off: usize, len: usize, val: u8) {
        let pattern = u64::from_le_bytes([val; 8]);
        let mut pos = off;
        let end = off + len;
        while pos < end {
            if pos.is_multiple_of(8) && end - pos >= 8 {
                self.word(pfn, pos / 8).store(pattern, Relaxed);
                pos += 8;
            } else {
                self.write_byte(pfn, pos, val);
                pos += 1;
            }
        }
    }

    /// Allocates a naturally aligned block of `2^order` frames
    /// (`__rmqueue_smallest` + `expand`). Returns ENOMEM when no block of that
    /// order or larger is free. The frames are not zeroed.
    pub fn alloc_pages(&self, order: u32) -> Result<Pfn, Errno> {
        if order > MAX_PAGE_ORDER {
            return Err(Errno::EINVAL);
        }
        let mut zone = self.zone.lock().unwrap();
        let found = (order..=MAX_PAGE_ORDER).find(|&o| zone.head[o as usize] != NO_PFN);
        let Some(mut cur) = found else {
            return Err(Errno::ENOMEM);
        };
        let pfn = zone.head[cur as usize];
        self.list_del(&mut zone, pfn, cur);
        // expand(): return the upper halves to the lower free lists.
        while cur > order {
            cur -= 1;
            self.list_add(&mut zone, pfn + (1 << cur), cur);
        }
        Ok(pfn)
    }

    /// The generation of frame `pfn`: how often it has been freed.
    pub fn generation(&self, pfn: Pfn) -> u32 {
        self.generation[pfn as usize].load(Acquire)
    }

    /// Frees a block of `2^order` frames, merging with free buddies
    /// (`__free_one_page`). The caller has reset the descriptors. Each frame's
    /// generation moves on, and with poisoning its bytes become [`POISON`].
    pub fn free_pages(&self, pfn: Pfn, order: u32) {
        for p in pfn..pfn + (1 << order) {
            if self.poison {
                self.fill(p, 0, PAGE_SIZE as usize, POISON);
            }
            self.generation[p as usize].fetch_add(1, Release);
        }
        let mut zone = self.zone.lock().unwrap();
        let (mut pfn, mut order) = (pfn, order);
        while order < MAX_PAGE_ORDER {
            let buddy = pfn ^ (1 << order);
            let bp = self.page(buddy);
            if !bp.test(pg::BUDDY) || bp.order_field() != order {
                break;
            }
            self.list_del(&mut zone, buddy, order);
            pfn &= !(1 << order);
            order += 1;
        }
        self.list_add(&mut zone, pfn, order);
    }

    /// Number of free frames.
    pub fn nr_free(&self) -> u64 {
        self.zone.lock().unwrap().free_pages
    }

    /// Free blocks per order (`/proc/buddyinfo`).
    pub fn buddyinfo(&self) -> Vec<u64> {
        self.zone.lock().unwrap().nr_free.to_vec()
    }

    /// Every free block as (pfn, order), walked through the free lists.
    pub fn free_blocks(&self) -> Vec<(Pfn, u32)> {
        let zone = self.zone.lock().unwrap();
        let mut out = Vec::new();
        for order in 0..=MAX_PAGE_ORDER {
            let mut pfn = zone.head[order as usize];
            let mut guard = 0;
            while pfn != NO_PFN && guard <= self.nr_frames {
                out.push((pfn, order));
                pfn = self.page(pfn).compound.load(Relaxed);
                guard += 1;
            }
        }
        out
    }

    fn list_add(&self, zone: &mut FreeArea, pfn: Pfn, order: u32) {
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

    fn list_del(&self, zone: &mut FreeArea, pfn: Pfn, order: u32) {
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
        assert_eq!(phys.buddyinfo()[MAX_PAGE_ORDER as usize], 2, "blocks must merge back");
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
