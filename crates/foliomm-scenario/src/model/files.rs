//! The model backend's file operations: files by handle, the descriptors
//! each process holds, names, seals, and what `observe FILE[OFF]` reports.

use std::collections::HashSet;
use std::sync::Arc;

use foliomm::internals::arch::PAGE_SIZE;
use foliomm::internals::mm::split_huge_pages::split_huge_pages_in_file;
use foliomm::internals::shmem::stat::Seek;
use foliomm::internals::shmem::Inode;

use super::{done, ModelBackend};
use crate::backend::Thread;
use crate::error::{BackendResult, Machinery};
use crate::observation::{FileInfo, Observation};
use crate::op::{FileKind, Op, Reply};

impl ModelBackend {
    /// Performs a file operation of thread `t` (any other `Op` is the
    /// caller's mistake).
    pub(super) fn file_op(&self, t: Thread, op: Op) -> BackendResult<Reply> {
        let m = self.m();
        Ok(match op {
            Op::CreateFile { kind, size } => {
                let inode = match kind {
                    FileKind::Memfd => m.memfd_create(size)?,
                    FileKind::Tmpfs { huge, named } => m.tmpfs_create(size, huge, named)?,
                    FileKind::Hugetlbfs(page) => m.hugetlbfs_create(size, page)?,
                };
                let h = inode.ino;
                self.files.lock().unwrap().insert(h, inode);
                if let Some(p) = self.procs.write().unwrap().get_mut(t.proc) {
                    p.fds.insert(h);
                }
                Reply::Value(h)
            }
            Op::Close { file } => {
                let held = self.procs.write().unwrap().get_mut(t.proc).is_some_and(|p| p.fds.remove(&file));
                if !held {
                    return Err(Machinery::NoFile(file).into());
                }
                self.release([file]);
                Reply::Done
            }
            Op::Unlink { file } => {
                self.file(file)?.unlink()?;
                self.release([file]);
                Reply::Done
            }
            Op::AddSeals { file, seals } => done(self.file(file)?.add_seals(seals))?,
            Op::Ftruncate { file, size } => done(m.ftruncate(&self.file(file)?, size))?,
            Op::PunchHole { file, offset, len } => done(m.punch_hole(&self.file(file)?, offset, len))?,
            Op::Fallocate { file, offset, len, keep_size } => {
                done(m.mms.fallocate(&self.file(file)?, offset, len, keep_size))?
            }
            Op::Pwrite { file, offset, data } => Reply::Value(m.mms.pwrite(&self.file(file)?, offset, &data)? as u64),
            Op::SplitFile { file, offset, len, order, at } => {
                let pages = (offset / PAGE_SIZE, (offset + len).div_ceil(PAGE_SIZE));
                let inode = self.file(file)?;
                split_huge_pages_in_file(&m.kernel, &m.mms, &inode, pages, order, at);
                Reply::Done
            }
            Op::Pread { file, offset, len } => {
                let mut buf = vec![0; len as usize];
                let n = m.mms.pread(&self.file(file)?, offset, &mut buf)?;
                buf.truncate(n);
                Reply::Bytes(buf)
            }
            Op::ObserveFile { file, offset } => Reply::Observed(Box::new(self.observe_file(file, offset)?)),
            op => unreachable!("not a file operation: {op:?}"),
        })
    }

    /// The file behind handle `h`.
    pub(super) fn file(&self, h: u64) -> BackendResult<Arc<Inode>> {
        let files = self.files.lock().unwrap();
        Ok(files.get(&h).cloned().ok_or(Machinery::NoFile(h))?)
    }

    /// Lets go of the files of `fds` that no process holds a descriptor of
    /// and that have no name any more (`fput` of the last descriptor,
    /// `iput` of an unlinked inode; a file also mapped lives on until its
    /// last mapping goes).
    pub(super) fn release(&self, fds: impl IntoIterator<Item = u64>) {
        let held: HashSet<u64> = self.procs.read().unwrap().values().flat_map(|p| p.fds.iter().copied()).collect();
        let gone: Vec<Arc<Inode>> = {
            let mut files = self.files.lock().unwrap();
            let unused = |h: &u64| !held.contains(h) && files.get(h).is_some_and(|f| f.nlink() == 0);
            let gone: Vec<u64> = fds.into_iter().filter(unused).collect();
            gone.iter().filter_map(|h| files.remove(h)).collect()
        };
        drop(gone);
    }

    /// The file's page at `offset` in the page cache, and the file's
    /// `fstat`, seals and `SEEK_DATA`/`SEEK_HOLE` from `offset`.
    fn observe_file(&self, file: u64, offset: u64) -> BackendResult<Observation> {
        let inode = self.file(file)?;
        let mut o = Observation::default();
        if let Some((f, pfn)) = inode.get_cached(offset / PAGE_SIZE) {
            o.page.present = true;
            o.page.pfn = pfn;
            o.page.folio_order = f.order();
            o.byte = self.m().kernel.phys.read_byte(pfn, (offset % PAGE_SIZE) as usize);
            self.m().kernel.folio_put_refs(f, 1);
        }
        let size = inode.size();
        // ENXIO (the only error) reads as the size.
        let seek = |whence| inode.seek(offset, whence).unwrap_or(size);
        o.file = FileInfo {
            size,
            blocks: inode.blocks(),
            nlink: inode.nlink() as u64,
            seals: inode.seals() as u64,
            seek_data: seek(Seek::Data),
            seek_hole: seek(Seek::Hole),
        };
        Ok(o)
    }
}
