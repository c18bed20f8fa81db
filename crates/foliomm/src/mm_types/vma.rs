//! A virtual memory area (`struct vm_area_struct`, include/linux/mm_types.h)
//! and its flags.
//!
//! Each VMA comes from the machine's VMA cache ([`super::VmaCache`]) and is
//! shared (`Arc`): the VMA tree holds one reference, and a lockless lookup
//! (`lock_vma_under_rcu`) another, so the object outlives its removal from
//! the tree for as long as someone still looks at it, which is what Linux
//! gets from RCU. Under `vma-refcount` the cache hands a freed VMA out again
//! at once, so the object a lookup found may by then be another VMA, of
//! another MM (`SLAB_TYPESAFE_BY_RCU`). Every field is therefore an atomic:
//! changed in place by writers that hold the mmap_lock for write and have
//! write-locked the VMA (`vma_set_range`, `vm_flags_reset`), read by faults
//! that hold the VMA's lock ([`super::vma_lock`]) or the mmap_lock.
#![warn(missing_docs)]

use arc_swap::ArcSwapOption;

use super::userfaultfd::UserfaultfdCtx;
use super::vma_layout::{Member, VmaLines};
use super::vma_lock::VmaLock;
use super::Mempolicy;
use crate::arch::PAGE_SIZE;
use crate::kernel::{VmaLayout, VmaLockDesign};
use crate::rmap::{AnonVmaSlot, VmaRecord};
use crate::shmem::{HugetlbVmaLock, Inode, PrivateResv};
use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use crate::sync::Arc;

/// Mapping protection (`PROT_*` values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Prot(pub u32);

impl Prot {
    /// `PROT_NONE`: no access; any touch faults with `EACCES`.
    pub const NONE: Prot = Prot(0);
    /// The `PROT_READ` bit.
    pub const READ: u32 = 1;
    /// The `PROT_WRITE` bit (implies read on x86-64, as in Linux).
    pub const WRITE: u32 = 2;
    /// The `PROT_EXEC` bit: recorded only. Unlike x86-64 Linux, where it
    /// implies read, an exec-only mapping faults on read (EACCES).
    pub const EXEC: u32 = 4;
    /// `PROT_READ | PROT_WRITE`.
    pub const RW: Prot = Prot(Self::READ | Self::WRITE);

    /// Parses `none` or the letters of `rwx` in that order, each at most
    /// once (`r`, `rw`, `rx`, `rwx`, `w`, `wx`, `x`: every combination of
    /// `PROT_*` bits Linux accepts); None for anything else.
    pub fn parse(s: &str) -> Option<Prot> {
        if s == "none" {
            return Some(Prot::NONE);
        }
        let mut rest = s;
        let mut p = 0;
        for (letter, bit) in [('r', Self::READ), ('w', Self::WRITE), ('x', Self::EXEC)] {
            if let Some(r) = rest.strip_prefix(letter) {
                (rest, p) = (r, p | bit);
            }
        }
        (rest.is_empty() && p != 0).then_some(Prot(p))
    }
}

