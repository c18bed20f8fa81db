//! The model's userfaultfds: each file's context, the address space it was
//! made in (`ctx->mm`, which its ioctls act on) and its handler's rules.
//! A fault handed to a context comes back to [`ModelBackend::perform`] as
//! [`Errno::Userfault`]; the backend then plays the handler thread: it
//! reads the messages, resolves each by its rule, and retries the call.

use std::collections::HashMap;
use std::sync::Arc;

use foliomm::internals::arch::PAGE_SIZE;
use foliomm::internals::memory::userfaultfd::Fill;
use foliomm::internals::mm_types::{UffdReason, UserfaultfdCtx};
use foliomm::internals::sync::Mutex;
use foliomm::{Errno, Mm};

use super::ModelBackend;
use crate::backend::Thread;
use crate::error::{BackendResult, StepError};
use crate::op::{Op, Reply, UffdAction, UffdCall};

/// How often a call may meet a userfaultfd fault in a row that no
/// handler call of its own answered before it counts as waiting forever.
const RETRIES_WITHOUT_ANSWER: usize = 100_000;

/// One userfaultfd of a process.
pub(super) struct UffdFile {
    ctx: Arc<UserfaultfdCtx>,
    mm: Arc<Mm>,
    rules: HashMap<UffdReason, UffdAction>,
    /// Held while a call plays the file's one handler thread: a fault
    /// whose message another call is answering waits here for the answer,
    /// as the faulting thread sleeps until the handler wakes it.
    handler: Arc<Mutex<()>>,
}

/// The userfaultfds of a run, by handle, and the next handle.
#[derive(Default)]
pub(super) struct Uffds {
    files: HashMap<u64, UffdFile>,
    next: u64,
}

impl Uffds {
    /// Closes the files made in `mm` (its process exited).
    pub(super) fn exited(&mut self, mm: &Arc<Mm>) {
        self.files.retain(|_, f| !Arc::ptr_eq(&f.mm, mm));
    }
}

impl ModelBackend {
    /// [`Backend::perform`] on the thread's CPU: a call that may fault
    /// on a userfaultfd's range waits for its handler and goes on.
    pub(super) fn perform_placed(&self, t: Thread, op: Op) -> BackendResult<Reply> {
        // A call that may fault on a userfaultfd's range waits for its
        // handler and goes on (accesses, populating advice and locks are
        // restartable); a pin gives up (Linux's long-term pins do not wait).
        let may_wait = matches!(op, Op::Access { .. } | Op::Madvise { .. } | Op::Mlock { .. } | Op::Pin { .. });
        if !may_wait {
            return self.perform_once(t, op);
        }
        // A fault whose message another thread's call answered is retried
        // as it is; one that keeps coming back unanswered would wait forever.
        for _ in 0..RETRIES_WITHOUT_ANSWER {
            match self.perform_once(t, op.clone()) {
                Err(StepError::Errno(Errno::Userfault)) if matches!(op, Op::Pin { .. }) => {
                    return Err(StepError::Unsupported("a pin of a page a userfaultfd must fill".into()));
                }
                Err(StepError::Errno(Errno::Userfault)) => {
                    // The woken thread retries its fault, then its access.
                    let (mm, cpu) = self.thread(t)?;
                    let answered = self.handle_userfaults(&mm)?;
                    if answered.is_empty() {
                        foliomm::internals::sync::thread::yield_now();
                    }
                    for (addr, write) in answered {
                        match cpu.lock().unwrap().retry_fault(&mm, addr, write) {
                            Ok(()) | Err(Errno::Userfault) => {}
                            Err(e) => return Err(e.into()),
                        }
                    }
                }
                r => return r,
            }
        }
        Err(StepError::Hangs("a fault went to a userfaultfd again and again and no handler answered it".into()))
    }

    /// `userfaultfd()` in thread `t`'s process; replies with its handle.
    pub(super) fn userfaultfd(&self, t: Thread, sigbus: bool) -> BackendResult<Reply> {
        let mm = self.mm_of(t)?;
        let mut u = self.uffds.lock().unwrap();
        u.next += 1;
        let id = u.next;
        let ctx = Arc::new(UserfaultfdCtx::new(id, sigbus));
        u.files.insert(id, UffdFile { ctx, mm, rules: HashMap::new(), handler: Arc::default() });
        Ok(Reply::Value(id))
    }

