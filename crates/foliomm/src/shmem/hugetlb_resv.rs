//! A private hugetlb mapping's reservation map (mm/hugetlb.c: the
//! `struct resv_map` a `MAP_PRIVATE` hugetlb VMA keeps in `vm_private_data`
//! with `HPAGE_RESV_OWNER`).
//!
//! The mmap that made the mapping promised every huge page of its range
//! (`hugetlb_reserve_pages`). For a private mapping the map records the
//! opposite of a shared one's: a huge page *in* the map has had its
//! reservation consumed by a fault (`vma_commit_reservation`); one not in
//! it is still promised. The VMA pieces a split makes share the map; a
//! child's copy at fork has none (`hugetlb_dup_vma_private`).
//!
//! Differs from Linux: no subpool or cgroup charges.
#![warn(missing_docs)]

use std::collections::BTreeSet;

use crate::kernel::HugeSize;
use crate::sync::Mutex;

/// The reservation map of a private hugetlb mapping's owner.
#[derive(Debug)]
pub struct PrivateResv {
    /// The size of the mapping's huge pages.
    pub size: HugeSize,
    /// The first file page index of each huge page whose reservation a
    /// fault consumed.
    consumed: Mutex<BTreeSet<u64>>,
}

impl PrivateResv {
    /// A map promising every huge page of the mapping (none consumed).
    pub fn new(size: HugeSize) -> PrivateResv {
        PrivateResv { size, consumed: Mutex::default() }
    }

    /// `vma_needs_reservation` turned around: true if the huge page at file
    /// index `first` still has its reservation.
    pub fn reserved(&self, first: u64) -> bool {
        !self.consumed.lock().unwrap().contains(&first)
    }

    /// `vma_commit_reservation`: the huge page at `first` was allocated for
    /// the mapping; its reservation, if it had one, is used up.
    pub fn commit(&self, first: u64) {
        self.consumed.lock().unwrap().insert(first);
    }

    /// `vma_add_reservation` after a zap: the huge page at `first` is
    /// promised again. Returns true if its reservation had been consumed.
    pub fn restore(&self, first: u64) -> bool {
        self.consumed.lock().unwrap().remove(&first)
    }

    /// `hugetlb_vm_op_close`'s count: the huge pages of file indexes
    /// `first..last` whose reservation no fault consumed.
    pub fn unconsumed(&self, first: u64, last: u64) -> u64 {
        let step = self.size.pages();
        let consumed = self.consumed.lock().unwrap().range(first..last).count() as u64;
        (last - first).div_ceil(step) - consumed
    }
}
