//! The reference model: what every byte must read, computed the plainest way.
//! One [`RefSpace`] per process maps pages to their protection and bytes
//! ([`RefPage`], stored by content class); fork is a copy that shares every
//! whole page until one side writes it. Files ([`RefFiles`]) are shared by every space made
//! from the same store: a page of a shared file mapping reads and writes the
//! file; a page of a private one reads the file until its first write gives
//! it bytes of its own. It knows nothing of folios, page tables, caches or
//! COW, so a model bug that leaks or loses a byte shows as a difference.

use std::collections::BTreeMap;
use std::ops::Range;

use rangemap::RangeMap;

pub use super::ref_file::RefFiles;
use super::ref_page::{Lazy, RefPage};
use crate::arch::PAGE_SIZE;
use crate::mm_types::Prot;
use crate::{Errno, Result};

const PS: usize = PAGE_SIZE as usize;

/// How a run of pages is mapped: its protection and, for a file mapping,
/// which file, shared or private. A file page's index is its page number
/// plus `delta` (wrapping), so one value describes a whole linear mapping
/// and adjacent runs of one mapping coalesce.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Mapping {
    pub(super) prot: u32,
    pub(super) file: Option<Backing>,
    /// `VM_LOCKED`: MADV_REMOVE refuses the run ([`super::ref_remove`]).
    pub(super) locked: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Backing {
    pub(super) file: u64,
    delta: u64,
    pub(super) shared: bool,
}

impl Backing {
    pub(super) fn index(&self, page: u64) -> u64 {
        (page / PAGE_SIZE).wrapping_add(self.delta)
    }

    /// The same file pages, moved from address `from` to address `to`.
    fn moved(self, from: u64, to: u64) -> Backing {
        Backing { delta: self.delta.wrapping_add(from / PAGE_SIZE).wrapping_sub(to / PAGE_SIZE), ..self }
    }
}

/// The bytes and protections of one process's address space: the mappings
/// as runs of pages, and the bytes of the pages written (a page never
/// written costs nothing, however large its mapping).
#[derive(Clone, Default)]
pub struct RefSpace {
    pub(super) maps: RangeMap<u64, Mapping>,
    /// The page's own bytes (anonymous, or a private copy of a file page);
    /// a page without reads as zeros, or as the file.
    pub(super) data: BTreeMap<u64, RefPage>,
    /// Pages `MADV_FREE` let go: what each reads if reclaim dropped it
    /// ([`super::ref_lazy`]).
    pub(super) lazy: BTreeMap<u64, Lazy>,
    pub(super) files: RefFiles,
}

/// The pieces of `[start, start + len)` within one page each: (address,
/// position in the range, length).
pub(super) fn pieces(start: u64, len: u64) -> impl Iterator<Item = (u64, usize, usize)> {
    let end = start + len;
    let next = move |at: u64| ((at / PAGE_SIZE + 1) * PAGE_SIZE).min(end);
    std::iter::successors(Some(start).filter(|&s| s < end), move |&at| Some(next(at)).filter(|&n| n < end))
        .map(move |at| (at, (at - start) as usize, (next(at) - at) as usize))
}

/// The whole pages `[start, start + len)` touches.
pub(super) fn page_range(start: u64, len: u64) -> Range<u64> {
    let end = (start + len).div_ceil(PAGE_SIZE) * PAGE_SIZE;
    start & !(PAGE_SIZE - 1)..end
}

impl RefSpace {
    /// An empty space whose file mappings use `files`.
    pub fn with_files(files: RefFiles) -> RefSpace {
        RefSpace { files, ..Default::default() }
    }

    /// A copy of this space whose file mappings use `files` instead.
    pub fn with_files_of(&self, files: &RefFiles) -> RefSpace {
        RefSpace { maps: self.maps.clone(), data: self.data.clone(), lazy: self.lazy.clone(), files: files.clone() }
    }

    /// Maps `range` (replacing whatever was there) with no bytes of its own.
    fn insert(&mut self, range: Range<u64>, m: Mapping) {
        if !range.is_empty() {
            self.drop_data(range.clone());
            self.maps.insert(range, m);
        }
    }

