//! What a run knows of its userfaultfds: their handles by name, their
//! handlers' rules and the ranges each process registered (kept by
//! [`super::uffd_cmd`], forgotten on unmap, mremap and exit).

use std::collections::{HashMap, HashSet};

use foliomm::internals::mm_types::UffdReason;

use crate::op::UffdAction;

/// What a run knows of its userfaultfds.
#[derive(Clone, Default)]
pub(crate) struct Uffds {
    /// Each userfaultfd by process and name: the backend's handle.
    pub(super) names: HashMap<(String, String), u64>,
    /// The handler's rules of each userfaultfd, by handle.
    pub(super) rules: HashMap<u64, HashMap<UffdReason, UffdAction>>,
    /// The userfaultfds made with `UFFD_FEATURE_SIGBUS`, by handle.
    pub(super) sigbus: HashSet<u64>,
    /// The ranges each process registered.
    pub(super) regs: HashMap<String, Vec<Reg>>,
}

/// A range a process registered: `[start, end)` with userfaultfd `uffd`
/// in `modes`, in pages of `page` bytes.
#[derive(Clone, Copy)]
pub(super) struct Reg {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) uffd: u64,
    pub(super) modes: u32,
    pub(super) page: u64,
}

impl Uffds {
    /// Forgets the registrations of `[start, start + len)` in `proc`
    /// (unregistered, unmapped, or moved away by mremap, which keeps no
    /// registration without `UFFD_FEATURE_EVENT_REMAP`).
    pub(super) fn forget(&mut self, proc: &str, start: u64, len: u64) {
        let Some(regs) = self.regs.get_mut(proc) else { return };
        let end = start + len;
        let mut kept = Vec::new();
        for &r in regs.iter() {
            if r.end <= start || r.start >= end {
                kept.push(r);
                continue;
            }
            if r.start < start {
                kept.push(Reg { end: start, ..r });
            }
            if r.end > end {
                kept.push(Reg { start: end, ..r });
            }
        }
        *regs = kept;
    }

    /// Forgets everything of an exited process.
    pub(super) fn exited(&mut self, proc: &str) {
        self.regs.remove(proc);
        self.names.retain(|(p, _), _| p != proc);
    }
}
