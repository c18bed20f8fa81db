//! MM IDs (`mm_id_t`, kernel/fork.c `mm_alloc_id` / `mm_free_id`): the small
//! numbers folios record for the address spaces that map them.

use std::collections::BTreeSet;

use crate::sync::Mutex;
use crate::Errno;

/// An address space's identity in folio slots (`mm_id_t`; 0 is `MM_ID_DUMMY`).
pub type MmId = u32;

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