    fn drop_data(&mut self, range: Range<u64>) {
        let gone: Vec<u64> = self.data.range(range.clone()).map(|(&p, _)| p).collect();
        gone.iter().for_each(|p| drop(self.data.remove(p)));
        let gone: Vec<u64> = self.lazy.range(range).map(|(&p, _)| p).collect();
        gone.iter().for_each(|p| drop(self.lazy.remove(p)));
    }

    /// The mapped runs overlapping `range`, clipped to it.
    pub(super) fn runs(&self, range: &Range<u64>) -> Vec<(Range<u64>, Mapping)> {
        let runs = self.maps.overlapping(range);
        runs.map(|(r, m)| (r.start.max(range.start)..r.end.min(range.end), *m)).collect()
    }

    /// A new mapping of zero pages (replacing whatever was there).
    pub fn map(&mut self, start: u64, len: u64, prot: Prot) {
        self.insert(page_range(start, len), Mapping { prot: prot.0, file: None, locked: false });
    }

    /// A new mapping of file `file` from page `index`, shared or private.
    pub fn map_file(&mut self, start: u64, len: u64, prot: Prot, file: u64, index: u64, shared: bool) {
        let delta = index.wrapping_sub(start / PAGE_SIZE);
        self.insert(
            page_range(start, len),
            Mapping { prot: prot.0, file: Some(Backing { file, delta, shared }), locked: false },
        );
    }

    pub fn unmap(&mut self, start: u64, len: u64) {
        let range = page_range(start, len);
        if !range.is_empty() {
            self.maps.remove(range.clone());
            self.drop_data(range);
        }
    }

    pub fn is_mapped(&self, addr: u64) -> bool {
        self.maps.contains_key(&(addr & !(PAGE_SIZE - 1)))
    }

    /// Whether every page of the range is mapped.
    pub fn covers(&self, start: u64, len: u64) -> bool {
        self.maps.gaps(&page_range(start, len)).next().is_none()
    }

    /// `mprotect`; a private mlocked run made writable is then faulted in
    /// for write (`mprotect_fixup` → `populate_vma_page_range`), which
    /// gives each of its file pages a copy of its own.
    pub fn protect(&mut self, start: u64, len: u64, prot: Prot) {
        for (range, m) in self.runs(&page_range(start, len)) {
            self.maps.insert(range.clone(), Mapping { prot: prot.0, ..m });
            let private = !m.file.is_some_and(|b| b.shared);
            if m.locked && private && m.prot & Prot::WRITE == 0 && prot.0 & Prot::WRITE != 0 {
                self.break_cow(range.start, range.end - range.start);
            }
        }
    }

    /// An `mprotect` that failed with ENOMEM at a hole: the pages mapped
    /// from `start` up to the first hole changed (Linux changes the VMAs
    /// before the hole; none if `start` is not mapped).
    pub fn protect_until_hole(&mut self, start: u64, len: u64, prot: Prot) {
        self.protect(start, self.mapped_prefix(start, len), prot);
    }

    /// How many bytes from `start` (of `len`) are mapped before the first
    /// hole.
    pub(super) fn mapped_prefix(&self, start: u64, len: u64) -> u64 {
        let mut at = start;
        for (range, _) in self.runs(&page_range(start, len)) {
            if range.start != at {
                break;
            }
            at = range.end;
        }
        at - start
    }

    /// MADV_DONTNEED: private pages read zero again (or the file, for a
    /// private file mapping); shared file pages keep their bytes.
    pub fn zap(&mut self, start: u64, len: u64) {
        self.drop_data(page_range(start, len));
    }

    /// The pages of `file` at indexes `pages` leave this space's private
    /// mappings of it, private copies too: truncation past the end
    /// (`unmap_mapping_range(.., even_cows)`), and a hole punched in a
    /// hugetlbfs file, whose unmap (`hugetlb_vmdelete_list`) never spares a
    /// private copy.
    pub fn drop_file_pages(&mut self, file: u64, pages: Range<u64>) {
        for (range, m) in self.runs(&(0..u64::MAX)) {
            if let Some(b) = m.file.filter(|b| b.file == file) {
                let inside = self.data.range(range).map(|(&p, _)| p).filter(|&p| pages.contains(&b.index(p)));
                let gone: Vec<u64> = inside.collect();
                gone.iter().for_each(|p| drop(self.data.remove(p)));
            }
        }
    }

