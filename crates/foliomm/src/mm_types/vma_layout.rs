//! Where the members of `struct vm_area_struct` (include/linux/mm_types.h)
//! sit in the kernel's memory, for the cache-line accounting
//! ([`cacheline`]): each VMA has a kernel address of its own, in a slab of
//! its layout, and each member an offset in it, so that the lines a fault
//! reads and a writer dirties are the kernel's lines, shared with the
//! neighbouring VMAs where the kernel's objects share them.
//!
//! Layouts (x86-64 with `CONFIG_PER_VMA_LOCK`, `SWAP`, `NUMA`,
//! `NUMA_BALANCING`, `ANON_VMA_NAME` and `USERFAULTFD`, without lockdep):
//! - 6.15+ (`vma-refcount`): members regrouped into three lines by the
//!   seed-004 series: the range, `vm_mm`, `vm_flags` and `vm_lock_seq` in
//!   the first; `anon_vma`, `vm_ops`, `vm_pgoff`, `vm_file` and `vm_policy`
//!   in the second; `vm_refcnt` starting the third, with the members no
//!   fault reads (`shared`, `anon_name`, `vm_userfaultfd_ctx`). The cache
//!   is `SLAB_HWCACHE_ALIGN`: 192-byte objects, no line shared by two.
//! - 6.4 to 6.14 (`vma-rwsem`): `detached`, `vm_lock_seq` and the `vm_lock`
//!   pointer after the flags, then `shared`, and the rest; 184-byte
//!   objects packed by `KMEM_CACHE(vm_area_struct, SLAB_PANIC|SLAB_ACCOUNT)`,
//!   so one VMA's last line is the next one's first.
//! - 6.1 to 6.3 (`mmap-lock`): no lock members; 168 bytes, packed.
//! - `embedded`: the 6.4 merge window's `vm_lock_seq` and `struct
//!   rw_semaphore lock` after the flags, before "mm: separate vma->lock from
//!   vm_area_struct" moved the lock out; 216 bytes, packed.
//!
//! Differs from Linux: slab objects are numbered in allocation order
//! across the machine, as if one CPU's slab served them all; in Linux each
//! CPU allocates from a slab of its own, so neighbours are mostly VMAs
//! made by one CPU.

use super::Vma;
use crate::kernel::{VmaLayout, VmaLockDesign};
use crate::sync::cacheline::{self, Structure};

/// A member of the VMA the accounting follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Member {
    Start,
    End,
    Mm,
    Prot,
    Flags,
    LockSeq,
    AnonVma,
    Ops,
    Pgoff,
    File,
    Policy,
}

/// Byte offsets of one release's `vm_area_struct`.
#[derive(Debug)]
struct Offsets {
    /// The object's size in its slab (after the cache's alignment).
    stride: usize,
    /// `vm_lock_seq`, in releases with per-VMA locks.
    lock_seq: Option<usize>,
    /// The lock word, when it is inside the VMA.
    lock: Option<usize>,
    anon_vma: usize,
    ops: usize,
    pgoff: usize,
    file: usize,
    policy: usize,
}

const V6_15: Offsets = Offsets {
    stride: 192,
    lock_seq: Some(40),
    lock: Some(128),
    anon_vma: 64,
    ops: 72,
    pgoff: 80,
    file: 88,
    policy: 112,
};
const V6_4: Offsets = Offsets {
    stride: 184,
    lock_seq: Some(44),
    lock: None,
    anon_vma: 104,
    ops: 112,
    pgoff: 120,
    file: 128,
    policy: 160,
};
const V6_1: Offsets =
    Offsets { stride: 168, lock_seq: None, lock: None, anon_vma: 88, ops: 96, pgoff: 104, file: 112, policy: 144 };
const EMBEDDED: Offsets = Offsets {
    stride: 216,
    lock_seq: Some(40),
    lock: Some(48),
    anon_vma: 136,
    ops: 144,
    pgoff: 152,
    file: 160,
    policy: 192,
};

/// Where the accounting finds the VMA slab, far from any address of the
/// model's memory, and half the owner table away from the `vm_lock` slab
/// (so that neither forgets the other's lines).
const VMA_SLAB: usize = 0xffff_8880_0200_0000;
/// Where it finds 6.4 to 6.14's `vm_lock` slab: slot `i` at `+ 40 * i`.
const VMA_LOCK_SLAB: usize = 0xffff_8000_0000_0000;
/// `sizeof(struct vma_lock)` (6.4 to 6.14).
const VMA_LOCK_SIZE: usize = 40;

