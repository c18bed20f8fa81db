//! Reading, writing and allocating a shmem file through its descriptor
//! (mm/shmem.c `shmem_file_read_iter`, `shmem_file_write_iter` →
//! mm/filemap.c `generic_perform_write` → `shmem_write_begin` /
//! `shmem_write_end`, and `shmem_fallocate` without `PUNCH_HOLE`).
//!
//! A read copies up to `i_size` and allocates nothing: holes read zeros. A
//! write and a fallocate allocate folios the mount's setting allows, every
//! file order for a write (`shmem_allowable_huge_orders` without a VMA),
//! the highest whose aligned block holds no cached page.
//!
//! A fallocated folio is not uptodate until written or faulted: reads and
//! `mincore` see a hole.
//!
//! Differs from Linux: a fallocated folio is zeroed at once (Linux clears
//! it when it becomes uptodate); no `RLIMIT_FSIZE`, no
//! block accounting (`ENOSPC`); a write copies page by page under the
//! cache lock rather than folio by folio under the folio lock.

use std::collections::BTreeSet;

use super::{Inode, MAX_FILE_SIZE};
use crate::arch::{Pfn, PAGE_SIZE, PMD_SIZE};
use crate::folio::Folio;
use crate::phys::pg;
use crate::{Errno, Result};

impl Inode {
    /// `pread(fd, buf, offset)`: copies the file's bytes from `offset` into
    /// `buf`, stopping at `i_size`; returns how many were read (0 at or past
    /// the end). Holes read zeros and stay holes; a page swapped out is
    /// read back in first (`shmem_get_folio(SGP_READ)`), the cache's lock
    /// taken page by page (reclaim may take what was read meanwhile). When
    /// a page cannot be read back, what was read before is returned, or
    /// ENOMEM if nothing was.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let n = self.size().saturating_sub(offset).min(buf.len() as u64) as usize;
        let mut failed = None;
        for_each_page(offset, n, |at, range| {
            if failed.is_some() {
                return;
            }
            let out = &mut buf[range.clone()];
            let index = at / PAGE_SIZE;
            let mut pages = self.pages.lock().unwrap();
            let pfn = match pages.get(&index) {
                Some(&pfn) => Some(pfn),
                None if pages.swapped.contains_key(&index) => {
                    self.swapin(&mut pages, index).map_err(|e| failed = Some((range.start, e))).ok()
                }
                None => None,
            };
            match pfn {
                Some(pfn) => self.k.phys.read_bytes(pfn, (at % PAGE_SIZE) as usize, out),
                None => out.fill(0),
            }
        });
        match failed {
            Some((0, e)) => Err(e),
            Some((done, _)) => Ok(done),
            None => Ok(n),
        }
    }

    /// `pwrite(fd, data, offset)`: copies `data` into the file from
    /// `offset`, allocating folios for holes, and extends `i_size` past the
    /// last byte written; returns the bytes written. EINVAL on hugetlbfs
    /// (it has no `write`); EFBIG past the largest file size; EPERM when a
    /// seal forbids a chunk; ENOMEM when a folio cannot be had (what was
    /// written before stays, and the size covers it).
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<usize> {
        if self.is_hugetlbfs() {
            // hugetlbfs has no write_iter.
            return Err(Errno::EINVAL);
        }
        let end = offset.checked_add(data.len() as u64).filter(|&e| e <= MAX_FILE_SIZE).ok_or(Errno::EFBIG)?;
        let _inode_lock = self.i_rwsem.lock().unwrap();
        let mut pages = self.pages.lock().unwrap();
        let mut written = 0;
        let mut result = Ok(());
        for_each_page(offset, data.len(), |at, range| {
            if result.is_err() {
                return;
            }
            // generic_perform_write() writes in chunks that end at the next
            // 2M boundary: the write end `within_size` looks at.
            let chunk_end = end.min((at / PMD_SIZE + 1) * PMD_SIZE);
            // shmem_write_begin() checks the seals once per chunk: 2M with
            // large folios (6.14 on, a mount whose huge is not never), else
            // a page.
            let chunk = if self.writes_large_folios() { PMD_SIZE } else { PAGE_SIZE };
            if at == offset || at % chunk == 0 {
                if let Err(e) = self.write_seals(end.min((at / chunk + 1) * chunk)) {
                    result = Err(e);
                    return;
                }
            }
            let orders = self.write_orders(at / PAGE_SIZE, chunk_end.div_ceil(PAGE_SIZE));
            match self.find_or_add(&mut pages, at / PAGE_SIZE, orders, false) {
                Ok((_, pfn)) => {
                    self.k.phys.write_bytes(pfn, (at % PAGE_SIZE) as usize, &data[range.clone()]);
                    Folio::containing(&self.k.phys, pfn).head().set(pg::DIRTY);
                    written = range.end;
                }
                Err(e) => result = Err(e),
            }
        });
        drop(pages);
        // shmem_write_end(): the size grows to the last byte copied.
        let new_end = offset + written as u64;
        if new_end > self.size() {
            self.set_size(new_end)?;
        }
        match result {
            Err(e) if written == 0 => Err(e),
            _ => Ok(written),
        }
    }

    /// `fallocate(fd, keep_size ? FALLOC_FL_KEEP_SIZE : 0, offset, len)`:
    /// every hole of the range gets a zeroed, dirty folio; without
    /// `keep_size` the size grows to cover the range. EINVAL for an empty
    /// range, EFBIG past the largest file size, EPERM where `F_SEAL_GROW`
    /// forbids it; on ENOMEM the folios this
    /// call added leave again and the size stays
    /// (`shmem_undo_range(unfalloc)`).
    pub fn fallocate(&self, offset: u64, len: u64, keep_size: bool) -> Result<()> {
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let end = offset.checked_add(len).filter(|&e| e <= MAX_FILE_SIZE).ok_or(Errno::EFBIG)?;
        self.fallocate_seals(false, end)?;
        if self.is_hugetlbfs() {
            return self.hugetlb_fallocate(offset, end, keep_size);
        }
        let _inode_lock = self.i_rwsem.lock().unwrap();
        let mut pages = self.pages.lock().unwrap();
        let (mut index, last) = (offset / PAGE_SIZE, end.div_ceil(PAGE_SIZE));
        let mut added: Vec<Pfn> = Vec::new();
        while index < last {
            let orders = self.write_orders(index, last);
            match self.find_or_add(&mut pages, index, orders, true) {
                Ok((new, pfn)) => {
                    let f = Folio::containing(&self.k.phys, pfn);
                    if new {
                        added.push(f.pfn);
                    }
                    index += f.nr_pages() - (pfn - f.pfn);
                }
                Err(e) => {
                    // Nothing could take them: the cache lock was held.
                    let undo: BTreeSet<Pfn> = added.into_iter().collect();
                    pages.retain(|_, &mut p| !undo.contains(&Folio::containing(&self.k.phys, p).pfn));
                    drop(pages);
                    undo.into_iter().for_each(|head| self.remove_from_cache(head));
                    return Err(e);
                }
            }
        }
        drop(pages);
        if !keep_size && end > self.size() {
            self.set_size(end)?;
        }
        Ok(())
    }
}

/// Calls `f` for each page-sized piece of the `len` bytes from `offset`:
/// with the piece's file offset and its range within the buffer.
fn for_each_page(offset: u64, len: usize, mut f: impl FnMut(u64, std::ops::Range<usize>)) {
    let mut done = 0;
    while done < len {
        let at = offset + done as u64;
        let n = ((PAGE_SIZE - at % PAGE_SIZE) as usize).min(len - done);
        f(at, done..done + n);
        done += n;
    }
}