/// `vm_flags` bits foliomm uses.
pub mod vm {
    /// `VM_READ`.
    pub const READ: u32 = 1;
    /// `VM_WRITE`.
    pub const WRITE: u32 = 2;
    /// `VM_EXEC`.
    pub const EXEC: u32 = 4;
    /// `VM_SHARED` (`MAP_SHARED`): writes reach the file and every mapping of it.
    pub const SHARED: u32 = 8;
    /// `VM_HUGEPAGE` (MADV_HUGEPAGE).
    pub const HUGEPAGE: u32 = 1 << 8;
    /// `VM_NOHUGEPAGE` (MADV_NOHUGEPAGE).
    pub const NOHUGEPAGE: u32 = 1 << 9;
    /// `VM_DONTCOPY` (MADV_DONTFORK).
    pub const DONTCOPY: u32 = 1 << 10;
    /// `VM_HUGETLB`: a mapping of a hugetlbfs file.
    pub const HUGETLB: u32 = 1 << 11;
    /// `HPAGE_RESV_UNMAPPED` (kept in `vm_private_data` in Linux): the
    /// reservation owner took a page of this child's private hugetlb
    /// mapping back (`unmap_ref_private`); any later fault that finds no
    /// page here gets SIGBUS. (The owner itself is known by its
    /// reservation map, [`super::Vma::hugetlb_resv`].)
    pub const HUGETLB_RESV_UNMAPPED: u32 = 1 << 12;
    /// `VM_LOCKED` (`mlock`): the pages stay in memory; `MADV_DONTNEED`
    /// refuses the VMA, and a child of fork does not inherit it.
    pub const LOCKED: u32 = 1 << 13;
    /// `VM_MAYWRITE` cleared: a shared mapping of a write-sealed memfd,
    /// which `mprotect` cannot make writable (EACCES). Inverted so that
    /// every other VMA needs nothing.
    pub const NO_MAYWRITE: u32 = 1 << 14;
    /// Not a flag of Linux's: the VMA's `anon_vma_chain` holds a parent's
    /// anon_vma besides its own (a fork child's, `vma_had_uncowed_parents`).
    /// Such a VMA merges with no neighbour without an anon_vma, which a
    /// flag difference gives (a neighbour with the same anon_vma has it too).
    pub const ANON_PARENTS: u32 = 1 << 15;
    /// `VM_UFFD_MISSING`: faults on none entries go to the VMA's userfaultfd.
    pub const UFFD_MISSING: u32 = 1 << 16;
    /// `VM_UFFD_WP`: writes to pages userfaultfd write-protects go to it.
    pub const UFFD_WP: u32 = 1 << 17;
    /// `VM_UFFD_MINOR`: faults on pages in the page cache but not mapped
    /// here go to it (shmem and hugetlbfs only).
    pub const UFFD_MINOR: u32 = 1 << 18;
    /// `VM_MERGEABLE`: ksmd may merge the VMA's anonymous pages
    /// (`MADV_MERGEABLE`).
    pub const MERGEABLE: u32 = 1 << 19;
    /// `VM_SOFTDIRTY`: the whole VMA counts as soft-dirty (it is new, or
    /// `clear_refs` has not cleared it since); never stops a merge.
    pub const SOFTDIRTY: u32 = 1 << 20;
    /// `__VM_UFFD_FLAGS`: any userfaultfd registration.
    pub const UFFD_FLAGS: u32 = UFFD_MISSING | UFFD_WP | UFFD_MINOR;
    /// The bits that mirror `PROT_*` (same values as [`super::Prot`]'s).
    pub const PROT_MASK: u32 = READ | WRITE | EXEC;
}

/// What a new VMA is made with: its MM's serial, range, flags, the file
/// page mapped at its start (or the page index of an anonymous start), the
/// file, and the anon_vma identity.
pub struct VmaInit {
    /// `vm_mm`: the owning MM's serial ([`super::Mm::serial`]).
    pub mm: u64,
    /// `vm_start`: the first address, page-aligned.
    pub start: u64,
    /// `vm_end`: the address just past the last byte, page-aligned.
    pub end: u64,
    /// `vm_flags`: [`vm`] bits.
    pub flags: u32,
    /// `vm_pgoff` (see [`Vma::pgoff`]).
    pub pgoff: u64,
    /// `vm_file`: the shmem or hugetlbfs inode mapped, if any.
    pub file: Option<Arc<Inode>>,
}

