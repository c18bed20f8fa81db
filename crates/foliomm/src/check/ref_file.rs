//! The reference model's files ([`RefFiles`]): each file's size and the
//! bytes of its pages ever written, shared by every [`RefSpace`] made from
//! the same store; for hugetlbfs, which huge pages its cache holds.
//!
//! [`RefSpace`]: super::reference::RefSpace

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use super::ref_page::RefPage;
use super::reference::pieces;
use crate::arch::PAGE_SIZE;

const PS: usize = PAGE_SIZE as usize;

/// One file: its size and the bytes of the pages ever written; for a
/// hugetlbfs file, the pages of a huge page (`unit`) and which huge pages
/// its cache holds (by first page index): a private mapping's fault where
/// the cache has none gets a zeroed huge page of its own
/// (`hugetlb_no_page`), which the file's later pages do not change.
#[derive(Clone, Default)]
pub(super) struct RefFile {
    pub(super) size: u64,
    pub(super) pages: BTreeMap<u64, RefPage>,
    pub(super) unit: u64,
    pub(super) cached: BTreeSet<u64>,
}

impl RefFile {
    /// Whether it is a hugetlbfs file.
    pub(super) fn hugetlbfs(&self) -> bool {
        self.unit > 1
    }

    /// The first page index of the huge page holding page `index`.
    pub(super) fn unit_of(&self, index: u64) -> u64 {
        index - index % self.unit.max(1)
    }

    /// The cached huge pages that start in pages `from..to` leave the
    /// cache, their bytes too.
    fn uncache(&mut self, from: u64, to: u64) {
        let gone: Vec<u64> = self.cached.range(from..to.max(from)).copied().collect();
        for first in gone {
            self.cached.remove(&first);
            let pages: Vec<u64> = self.pages.range(first..first + self.unit).map(|(&i, _)| i).collect();
            pages.iter().for_each(|i| drop(self.pages.remove(i)));
        }
    }
}

/// The files of a run, shared by the spaces that map them.
#[derive(Clone, Default)]
pub struct RefFiles(pub(super) Arc<Mutex<HashMap<u64, RefFile>>>);

impl RefFiles {
    /// A separate copy of every file as it is now.
    pub fn snapshot(&self) -> RefFiles {
        RefFiles(Arc::new(Mutex::new(self.0.lock().unwrap().clone())))
    }

    /// A punched hole: the bytes of `[offset, end)` read zero; the huge
    /// pages of a hugetlbfs file it covers whole leave the cache.
    pub fn punch(&self, id: u64, offset: u64, end: u64) {
        let mut files = self.0.lock().unwrap();
        let Some(f) = files.get_mut(&id) else { return };
        if f.hugetlbfs() {
            let unit = f.unit * PAGE_SIZE;
            f.uncache(offset.div_ceil(unit) * f.unit, end / unit * f.unit);
        }
        for i in offset / PAGE_SIZE..end.div_ceil(PAGE_SIZE) {
            let lo = offset.max(i * PAGE_SIZE) - i * PAGE_SIZE;
            let hi = end.min((i + 1) * PAGE_SIZE) - i * PAGE_SIZE;
            if let Some(page) = f.pages.get_mut(&i) {
                page.fill(lo as usize, (hi - lo) as usize, 0);
            }
        }
    }

    /// A new file of `size` bytes, all zeros, of huge pages of `unit`
    /// pages on hugetlbfs (else 1); returns its id (the backends' file
    /// handles may repeat across processes, the ids do not).
    pub fn new_file(&self, size: u64, unit: u64) -> u64 {
        let mut files = self.0.lock().unwrap();
        let id = files.len() as u64 + 1;
        files.insert(id, RefFile { size, unit, ..RefFile::default() });
        id
    }

    /// `fallocate` of `[offset, end)`: a hugetlbfs file caches the huge
    /// pages it covers.
    pub fn allocate(&self, id: u64, offset: u64, end: u64) {
        let mut files = self.0.lock().unwrap();
        let Some(f) = files.get_mut(&id).filter(|f| f.hugetlbfs()) else { return };
        let unit = f.unit * PAGE_SIZE;
        let firsts: Vec<u64> = (offset / unit..end.div_ceil(unit)).map(|u| u * f.unit).collect();
        f.cached.extend(firsts);
    }

    /// `pwrite`: the bytes of `data` from `offset`; the size grows to cover them.
    pub fn write(&self, id: u64, offset: u64, data: &[u8]) {
        let mut files = self.0.lock().unwrap();
        let f = files.entry(id).or_default();
        for (at, pos, n) in pieces(offset, data.len() as u64) {
            f.pages.entry(at / PAGE_SIZE).or_default().write((at % PAGE_SIZE) as usize, &data[pos..pos + n]);
        }
        f.size = f.size.max(offset + data.len() as u64);
    }

    /// `pread`: up to `len` bytes from `offset`, stopping at the end of the file.
    pub fn read(&self, id: u64, offset: u64, len: u64) -> Vec<u8> {
        let files = self.0.lock().unwrap();
        let Some(f) = files.get(&id) else { return Vec::new() };
        let end = f.size.min(offset.saturating_add(len));
        (offset..end)
            .map(|at| f.pages.get(&(at / PAGE_SIZE)).map_or(0, |p| p.byte((at % PAGE_SIZE) as usize)))
            .collect()
    }

    /// `fallocate` without `KEEP_SIZE`: the size grows to `size` if smaller.
    pub fn extend(&self, id: u64, size: u64) {
        let mut files = self.0.lock().unwrap();
        let f = files.entry(id).or_default();
        f.size = f.size.max(size);
    }

    /// `ftruncate`: pages past the new end are gone (and read as zeros if
    /// the file grows again).
    pub fn truncate(&self, id: u64, size: u64) {
        let mut files = self.0.lock().unwrap();
        let f = files.entry(id).or_default();
        f.uncache(size.div_ceil(PAGE_SIZE), u64::MAX);
        f.pages.split_off(&size.div_ceil(PAGE_SIZE));
        if let Some(last) =
            (!size.is_multiple_of(PAGE_SIZE)).then_some(size / PAGE_SIZE).and_then(|i| f.pages.get_mut(&i))
        {
            let off = (size % PAGE_SIZE) as usize;
            last.fill(off, PS - off, 0);
        }
        f.size = size;
    }
}
