//! Invariants of one MM's VMA tree and VMA locks (seed 004), checked at a
//! quiescent point: VMAs are ordered, non-empty and disjoint; each belongs
//! to the MM (`vm_mm`), is attached and has no reader left (a leaked
//! `vma_start_read`); lockless readers see the same tree as the mmap_lock
//! holder; the MM is not write-locked. The VMAs that map a file are
//! exactly those its `i_mmap` holds, each with its current range.

use std::collections::HashSet;

use super::{Subject, Violation, ViolationKind::Vma as VmaKind};
use crate::mm_types::{Mm, Vmas};
use crate::rmap::VmaRecord;
use crate::shmem::Inode;
use crate::sync::Arc;

/// Appends a violation for every broken VMA-tree invariant of `mm`, whose
/// tree `vmas` the caller holds; adds each file VMA's `i_mmap` record to
/// `linked` (as the inode number and the record).
pub(super) fn check_vma_tree(mm: &Mm, vmas: &Vmas, linked: &mut HashSet<(u64, VmaRecord)>, bad: &mut Vec<Violation>) {
    let mut push = |addr: Option<u64>, what: String| {
        bad.push(Violation::new(VmaKind, Subject::Mm { mm: mm.id, addr }, format!("mm {}: {what}", mm.id)))
    };
    let mut prev_end = 0;
    for v in vmas.iter() {
        let (start, end) = (v.start(), v.end());
        if start >= end || start < prev_end {
            push(Some(start), format!("VMA [{start:#x}, {end:#x}) is empty or overlaps the one before"));
        }
        prev_end = end;
        if v.mm() != mm.serial {
            push(Some(start), format!("VMA at {start:#x} belongs to mm serial {}, not {}", v.mm(), mm.serial));
        }
        if v.lock.is_detached() {
            push(Some(start), format!("VMA at {start:#x} is in the tree but detached"));
        }
        if let Some(n) = v.lock.readers().filter(|&n| n != 0) {
            push(Some(start), format!("VMA at {start:#x} still has {n} reader(s) of its lock"));
        }
        // userfaultfd_register's invariant: a context iff a mode.
        if v.userfaultfd_armed() != v.userfaultfd_ctx().is_some() {
            let (armed, ctx) = (v.userfaultfd_armed(), v.userfaultfd_ctx().map(|c| c.id));
            push(Some(start), format!("VMA at {start:#x}: userfaultfd modes set {armed}, context {ctx:?}"));
        }
        if let Some(inode) = v.file() {
            let want = v.record();
            let found = inode.i_mmap.snapshot().into_iter().filter(|m| m.vma == want.vma).collect::<Vec<_>>();
            if found != [want] {
                push(Some(start), format!("file VMA at {start:#x}: inode {}'s i_mmap holds {found:?}", inode.ino));
            }
            linked.insert((inode.ino, want));
        }
    }
    let published = mm.published_vmas();
    let same =
        published.len() == vmas.iter().count() && published.iter().zip(vmas.iter()).all(|(a, b)| Arc::ptr_eq(a, b));
    if !same {
        push(None, "the tree lockless readers see differs from the mmap_lock holder's".into());
    }
}

/// Appends a violation for every `i_mmap` record of `inodes` that no VMA
/// of the MMs checked has (`linked`, from [`check_vma_tree`]).
pub(super) fn check_i_mmap(inodes: &[Arc<Inode>], linked: &HashSet<(u64, VmaRecord)>, bad: &mut Vec<Violation>) {
    for inode in inodes {
        for m in inode.i_mmap.snapshot().into_iter().filter(|m| !linked.contains(&(inode.ino, *m))) {
            let what = format!("inode {}: i_mmap holds {m:?}, which no VMA of a live MM matches", inode.ino);
            bad.push(Violation::new(VmaKind, Subject::Machine, what));
        }
    }
}
