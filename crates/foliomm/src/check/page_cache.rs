//! shmem page caches against the folios they hold: each cached page is part
//! of an allocated, swap-backed, non-anon folio whose mapping names the
//! inode, held by one cache at consecutive indexes from an aligned one; an
//! index holds a page or a swap entry, not both.

use std::collections::HashMap;

use super::{Subject, Violation, ViolationKind::PageCache};
use crate::arch::Pfn;
use crate::folio::Folio;
use crate::kernel::Kernel;
use crate::phys::pg;
use crate::shmem::Inode;
use crate::sync::atomic::Ordering::Relaxed;
use crate::sync::Arc;

/// Checks every inode's cache; returns each cached folio head with the
/// inode and the index of its first page.
pub(super) fn check_page_caches(
    m: &Kernel,
    inodes: &[Arc<Inode>],
    bad: &mut Vec<Violation>,
) -> HashMap<Pfn, (u64, u64)> {
    let mut cached = HashMap::new();
    for inode in inodes {
        for (index, pfn) in inode.cached() {
            let f = Folio::containing(&m.phys, pfn);
            let head = f.head();
            let ino = inode.ino;
            let mut push = |what| bad.push(Violation::new(PageCache, Subject::Folio(f.pfn), what));
            if f.refcount() <= 0 || head.test(pg::BUDDY) || head.test(pg::TABLE) {
                push(format!("inode {ino}: index {index} holds pfn {pfn:#x}, which is not an allocated folio"));
                continue;
            }
            let kind = if inode.is_hugetlbfs() { pg::HUGETLB } else { pg::SWAPBACKED };
            if f.test_anon() || !head.test(kind) || head.link.load(Relaxed) != ino {
                push(format!("inode {ino}: folio {:#x} at index {index} is not a shmem folio of this inode", f.pfn));
            }
            // The folio's first index: its pages sit at consecutive indexes
            // from an index aligned to its size.
            let first = index - (pfn - f.pfn);
            if !first.is_multiple_of(f.nr_pages()) {
                push(format!(
                    "inode {ino}: folio {:#x} of order {} starts at unaligned index {first}",
                    f.pfn,
                    f.order()
                ));
            }
            match cached.insert(f.pfn, (ino, first)) {
                Some(prev) if prev != (ino, first) => {
                    let (other, at) = prev;
                    push(format!("folio {:#x} is cached by inode {ino} at {first} and by inode {other} at {at}", f.pfn))
                }
                _ => {}
            }
        }
        let resident: HashMap<u64, Pfn> = inode.cached().into_iter().collect();
        for (index, e) in inode.swapped() {
            if let Some(pfn) = resident.get(&index) {
                let what = format!("inode {}: index {index} holds pfn {pfn:#x} and swap slot {}", inode.ino, e.offset);
                bad.push(Violation::new(PageCache, Subject::Folio(*pfn), what));
            }
        }
    }
    cached
}
