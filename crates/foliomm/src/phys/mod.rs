//! Simulated physical memory: a frame arena holding real bytes
//! (`arena`) for the frames that need them, the rest by content class
//! (`content`, `bytes`), the memmap of page descriptors (`memmap`), and a buddy
//! allocator for orders `0..=MAX_PAGE_ORDER` (`buddy`) behind per-CPU
//! page lists (`pcp`), one of each per NUMA node (`node`).
//!
//! Every word of the arena is accessed as an atomic: page tables live in
//! frames and are updated concurrently, and user data may be written by
//! several threads at once, exactly as on hardware.

mod arena;
mod buddy;
mod bytes;
mod changes;
mod content;
mod contig;
mod memmap;
mod node;
mod pcp;
mod vmemmap;
mod wide_pair;

pub use changes::Changed;
pub use content::{Content, Sparse};
pub use memmap::{pg, Page};
pub use node::{set_local_node, NodeMask, Placement, MAX_NUMNODES};
pub use pcp::{MigrateType, NR_PCP};
pub use vmemmap::KEPT_DESCRIPTORS;
pub use wide_pair::WidePair;

use crate::arch::{Pfn, MAX_PAGE_ORDER, PAGE_SIZE};
use crate::sync::atomic::AtomicU32;
use crate::Errno;

/// Physical memory: arena, memmap and buddy allocator.
pub struct PhysMem {
    arena: arena::Arena,
    memmap: memmap::PerFrame<Page>,
    /// Which hugetlb folios' memmap is optimized (HVO).
    vmemmap: vmemmap::Vmemmap,
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
    /// Keep every written frame's bytes in the arena ([`PhysMem::with_dense`]).
    dense: bool,
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

    /// This memory with every frame it writes held in the arena (no
    /// content classes): zeroing and copying cost what they do on
    /// hardware, for benchmarks that time them.
    pub fn with_dense(self, on: bool) -> PhysMem {
        PhysMem { dense: on, ..self }
    }

    /// [`PhysMem::new`] cut into `nodes` NUMA nodes; EINVAL when a node
    /// would have less than one 4 MiB block.
    pub fn new_numa(bytes: u64, nodes: usize, poison: bool) -> Result<PhysMem, Errno> {
        let block = PAGE_SIZE << MAX_PAGE_ORDER;
        let nr_frames = (bytes / block) * (block / PAGE_SIZE);
        if nr_frames == 0 {
            return Err(Errno::EINVAL);
        }
        let arena = arena::Arena::new(nr_frames as usize)?;
        let memmap = memmap::new_per_frame(nr_frames)?;
        let phys = PhysMem {
            arena,
            memmap,
            vmemmap: vmemmap::Vmemmap::new(nr_frames)?,
            nr_frames,
            nodes: node::new_nodes(nr_frames, nodes)?,
            generation: memmap::new_per_frame(nr_frames)?,
            poison,
            init_on_free: false,
            dense: false,
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

    /// Backs the per-frame arrays, and with dense frames the frames' bytes,
    /// with host memory now, so that no step timed later waits for the host
    /// to fault in the model's own memory (Linux's memmap and RAM are
    /// there from boot); ENOMEM where the host cannot. Behaviour is the same.
    pub fn populate(&self) -> Result<(), Errno> {
        self.arena.populate(self.dense)?;
        memmap::populate(&self.memmap)?;
        memmap::populate(&self.generation)
    }

    pub fn nr_frames(&self) -> u64 {
        self.nr_frames
    }

    /// The descriptor of `pfn` (`pfn_to_page`); for a tail of a hugetlb
    /// folio with an optimized memmap, the descriptor all its later tails
    /// share (see `vmemmap`).
    pub fn page(&self, pfn: Pfn) -> &Page {
        &self.memmap[self.vmemmap.descriptor(pfn) as usize]
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

    /// Allocates like [`PhysMem::alloc_pages`] and zeroes the block
    /// (`__GFP_ZERO`, `clear_page`).
    pub fn alloc_pages_zeroed(&self, order: u32) -> Result<Pfn, Errno> {
        self.alloc_pages_zeroed_as(order, MigrateType::Movable)
    }

    /// [`PhysMem::alloc_pages_zeroed`] for `kind` of use.
    pub fn alloc_pages_zeroed_as(&self, order: u32, kind: MigrateType) -> Result<Pfn, Errno> {
        self.alloc_pages_zeroed_on(Placement::local(), order, kind)
    }

    /// [`PhysMem::alloc_pages_on`] with the block zeroed.
    pub fn alloc_pages_zeroed_on(&self, place: Placement, order: u32, kind: MigrateType) -> Result<Pfn, Errno> {
        let pfn = self.alloc_pages_on(place, order, kind)?;
        self.reset_frames(pfn, 1 << order, 0);
        (0..1u32 << order).for_each(|_| crate::sync::sim::work(crate::sync::sim::Work::ZeroPage));
        Ok(pfn)
    }
}
