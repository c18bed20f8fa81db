//! What `fstat` and `lseek(SEEK_DATA / SEEK_HOLE)` tell of a shmem or
//! hugetlbfs file (mm/shmem.c `shmem_getattr`, `shmem_file_llseek` →
//! mm/filemap.c `mapping_seek_hole_data`; fs/read_write.c
//! `default_llseek` for hugetlbfs), and `unlink` of a named tmpfs file.
//!
//! Differs from Linux: `st_blocks` counts the cached pages (8 blocks of
//! 512 bytes each), which is what `i_blocks` holds without swap and
//! without quota.

use super::Inode;
use crate::arch::PAGE_SIZE;
use crate::folio::Folio;
use crate::phys::pg;
use crate::sync::atomic::Ordering::Relaxed;
use crate::{Errno, Result};

/// Whence of [`Inode::seek`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seek {
    /// `SEEK_DATA`: the first byte at or after the offset that is data.
    Data,
    /// `SEEK_HOLE`: the first byte at or after the offset in a hole (the
    /// end of the file is one).
    Hole,
}

impl Inode {
    /// `st_blocks`: 512-byte blocks allocated to the file (`i_blocks`,
    /// raised per page added to the cache, huge pages whole, and kept for
    /// a page swapped out).
    pub fn blocks(&self) -> u64 {
        let pages = self.pages.lock().unwrap();
        (pages.len() + pages.swapped.len()) as u64 * (PAGE_SIZE / 512)
    }

    /// `st_nlink`: 1 for a named tmpfs file until it is unlinked; 0 for a
    /// memfd, an `O_TMPFILE` file and hugetlbfs memfds (`clear_nlink`).
    pub fn nlink(&self) -> u32 {
        self.nlink.load(Relaxed)
    }

    /// `unlink` of the file's name (`shmem_unlink`): ENOENT when it has
    /// none. The file lives on while a descriptor or a mapping holds it.
    pub fn unlink(&self) -> Result<()> {
        self.nlink.compare_exchange(1, 0, Relaxed, Relaxed).map(|_| ()).map_err(|_| Errno::ENOENT)
    }

    /// `lseek(fd, offset, whence)` for `SEEK_DATA` or `SEEK_HOLE`: ENXIO at
    /// or past `i_size`, and for `SEEK_DATA` when only holes follow. On
    /// shmem a page is data when its folio is cached and uptodate (a
    /// fallocated folio never written is a hole: `folio_seek_hole_data`
    /// without `is_partially_uptodate`), or swapped out; on hugetlbfs the whole file is
    /// data (`default_llseek`).
    pub fn seek(&self, offset: u64, whence: Seek) -> Result<u64> {
        let size = self.size();
        if offset >= size {
            return Err(Errno::ENXIO);
        }
        if self.is_hugetlbfs() {
            return Ok(if whence == Seek::Data { offset } else { size });
        }
        let pages = self.pages.lock().unwrap();
        let is_data = |index: u64| {
            let uptodate = |&pfn: &_| Folio::containing(&self.k.phys, pfn).head().test(pg::UPTODATE);
            pages.get(&index).is_some_and(uptodate) || pages.swapped.contains_key(&index)
        };
        let found = (offset / PAGE_SIZE..size.div_ceil(PAGE_SIZE)).find(|&i| is_data(i) == (whence == Seek::Data));
        match (found, whence) {
            (Some(index), _) => Ok((index * PAGE_SIZE).clamp(offset, size)),
            (None, Seek::Hole) => Ok(size),
            (None, Seek::Data) => Err(Errno::ENXIO),
        }
    }
}
