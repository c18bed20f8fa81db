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
use crate::mm_types::Prot;
use crate::Errno;

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

    /// MADV_REMOVE that a VMA refused with `errno` (EINVAL or EACCES; the
    /// range starts on a page): the runs before the one that refused are
    /// punched. A run is refused with EINVAL when mlocked or anonymous,
    /// with EACCES when a private mapping, or a shared read-only one where
    /// `read_only_refused` (Linux 6.2 to 6.6); elsewhere a shared read-only
    /// run is refused only without `VM_MAYWRITE` (a write-sealed memfd),
    /// which the reference does not track. Where it cannot tell which run
    /// refused, or no run explains `errno`, nothing is punched.
    pub fn remove_until_refused(
        &mut self,
        start: u64,
        len: u64,
        errno: Errno,
        read_only_refused: bool,
    ) -> Vec<(u64, Range<u64>)> {
        let runs = self.runs(&page_range(start, len));
        for (i, (_, m)) in runs.iter().enumerate() {
            let refusal = match m.file {
                _ if m.locked => Some(Errno::EINVAL),
                None => Some(Errno::EINVAL),
                Some(b) if !b.shared => Some(Errno::EACCES),
                Some(_) if m.prot & Prot::WRITE != 0 => None,
                Some(_) if read_only_refused => Some(Errno::EACCES),
                // Accepted unless it has no VM_MAYWRITE: then EACCES.
                Some(_) if errno == Errno::EACCES => return Vec::new(),
                Some(_) => None,
            };
            match refusal {
                None => {}
                Some(e) if e == errno => return self.punch_runs(runs.into_iter().take(i).collect()),
                Some(_) => return Vec::new(),
            }
        }
        Vec::new()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::reference::RefFiles;

    const P: u64 = PAGE_SIZE;

    /// Four pages of one file, each run of one page mapped as `how` says
    /// (shared or private, protection, locked), every page holding 7.
    fn space(how: [(bool, Prot, bool); 4]) -> RefSpace {
        let files = RefFiles::default();
        let f = files.new_file(4 * P, 1);
        (0..4).for_each(|i| files.write(f, i * P, &[7]));
        let mut s = RefSpace::with_files(files);
        for (i, &(shared, prot, locked)) in how.iter().enumerate() {
            let at = 0x10000 + i as u64 * P;
            s.map_file(at, P, prot, f, i as u64, shared);
            s.lock(at, P, locked);
        }
        s
    }

    /// The first byte of each page after the remove.
    fn bytes(s: &mut RefSpace) -> Vec<u8> {
        (0..4).map(|i| s.read(0x10000 + i * P, 1).map_or(0xff, |b| b[0])).collect()
    }

    const SHARED: (bool, Prot, bool) = (true, Prot::RW, false);
    const LOCKED: (bool, Prot, bool) = (true, Prot::RW, true);
    const PRIVATE: (bool, Prot, bool) = (false, Prot::RW, false);
    const READ_ONLY: (bool, Prot, bool) = (true, Prot(Prot::READ), false);

    #[test]
    fn a_refusal_leaves_the_runs_before_it_punched() {
        let mut s = space([SHARED, SHARED, LOCKED, SHARED]);
        // The two shared runs before the locked one coalesce: one hole.
        assert_eq!(s.remove_until_refused(0x10000, 4 * P, Errno::EINVAL, false).len(), 1);
        assert_eq!(bytes(&mut s), [0, 0, 7, 7]);
        let mut s = space([SHARED, PRIVATE, SHARED, SHARED]);
        s.remove_until_refused(0x10000, 4 * P, Errno::EACCES, false);
        assert_eq!(bytes(&mut s), [0, 7, 7, 7]);
    }

    #[test]
    fn a_refusal_nothing_explains_punches_nothing() {
        // A read-only shared run may lack VM_MAYWRITE: EACCES could be its.
        let mut s = space([SHARED, READ_ONLY, PRIVATE, SHARED]);
        assert!(s.remove_until_refused(0x10000, 4 * P, Errno::EACCES, false).is_empty());
        // In 6.2 to 6.6 it is refused for sure.
        s.remove_until_refused(0x10000, 4 * P, Errno::EACCES, true);
        assert_eq!(bytes(&mut s), [0, 7, 7, 7]);
        // EINVAL where the first refusing run says EACCES: not this walk's.
        let mut s = space([SHARED, PRIVATE, LOCKED, SHARED]);
        assert!(s.remove_until_refused(0x10000, 4 * P, Errno::EINVAL, false).is_empty());
        assert_eq!(bytes(&mut s), [7; 4]);
    }

    #[test]
    fn a_fork_child_has_nothing_locked() {
        let mut s = space([LOCKED, LOCKED, SHARED, SHARED]);
        s.unlock_all();
        assert_eq!(s.remove_until_refused(0x10000, 4 * P, Errno::EINVAL, false).len(), 0);
        assert!(s.maps.iter().all(|(_, m)| !m.locked));
    }
}
