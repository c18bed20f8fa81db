//! Simulated physical memory: a frame arena holding real bytes
//! (`arena`), the memmap of page descriptors (`memmap`), and a buddy
//! allocator for orders `0..=MAX_PAGE_ORDER` (`buddy`) behind per-CPU
//! page lists (`pcp`), one of each per NUMA node (`node`).
//!
//! Every word of the arena is accessed as an atomic: page tables live in
//! frames and are updated concurrently, and user data may be written by
//! several threads at once, exactly as on hardware.

mod arena;
mod buddy;
mod changes;
mod contig;
mod memmap;
mod node;
mod pcp;

pub use changes::Changed;
pub use memmap::{pg, Page};
pub use node::{NodeMask, Placement, MAX_NUMNODES};
pub use pcp::{MigrateType, NR_PCP};

use std::sync::atomic::AtomicU64;

use crate::arch::{Pfn, MAX_PAGE_ORDER, PAGE_SIZE, WORDS_PER_PAGE};
use crate::sync::atomic::{AtomicU32, Ordering::*};
use crate::Errno;

/// Physical memory: arena, memmap and buddy allocator.
pub struct PhysMem {
    arena: arena::Arena,
    memmap: memmap::PerFrame<Page>,
    nr_frames: u64,
    /// The nodes, each with its zone and per-CPU lists.
    nodes: Box<[node::Node]>,
    /// Per-frame generation, bumped whenever the frame is freed: a TLB entry
    /// remembers it, so a use after free is recognised (model-only).
    generation: memmap::PerFrame<AtomicU32>,
    /// Fill freed frames with [`POISON`] (`page_poisoning`).
    poison: bool,
    /// Zero freed frames (`init_on_free`); wins over `poison`.
    init_on_free: bool,
    /// What changed since the checker last asked, while it tracks.
    changes: changes::Changes,
}

/// The byte freed frames are filled with when poisoning is on (`PAGE_POISON`).
pub const POISON: u8 = 0xaa;

impl PhysMem {
    /// Creates `bytes` of model RAM (rounded down to whole 4 MiB blocks), all
    /// free, on one node; `poison` fills every freed frame with [`POISON`].
    pub fn new(bytes: u64, poison: bool) -> Result<PhysMem, Errno> {
        PhysMem::new_numa(bytes, 1, poison)
    }

    /// This memory with every freed frame zeroed (`init_on_free=1`).
    pub fn with_init_on_free(self, on: bool) -> PhysMem {
        PhysMem { init_on_free: on, ..self }
    }

    /// [`PhysMem::new`] cut into `nodes` NUMA nodes; EINVAL when a node
    /// would have less than one 4 MiB block.
    pub fn new_numa(bytes: u64, nodes: usize, poison: bool) -> Result<PhysMem, Errno> {
        let block = PAGE_SIZE << MAX_PAGE_ORDER;
        let nr_frames = (bytes / block) * (block / PAGE_SIZE);
        if nr_frames == 0 {
            return Err(Errno::EINVAL);
        }
        let arena = arena::Arena::new((nr_frames * PAGE_SIZE) as usize)?;
        let memmap = memmap::new_per_frame(nr_frames)?;
        let phys = PhysMem {
            arena,
            memmap,
            nr_frames,
            nodes: node::new_nodes(nr_frames, nodes)?,
            generation: memmap::new_per_frame(nr_frames)?,
            poison,
            init_on_free: false,
            changes: changes::Changes::default(),
        };
        for n in phys.nodes.iter() {
            let mut zone = n.zone.lock().unwrap();
            for pfn in (n.start..n.start + n.nr_frames).step_by(1 << MAX_PAGE_ORDER) {
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

    /// Starts (or stops) recording what changes: page tables written
    /// ([`PhysMem::table_written`]) and blocks allocated or freed.
    pub fn track_changes(&self, on: bool) {
        self.changes.set_tracking(on);
    }

    /// Notes that an entry of page table `table` was written.
    pub fn table_written(&self, table: Pfn) {
        self.changes.table_written(table);
    }

    /// Notes that the folios of the block of `2^order` frames at `pfn`
    /// changed shape (a split), as an allocation or a free is noted.
    pub fn folios_changed(&self, pfn: Pfn, order: u32) {
        self.changes.block(pfn, order);
    }

    /// Notes that the MM with serial `serial` is new or may change its
    /// VMAs (`mmap_write_lock`).
    pub fn mm_changed(&self, serial: u64) {
        self.changes.mm(serial);
    }

    /// What changed since the last call (or since tracking started).
    pub fn take_changes(&self) -> Changed {
        self.changes.take()
    }

    /// Word `idx` (0..512) of frame `pfn`: a page-table entry or 8 data bytes.
    pub fn word(&self, pfn: Pfn, idx: usize) -> &AtomicU64 {
        debug_assert!(idx < WORDS_PER_PAGE);
        self.arena.word(pfn as usize * WORDS_PER_PAGE + idx)
    }

    /// Allocates like [`PhysMem::alloc_pages`] and zeroes the block
    /// (`__GFP_ZERO`, `clear_page`).
    pub fn alloc_pages_zeroed(&self, order: u32) -> Result<Pfn, Errno> {
        self.alloc_pages_zeroed_as(order, MigrateType::Movable)
    }

    /// [`PhysMem::alloc_pages_zeroed`] for `kind` of use.
    pub fn alloc_pages_zeroed_as(&self, order: u32, kind: MigrateType) -> Result<Pfn, Errno> {
        self.alloc_pages_zeroed_on(Placement::LOCAL, order, kind)
    }

    /// [`PhysMem::alloc_pages_on`] with the block zeroed.
    pub fn alloc_pages_zeroed_on(&self, place: Placement, order: u32, kind: MigrateType) -> Result<Pfn, Errno> {
        let pfn = self.alloc_pages_on(place, order, kind)?;
        self.arena.zero(pfn as usize * WORDS_PER_PAGE, (PAGE_SIZE as usize) << order);
        (0..1u32 << order).for_each(|_| crate::sync::sim::work(crate::sync::sim::Work::ZeroPage));
        Ok(pfn)
    }

    /// Zeroes `nr` frames from `pfn`, word by word (`folio_zero_user`).
    pub fn clear_frames(&self, pfn: Pfn, nr: u64) {
        (pfn..pfn + nr).for_each(|p| self.fill(p, 0, PAGE_SIZE as usize, 0));
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

    /// Reads `buf.len()` bytes from frame `pfn` starting at `off`; whole
    /// aligned words are loaded at once.
    pub fn read_bytes(&self, pfn: Pfn, off: usize, buf: &mut [u8]) {
        let mut i = 0;
        while i < buf.len() {
            let pos = off + i;
            if pos.is_multiple_of(8) && buf.len() - i >= 8 {
                let v = self.word(pfn, pos / 8).load(Relaxed);
                buf[i..i + 8].copy_from_slice(&v.to_le_bytes());
                i += 8;
            } else {
                buf[i] = self.read_byte(pfn, pos);
                i += 1;
            }
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
}
