//! The page-fault entry (mm/memory.c `handle_mm_fault` → `__handle_mm_fault`
//! → `handle_pte_fault`): walks to the PMD, lets the huge-PMD handlers try,
//! else goes down to the PTE and dispatches to [`super::anon`] or
//! [`super::wp`]. The caller holds the VMA stable (through
//! [`crate::mm_types::vma_lock`]) and has checked the access against it.
//!
//! A write to an entry userfaultfd write-protects goes to the handler
//! first (`wp_huge_pmd`, `do_wp_page`: `userfaultfd_pte_wp`).
//!
//! Differs from Linux: no KSM or memcg; a folio lock that is
//! contended makes reuse fail instead of waiting. The page tables a fault
//! allocates come with reclaim, as its folios do.

use super::huge_memory::{self, Huge};
use super::vmscan::reclaim_on_enomem;
use super::{anon, file, wp};
use crate::arch::{pte_index, Pfn, Pte, PMD_ORDER, PMD_SIZE};
use crate::kernel::{Kernel, Stats};
use crate::mm_types::{vm, Mm, UffdReason, Vma};
use crate::pgtable::{alloc_pmd, alloc_pte_table, load, pte_lock_checked, pte_lockptr, store, PmdSlot};
use crate::sync::BitSpinLock;
use crate::tlb::table_rcu::TableReadGuard;
use crate::Result;

/// What a fault asks for (`FAULT_FLAG_WRITE`, `FAULT_FLAG_UNSHARE`, neither).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    Read,
    Write,
    /// Make an anon page exclusive to this MM without writing it (GUP R/O
    /// pins): the COW paths run, but the entry stays read-only.
    Unshare,
}

/// One fault as it travels down the handlers (`struct vm_fault`).
#[derive(Clone, Copy)]
pub struct VmFault<'a> {
    pub k: &'a Kernel,
    pub mm: &'a Mm,
    pub vma: &'a Vma,
    /// The faulting address (`vmf->address`, not rounded).
    pub address: u64,
    pub kind: FaultKind,
    /// The PMD slot of the address (`vmf->pmd`).
    pub pmd: PmdSlot,
    /// The PTE table under it, once the fault reached PTE level.
    pub table: Pfn,
    /// The entry the handler decided on (`vmf->orig_pte` / `vmf->orig_pmd`).
    pub orig: Pte,
}

impl<'a> VmFault<'a> {
    pub fn write(&self) -> bool {
        self.kind == FaultKind::Write
    }
    pub fn unshare(&self) -> bool {
        self.kind == FaultKind::Unshare
    }
    /// The PTL of the fault's PTE table, if the PMD still points at it
    /// ([`pte_lock_checked`]); `None`: the table went (PT_RECLAIM) and the
    /// fault is retried.
    pub fn pte_lock(&self) -> Option<BitSpinLock<'a>> {
        pte_lock_checked(&self.k.phys, self.pmd, self.table)
    }
    /// The THP orders the VMA may use (`thp_vma_allowable_orders`); none
    /// for a file VMA (shmem folios are order 0 for now).
    pub fn thp_orders(&self) -> u32 {
        let flags = self.vma.flags();
        if self.vma.with_file(|f| f.is_some()) {
            return 0;
        }
        self.k.thp.allowable_orders(flags & vm::HUGEPAGE != 0, flags & vm::NOHUGEPAGE != 0)
    }
}

/// `handle_mm_fault` for a read or write of `addr` in `vma`. Returns ENOMEM
/// (`VM_FAULT_OOM`) when no order-0 page or page table can be allocated.
pub fn handle_mm_fault(mm: &Mm, vma: &Vma, addr: u64, write: bool) -> Result<()> {
    handle_fault(mm, vma, addr, if write { FaultKind::Write } else { FaultKind::Read })
}

/// `handle_mm_fault` with the fault's kind spelled out.
pub fn handle_fault(mm: &Mm, vma: &Vma, addr: u64, kind: FaultKind) -> Result<()> {
    let k = &*mm.kernel;
    Stats::inc(&k.stats.pgfault);
    crate::sync::sim::work(crate::sync::sim::Work::Fault);
    let r = match vma.is_hugetlb() {
        true => super::hugetlb::hugetlb_fault(mm, vma, addr, kind),
        // A read section for the PTE table the fault may reach.
        false => __handle_mm_fault(k, mm, vma, addr, kind, &mm.pt_read()),
    };
    if r == Err(crate::Errno::ENOMEM) {
        Stats::inc(&k.stats.oom);
    }
    r
}

