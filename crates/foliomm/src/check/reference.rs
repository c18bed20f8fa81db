//! The reference model: what every byte must read, computed the plainest way.
//! One [`RefSpace`] per process maps pages to their protection and bytes;
//! fork is a deep copy. Files ([`RefFiles`]) are shared by every space made
//! from the same store: a page of a shared file mapping reads and writes the
//! file; a page of a private one reads the file until its first write gives
//! it bytes of its own. It knows nothing of folios, page tables, caches or
//! COW, so a model bug that leaks or loses a byte shows as a difference.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::arch::PAGE_SIZE;
use crate::mm_types::Prot;
use crate::{Errno, Result};

const PS: usize = PAGE_SIZE as usize;
type Bytes = Box<[u8; PS]>;

/// The file behind a page: which, at which page index, and whether writes
/// go to it.
#[derive(Clone, Copy)]
struct Backing {
    file: u64,
    index: u64,
    shared: bool,
}

#[derive(Clone)]
struct RefPage {
    prot: u32,
    file: Option<Backing>,
    /// The page's own bytes (anonymous, or a private copy of a file page);
    /// `None` reads as zeros, or as the file.
    data: Option<Bytes>,
}

/// One file: its size and the bytes of the pages ever written.
#[derive(Clone, Default)]
struct RefFile {
    size: u64,
    pages: BTreeMap<u64, Bytes>,
}

/// The files of a run, shared by the spaces that map them.
#[derive(Clone, Default)]
pub struct RefFiles(Arc<Mutex<HashMap<u64, RefFile>>>);

impl RefFiles {
    /// A separate copy of every file as it is now.
    pub fn snapshot(&self) -> RefFiles {
        RefFiles(Arc::new(Mutex::new(self.0.lock().unwrap().clone())))
    }

    /// A punched hole: the bytes of `[offset, end)` read zero.
    pub fn punch(&self, id: u64, offset: u64, end: u64) {
        let mut files = self.0.lock().unwrap();
        let Some(f) = files.get_mut(&id) else { return };
        for i in offset / PAGE_SIZE..end.div_ceil(PAGE_SIZE) {
            let lo = offset.max(i * PAGE_SIZE) - i * PAGE_SIZE;
            let hi = end.min((i + 1) * PAGE_SIZE) - i * PAGE_SIZE;
            if let Some(page) = f.pages.get_mut(&i) {
                page[lo as usize..hi as usize].fill(0);
            }
        }
    }

    /// A new file of `size` bytes, all zeros; returns its id (the
    /// backends' file handles may repeat across processes, the ids do not).
    pub fn new_file(&self, size: u64) -> u64 {
        let mut files = self.0.lock().unwrap();
        let id = files.len() as u64 + 1;
        files.insert(id, RefFile { size, pages: BTreeMap::new() });
        id
    }

    /// `pwrite`: the bytes of `data` from `offset`; the size grows to cover them.
    pub fn write(&self, id: u64, offset: u64, data: &[u8]) {
        let mut files = self.0.lock().unwrap();
        let f = files.entry(id).or_default();
        for (i, &b) in data.iter().enumerate() {
            let at = offset + i as u64;
            f.pages.entry(at / PAGE_SIZE).or_insert_with(|| Box::new([0; PS]))[(at % PAGE_SIZE) as usize] = b;
        }
        f.size = f.size.max(offset + data.len() as u64);
    }

    /// `pread`: up to `len` bytes from `offset`, stopping at the end of the file.
    pub fn read(&self, id: u64, offset: u64, len: u64) -> Vec<u8> {
        let files = self.0.lock().unwrap();
        let Some(f) = files.get(&id) else { return Vec::new() };
        let end = f.size.min(offset.saturating_add(len));
        (offset..end).map(|at| f.pages.get(&(at / PAGE_SIZE)).map_or(0, |p| p[(at % PAGE_SIZE) as usize])).collect()
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
        f.pages.split_off(&size.div_ceil(PAGE_SIZE));
        if let Some(last) =
            (!size.is_multiple_of(PAGE_SIZE)).then_some(size / PAGE_SIZE).and_then(|i| f.pages.get_mut(&i))
        {
            last[(size % PAGE_SIZE) as usize..].fill(0);
        }
        f.size = size;
    }
}

/// The bytes and protections of one process's address space.
#[derive(Clone, Default)]
pub struct RefSpace {
    pages: BTreeMap<u64, RefPage>,
    files: RefFiles,
}

fn page_range(start: u64, len: u64) -> impl Iterator<Item = u64> {
    let end = (start + len).div_ceil(PAGE_SIZE) * PAGE_SIZE;
    (start & !(PAGE_SIZE - 1)..end).step_by(PS)
}

impl RefSpace {
    /// An empty space whose file mappings use `files`.
    pub fn with_files(files: RefFiles) -> RefSpace {
        RefSpace { pages: BTreeMap::new(), files }
    }

    /// A copy of this space whose file mappings use `files` instead.
    pub fn with_files_of(&self, files: &RefFiles) -> RefSpace {
        RefSpace { pages: self.pages.clone(), files: files.clone() }
    }

    /// A new mapping of zero pages (replacing whatever was there).
    pub fn map(&mut self, start: u64, len: u64, prot: Prot) {
        for p in page_range(start, len) {
            self.pages.insert(p, RefPage { prot: prot.0, file: None, data: None });
        }
    }