/// A virtual memory area.
/// Cacheline-aligned with its fault-path fields first, as 6.15 lays
/// `vm_area_struct` out: the accounting takes the first line for them.
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Vma {
    /// `vm_mm`: the serial number ([`super::Mm::serial`]) of the owning MM.
    mm: AtomicU64,
    start: AtomicU64,
    end: AtomicU64,
    flags: AtomicU32,
    /// `vm_pgoff`: the file page mapped at `start`; for anonymous memory
    /// the page index of the original start.
    pgoff: AtomicU64,
    /// `vm_file`: the shmem inode mapped, if any.
    file: ArcSwapOption<Inode>,
    /// The reservation map of a private hugetlb mapping's owner (in
    /// `vm_private_data` in Linux), shared by the pieces of a split.
    hugetlb_resv: ArcSwapOption<PrivateResv>,
    /// `vm_policy`, encoded ([`Mempolicy::encode`]).
    policy: AtomicU64,
    /// `vm_userfaultfd_ctx`: the userfaultfd the VMA is registered with.
    uffd: ArcSwapOption<UserfaultfdCtx>,
    /// `vm_area_struct::anon_vma` and `anon_vma_chain`.
    pub anon_vma: AnonVmaSlot,
    /// The per-VMA lock and `vm_lock_seq`.
    pub(crate) lock: VmaLock,
    /// Where the kernel keeps the members, for the cache-line accounting.
    pub(super) lines: VmaLines,
    /// How often the object went back to the slab (`vm_area_free`): what
    /// KASAN would tell of a read after a free, which a type-safe cache
    /// lets happen (foliomm's own bookkeeping; Linux has no such field).
    frees: AtomicU64,
}

impl Vma {
    /// A new, empty, detached VMA with the lock `design` gives it (the
    /// slab constructor); only [`super::VmaCache`] makes them.
    pub(super) fn new(design: VmaLockDesign, layout: VmaLayout, slot: usize) -> Vma {
        Vma {
            mm: AtomicU64::new(0),
            start: AtomicU64::new(0),
            end: AtomicU64::new(0),
            flags: AtomicU32::new(0),
            pgoff: AtomicU64::new(0),
            file: ArcSwapOption::empty(),
            hugetlb_resv: ArcSwapOption::empty(),
            policy: AtomicU64::new(0),
            uffd: ArcSwapOption::empty(),
            anon_vma: AnonVmaSlot::default(),
            lock: VmaLock::new(design),
            lines: VmaLines::new(design, layout, slot),
            frees: AtomicU64::new(0),
        }
    }

    /// How many times the VMA object was freed so far ([`Vma::note_freed`]).
    pub fn frees(&self) -> u64 {
        self.frees.load(SeqCst)
    }

    /// `vm_area_free` handed the object back to the cache.
    pub(super) fn note_freed(&self) {
        self.frees.fetch_add(1, SeqCst);
    }

    /// Gives a free VMA what `v` says (`vma_init`).
    pub(super) fn init(&self, v: VmaInit) {
        self.account(&[Member::Mm], true);
        self.mm.store(v.mm, Relaxed);
        self.file.store(v.file);
        self.set_range(v.start, v.end, v.pgoff);
        self.set_flags(v.flags);
        self.set_policy(Mempolicy::Default);
        self.uffd.store(None);
        self.anon_vma.reset();
        self.lock.init();
    }