    /// One call on userfaultfd `uffd`, on the address space it was made in.
    pub(super) fn uffd_call(&self, uffd: u64, call: UffdCall) -> BackendResult<Reply> {
        let (ctx, mm) = {
            let u = self.uffds.lock().unwrap();
            let f = u.files.get(&uffd).ok_or(Errno::EINVAL)?;
            (f.ctx.clone(), f.mm.clone())
        };
        Ok(match call {
            UffdCall::Register { addr, len, modes, .. } => {
                mm.userfaultfd_register(&ctx, addr, len, modes)?;
                Reply::Done
            }
            UffdCall::Unregister { addr, len } => {
                mm.userfaultfd_unregister(&ctx, addr, len)?;
                Reply::Done
            }
            UffdCall::Fill { addr, len, val: Some(v), wp } => {
                Reply::Value(mm.uffd_fill(addr, len, Fill::Copy { bytes: &vec![v; len as usize], wp })?)
            }
            UffdCall::Fill { addr, len, val: None, .. } => Reply::Value(mm.uffd_fill(addr, len, Fill::ZeroPage)?),
            UffdCall::Continue { addr, len, wp } => Reply::Value(mm.uffd_fill(addr, len, Fill::Continue { wp })?),
            UffdCall::Move { src, dst, len, holes } => Reply::Value(mm.uffd_move(&ctx, dst, src, len, holes)?),
            UffdCall::WriteProtect { addr, len, protect } => {
                mm.uffd_writeprotect(addr, len, protect)?;
                Reply::Done
            }
            UffdCall::On { reason, action } => {
                let mut u = self.uffds.lock().unwrap();
                u.files.get_mut(&uffd).ok_or(Errno::EINVAL)?.rules.insert(reason, action);
                Reply::Done
            }
        })
    }

    /// The handler threads of `mm`'s userfaultfds at work: every message
    /// waiting is read and resolved by its file's rule (an error of the
    /// resolving ioctl, such as EEXIST for a page another thread filled,
    /// is the handler's to ignore). A message no rule answers would leave
    /// its thread waiting forever. Returns the faults resolved (address
    /// and whether a write), which their threads retry; none if another
    /// thread's handler call took the message first.
    pub(super) fn handle_userfaults(&self, mm: &Arc<Mm>) -> BackendResult<Vec<(u64, bool)>> {
        type Handler = (u64, Arc<UserfaultfdCtx>, HashMap<UffdReason, UffdAction>, Arc<Mutex<()>>);
        let files: Vec<Handler> = {
            let u = self.uffds.lock().unwrap();
            u.files
                .iter()
                .filter(|(_, f)| Arc::ptr_eq(&f.mm, mm))
                .map(|(&h, f)| (h, f.ctx.clone(), f.rules.clone(), f.handler.clone()))
                .collect()
        };
        let mut handled = Vec::new();
        for (h, ctx, rules, handler) in files {
            let _handler = handler.lock().unwrap();
            while let Some(msg) = ctx.read() {
                let page = msg.address;
                // The handler resolves the fault's page: a huge page in hugetlb.
                let size = mm.vmas().iter().find(|v| v.contains(page)).and_then(|v| v.huge_page_size());
                let size = size.unwrap_or(PAGE_SIZE);
                let r = match rules.get(&msg.reason) {
                    Some(&UffdAction::Copy(v)) => {
                        let bytes = &vec![v; size as usize];
                        mm.uffd_fill(page, size, Fill::Copy { bytes, wp: false }).map(|_| ())
                    }
                    Some(UffdAction::ZeroPage) => mm.uffd_fill(page, size, Fill::ZeroPage).map(|_| ()),
                    Some(UffdAction::Continue) => mm.uffd_fill(page, size, Fill::Continue { wp: false }).map(|_| ()),
                    Some(UffdAction::Unprotect) => mm.uffd_writeprotect(page, size, false),
                    None => {
                        let (kind, rule) = match msg.reason {
                            UffdReason::Missing => ("missing", "missing copy BYTE' or 'on NAME missing zeropage"),
                            UffdReason::WriteProtect => ("write-protect", "wp unprotect"),
                            UffdReason::Minor => ("minor", "minor continue"),
                        };
                        return Err(StepError::Hangs(format!(
                            "the {kind} fault at {page:#x} went to userfaultfd {h}, whose handler has no rule for it \
                             (give it one: 'PROCESS: on NAME {rule}')"
                        )));
                    }
                };
                match r {
                    Ok(()) | Err(Errno::EEXIST) => handled.push((page, msg.write)),
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(handled)
    }
}