    /// A new mapping of file `file` from page `index`, shared or private.
    pub fn map_file(&mut self, start: u64, len: u64, prot: Prot, file: u64, index: u64, shared: bool) {
        for (i, p) in page_range(start, len).enumerate() {
            let backing = Backing { file, index: index + i as u64, shared };
            self.pages.insert(p, RefPage { prot: prot.0, file: Some(backing), data: None });
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

    /// MADV_DONTNEED: private pages read zero again (or the file, for a
    /// private file mapping); shared file pages keep their bytes.
    pub fn zap(&mut self, start: u64, len: u64) {
        for p in page_range(start, len) {
            if let Some(pg) = self.pages.get_mut(&p) {
                pg.data = None;
            }
        }
    }

    /// MADV_REMOVE: punches the whole pages of the range out of the shared
    /// file mapped there.
    pub fn remove(&mut self, start: u64, len: u64) {
        for p in page_range(start, len) {
            if let Some(b) = self.pages.get(&p).and_then(|pg| pg.file).filter(|b| b.shared) {
                self.files.punch(b.file, b.index * PAGE_SIZE, (b.index + 1) * PAGE_SIZE);
            }
        }
    }

    /// Truncation of `file` to `pages` pages zaps even the private copies
    /// of the pages past the end (`unmap_mapping_range(.., even_cows)`).
    pub fn truncate_file(&mut self, file: u64, pages: u64) {
        for pg in self.pages.values_mut() {
            if pg.file.is_some_and(|b| b.file == file && b.index >= pages) {
                pg.data = None;
            }
        }
    }

    /// mremap: `old_len` bytes move to `new`; a longer new range is
    /// zero-filled, or continues the file a file mapping maps.
    pub fn remap(&mut self, old: u64, old_len: u64, new: u64, new_len: u64) {
        let moved: Vec<(u64, RefPage)> =
            page_range(old, old_len).filter_map(|p| self.pages.remove(&p).map(|pg| (p, pg))).collect();
        let first = moved.first().map(|(_, p)| (p.prot, p.file));
        let (prot, file) = first.unwrap_or((0, None));
        for (i, p) in page_range(new, new_len).enumerate() {
            let file = file.map(|b| Backing { index: b.index + i as u64, ..b });
            self.pages.insert(p, RefPage { prot, file, data: None });
        }
        for (p, pg) in moved {
            if p - old < new_len {
                self.pages.insert(new + (p - old), pg);
            }
        }
    }

    /// Runs `f` on the bytes the page at `addr` reads and writes (its own,
    /// or its file's), checking the access; a write to a private page of a
    /// file first copies the file's page. SIGBUS past the end of the file.
    fn with_bytes<R>(&mut self, addr: u64, write: bool, f: impl FnOnce(&mut [u8; PS]) -> R) -> Result<R> {
        let pg = self.pages.get_mut(&(addr & !(PAGE_SIZE - 1))).ok_or(Errno::EFAULT)?;
        let need = if write { Prot::WRITE } else { Prot::READ | Prot::WRITE };
        if pg.prot & need == 0 {
            return Err(Errno::EACCES);
        }
        // Reads of bytes never written see zeros without storing any.
        let zeros = || Box::new([0; PS]);
        let Some(b) = pg.file else {
            return Ok(match (&mut pg.data, write) {
                (None, false) => f(&mut zeros()),
                (data, _) => f(data.get_or_insert_with(zeros)),
            });
        };
        let mut files = self.files.0.lock().unwrap();
        let file = files.get_mut(&b.file).ok_or(Errno::SIGBUS)?;
        if b.index >= file.size.div_ceil(PAGE_SIZE) {
            return Err(Errno::SIGBUS);
        }
        let file_page = |pages: &BTreeMap<u64, Bytes>| pages.get(&b.index).cloned().unwrap_or_else(zeros);
        Ok(match (b.shared, &mut pg.data, write) {
            (true, _, true) => f(file.pages.entry(b.index).or_insert_with(zeros)),
            (true, _, false) | (false, None, false) => f(&mut file_page(&file.pages)),
            (false, data, _) => f(data.get_or_insert_with(|| file_page(&file.pages))),
        })
    }

    /// Writes `data` at `addr`, page by page, stopping at the first page that
    /// is unmapped or not writable (as a real access would).
    pub fn write(&mut self, addr: u64, data: &[u8]) -> Result<()> {
        self.each_piece(addr, data.len() as u64, true, |d, off, pos, n| {
            d[off..off + n].copy_from_slice(&data[pos..pos + n]);
        })
    }

    pub fn fill(&mut self, addr: u64, len: u64, val: u8) -> Result<()> {
        self.each_piece(addr, len, true, |d, off, _, n| d[off..off + n].fill(val))
    }

    pub fn write_byte_per_page(&mut self, addr: u64, len: u64, val: u8) -> Result<()> {
        for p in page_range(addr, len) {
            self.with_bytes(p, true, |d| d[0] = val)?;
        }
        Ok(())
    }

    pub fn read(&mut self, addr: u64, len: u64) -> Result<Vec<u8>> {
        let mut out = vec![0; len as usize];
        self.each_piece(addr, len, false, |d, off, pos, n| out[pos..pos + n].copy_from_slice(&d[off..off + n]))?;
        Ok(out)
    }

    pub fn read_byte_per_page(&mut self, addr: u64, len: u64) -> Result<Vec<u8>> {
        page_range(addr, len).map(|p| self.with_bytes(p, false, |d| d[0])).collect()
    }

    fn each_piece(
        &mut self,
        addr: u64,
        len: u64,
        write: bool,
        mut f: impl FnMut(&mut [u8; PS], usize, usize, usize),
    ) -> Result<()> {
        let end = addr + len;
        let mut at = addr;
        while at < end {
            let next = (at / PAGE_SIZE + 1) * PAGE_SIZE;
            let n = (next.min(end) - at) as usize;
            self.with_bytes(at, write, |d| f(d, (at % PAGE_SIZE) as usize, (at - addr) as usize, n))?;
            at = next;
        }
        Ok(())
    }
}
