//! MM IDs (`mm_id_t`, kernel/fork.c `mm_alloc_id` / `mm_free_id`): the small
//! numbers folios record for the address spaces that map them.

use std::cell::Cell;
use std::collections::BTreeSet;

use super::construction::{Construction, Values};
use crate::sync::cacheline;
use crate::sync::sim::{self, Work};
use crate::sync::structure::Structure;
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

    /// The line of the MM's sub-IDs: a line of their own in its
    /// `mm_struct`, in a synthetic slab. Where the RFC put them in the
    /// structure foliomm does not know; a line no other member shares is
    /// the MM variant's best case.
    fn line(&self) -> usize {
        MM_SUBIDS + self.id as usize * MM_STRIDE
    }

    /// Accounts `mm_alloc_rmap_id`'s write of the sub-IDs as the MM is
    /// made (on the forking CPU).
    pub(super) fn account_init(&self) {
        cacheline::access_at(Structure::MmRmapIds, self.line(), true);
    }

    /// The sub-IDs for a folio of `order` (at most 9), read from the MM as
    /// the rmap code does from patch 11 on.
    pub(super) fn read_subids(&self, order: u32) -> &[u64] {
        cacheline::access_at(Structure::MmRmapIds, self.line(), false);
        self.subids(order)
    }
}

/// The synthetic slab of `mm_struct`s and its stride; its base, and the
/// per-CPU area's, sit apart from the VMA slabs' and the inodes' in the
/// non-simulated owner table (at other offsets modulo its 64 MiB span).
const MM_SUBIDS: usize = 0xffff_8880_0300_0000;
const MM_STRIDE: usize = 2048;
/// The synthetic per-CPU area: a CPU's copy of sub-IDs at its offset.
const PERCPU_SUBIDS: usize = 0xffff_8881_0380_0000;
const PERCPU_STRIDE: usize = 1 << 18;

thread_local! {
    /// This CPU's copy of the sub-IDs of the MM it last updated a folio
    /// for (stage `all-percpu`): in practice the current task's MM.
    static PERCPU: Cell<Option<RmapMm>> = const { Cell::new(None) };
}

/// Stage `all-percpu` (seed 000's "pre-calculating the sub-IDs ... in a
/// pcpu variable"): `mm`'s sub-IDs for a folio of `order` (at most 9),
/// read from this CPU's copy, which `calc_rmap_subid` refills first when
/// it holds another MM's (a fork's copy of the child's mappings, an
/// exit's unmapping on another CPU). Keyed by the MM ID, the copy is
/// right even for an ID reused after an exit; under loom and shuttle,
/// whose threads share one OS thread, it is simply refilled more often.
pub(super) fn percpu_subids(mm: &RmapMm, order: u32) -> Values {
    let cpu = sim::cpu().unwrap_or(cacheline::cpu() as usize);
    let line = PERCPU_SUBIDS + cpu * PERCPU_STRIDE;
    let copy = PERCPU.get().filter(|c| c.id == mm.id).unwrap_or_else(|| {
        sim::work(Work::SubIds);
        let fresh = RmapMm::new(mm.id);
        cacheline::access_at(Structure::MmRmapIds, line, true);
        PERCPU.set(Some(fresh));
        fresh
    });
    cacheline::access_at(Structure::MmRmapIds, line, false);
    Values::from(copy.subids(order))
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

    #[test]
    fn a_per_cpu_copy_gives_each_mm_its_own_sub_ids() {
        // Alternating MMs refill the copy; each read is its MM's.
        for id in [5, 0x1234, 5, 5, (1 << 24) - 1, 0x1234] {
            let mm = RmapMm::new(id);
            for order in [2, 5, 9] {
                assert_eq!(&*percpu_subids(&mm, order), mm.subids(order), "MM {id:#x}, order {order}");
            }
        }
    }
}