    /// mremap: `old_len` bytes move to `new`; a longer new range is
    /// zero-filled, or continues the file a file mapping maps.
    pub fn remap(&mut self, old: u64, old_len: u64, new: u64, new_len: u64) {
        let (old_range, new_range) = (page_range(old, old_len), page_range(new, new_len));
        let runs = self.runs(&old_range);
        let moved: Vec<(u64, RefPage)> = self.data.range(old_range.clone()).map(|(&p, d)| (p, d.clone())).collect();
        let lazy: Vec<(u64, Lazy)> = self.lazy.range(old_range.clone()).map(|(&p, l)| (p, l.clone())).collect();
        self.unmap(old, old_len);
        // File indexes stay with their pages.
        let moved_by = |b: Backing| b.moved(old, new);
        let first = runs.first().map_or(Mapping { prot: 0, file: None, locked: false }, |(_, m)| *m);
        self.insert(new_range.clone(), Mapping { file: first.file.map(moved_by), ..first });
        for (range, m) in runs {
            let to = new + (range.start - old)..(new + (range.end - old)).min(new_range.end);
            self.insert(to, Mapping { file: m.file.map(moved_by), ..m });
        }
        for (p, d) in moved.into_iter().filter(|(p, _)| p - old < new_len) {
            self.data.insert(new + (p - old), d);
        }
        for (p, l) in lazy.into_iter().filter(|(p, _)| p - old < new_len) {
            self.lazy.insert(new + (p - old), l);
        }
    }

    /// `MREMAP_DONTUNMAP`: as [`Self::remap`] of `len` bytes, but the
    /// source stays mapped as it was, its pages gone (anonymous memory
    /// reads zeros, a file mapping its file).
    pub fn remap_keeping_source(&mut self, old: u64, len: u64, new: u64) {
        let runs = self.runs(&page_range(old, len));
        self.remap(old, len, new, len);
        // The source is no longer locked (`mremap` clears `VM_LOCKED` there).
        for (range, m) in runs {
            self.insert(range, Mapping { locked: false, ..m });
        }
    }

    /// Runs `f` on the bytes the page at `addr` reads and writes (its own,
    /// or its file's), checking the access; a write to a private page of a
    /// file first copies the file's page. SIGBUS past the end of the file.
    fn with_bytes<R>(&mut self, addr: u64, write: bool, mut f: impl FnMut(&mut RefPage) -> R) -> Result<R> {
        let page = addr & !(PAGE_SIZE - 1);
        let m = *self.maps.get(&page).ok_or(Errno::EFAULT)?;
        let need = if write { Prot::WRITE } else { Prot::READ | Prot::WRITE };
        if m.prot & need == 0 {
            return Err(Errno::EACCES);
        }
        // Reads of bytes never written see zeros without storing any.
        let zeros = RefPage::default;
        let Some(b) = m.file else {
            // A page MADV_FREE let go is written whichever way it went.
            if let Some(l) = self.lazy.get_mut(&page).filter(|_| write) {
                f(&mut l.dropped);
                l.written = true;
            }
            return Ok(match (self.data.get_mut(&page), write) {
                (None, false) => f(&mut zeros()),
                (Some(d), _) => f(d),
                (None, true) => f(self.data.entry(page).or_insert_with(zeros)),
            });
        };
        let mut files = self.files.0.lock().unwrap();
        let file = files.get_mut(&b.file).ok_or(Errno::SIGBUS)?;
        let index = b.index(page);
        if index >= file.size.div_ceil(PAGE_SIZE) {
            return Err(Errno::SIGBUS);
        }
        let file_page = |pages: &BTreeMap<u64, RefPage>| pages.get(&index).cloned().unwrap_or_else(zeros);
        let first = file.unit_of(index);
        if file.hugetlbfs() && b.shared {
            file.cached.insert(first);
        }
        let own = self.data.get_mut(&page);
        // A private fault on a hugetlbfs hole maps a zeroed page of its own.
        let hole = file.hugetlbfs() && !file.cached.contains(&first);
        Ok(match (b.shared, own, write || hole) {
            (true, _, true) => f(file.pages.entry(index).or_insert_with(zeros)),
            (true, _, false) | (false, None, false) => f(&mut file_page(&file.pages)),
            (false, Some(d), _) => f(d),
            (false, None, true) => {
                // The rest of a huge page is copied with it (`hugetlb_wp`).
                let unit = file.unit.max(1) * PAGE_SIZE;
                let base = page & !(unit - 1);
                for q in (base..base + unit).step_by(PS).filter(|&q| q != page) {
                    let copy =
                        || if hole { zeros() } else { file.pages.get(&b.index(q)).cloned().unwrap_or_else(zeros) };
                    self.data.entry(q).or_insert_with(copy);
                }
                f(self.data.entry(page).or_insert_with(|| if hole { zeros() } else { file_page(&file.pages) }))
            }
        })
    }

