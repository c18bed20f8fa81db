//! MM IDs (`mm_id_t`, kernel/fork.c `mm_alloc_id` / `mm_free_id`): the small
//! numbers folios record for the address spaces that map them.

use std::collections::BTreeSet;

use super::construction::Construction;
use crate::sync::Mutex;
use crate::Errno;

/// An address space's identity in folio slots (`mm_id_t`; 0 is `MM_ID_DUMMY`).
pub type MmId = u32;

/// An MM as the rmap code sees it (`vma->vm_mm`): its ID, and the rmap
/// sub-IDs seed 000's patch 11 computes once per MM (`mm_rmap_subid_1`,
/// `_2[2]`, `_3[3]`, by `calc_rmap_subid`) for folios up to order 9.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RmapMm {
    /// The MM's `mm_id`.
    pub id: MmId,
    subids: [u64; 6],
}

impl RmapMm {
    /// `mm_alloc_rmap_id`: the MM with ID `id`, its sub-IDs computed.
    pub fn new(id: MmId) -> RmapMm {
        let mut subids = [0; 6];
        let all = [2, 5, 9].into_iter().flat_map(|order| Construction::SeedSubIds.values(id as u64, order).to_vec());
        subids.iter_mut().zip(all).for_each(|(s, v)| *s = v);
        RmapMm { id, subids }
    }

    /// The precomputed sub-IDs for a folio of `order` (at most 9).
    pub(super) fn subids(&self, order: u32) -> &[u64] {
        match order {
            0..=2 => &self.subids[..1],
            3..=5 => &self.subids[1..3],
            _ => &self.subids[3..],
        }
    }
}

/// The ID allocator (`mm_ida`): the lowest free ID from `MM_ID_MIN` up to a
/// limit.
pub struct MmIds {
    /// Freed IDs, and the next never-used one.
    state: Mutex<(BTreeSet<MmId>, MmId)>,
    max: MmId,
}

impl MmIds {
    /// An allocator handing out IDs `1..=max`.
    pub fn new(max: MmId) -> MmIds {
        MmIds { state: Mutex::new((BTreeSet::new(), 1)), max }
    }

    /// Allocates the lowest free ID (`ida_alloc_range`); ENOMEM when all are
    /// taken, which fails the `mm_alloc` (and so the fork) that asked.
    pub fn alloc(&self) -> Result<MmId, Errno> {
        let mut ids = self.state.lock().unwrap();
        if let Some(id) = ids.0.pop_first() {
            return Ok(id);
        }
        if ids.1 > self.max {
            return Err(Errno::ENOMEM);
        }
        ids.1 += 1;
        Ok(ids.1 - 1)
    }

    /// Returns `id` for reuse (`mm_free_id`).
    pub fn free(&self, id: MmId) {
        self.state.lock().unwrap().0.insert(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precomputed_sub_ids_are_the_calculated_ones() {
        for id in [1, 2, 0xff, 0x1234, 0xabcdef, (1 << 24) - 1] {
            let mm = RmapMm::new(id);
            for order in 2..=9 {
                let want = Construction::SeedSubIds.values(id as u64, order);
                assert_eq!(mm.subids(order), &*want, "MM {id:#x}, order {order}");
            }
        }
        assert_ne!(RmapMm::new(1), RmapMm::new(2));
    }
}
