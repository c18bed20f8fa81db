//! Memory accesses by a simulated CPU: each access walks the page tables,
//! checks the entry's permission bits as the MMU does, sets accessed/dirty,
//! and takes the page fault it needs (`do_user_addr_fault`).
//!
//! Differs from hardware: there is no TLB yet (every access walks), and each
//! page is accessed with its page-table lock held, which stands in for the
//! atomicity a TLB shootdown gives a real access against a concurrent unmap.
//! The TLB issue replaces this with a per-CPU software TLB.

use std::sync::Arc;

use crate::fault::handle_mm_fault;
use crate::machine::Machine;
use crate::mm::{Mm, Vmas};
use crate::pgtable::{load, pte_index, store, table_lock, walk_pmd, Pte};
use crate::phys::{Pfn, PAGE_SIZE};
use crate::{Errno, Result};

/// A simulated CPU (one per thread that accesses memory).
pub struct Cpu {
    machine: Arc<Machine>,
}

impl Cpu {
    pub fn new(machine: &Arc<Machine>) -> Cpu {
        Cpu { machine: machine.clone() }
    }

    /// Reads `buf.len()` bytes at `addr`.
    pub fn read(&mut self, mm: &Mm, addr: u64, buf: &mut [u8]) -> Result<()> {
        let m = self.machine.clone();
        let phys = &m.phys;
        self.access(mm, addr, buf.len() as u64, false, |pfn, off, pos, n| {
            phys.read_bytes(pfn, off, &mut buf[pos..pos + n])
        })
    }

    /// Writes `data` at `addr`.
    pub fn write(&mut self, mm: &Mm, addr: u64, data: &[u8]) -> Result<()> {
        let m = self.machine.clone();
        let phys = &m.phys;
        self.access(mm, addr, data.len() as u64, true, |pfn, off, pos, n| {
            phys.write_bytes(pfn, off, &data[pos..pos + n])
        })
    }

    /// Sets `len` bytes at `addr` to `val` (`memset`).
    pub fn fill(&mut self, mm: &Mm, addr: u64, len: u64, val: u8) -> Result<()> {
        let m = self.machine.clone();
        let phys = &m.phys;
        self.access(mm, addr, len, true, |pfn, off, _, n| phys.fill(pfn, off, n, val))
    }

    /// Writes `val` to the first byte of every page of `[addr, addr+len)`.
    pub fn write_byte_per_page(&mut self, mm: &Mm, addr: u64, len: u64, val: u8) -> Result<()> {
        let m = self.machine.clone();
        let phys = &m.phys;
        let vmas = mm.read_lock();
        for page in pages(addr, len) {
            self.with_page(mm, &vmas, page, true, |pfn| phys.write_byte(pfn, 0, val))?;
        }
        Ok(())
    }

    /// Reads the first byte of every page of `[addr, addr+len)`.
    pub fn read_byte_per_page(&mut self, mm: &Mm, addr: u64, len: u64) -> Result<Vec<u8>> {
        let m = self.machine.clone();
        let phys = &m.phys;
        let vmas = mm.read_lock();
        pages(addr, len).map(|page| self.with_page(mm, &vmas, page, false, |pfn| phys.read_byte(pfn, 0))).collect()
    }

    /// Splits `[addr, addr+len)` at page boundaries and runs
    /// `op(pfn, offset in page, offset in the access, length)` on each piece.
    fn access(
        &mut self,
        mm: &Mm,
        addr: u64,
        len: u64,
        write: bool,
        mut op: impl FnMut(Pfn, usize, usize, usize),
    ) -> Result<()> {
        let end = addr.checked_add(len).ok_or(Errno::EFAULT)?;
        let vmas = mm.read_lock();
        let mut at = addr;
        while at < end {
            let next = ((at / PAGE_SIZE) + 1) * PAGE_SIZE;
            let n = (next.min(end) - at) as usize;
            let off = (at % PAGE_SIZE) as usize;
            let pos = (at - addr) as usize;
            self.with_page(mm, &vmas, at, write, |pfn| op(pfn, off, pos, n))?;
            at = next;
        }
        Ok(())
    }

    /// Runs `f` on the frame behind `addr` with a translation that permits
    /// the access, faulting first as often as needed.
    fn with_page<R>(&mut self, mm: &Mm, vmas: &Vmas, addr: u64, write: bool, f: impl FnOnce(Pfn) -> R) -> Result<R> {
        let m = &*self.machine;
        let mut f = Some(f);
        loop {
            if let Some(r) = self.try_access(mm, addr, write, &mut f) {
                return Ok(r);
            }
            let vma = vmas.find(addr).ok_or(Errno::EFAULT)?;
            if (write && !vma.writable()) || !vma.readable() {
                return Err(Errno::EACCES);
            }
            handle_mm_fault(m, mm, vma, addr, write)?;
        }
    }

    /// The MMU's view: a walk to a hardware-present leaf that allows the
    /// access; sets accessed/dirty and runs `f` under the leaf's table lock.
    fn try_access<R>(&self, mm: &Mm, addr: u64, write: bool, f: &mut Option<impl FnOnce(Pfn) -> R>) -> Option<R> {
        let phys = &self.machine.phys;
        let pmd = walk_pmd(phys, mm.pgd, addr)?;
        let e = pmd.load(phys);
        let (table, idx, pfn_of) = if e.huge() {
            (pmd.table, pmd.idx, pte_index(addr) as u64)
        } else if e.is_none() {
            return None;
        } else {
            (e.pfn(), pte_index(addr), 0)
        };
        let _ptl = table_lock(phys, table);
        let leaf = load(phys, table, idx);
        if !leaf.hw_present() || (write && !leaf.write()) || leaf.huge() != e.huge() {
            return None;
        }
        let bits = Pte::ACCESSED | if write { Pte::DIRTY } else { 0 };
        if leaf.0 & bits != bits {
            store(phys, table, idx, leaf.with(bits));
        }
        Some((f.take().unwrap())(leaf.pfn() + pfn_of))
    }
}

fn pages(addr: u64, len: u64) -> impl Iterator<Item = u64> {
    let first = addr & !(PAGE_SIZE - 1);
    (first..addr.saturating_add(len)).step_by(PAGE_SIZE as usize)
}