/// The kernel addresses of one VMA object's members.
#[derive(Debug)]
pub(crate) struct VmaLines {
    base: usize,
    offsets: &'static Offsets,
    /// The lock word's address, 0 when the design has no VMA lock.
    lock: usize,
}

impl VmaLines {
    /// The lines of the `slot`-th object the VMA cache made.
    pub(super) fn new(design: VmaLockDesign, layout: VmaLayout, slot: usize) -> VmaLines {
        let offsets = match (layout, design) {
            (VmaLayout::Embedded, _) => &EMBEDDED,
            (VmaLayout::Design, VmaLockDesign::VmaRefcount) => &V6_15,
            (VmaLayout::Design, VmaLockDesign::VmaRwsem) => &V6_4,
            (VmaLayout::Design, VmaLockDesign::MmapLock) => &V6_1,
        };
        let base = VMA_SLAB + offsets.stride * slot;
        let lock = match (design, offsets.lock) {
            (VmaLockDesign::MmapLock, _) => 0,
            (_, Some(at)) => base + at,
            (_, None) => VMA_LOCK_SLAB + VMA_LOCK_SIZE * slot,
        };
        VmaLines { base, offsets, lock }
    }

    /// The member's address; None for `vm_lock_seq` where there is none.
    fn at(&self, m: Member) -> Option<usize> {
        let o = self.offsets;
        let off = match m {
            Member::Start => 0,
            Member::End => 8,
            Member::Mm => 16,
            Member::Prot => 24,
            Member::Flags => 32,
            Member::LockSeq => o.lock_seq?,
            Member::AnonVma => o.anon_vma,
            Member::Ops => o.ops,
            Member::Pgoff => o.pgoff,
            Member::File => o.file,
            Member::Policy => o.policy,
        };
        Some(self.base + off)
    }
}

/// What a fault reads of the VMA it holds: the range (the address's
/// check), `vm_mm` and `vm_flags` (`handle_mm_fault`), `vm_ops`
/// (`vma_is_anonymous`), `vm_pgoff` (`linear_page_index`) and `vm_policy`
/// (`get_vma_policy` for a new folio), in offset order.
const FAULT_READS: [Member; 7] =
    [Member::Start, Member::End, Member::Mm, Member::Flags, Member::Ops, Member::Pgoff, Member::Policy];

impl Vma {
    /// Accounts an access to each line holding one of `members`, once per
    /// line (a member's read brings its neighbours in the line with it).
    pub(crate) fn account(&self, members: &[Member], write: bool) {
        if !cacheline::accounting() {
            return;
        }
        let mut last = None;
        for &m in members {
            let Some(addr) = self.lines.at(m) else { continue };
            let s = if m == Member::LockSeq { Structure::VmaLock } else { Structure::Vma };
            if last != Some(addr >> 6) {
                cacheline::access_at(s, addr, write);
                last = Some(addr >> 6);
            }
        }
    }

    /// Accounts the reads a fault makes of the VMA once it holds it; a
    /// file VMA's fault reads `vm_file` too.
    pub(crate) fn account_fault_reads(&self) {
        if !cacheline::accounting() {
            return;
        }
        self.account(&FAULT_READS, false);
        if self.with_file(|f| f.is_some()) {
            self.account(&[Member::File], false);
        }
    }

    /// Accounts a write of the design's lock word, where the layout puts it.
    pub(super) fn account_lock_write(&self) {
        if self.lines.lock != 0 {
            cacheline::access_at(Structure::VmaLock, self.lines.lock, true);
        }
    }

    /// Accounts the store a read hold of a `vm_lock` rwsem makes after its
    /// count: `rwsem_set_reader_owned` writes the reader into `sem->owner`,
    /// the next word (in the next line when the 40-byte object puts the
    /// count last in its line). `vm_refcnt` has no such word. A separate
    /// access: on simulated CPUs another CPU may take the line between the
    /// two, as one whose request arrives first takes it in hardware.
    pub(super) fn account_reader_owner(&self) {
        if self.lines.lock != 0 {
            cacheline::access_at(Structure::VmaLock, self.lines.lock + 8, true);
        }
    }
}
