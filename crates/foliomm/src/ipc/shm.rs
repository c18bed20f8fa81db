//! System V shared memory (ipc/shm.c): `shmget`, `shmat`, `shmdt`,
//! `shmctl(IPC_RMID)`, with `kernel.shm_rmid_forced` at 1, as foliomm runs
//! it so that no segment outlives its scenario: a segment is destroyed at
//! its last detach (`shm_may_destroy`), and one never attached when its
//! creator exits (`exit_shm`).
//!
//! A segment is a shmem file (`shmem_kernel_file_setup`), or with
//! `SHM_HUGETLB` a hugetlbfs file whose huge pages are all reserved when
//! the segment is made (`hugetlb_file_setup` → `hugetlb_reserve_pages`);
//! `shmat` maps it shared (`do_mmap` of the segment's file). The table
//! holds the file until the first attach, `IPC_RMID` or the creator's
//! exit; then the attaches (VMAs) hold it, and it can be attached by id
//! until the last of them goes.
//!
//! Differs from Linux: ids count from 1; no keys, permissions or
//! `shmmax`/`shmall` limits, no `SHM_REMAP`/`SHM_RND`/`SHM_NORESERVE`;
//! the attach count is what the VMAs hold.

use std::collections::BTreeMap;

use crate::arch::PAGE_SIZE;
use crate::kernel::{HugeSize, Kernel};
use crate::mm::MmapFlags;
use crate::mm_types::{Mm, MmList, Prot};
use crate::shmem::{Inode, Mount};
use crate::sync::{Arc, Mutex, Weak};
use crate::{Errno, Result};

/// One segment: its file (held by the table until removed), its size and
/// the MM that made it.
struct Segment {
    file: Weak<Inode>,
    held: Option<Arc<Inode>>,
    size: u64,
    creator: u64,
}

/// The machine's segments (the IPC namespace's `shm_ids`).
#[derive(Default)]
pub struct ShmIds {
    segs: Mutex<BTreeMap<u64, Segment>>,
}

impl ShmIds {
    /// `shmget(IPC_PRIVATE, size, IPC_CREAT [| SHM_HUGETLB])` by the MM
    /// with serial `creator`: a new segment's id. EINVAL for size 0;
    /// ENOMEM when a hugetlb segment's pages cannot all be reserved.
    pub fn shmget(
        &self,
        k: &Arc<Kernel>,
        list: &MmList,
        creator: u64,
        size: u64,
        huge: Option<HugeSize>,
    ) -> Result<u64> {
        if size == 0 || size > crate::shmem::MAX_FILE_SIZE {
            return Err(Errno::EINVAL);
        }
        let file = match huge {
            Some(h) => {
                let len = size.next_multiple_of(h.bytes());
                let inode = list.new_inode(k, len, Mount::Hugetlbfs(h))?;
                inode.hugetlb_reserve(0, len / PAGE_SIZE)?;
                inode
            }
            None => list.new_inode(k, size, Mount::Shm)?,
        };
        let mut segs = self.segs.lock().unwrap();
        let id = segs.last_key_value().map_or(1, |(id, _)| id + 1);
        segs.insert(id, Segment { file: Arc::downgrade(&file), held: Some(file), size, creator });
        Ok(id)
    }

    /// `shmat(id, NULL, readonly ? SHM_RDONLY : 0)` in `mm`: the address
    /// the whole segment is mapped shared at; from now on the attaches
    /// hold the segment. EINVAL for an id that names no segment (or one
    /// destroyed).
    pub fn shmat(&self, mm: &Mm, id: u64, readonly: bool) -> Result<u64> {
        let (file, size) = {
            let segs = self.segs.lock().unwrap();
            let s = segs.get(&id).ok_or(Errno::EINVAL)?;
            (s.file.upgrade().ok_or(Errno::EINVAL)?, s.size)
        };
        let prot = if readonly { Prot(Prot::READ) } else { Prot::RW };
        let flags = MmapFlags { shared: true, ..MmapFlags::default() };
        let addr = mm.mmap_file(0, size, prot, flags, Some((&file, 0)))?;
        let held = self.segs.lock().unwrap().get_mut(&id).and_then(|s| s.held.take());
        drop(held);
        Ok(addr)
    }

    /// `shmdt(addr)` in `mm`: unmaps the attach at `addr`: the first
    /// segment VMA at or after `addr` whose start lies at its file offset
    /// from `addr`, and the VMAs of the same file after it within the
    /// segment's size; a removed segment nothing maps any more is
    /// destroyed. EINVAL when `addr` is not page-aligned or starts no attach.
    pub fn shmdt(&self, mm: &Mm, addr: u64) -> Result<()> {
        if !addr.is_multiple_of(PAGE_SIZE) {
            return Err(Errno::EINVAL);
        }
        let size_of = |f: &Arc<Inode>| {
            let segs = self.segs.lock().unwrap();
            segs.values().find(|s| s.file.upgrade().is_some_and(|g| Arc::ptr_eq(&g, f))).map(|s| s.size)
        };
        let attach = |start: u64, pgoff: u64| start.checked_sub(addr) == Some(pgoff * PAGE_SIZE);
        let ranges: Vec<(u64, u64)> = {
            let vmas = mm.mmap_read_lock();
            let mut found: Option<(Arc<Inode>, u64)> = None;
            let mut ranges = Vec::new();
            for v in vmas.iter().filter(|v| v.end() > addr) {
                let Some(f) = v.file() else { continue };
                match &found {
                    None if attach(v.start(), v.pgoff()) => {
                        if let Some(size) = size_of(&f) {
                            found = Some((f, addr + size.next_multiple_of(PAGE_SIZE)));
                            ranges.push((v.start(), v.end()));
                        }
                    }
                    Some((g, end)) if v.start() < *end && Arc::ptr_eq(g, &f) && attach(v.start(), v.pgoff()) => {
                        ranges.push((v.start(), v.end()));
                    }
                    _ => {}
                }
            }
            ranges
        };
        if ranges.is_empty() {
            return Err(Errno::EINVAL);
        }
        for (start, end) in ranges {
            mm.munmap(start, end - start)?;
        }
        self.reap();
        Ok(())
    }

    /// `shmctl(id, IPC_RMID)`: the segment is destroyed now if nothing
    /// maps it, else at its last detach. EINVAL for an unknown id.
    pub fn rmid(&self, id: u64) -> Result<()> {
        let held = self.segs.lock().unwrap().get_mut(&id).ok_or(Errno::EINVAL)?.held.take();
        drop(held);
        self.reap();
        Ok(())
    }

    /// `exit_shm` with `shm_rmid_forced`: the segments the MM with serial
    /// `creator` made and nobody attached are destroyed.
    pub fn exit(&self, creator: u64) {
        let held: Vec<Arc<Inode>> = {
            let mut segs = self.segs.lock().unwrap();
            segs.values_mut().filter(|s| s.creator == creator).filter_map(|s| s.held.take()).collect()
        };
        drop(held);
        self.reap();
    }

    /// Forgets the removed segments whose file is gone (`shm_destroy`).
    fn reap(&self) {
        self.segs.lock().unwrap().retain(|_, s| s.held.is_some() || s.file.strong_count() > 0);
    }
}
