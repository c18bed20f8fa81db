//! MADV_REMOVE in the reference model, and the mlock state it depends on.
//!
//! `madvise_walk_vmas` visits the range's VMAs in address order, and
//! `madvise_remove` punches each one's part of its file
//! (`vfs_fallocate(FALLOC_FL_PUNCH_HOLE)`) or refuses it: EINVAL for an
//! mlocked VMA (`VM_LOCKED`) or one with no file, EACCES for one that is
//! not a shared writable mapping (`vma_is_shared_maywrite`). A refusal
//! ends the walk, so the VMAs before it stay punched. The reference knows
//! runs, not VMAs, and of `VM_MAYWRITE` only that a shared mapping has it
//! (a write-sealed memfd's read-only shared mapping does not).

use std::ops::Range;

use super::reference::{page_range, Mapping, RefSpace};
use crate::arch::PAGE_SIZE;

impl RefSpace {
    /// mlock (`on`) or munlock of every run of the range (`mlock_fixup`).
    pub fn lock(&mut self, start: u64, len: u64, on: bool) {
        for (range, m) in self.runs(&page_range(start, len)) {
            self.maps.insert(range, Mapping { locked: on, ..m });
        }
    }

    /// An mlock or munlock that failed with ENOMEM at a hole: the runs
    /// before the hole changed (`apply_vma_lock_flags` fixes each VMA up
    /// before it looks at the next).
    pub fn lock_until_hole(&mut self, start: u64, len: u64, on: bool) {
        self.lock(start, self.mapped_prefix(start, len), on);
    }

    /// The child's copy at fork: no mapping of it is locked (`dup_mmap`
    /// clears `VM_LOCKED`).
    pub fn unlock_all(&mut self) {
        let locked: Vec<_> = self.maps.iter().filter(|(_, m)| m.locked).map(|(r, m)| (r.clone(), *m)).collect();
        for (range, m) in locked {
            self.maps.insert(range, Mapping { locked: false, ..m });
        }
    }

    /// MADV_REMOVE that punched every run it met (it succeeded, or met a
    /// hole: ENOMEM); returns each hole as (file, byte range).
    pub fn remove(&mut self, start: u64, len: u64) -> Vec<(u64, Range<u64>)> {
        self.punch_runs(self.runs(&page_range(start, len)))
    }

    /// MADV_REMOVE that a VMA refused (EINVAL or EACCES): the runs before
    /// the first one the reference knows `madvise_remove` refuses are
    /// punched. Where it knows none, the refusal came before the walk (or
    /// from `VM_MAYWRITE`, which it does not track) and none is punched.
    pub fn remove_until_refused(&mut self, start: u64, len: u64) -> Vec<(u64, Range<u64>)> {
        let runs = self.runs(&page_range(start, len));
        let Some(refused) = runs.iter().position(|(_, m)| m.locked || !m.file.is_some_and(|b| b.shared)) else {
            return Vec::new();
        };
        self.punch_runs(runs.into_iter().take(refused).collect())
    }

    /// Punches the file pages of shared file mappings `runs` map.
    fn punch_runs(&mut self, runs: Vec<(Range<u64>, Mapping)>) -> Vec<(u64, Range<u64>)> {
        let mut holes = Vec::new();
        for (range, m) in runs {
            if let Some(b) = m.file.filter(|b| b.shared) {
                let (first, end) = (b.index(range.start), b.index(range.end - PAGE_SIZE) + 1);
                self.files.punch(b.file, first * PAGE_SIZE, end * PAGE_SIZE);
                holes.push((b.file, first * PAGE_SIZE..end * PAGE_SIZE));
            }
        }
        holes
    }
}
