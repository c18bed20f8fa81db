//! Where a mapping of a shmem file goes (mm/shmem.c
//! `shmem_get_unmapped_area`): at an address whose offset within a large
//! folio size matches the file offset's, so that the file's large folios
//! can be mapped whole (by a PMD for 2 MiB ones).

use super::Inode;
use crate::arch::{PAGE_SIZE, PMD_SIZE};
use crate::folio::thp::{file_orders, ShmemHuge, ShmemMode};

impl Inode {
    /// The alignment a mapping of `len` bytes from file page `pgoff`
    /// wants, as (size, the address's offset within it), or None for no
    /// more than a page. `anonymous` is shared anonymous memory, whose
    /// size is the largest the per-size knobs may give it; a file's is
    /// 2 MiB unless its mount's `huge` is `never`. None with `deny`, for a
    /// mapping shorter than the size, or for an offset into it that leaves
    /// less than a whole aligned block.
    pub fn unmapped_area_alignment(&self, anonymous: bool, pgoff: u64, len: u64) -> Option<(u64, u64)> {
        let thp = &self.k.thp;
        let mut size = PMD_SIZE;
        match thp.shmem_enabled() {
            ShmemHuge::Deny => return None,
            ShmemHuge::Force => {}
            _ => {
                let mut order = 0;
                if anonymous {
                    let inherit = self.sb_huge() != ShmemHuge::Never;
                    let chosen = |o: &u32| match thp.shmem_order_mode(*o) {
                        ShmemMode::Always | ShmemMode::WithinSize | ShmemMode::Advise => true,
                        ShmemMode::Inherit => inherit,
                        ShmemMode::Never => false,
                    };
                    if let Some(o) = file_orders().rev().find(chosen) {
                        order = o;
                        size = PAGE_SIZE << o;
                    }
                }
                if self.sb_huge() == ShmemHuge::Never && order == 0 {
                    return None;
                }
            }
        }
        let offset = (pgoff * PAGE_SIZE) & (size - 1);
        if len < size || (offset != 0 && offset + len < 2 * size) {
            return None;
        }
        Some((size, offset))
    }
}