    /// The serial number of the MM the VMA belongs to (`vm_mm`); may be
    /// another MM's by the time a lockless reader looks.
    pub fn mm(&self) -> u64 {
        self.mm.load(Relaxed)
    }
    /// `vm_start`: the first address.
    pub fn start(&self) -> u64 {
        self.start.load(Relaxed)
    }
    /// `vm_end`: the address just past the VMA.
    pub fn end(&self) -> u64 {
        self.end.load(Relaxed)
    }
    /// `vm_flags`, as [`vm`] bits.
    pub fn flags(&self) -> u32 {
        self.flags.load(Relaxed)
    }
    /// `vm_pgoff`: the file page mapped at `start`; for anonymous memory
    /// the page index of the original start.
    pub fn pgoff(&self) -> u64 {
        self.pgoff.load(Relaxed)
    }
    /// The anon_vma identity; 0 until the first anonymous folio is mapped
    /// (`anon_vma_prepare`).
    pub fn anon_vma(&self) -> u64 {
        self.anon_vma.get()
    }
    /// `vm_file`, with a reference of its own.
    pub fn file(&self) -> Option<Arc<Inode>> {
        self.file.load_full()
    }
    /// Runs `f` on `vm_file` without taking a reference (the fault path's
    /// way: no shared count to write).
    pub fn with_file<R>(&self, f: impl FnOnce(Option<&Arc<Inode>>) -> R) -> R {
        f(self.file.load().as_ref())
    }
    /// Drops the file reference of a freed VMA (`fput` in `vm_area_free`),
    /// and its reservation map.
    pub(super) fn clear_file(&self) {
        self.file.store(None);
        self.hugetlb_resv.store(None);
        self.uffd.store(None);
    }
    /// The reservation map of a private hugetlb mapping, if this VMA owns
    /// its reservations (`HPAGE_RESV_OWNER`).
    pub fn hugetlb_resv(&self) -> Option<Arc<PrivateResv>> {
        self.hugetlb_resv.load_full()
    }
    /// Gives the VMA a reservation map, or (`None`, a child's copy at fork:
    /// `hugetlb_dup_vma_private`) takes it away.
    pub fn set_hugetlb_resv(&self, resv: Option<Arc<PrivateResv>>) {
        self.hugetlb_resv.store(resv);
    }
    /// `vma_policy`: the VMA's NUMA memory policy.
    pub fn policy(&self) -> Mempolicy {
        Mempolicy::decode(self.policy.load(Relaxed))
    }
    /// Sets `vm_policy` (`vma_replace_policy`, `vma_dup_policy`); the
    /// caller holds the mmap_lock for write.
    pub fn set_policy(&self, p: Mempolicy) {
        self.account(&[Member::Policy], true);
        self.policy.store(p.encode(), Relaxed);
    }
    /// `vm_userfaultfd_ctx.ctx`: the userfaultfd the VMA is registered
    /// with, if any.
    pub fn userfaultfd_ctx(&self) -> Option<Arc<UserfaultfdCtx>> {
        self.uffd.load_full()
    }
    /// Registers the VMA with `ctx` or (`None`) unregisters it
    /// (`userfaultfd_set_ctx`, `userfaultfd_reset_ctx`); the caller holds
    /// the mmap_lock for write and sets the `VM_UFFD_*` flags with it.
    pub fn set_userfaultfd_ctx(&self, ctx: Option<Arc<UserfaultfdCtx>>) {
        self.uffd.store(ctx);
    }
    /// `userfaultfd_missing`: faults on none entries go to userspace.
    pub fn userfaultfd_missing(&self) -> bool {
        self.flags() & vm::UFFD_MISSING != 0
    }
    /// `userfaultfd_wp`: the VMA is registered for write-protect faults.
    pub fn userfaultfd_wp(&self) -> bool {
        self.flags() & vm::UFFD_WP != 0
    }
    /// `userfaultfd_minor`: faults on pages the cache holds go to userspace.
    pub fn userfaultfd_minor(&self) -> bool {
        self.flags() & vm::UFFD_MINOR != 0
    }
    /// `userfaultfd_armed`: registered in any mode (no large anonymous
    /// folios: `alloc_anon_folio` falls back to order 0).
    pub fn userfaultfd_armed(&self) -> bool {
        self.flags() & vm::UFFD_FLAGS != 0
    }
    /// Where a folio of `order` for `addr` goes under the VMA's policy
    /// (`vma_alloc_folio` → `get_vma_policy`, the interleave index from
    /// `vm_pgoff` and the offset in folios); a THP of a `MADV_HUGEPAGE`
    /// VMA may fall back to other nodes (direct reclaim under the default
    /// `defrag` mode).
    pub fn placement(&self, addr: u64, order: u32) -> crate::phys::Placement {
        self.policy().placement(self.interleave_index(addr, order), order, self.flags() & vm::HUGEPAGE != 0)
    }
    /// Where the hugetlb page of `order` at file page `index` comes from
    /// under the VMA's policy (`huge_node`, its interleave index the huge
    /// page's number): the policy's nodes, without a THP's `__GFP_THISNODE`.
    pub fn huge_placement(&self, index: u64, order: u32) -> crate::phys::Placement {
        self.policy().placement(index >> order, 0, true)
    }
    /// The interleave index of a folio of `order` at `addr`
    /// (`get_vma_policy`'s `ilx`: `vm_pgoff` and the offset, in folios).
    pub fn interleave_index(&self, addr: u64, order: u32) -> u64 {
        (self.pgoff() >> order) + ((addr - self.start()) >> (crate::arch::PAGE_SHIFT + order))
    }
    /// Whether writes go to the file (`VM_SHARED`).
    pub fn shared(&self) -> bool {
        self.flags() & vm::SHARED != 0
    }
    /// Whether the VMA is mlocked (`VM_LOCKED`).
    pub fn mlocked(&self) -> bool {
        self.flags() & vm::LOCKED != 0
    }
    /// The file page mapped at `addr` (`linear_page_index`).
    pub fn page_index(&self, addr: u64) -> u64 {
        self.pgoff() + (addr - self.start()) / PAGE_SIZE
    }
    /// Whether reads are allowed: `VM_READ` or `VM_WRITE` (Linux's
    /// `vma_is_accessible` also counts `VM_EXEC`).
    pub fn readable(&self) -> bool {
        self.flags() & (vm::READ | vm::WRITE) != 0
    }
    /// Whether writes are allowed (`VM_WRITE`).
    pub fn writable(&self) -> bool {
        self.flags() & vm::WRITE != 0
    }
    /// Whether `addr` lies in `[start, end)`.
    pub fn contains(&self, addr: u64) -> bool {
        self.start() <= addr && addr < self.end()
    }

