//! A worker process's userfaultfds: each file with its handler thread,
//! which reads the faults and resolves each by the rule the scenario gave
//! (`on NAME missing copy BYTE`, ...). A fault without a rule is resolved
//! anyway, so that the thread waiting on it goes on, and reported: the
//! step that faulted fails as one that would wait forever.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use foliomm::internals::mm_types::{vm, UffdReason};
use foliomm::Errno;
use foliomm_scenario::op::{Reply, UffdAction, UffdCall};

use crate::protocol::{Answer, Refused};
use crate::sys::userfaultfd as sys;

const PAGE: u64 = 4096;

/// The handler's rules of one userfaultfd.
type Rules = Arc<Mutex<HashMap<UffdReason, UffdAction>>>;

/// The ranges registered, in any file, with the size of their pages.
type Ranges = Arc<Mutex<Vec<(u64, u64, u64)>>>;

/// The userfaultfds of one worker process.
#[derive(Default)]
pub(crate) struct Uffds {
    files: Mutex<HashMap<u64, (Arc<OwnedFd>, Rules)>>,
    /// Ranges registered, in any file: accesses there are faulted in with
    /// `MADV_POPULATE_*` first, so that SIGBUS comes back as an error; the
    /// handlers resolve a fault's page of the size registered.
    ranges: Ranges,
    /// What the handlers found no rule for since the last look.
    unhandled: Arc<Mutex<Option<String>>>,
}

impl Uffds {
    /// `userfaultfd()` with its handler thread (spawned by `spawn`, which
    /// places the thread's stack); replies with its handle (the descriptor).
    pub(crate) fn make(
        &self,
        sigbus: bool,
        spawn: impl FnOnce(Box<dyn FnOnce() + Send>) -> std::io::Result<()>,
    ) -> Answer {
        let fd = Arc::new(sys::open(sigbus)?);
        let rules = Rules::default();
        let (f, r, u, g) = (fd.clone(), rules.clone(), self.unhandled.clone(), self.ranges.clone());
        spawn(Box::new(move || handle(&f, &r, &u, &g)))?;
        let id = std::os::fd::AsRawFd::as_raw_fd(&*fd) as u64;
        self.files.lock().unwrap().insert(id, (fd, rules));
        Ok(Reply::Value(id))
    }

    /// One call on userfaultfd `uffd`.
    pub(crate) fn call(&self, uffd: u64, call: UffdCall) -> Answer {
        let (fd, rules) = self.files.lock().unwrap().get(&uffd).cloned().ok_or(Refused::Errno(Errno::EINVAL))?;
        match call {
            UffdCall::Register { addr, len, modes, page } => {
                // UFFDIO_REGISTER_MODE_MISSING, _WP, _MINOR.
                let mode = [(vm::UFFD_MISSING, 1), (vm::UFFD_WP, 2), (vm::UFFD_MINOR, 4)]
                    .iter()
                    .filter(|(m, _)| modes & m != 0)
                    .fold(0, |acc, (_, bit)| acc | bit);
                sys::register(&fd, addr, len, mode)?;
                self.ranges.lock().unwrap().push((addr, addr + len, page));
                Ok(Reply::Done)
            }
            UffdCall::Unregister { addr, len } => {
                sys::unregister(&fd, addr, len)?;
                Ok(Reply::Done)
            }
            UffdCall::Fill { addr, len, val, wp } => {
                let bytes = val.map(|v| vec![v; len as usize]);
                Ok(Reply::Value(sys::fill(&fd, addr, len, bytes.as_deref(), wp)?))
            }
            UffdCall::Continue { addr, len, wp } => Ok(Reply::Value(sys::continue_range(&fd, addr, len, wp)?)),
            UffdCall::Move { src, dst, len, holes } => Ok(Reply::Value(sys::move_range(&fd, dst, src, len, holes)?)),
            UffdCall::WriteProtect { addr, len, protect } => {
                sys::writeprotect(&fd, addr, len, protect)?;
                Ok(Reply::Done)
            }
            UffdCall::On { reason, action } => {
                rules.lock().unwrap().insert(reason, action);
                Ok(Reply::Done)
            }
        }
    }

    /// Faults the page at `addr` in through `MADV_POPULATE_*` if it lies in
    /// a registered range, so that a fault the userfaultfd answers with
    /// SIGBUS is an error here rather than a signal.
    pub(crate) fn fault_in(&self, addr: u64, write: bool) -> Result<(), Refused> {
        if !self.ranges.lock().unwrap().iter().any(|&(s, e, _)| s <= addr && addr < e) {
            return Ok(());
        }
        let advice = if write { libc::MADV_POPULATE_WRITE } else { libc::MADV_POPULATE_READ };
        match crate::sys::scenario::madvise(addr & !(PAGE - 1), PAGE, advice) {
            Err(e) if e.raw_os_error() == Some(libc::EFAULT) => Err(Refused::Errno(Errno::SIGBUS)),
            Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => Ok(()),
            r => r.map_err(Refused::from),
        }
    }

    /// What a handler found no rule for, once: the step that waited fails.
    pub(crate) fn take_unhandled(&self) -> Result<(), Refused> {
        match self.unhandled.lock().unwrap().take() {
            Some(why) => Err(Refused::Hangs(why)),
            None => Ok(()),
        }
    }
}

/// The handler thread of `fd`: resolves every fault by its rule, then
/// wakes the range (a resolution that failed, EEXIST for one, wakes
/// nothing by itself). Ends when the descriptor is gone.
fn handle(fd: &OwnedFd, rules: &Rules, unhandled: &Mutex<Option<String>>, ranges: &Ranges) {
    while let Ok(msg) = sys::read_fault(fd) {
        let Some(f) = msg else { continue };
        let registered =
            ranges.lock().unwrap().iter().rev().find(|&&(s, e, _)| s <= f.address && f.address < e).copied();
        let size = registered.map_or(PAGE, |(_, _, page)| page);
        let (reason, kind, rule, fallback) = match (f.wp, f.minor) {
            (true, _) => (UffdReason::WriteProtect, "write-protect", "wp unprotect", UffdAction::Unprotect),
            (_, true) => (UffdReason::Minor, "minor", "minor continue", UffdAction::Continue),
            _ => (
                UffdReason::Missing,
                "missing",
                "missing copy BYTE' or 'on NAME missing zeropage",
                UffdAction::ZeroPage,
            ),
        };
        let action = rules.lock().unwrap().get(&reason).copied().unwrap_or_else(|| {
            let access = if f.write { "write" } else { "read" };
            *unhandled.lock().unwrap() = Some(format!(
                "the {kind} fault ({access}) at {:#x} went to a userfaultfd whose handler has no rule for it \
                 (give it one: 'PROCESS: on NAME {rule}')",
                f.address
            ));
            fallback
        });
        let _ = match action {
            UffdAction::Copy(v) => sys::fill(fd, f.address, size, Some(&vec![v; size as usize]), false).map(|_| ()),
            UffdAction::ZeroPage => sys::fill(fd, f.address, size, None, false).map(|_| ()),
            UffdAction::Unprotect => sys::writeprotect(fd, f.address, size, false),
            UffdAction::Continue => sys::continue_range(fd, f.address, size, false).map(|_| ()),
        };
        let _ = sys::wake(fd, f.address, size);
    }
}