    /// Writes `data` at `addr`, page by page, stopping at the first page that
    /// is unmapped or not writable (as a real access would).
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<()> {
        self.each_piece(addr, data.len() as u64, true, |d, off, pos, n| d.write(off, &data[pos..pos + n]))
    }

    pub fn fill(&mut self, addr: u64, len: u64, val: u8) -> Result<()> {
        self.each_piece(addr, len, true, |d, off, _, n| d.fill(off, n, val))
    }

    /// Gives each page of `[addr, addr + len)` bytes all `val` of its own,
    /// whatever its protection: pages the kernel filled for userspace
    /// (`UFFDIO_COPY`, `UFFDIO_ZEROPAGE`). EFAULT at the first unmapped page.
    /// A page of a shared file mapping is the file's: the file gets the
    /// bytes (EFAULT past its end).
    pub fn fill_pages(&mut self, addr: u64, len: u64, val: u8) -> Result<()> {
        for p in page_range(addr, len).step_by(PS) {
            let m = *self.maps.get(&p).ok_or(Errno::EFAULT)?;
            let mut page = RefPage::default();
            page.fill(0, PS, val);
            match m.file.filter(|b| b.shared) {
                Some(b) => {
                    let mut files = self.files.0.lock().unwrap();
                    let file = files.get_mut(&b.file).ok_or(Errno::EFAULT)?;
                    if b.index(p) >= file.size.div_ceil(PAGE_SIZE) {
                        return Err(Errno::EFAULT);
                    }
                    file.pages.insert(b.index(p), page);
                }
                None => _ = self.data.insert(p, page),
            }
        }
        Ok(())
    }

    /// Whether the page at `addr` is mapped from a file (shmem), shared or
    /// private.
    pub fn file_backed(&self, addr: u64) -> bool {
        self.maps.get(&(addr & !(PAGE_SIZE - 1))).is_some_and(|m| m.file.is_some())
    }

    pub fn write_byte_per_page(&mut self, addr: u64, len: u64, val: u8) -> Result<()> {
        for p in page_range(addr, len).step_by(PS) {
            self.with_bytes(p, true, |d| d.fill(0, 1, val))?;
        }
        Ok(())
    }

    /// A write fault that writes nothing (GUP with FOLL_WRITE: a write pin,
    /// MADV_POPULATE_WRITE, MAP_POPULATE or mlock of a private writable
    /// mapping): each writable page of a private file mapping gets its own
    /// copy of the file's page, which later writes to the file no longer
    /// show through. Pages it cannot write are faulted for read
    /// ([`Self::fault_read`]), as are shared ones.
    pub fn break_cow(&mut self, addr: u64, len: u64) {
        for p in page_range(addr, len).step_by(PS) {
            let private_file = self.maps.get(&p).is_some_and(|m| m.file.is_some_and(|b| !b.shared));
            if !(private_file && !self.data.contains_key(&p) && self.with_bytes(p, true, |_| ()).is_ok()) {
                let _ = self.with_bytes(p, false, |_| ());
            }
        }
    }

