//! Memory accesses by a simulated CPU: the MMU's view. An access looks up
//! the CPU's software TLB; on a miss, or when the entry lacks the permission
//! or the dirty bit, it walks the page tables, sets accessed/dirty with an
//! atomic compare-and-exchange as the hardware walker does, and fills the TLB;
//! when the walk finds no usable entry it takes the page fault
//! (`do_user_addr_fault` → `handle_mm_fault`) and retries.
//!
//! TLB use and walks happen inside the MM's access section (see
//! [`crate::tlb`]), so that a flush, and the frees behind it, wait for them.
//! An access through an entry whose frame was freed since the entry was
//! filled is a use after free: it is recorded in
//! [`Kernel::violations`] (the checker reports it) and, as on
//! hardware, still performed.
#![warn(missing_docs)]

use crate::arch::{Pfn, Pte, PAGE_SIZE};
use crate::kernel::{Incident, Kernel};
use crate::memory::handle_mm_fault;
use crate::mm_types::{Mm, Vma};
use crate::pgtable::leaf_slot;
use crate::sync::atomic::Ordering::*;
use crate::sync::Arc;
use crate::tlb::{Tlb, TlbEntry};
use crate::{Errno, Result};

/// A simulated CPU (one per thread that accesses memory), with its TLB.
pub struct Cpu {
    kernel: Arc<Kernel>,
    /// A number naming this CPU in violation reports.
    pub id: u64,
    /// This CPU's TLB; it applies an MM's pending flushes before each access.
    pub tlb: Tlb,
    /// Page translations the TLB served.
    pub hits: u64,
    /// Page translations that walked the page tables: no TLB entry, or one
    /// lacking write permission or the dirty bit.
    pub misses: u64,
}

impl Cpu {
    /// A CPU of `kernel` with an empty TLB of `Config::tlb_entries` slots;
    /// [`crate::Machine::new_cpu`] is the usual way to get one.
    pub fn new(kernel: &Arc<Kernel>) -> Cpu {
        Cpu {
            kernel: kernel.clone(),
            id: kernel.new_serial(),
            tlb: Tlb::new(kernel.config.tlb_entries),
            hits: 0,
            misses: 0,
        }
    }

    /// Reads `buf.len()` bytes at `addr`.
    pub fn read(&mut self, mm: &Mm, addr: u64, buf: &mut [u8]) -> Result<()> {
        let m = self.kernel.clone();
        let phys = &m.phys;
        self.access(&m, mm, addr, buf.len() as u64, false, |pfn, off, pos, n| {
            phys.read_bytes(pfn, off, &mut buf[pos..pos + n])
        })
    }

    /// Writes `data` at `addr`.
    pub fn write(&mut self, mm: &Mm, addr: u64, data: &[u8]) -> Result<()> {
        let m = self.kernel.clone();
        let phys = &m.phys;
        self.access(&m, mm, addr, data.len() as u64, true, |pfn, off, pos, n| {
            phys.write_bytes(pfn, off, &data[pos..pos + n])
        })
    }

    /// Sets `len` bytes at `addr` to `val` (`memset`).
    pub fn fill(&mut self, mm: &Mm, addr: u64, len: u64, val: u8) -> Result<()> {
        let m = self.kernel.clone();
        let phys = &m.phys;
        self.access(&m, mm, addr, len, true, |pfn, off, _, n| phys.fill(pfn, off, n, val))
    }

    /// Writes `val` to the first byte of every page of `[addr, addr+len)`.
    pub fn write_byte_per_page(&mut self, mm: &Mm, addr: u64, len: u64, val: u8) -> Result<()> {
        let m = self.kernel.clone();
        let phys = &m.phys;
        for page in pages(addr, len) {
            self.with_page(&m, mm, page, true, |pfn| phys.write_byte(pfn, 0, val))?;
        }
        Ok(())
    }

    /// Reads the first byte of every page of `[addr, addr+len)`.
    pub fn read_byte_per_page(&mut self, mm: &Mm, addr: u64, len: u64) -> Result<Vec<u8>> {
        let m = self.kernel.clone();
        let phys = &m.phys;
        pages(addr, len).map(|page| self.with_page(&m, mm, page, false, |pfn| phys.read_byte(pfn, 0))).collect()
    }

    /// The fault a thread woken by its userfaultfd's handler runs again
    /// (`do_user_addr_fault` after `VM_FAULT_RETRY`, with
    /// `FAULT_FLAG_TRIED`): a read or write fault at `addr`, which finds
    /// what the handler installed. The access itself is the caller's to
    /// redo.
    pub fn retry_fault(&mut self, mm: &Mm, addr: u64, write: bool) -> Result<()> {
        do_user_addr_fault(mm, addr, write)
    }

