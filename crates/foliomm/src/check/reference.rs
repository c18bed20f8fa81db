//! The reference model: what every byte must read, computed the plainest way.
//! One [`RefSpace`] per process maps pages to their protection and bytes;
//! fork is a deep copy. It knows nothing of folios, page tables or COW, so a
//! model bug that leaks or loses a byte shows as a difference.

use std::collections::BTreeMap;

use crate::arch::PAGE_SIZE;
use crate::mm_types::Prot;
use crate::{Errno, Result};

const PS: usize = PAGE_SIZE as usize;

#[derive(Clone)]
struct RefPage {
    prot: u32,
    /// `None` reads as zeros.
    data: Option<Box<[u8; PS]>>,
}

/// The bytes and protections of one process's address space.
#[derive(Clone, Default)]
pub struct RefSpace {
    pages: BTreeMap<u64, RefPage>,
}

fn page_range(start: u64, len: u64) -> impl Iterator<Item = u64> {
    let end = (start + len).div_ceil(PAGE_SIZE) * PAGE_SIZE;
    (start & !(PAGE_SIZE - 1)..end).step_by(PS)
}

impl RefSpace {
    /// A new mapping of zero pages (replacing whatever was there).
    pub fn map(&mut self, start: u64, len: u64, prot: Prot) {
        for p in page_range(start, len) {
            self.pages.insert(p, RefPage { prot: prot.0, data: None });
        }
    }

    pub fn unmap(&mut self, start: u64, len: u64) {
        for p in page_range(start, len) {
            self.pages.remove(&p);
        }
    }

    pub fn is_mapped(&self, addr: u64) -> bool {
        self.pages.contains_key(&(addr & !(PAGE_SIZE - 1)))
    }

    /// Whether every page of the range is mapped.
    pub fn covers(&self, start: u64, len: u64) -> bool {
        page_range(start, len).all(|p| self.pages.contains_key(&p))
    }

    pub fn protect(&mut self, start: u64, len: u64, prot: Prot) {
        for p in page_range(start, len) {
            if let Some(pg) = self.pages.get_mut(&p) {
                pg.prot = prot.0;
            }
        }
    }

    /// MADV_DONTNEED on private anonymous memory: mapped pages read zero again.
    pub fn zap(&mut self, start: u64, len: u64) {
        for p in page_range(start, len) {
            if let Some(pg) = self.pages.get_mut(&p) {
                pg.data = None;
            }
        }
    }

    /// mremap: `old_len` bytes move to `new`; a longer new range is zero-filled.
    pub fn remap(&mut self, old: u64, old_len: u64, new: u64, new_len: u64) {
        let moved: Vec<(u64, RefPage)> =
            page_range(old, old_len).filter_map(|p| self.pages.remove(&p).map(|pg| (p, pg))).collect();
        let prot = moved.first().map(|(_, p)| p.prot).unwrap_or(0);
        for p in page_range(new, new_len) {
            self.pages.insert(p, RefPage { prot, data: None });
        }
        for (p, pg) in moved {
            if p - old < new_len {
                self.pages.insert(new + (p - old), pg);
            }
        }
    }

    fn page_mut(&mut self, addr: u64, write: bool) -> Result<&mut RefPage> {
        let pg = self.pages.get_mut(&(addr & !(PAGE_SIZE - 1))).ok_or(Errno::EFAULT)?;
        let need = if write { Prot::WRITE } else { Prot::READ | Prot::WRITE };
        if pg.prot & need == 0 {
            return Err(Errno::EACCES);
        }
        Ok(pg)
    }

    /// Writes `data` at `addr`, page by page, stopping at the first page that
    /// is unmapped or not writable (as a real access would).
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<()> {
        self.each_piece(addr, data.len() as u64, true, |pg, off, pos, n| {
            pg.data.get_or_insert_with(|| Box::new([0; PS]))[off..off + n].copy_from_slice(&data[pos..pos + n]);
        })
    }

    pub fn fill(&mut self, addr: u64, len: u64, val: u8) -> Result<()> {
        self.each_piece(addr, len, true, |pg, off, _, n| {
            pg.data.get_or_insert_with(|| Box::new([0; PS]))[off..off + n].fill(val);
        })
    }

    pub fn write_byte_per_page(&mut self, addr: u64, len: u64, val: u8) -> Result<()> {
        for p in page_range(addr, len) {
            self.page_mut(p, true)?.data.get_or_insert_with(|| Box::new([0; PS]))[0] = val;
        }
        Ok(())
    }

    pub fn read(&mut self, addr: u64, len: u64) -> Result<Vec<u8>> {
        let mut out = vec![0; len as usize];
        self.each_piece(addr, len, false, |pg, off, pos, n| {
            if let Some(d) = &pg.data {
                out[pos..pos + n].copy_from_slice(&d[off..off + n]);
            }
        })?;
        Ok(out)
    }

    pub fn read_byte_per_page(&mut self, addr: u64, len: u64) -> Result<Vec<u8>> {
        page_range(addr, len).map(|p| Ok(self.page_mut(p, false)?.data.as_ref().map_or(0, |d| d[0]))).collect()
    }

    fn each_piece(
        &mut self,
        addr: u64,
        len: u64,
        write: bool,
        mut f: impl FnMut(&mut RefPage, usize, usize, usize),
    ) -> Result<()> {
        let end = addr + len;
        let mut at = addr;
        while at < end {
            let next = (at / PAGE_SIZE + 1) * PAGE_SIZE;
            let n = (next.min(end) - at) as usize;
            let pg = self.page_mut(at, write)?;
            f(pg, (at % PAGE_SIZE) as usize, (at - addr) as usize, n);
            at = next;
        }
        Ok(())
    }
}