    /// A read fault that reads nothing (MADV_POPULATE_READ, a read pin):
    /// a shared mapping of a hugetlbfs file brings its huge pages into the
    /// cache; a private one gets zeroed pages of its own where the cache
    /// has none. Nothing else changes.
    pub fn fault_read(&mut self, addr: u64, len: u64) {
        for p in page_range(addr, len).step_by(PS) {
            let _ = self.with_bytes(p, false, |_| ());
        }
    }

    pub fn read(&mut self, addr: u64, len: u64) -> Result<Vec<u8>> {
        let mut out = vec![0; len as usize];
        self.read_into(addr, &mut out)?;
        Ok(out)
    }

    /// [`RefSpace::read`] of `out.len()` bytes into `out`.
    pub fn read_into(&mut self, addr: u64, out: &mut [u8]) -> Result<()> {
        self.each_piece(addr, out.len() as u64, false, |d, off, pos, n| d.read(off, &mut out[pos..pos + n]))
    }

    pub fn read_byte_per_page(&mut self, addr: u64, len: u64) -> Result<Vec<u8>> {
        page_range(addr, len).step_by(PS).map(|p| self.with_bytes(p, false, |d| d.byte(0))).collect()
    }

    fn each_piece(
        &mut self,
        addr: u64,
        len: u64,
        write: bool,
        mut f: impl FnMut(&mut RefPage, usize, usize, usize),
    ) -> Result<()> {
        for (at, pos, n) in pieces(addr, len) {
            self.with_bytes(at, write, |d| f(d, (at % PAGE_SIZE) as usize, pos, n))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: u64 = PAGE_SIZE;

    #[test]
    fn a_large_mapping_costs_only_the_pages_written() {
        let mut s = RefSpace::default();
        s.map(1 << 40, 1 << 40, Prot::RW);
        s.write(1 << 40, &[7]).unwrap();
        assert_eq!((s.maps.iter().count(), s.data.len()), (1, 1));
        assert!(s.covers(1 << 40, 1 << 40) && !s.covers(1 << 40, (1 << 40) + 1));
        assert_eq!(s.read((1 << 40) + 5 * P, 1).unwrap(), [0]);
    }

    #[test]
    fn protect_splits_and_an_access_stops_at_the_first_refused_page() {
        let mut s = RefSpace::default();
        s.map(0, 4 * P, Prot::RW);
        s.protect(2 * P, P, Prot(Prot::READ));
        assert_eq!(s.write(P, &[1; 2 * PS]), Err(Errno::EACCES));
        assert_eq!(s.read(P, 1).unwrap(), [1], "the page before the refused one is written");
        assert_eq!(s.read(2 * P, 1).unwrap(), [0]);
        s.protect(2 * P, P, Prot::RW);
        assert_eq!(s.maps.iter().count(), 1, "equal runs coalesce again");
    }

    #[test]
    fn a_moved_file_mapping_keeps_its_file_pages_and_grows_along_the_file() {
        let files = RefFiles::default();
        let f = files.new_file(8 * P, 1);
        files.write(f, 3 * P, &[3]);
        files.write(f, 5 * P, &[5]);
        let mut s = RefSpace::with_files(files.clone());
        // Pages 2..4 of the file at 0x10000; a private copy of file page 2.
        s.map_file(0x10000, 2 * P, Prot::RW, f, 2, false);
        s.write(0x10000, &[9]).unwrap();
        s.remap(0x10000, 2 * P, 0x80000, 2 * P);
        s.remap(0x80000, 2 * P, 0x40000, 4 * P);
        assert!(!s.is_mapped(0x10000) && !s.is_mapped(0x80000));
        assert_eq!(s.read(0x40000, 1).unwrap(), [9], "the private copy moved, up and down");
        assert_eq!(s.read(0x40000 + P, 1).unwrap(), [3], "file page 3");
        assert_eq!(s.read(0x40000 + 3 * P, 1).unwrap(), [5], "grown: file page 5");
        files.truncate(f, 2 * P);
        s.drop_file_pages(f, 2..u64::MAX);
        assert_eq!(s.read(0x40000, 1), Err(Errno::SIGBUS), "truncation drops even the private copy");
        assert!(s.data.is_empty());
    }
}
