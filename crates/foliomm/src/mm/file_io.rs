//! Reading, writing and fallocating a shmem file as a system call does
//! (mm/shmem.c `shmem_file_read_iter`, `shmem_write_begin`,
//! `shmem_fallocate`): the file's own work ([`Inode::read`],
//! [`Inode::write`], [`Inode::fallocate`]) with reclaim when a folio
//! cannot be had.
//!
//! Differs from Linux: the allocation happens under the file's cache
//! lock, which reclaim of the file's own folios needs, so a call that runs
//! out of memory returns ENOMEM, reclaim runs, and the call is made again
//! from where it stopped (a whole `fallocate` again: it undid its part);
//! Linux reclaims inside the allocation.

use crate::memory::vmscan::retry_after_reclaim;
use crate::mm_types::MmList;
use crate::shmem::Inode;
use crate::sync::Arc;
use crate::Result;

impl MmList {
    /// `pread(fd, buf, offset)` ([`Inode::read`]), with reclaim for the
    /// pages it reads back from swap: a read cut short goes on from where
    /// it stopped after reclaim, until the end of the file or an error
    /// that reclaim does not cure.
    pub fn pread(&self, inode: &Arc<Inode>, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match retry_after_reclaim(&inode.k, self, || inode.read(offset + done as u64, &mut buf[done..])) {
                Ok(n) if n > 0 => done += n,
                Err(e) if done == 0 => return Err(e),
                _ => break,
            }
        }
        Ok(done)
    }

    /// `pwrite(fd, data, offset)` ([`Inode::write`]), with reclaim for the
    /// folios it adds: a write cut short by ENOMEM goes on from where it
    /// stopped after reclaim; one cut short otherwise (a seal) or failing
    /// again returns what was written, or the error if nothing was.
    pub fn pwrite(&self, inode: &Arc<Inode>, offset: u64, data: &[u8]) -> Result<usize> {
        let mut done = 0;
        while done < data.len() {
            match retry_after_reclaim(&inode.k, self, || inode.write(offset + done as u64, &data[done..])) {
                Ok(n) if n > 0 => done += n,
                Err(e) if done == 0 => return Err(e),
                _ => break,
            }
        }
        Ok(done)
    }

    /// `fallocate(fd, keep_size ? FALLOC_FL_KEEP_SIZE : 0, offset, len)`
    /// ([`Inode::fallocate`]), with reclaim for the folios it adds.
    pub fn fallocate(&self, inode: &Arc<Inode>, offset: u64, len: u64, keep_size: bool) -> Result<()> {
        retry_after_reclaim(&inode.k, self, || inode.fallocate(offset, len, keep_size))
    }
}