    /// `vma_set_range`: new bounds and pgoff; the caller holds the mmap_lock
    /// for write and keeps the tree's key (the start) in step.
    /// A linked file VMA's `i_mmap` record changes with it.
    pub fn set_range(&self, start: u64, end: u64, pgoff: u64) {
        self.account(&[Member::Start, Member::End, Member::Pgoff], true);
        self.start.store(start, Relaxed);
        self.end.store(end, Relaxed);
        self.pgoff.store(pgoff, Relaxed);
        self.with_file(|f| f.map(|f| f.i_mmap.update(self.id(), start, pgoff, (end - start) / PAGE_SIZE)));
        self.anon_vma.update(self.record());
    }

    /// The VMA's identity in its file's `i_mmap`: its address.
    pub(crate) fn id(&self) -> usize {
        self as *const Vma as usize
    }

    /// What the rmap trees (its file's `i_mmap`, its anon_vmas') hold of
    /// this VMA while it is linked.
    pub fn record(&self) -> VmaRecord {
        let pages = (self.end() - self.start()) / PAGE_SIZE;
        let (vma, mm, start, pgoff, flags) = (self.id(), self.mm(), self.start(), self.pgoff(), self.flags());
        let shared_maywrite = flags & vm::SHARED != 0 && flags & vm::NO_MAYWRITE == 0;
        VmaRecord { vma, mm, start, pgoff, pages, flags, shared_maywrite }
    }

    /// `vma_link_file`: a VMA entering its MM's tree joins the file's
    /// `i_mmap` (a shared hugetlb one with a new hugetlb VMA lock) and the
    /// trees of its anon_vmas.
    pub(super) fn link_rmap(&self) {
        let vma_lock = self.is_hugetlb() && self.shared();
        self.with_file(|f| f.map(|f| f.i_mmap.link(self.record(), vma_lock)));
        self.anon_vma.link(self.record());
    }

    /// The hugetlb VMA lock of a linked shared hugetlb VMA.
    pub fn hugetlb_vma_lock(&self) -> Option<HugetlbVmaLock> {
        self.with_file(|f| f.and_then(|f| f.i_mmap.vma_lock(self.id())))
    }

