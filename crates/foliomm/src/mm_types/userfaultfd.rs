//! A userfaultfd (fs/userfaultfd.c `struct userfaultfd_ctx`): what one
//! `userfaultfd()` file holds. Registered VMAs point at it
//! (`vm_userfaultfd_ctx`); a fault it must handle queues a message on it
//! (`handle_userfault`), which its handler reads (`userfaultfd_read`) and
//! answers with an ioctl ([`crate::mm`]'s `uffd_*` operations).
//!
//! Differs from Linux: the faulting thread does not sleep on the context's
//! wait queue. The fault returns [`crate::Errno::Userfault`] up to the
//! thread's caller, which plays the handler thread (reads the message,
//! resolves it) and retries the access, as the woken thread would.

use crate::sync::Mutex;
use std::collections::VecDeque;

/// Why a fault was handed to userspace (`uffd_msg.arg.pagefault.flags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum UffdReason {
    /// A none entry in a range registered for missing faults
    /// (`VM_UFFD_MISSING`).
    Missing,
    /// A write to a page userfaultfd write-protects (`VM_UFFD_WP`,
    /// `UFFD_PAGEFAULT_FLAG_WP`).
    WriteProtect,
    /// A fault on a page the page cache holds but this VMA does not map
    /// (`VM_UFFD_MINOR`, `UFFD_PAGEFAULT_FLAG_MINOR`; shmem and hugetlb).
    Minor,
}

/// One `UFFD_EVENT_PAGEFAULT` message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UffdMsg {
    /// The faulting address, rounded down to its page (Linux without
    /// `UFFD_FEATURE_EXACT_ADDRESS`).
    pub address: u64,
    pub reason: UffdReason,
    /// `UFFD_PAGEFAULT_FLAG_WRITE`.
    pub write: bool,
}

/// A userfaultfd and the messages its handler has not read yet.
#[derive(Debug)]
pub struct UserfaultfdCtx {
    /// A number naming the context (the file descriptor's stand-in).
    pub id: u64,
    /// `UFFD_FEATURE_SIGBUS`: faults raise SIGBUS instead of waiting.
    pub sigbus: bool,
    pending: Mutex<VecDeque<UffdMsg>>,
}

impl UserfaultfdCtx {
    /// `userfaultfd()` + `UFFDIO_API` with `UFFD_FEATURE_SIGBUS` if `sigbus`.
    pub fn new(id: u64, sigbus: bool) -> UserfaultfdCtx {
        UserfaultfdCtx { id, sigbus, pending: Mutex::new(VecDeque::new()) }
    }

    /// Queues a fault's message (`handle_userfault`'s `uwq` on
    /// `fault_pending_wqh`); a fault already pending for the same page
    /// and reason is not queued twice.
    pub(crate) fn queue(&self, msg: UffdMsg) {
        let mut q = self.pending.lock().unwrap();
        if !q.iter().any(|m| m.address == msg.address && m.reason == msg.reason) {
            q.push_back(msg);
        }
    }

    /// The oldest message not read yet (`userfaultfd_read`), if any.
    pub fn read(&self) -> Option<UffdMsg> {
        self.pending.lock().unwrap().pop_front()
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use crate::sync::{thread, Arc};

    const MSG: UffdMsg = UffdMsg { address: 0x1000, reason: UffdReason::Missing, write: true };

    /// Two threads fault on one page while a handler may read: every
    /// message is read once, and at most one is pending for the page at a
    /// time (without a read in between, the second fault queues nothing).
    #[test]
    fn loom_faults_on_one_page_queue_one_message() {
        for handler_reads in [false, true] {
            loom::model(move || {
                let ctx = Arc::new(UserfaultfdCtx::new(1, false));
                let faults: Vec<_> = (0..2)
                    .map(|_| {
                        let c = ctx.clone();
                        thread::spawn(move || c.queue(MSG))
                    })
                    .collect();
                let mut read = (handler_reads && ctx.read().is_some()) as u32;
                faults.into_iter().for_each(|f| f.join().unwrap());
                while ctx.read().is_some() {
                    read += 1;
                }
                match handler_reads {
                    false => assert_eq!(read, 1),
                    true => assert!((1..=2).contains(&read), "{read} messages"),
                }
            });
        }
    }
}
