//! File seals of a memfd (mm/memfd.c `memfd_add_seals`,
//! `memfd_check_seals_mmap`, `memfd_get_seals`) and the checks every path
//! that changes a sealed file makes: `shmem_setattr` and
//! `hugetlbfs_setattr` (size), `shmem_write_begin` (write),
//! `shmem_fallocate` and `hugetlbfs_fallocate` (allocate, punch), and
//! mmap's (`VM_MAYWRITE`).
//!
//! Every modelled release treats `F_SEAL_WRITE` as 6.7 does (only shared
//! mappings that may become writable count against it, and a write-sealed
//! memfd can be mapped shared read-only: "mm: update memfd seal write check
//! to include F_SEAL_WRITE" and "mm: reinstate ability to map write-sealed
//! memfd mappings read-only"): the 6.1 stable series took both in July
//! 2025, and the Debian 6.1.0-47 guest behaves so.
//!
//! Differs from Linux: no `F_SEAL_EXEC`; adding `F_SEAL_WRITE` does not
//! wait for pinned pages (`memfd_wait_for_pins`); every memfd is made with
//! `MFD_ALLOW_SEALING`. The linked VMAs stand in for `i_mmap_writable`,
//! so an mmap that passed its seal check before `F_SEAL_WRITE` was added
//! may still link a writable mapping after (Linux's counter, raised before
//! the link, refuses it).

use super::Inode;
use crate::sync::atomic::Ordering::Relaxed;
use crate::{Errno, Result};

/// `F_SEAL_SEAL`: no seal can be added any more.
pub const SEAL_SEAL: u32 = 1;
/// `F_SEAL_SHRINK`: the size cannot go down.
pub const SEAL_SHRINK: u32 = 2;
/// `F_SEAL_GROW`: the size cannot go up.
pub const SEAL_GROW: u32 = 4;
/// `F_SEAL_WRITE`: the contents cannot change (no writable shared mapping
/// may exist when it is added).
pub const SEAL_WRITE: u32 = 8;
/// `F_SEAL_FUTURE_WRITE`: no new way to write; writable shared mappings
/// made before keep writing.
pub const SEAL_FUTURE_WRITE: u32 = 0x10;
/// Every seal the model knows.
pub const ALL_SEALS: u32 = SEAL_SEAL | SEAL_SHRINK | SEAL_GROW | SEAL_WRITE | SEAL_FUTURE_WRITE;

/// Seals by their lowercase `F_SEAL_*` suffix, as scenarios write them.
pub const SEAL_NAMES: [(&str, u32); 5] = [
    ("seal", SEAL_SEAL),
    ("shrink", SEAL_SHRINK),
    ("grow", SEAL_GROW),
    ("write", SEAL_WRITE),
    ("future_write", SEAL_FUTURE_WRITE),
];

impl Inode {
    /// `fcntl(F_GET_SEALS)`.
    pub fn seals(&self) -> u32 {
        self.seals.load(Relaxed)
    }

    /// `fcntl(F_ADD_SEALS, seals)` (`memfd_add_seals`): EINVAL for an
    /// unknown seal; EPERM once `F_SEAL_SEAL` is set (a tmpfs file that is
    /// no memfd starts with it); EBUSY when `F_SEAL_WRITE` is asked while a
    /// shared mapping may write (`mapping_deny_writable`).
    pub fn add_seals(&self, seals: u32) -> Result<()> {
        if seals & !ALL_SEALS != 0 {
            return Err(Errno::EINVAL);
        }
        let _inode_lock = self.i_rwsem.lock().unwrap();
        let now = self.seals();
        if now & SEAL_SEAL != 0 {
            return Err(Errno::EPERM);
        }
        if seals & SEAL_WRITE != 0 && now & SEAL_WRITE == 0 && self.writably_mapped() {
            return Err(Errno::EBUSY);
        }
        self.seals.store(now | seals, Relaxed);
        Ok(())
    }

    /// Whether a shared mapping that may become writable maps the file
    /// (`i_mmap_writable > 0`, counted by `is_shared_maywrite`).
    fn writably_mapped(&self) -> bool {
        self.i_mmap.read().iter().any(|m| m.shared_maywrite)
    }

    /// The seal check of `mmap`: returns whether the mapping loses
    /// `VM_MAYWRITE` (a shared mapping of a write-sealed file; mprotect
    /// cannot make it writable); EPERM for a shared writable mapping of
    /// one (`memfd_check_seals_mmap`).
    pub(crate) fn mmap_seals(&self, shared: bool, write: bool) -> Result<bool> {
        let sealed = self.seals() & (SEAL_WRITE | SEAL_FUTURE_WRITE) != 0;
        match (shared && sealed, write) {
            (true, true) => Err(Errno::EPERM),
            (sealed, _) => Ok(sealed),
        }
    }

    /// The seal check of a size change to `size` (`shmem_setattr`,
    /// `hugetlbfs_setattr`): EPERM when `F_SEAL_SHRINK` or `F_SEAL_GROW`
    /// forbids it.
    pub(crate) fn resize_seals(&self, size: u64) -> Result<()> {
        let (seals, now) = (self.seals(), self.size());
        if (size < now && seals & SEAL_SHRINK != 0) || (size > now && seals & SEAL_GROW != 0) {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// The seal check of a write whose chunk ends at `end`
    /// (`shmem_write_begin`): EPERM when write-sealed, or when `F_SEAL_GROW`
    /// is set and the chunk ends past `i_size`.
    pub(crate) fn write_seals(&self, end: u64) -> Result<()> {
        let seals = self.seals();
        if seals & (SEAL_WRITE | SEAL_FUTURE_WRITE) != 0 || (seals & SEAL_GROW != 0 && end > self.size()) {
            return Err(Errno::EPERM);
        }
        Ok(())
    }

    /// The seal check of a fallocate ending at `end` (`shmem_fallocate`,
    /// `hugetlbfs_fallocate`): a hole punch is EPERM when write-sealed, an
    /// allocation when `F_SEAL_GROW` is set and it ends past `i_size`
    /// (with `FALLOC_FL_KEEP_SIZE` too).
    pub(crate) fn fallocate_seals(&self, punch: bool, end: u64) -> Result<()> {
        let seals = self.seals();
        let refused = match punch {
            true => seals & (SEAL_WRITE | SEAL_FUTURE_WRITE) != 0,
            false => seals & SEAL_GROW != 0 && end > self.size(),
        };
        if refused {
            return Err(Errno::EPERM);
        }
        Ok(())
    }
}