    /// Splits `[addr, addr+len)` at page boundaries and runs
    /// `op(pfn, offset in page, offset in the access, length)` on each piece.
    fn access(
        &mut self,
        m: &Kernel,
        mm: &Mm,
        addr: u64,
        len: u64,
        write: bool,
        mut op: impl FnMut(Pfn, usize, usize, usize),
    ) -> Result<()> {
        let end = addr.checked_add(len).ok_or(Errno::EFAULT)?;
        let mut at = addr;
        while at < end {
            // The next page, or the end of the address space.
            let next = (at | (PAGE_SIZE - 1)).saturating_add(1);
            let n = (next.min(end) - at) as usize;
            let off = (at % PAGE_SIZE) as usize;
            let pos = (at - addr) as usize;
            self.with_page(m, mm, at, write, |pfn| op(pfn, off, pos, n))?;
            at = next;
        }
        Ok(())
    }

    /// Runs `f` on the frame behind `addr` inside an access section, through
    /// a translation that permits the access, faulting first as often as needed.
    fn with_page<R>(&mut self, m: &Kernel, mm: &Mm, addr: u64, write: bool, f: impl FnOnce(Pfn) -> R) -> Result<R> {
        let mut f = Some(f);
        loop {
            {
                let _section = mm.tlb.enter();
                self.tlb.sync(&mm.tlb, &m.stats);
                if let Some(pfn) = self.translate(m, mm, addr, write) {
                    return Ok((f.take().unwrap())(pfn));
                }
            }
            do_user_addr_fault(mm, addr, write)?;
        }
    }

    /// The frame `addr` translates to for this access, from the TLB or a walk
    /// that fills it; `None` means a page fault. Runs inside a section.
    fn translate(&mut self, m: &Kernel, mm: &Mm, addr: u64, write: bool) -> Option<Pfn> {
        let serial = mm.tlb.serial;
        if let Some((e, huge)) = self.tlb.lookup(serial, addr) {
            if !write || (e.writable && e.dirty) {
                self.hits += 1;
                let pfn = e.pfn + if huge { crate::arch::pte_index(addr) as u64 } else { 0 };
                let now = m.phys.generation(e.pfn);
                if now != e.generation {
                    let what = format!(
                        "CPU {}: stale TLB entry for {addr:#x} in mm {} used frame {:#x} after it was freed (generation {} -> {now})",
                        self.id, mm.id, e.pfn, e.generation
                    );
                    m.violations.lock().unwrap().push(Incident::UseAfterFree { mm: mm.id, addr, what });
                }
                return Some(pfn);
            }
            // Not writable or not yet dirty: the MMU walks again.
            self.tlb.remove(serial, addr, huge);
        }
        self.misses += 1;
        let phys = &m.phys;
        let at = leaf_slot(phys, mm.pgd, addr)?;
        let (slot, huge) = (at.entry(phys), at.huge());
        let leaf = Pte(slot.load(Acquire));
        if !leaf.hw_present() || (write && !leaf.write()) || leaf.huge() != huge {
            return None;
        }
        let bits = Pte::ACCESSED | if write { Pte::DIRTY } else { 0 };
        if leaf.0 & bits != bits && slot.compare_exchange(leaf.0, leaf.with(bits).0, AcqRel, Acquire).is_err() {
            return None;
        }
        // A 1 GiB entry is cached as the 2 MiB entry of `addr` (as CPUs
        // without 1 GiB TLB entries splinter it).
        let base = at.page_pfn(leaf, addr & !(crate::arch::PMD_SIZE - 1));
        let entry = TlbEntry {
            pfn: base,
            writable: leaf.write(),
            dirty: write || leaf.dirty(),
            generation: phys.generation(base),
        };
        self.tlb.insert(serial, addr, huge, entry);
        Some(at.page_pfn(leaf, addr))
    }
}

/// `do_user_addr_fault` (arch/x86/mm/fault.c): the VMA under its own lock
/// if the design allows (`lock_vma_under_rcu`), else, or when the fault
/// must be retried, under the mmap_lock (`lock_mm_and_find_vma`); the
/// access checked against the VMA (`access_error`), then `handle_mm_fault`.
fn do_user_addr_fault(mm: &Mm, addr: u64, write: bool) -> Result<()> {
    if let Some(held) = mm.lock_vma_under_rcu(addr) {
        access_error(held.vma(), write)?;
        if held.anon_prepare(write && !held.vma().shared()) {
            return handle_mm_fault(mm, held.vma(), addr, write);
        }
        held.retry();
    }
    let held = mm.lock_mm_and_find_vma(addr)?;
    access_error(held.vma(), write)?;
    handle_mm_fault(mm, held.vma(), addr, write)
}

/// `access_error`: EACCES if the VMA does not allow the access.
fn access_error(vma: &Vma, write: bool) -> Result<()> {
    if (write && !vma.writable()) || !vma.readable() {
        return Err(Errno::EACCES);
    }
    Ok(())
}

fn pages(addr: u64, len: u64) -> impl Iterator<Item = u64> {
    let first = addr & !(PAGE_SIZE - 1);
    (first..addr.saturating_add(len)).step_by(PAGE_SIZE as usize)
}