    /// `unlink_file_vma`: a VMA leaving its MM's tree leaves the file's
    /// `i_mmap` and its anon_vmas' trees, once no walker looks at it (its
    /// chain stays until it is freed or reset).
    pub(super) fn unlink_rmap(&self) {
        self.with_file(|f| f.map(|f| f.i_mmap.unlink(self.id())));
        self.anon_vma.unlink();
    }

    /// `vm_flags_reset`; the caller holds the mmap_lock for write. A linked
    /// file VMA's `i_mmap` record changes with it.
    pub fn set_flags(&self, flags: u32) {
        self.account(&[Member::Prot, Member::Flags], true);
        self.flags.store(flags, Relaxed);
        self.with_file(|f| f.map(|f| f.i_mmap.update_flags(self.id(), flags)));
        self.anon_vma.update(self.record());
    }

    /// `vma_soft_dirty_enabled` under a kernel built with soft-dirty
    /// (`config_on`): writes are being tracked here (the VMA's
    /// `VM_SOFTDIRTY` is clear), so entries that are not soft-dirty must
    /// stay write-protected. hugetlb VMAs never track (no write notify).
    pub fn soft_dirty_enabled(&self, config_on: bool) -> bool {
        config_on && self.flags() & vm::SOFTDIRTY == 0 && !self.is_hugetlb()
    }

    /// `pte_needs_soft_dirty_wp`: an entry (`soft_dirty` or not) must stay
    /// write-protected so that the next write is seen.
    pub fn needs_soft_dirty_wp(&self, config_on: bool, soft_dirty: bool) -> bool {
        self.soft_dirty_enabled(config_on) && !soft_dirty
    }

    /// `is_vm_hugetlb_page`.
    pub fn is_hugetlb(&self) -> bool {
        self.flags() & vm::HUGETLB != 0
    }

    /// `huge_page_size(hstate_vma(vma))`: the size of a hugetlb VMA's pages
    /// (2 MiB or 1 GiB), `None` for any other VMA.
    pub fn huge_page_size(&self) -> Option<u64> {
        self.with_file(|f| f.and_then(|f| f.huge_size())).filter(|_| self.is_hugetlb()).map(|s| s.bytes())
    }

    /// `is_mergeable_vma` + `is_mergeable_anon_vma` for `self` followed by `next`.
    pub fn can_merge_with(&self, next: &Vma) -> bool {
        let (a, b) = (self.anon_vma(), next.anon_vma());
        let same_file = same_object(self.file.load().as_ref(), next.file.load().as_ref());
        // The same userfaultfd context (is_mergeable_vm_userfaultfd_ctx).
        let same_uffd = same_object(self.uffd.load().as_ref(), next.uffd.load().as_ref());
        // hugetlb VMAs have a close operation: never merged.
        same_file
            && same_uffd
            && !self.is_hugetlb()
            && self.end() == next.start()
            && (self.flags() ^ next.flags()) & !vm::SOFTDIRTY == 0
            && self.policy() == next.policy()
            && self.pgoff() + (self.end() - self.start()) / PAGE_SIZE == next.pgoff()
            && (a == 0 || b == 0 || a == b)
    }
}

/// Whether two optional references name the same object (or both none).
fn same_object<T>(a: Option<&Arc<T>>, b: Option<&Arc<T>>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(x), Some(y)) => Arc::ptr_eq(x, y),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::Prot;

    #[test]
    fn protections_are_rwx_letters_in_order_at_most_once() {
        for (s, p) in [("none", 0), ("r", 1), ("rw", 3), ("rwx", 7), ("rx", 5), ("w", 2), ("wx", 6), ("x", 4)] {
            assert_eq!(Prot::parse(s), Some(Prot(p)), "{s}");
        }
        for s in ["", "rr", "wr", "rrw", "xw", "rwxr", "ro", "RW"] {
            assert_eq!(Prot::parse(s), None, "{s}");
        }
    }
}