/// `__handle_mm_fault`: the PMD level, then [`handle_pte_fault`].
fn __handle_mm_fault(k: &Kernel, mm: &Mm, vma: &Vma, addr: u64, kind: FaultKind, _walk: &TableReadGuard) -> Result<()> {
    // The tables come with reclaim, as `GFP_PGTABLE_USER` allows.
    let pmd = reclaim_on_enomem(k, &mm.mmlist, || alloc_pmd(k, mm.pgd, addr, &mm.page_table_lock))?;
    let mut vmf = VmFault { k, mm, vma, address: addr, kind, pmd, table: 0, orig: Pte::NONE };
    loop {
        let e = pmd.load(&k.phys);
        vmf.orig = e;
        if e.is_none() {
            let haddr = addr & !(PMD_SIZE - 1);
            let fits = haddr >= vma.start() && haddr + PMD_SIZE <= vma.end();
            let pmd_mapped = vma.with_file(|f| match f {
                Some(inode) if fits && kind != FaultKind::Unshare => file::do_fault_pmd(&vmf, inode),
                _ => Ok(Huge::Fallback),
            })?;
            if pmd_mapped == Huge::Done {
                return Ok(());
            }
            if fits
                && vmf.thp_orders() & (1 << PMD_ORDER) != 0
                && huge_memory::do_huge_pmd_anonymous_page(&vmf)? == Huge::Done
            {
                return Ok(());
            }
        } else if e.huge() && !e.hw_present() && vma.readable() {
            return super::numa_balancing::do_huge_pmd_numa_page(&vmf, pmd);
        } else if e.huge() {
            if kind == FaultKind::Write && e.uffd_wp() && vma.userfaultfd_wp() {
                return Err(vmf.userfault(UffdReason::WriteProtect));
            }
            if kind != FaultKind::Read && !e.write() {
                if huge_memory::do_huge_pmd_wp_page(&vmf)? == Huge::Done {
                    return Ok(());
                }
                continue;
            }
            let _pl = pte_lockptr(&k.phys, pmd.table).lock();
            touch(k, pmd.table, pmd.idx, e, vmf.write());
            return Ok(());
        }
        let Some(table) = reclaim_on_enomem(k, &mm.mmlist, || alloc_pte_table(k, pmd))? else {
            continue;
        };
        vmf.table = table;
        return handle_pte_fault(&mut vmf);
    }
}

/// Sets accessed (and dirty for a write) on an entry that already allows the
/// access, as the MMU would (`huge_pmd_set_accessed`, the `pte_mkyoung` tail
/// of `handle_pte_fault`). The caller holds the table's lock.
fn touch(k: &Kernel, table: Pfn, idx: usize, orig: Pte, write: bool) {
    if load(&k.phys, table, idx) == orig {
        let bits = Pte::ACCESSED | if write { Pte::MKDIRTY } else { 0 };
        store(&k.phys, table, idx, orig.with(bits));
    }
}

/// `handle_pte_fault`: a none PTE is an anonymous or a file fault
/// (`do_fault`), a swap entry a swap-in (`do_swap_page`), a write (or
/// unshare) to a read-only one is a write-protect fault, else the entry is
/// only marked accessed.
fn handle_pte_fault(vmf: &mut VmFault) -> Result<()> {
    let idx = pte_index(vmf.address);
    let pte = load(&vmf.k.phys, vmf.table, idx);
    vmf.orig = pte;
    if pte.is_none() {
        let vmf = &*vmf;
        vmf.vma.with_file(|f| match f {
            Some(inode) => file::do_fault(vmf, inode),
            None => anon::do_anonymous_page(vmf),
        })
    } else if pte.is_swap() {
        super::swap::do_swap_page(vmf)
    } else if !pte.hw_present() && vmf.vma.readable() {
        // PROT_NONE in an accessible VMA: the NUMA scan's (`pte_protnone`
        // and `vma_is_accessible`).
        super::numa_balancing::do_numa_page(vmf)
    } else if vmf.kind != FaultKind::Read && !pte.write() {
        if vmf.write() && pte.uffd_wp() && vmf.vma.userfaultfd_wp() {
            return Err(vmf.userfault(UffdReason::WriteProtect));
        }
        if vmf.vma.shared() {
            return file::wp_page_shared(vmf);
        }
        wp::do_wp_page(vmf)
    } else {
        if let Some(_ptl) = vmf.pte_lock() {
            touch(vmf.k, vmf.table, idx, pte, vmf.write());
        }
        Ok(())
    }
}
