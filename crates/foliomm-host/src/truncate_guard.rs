//! `ftruncate` of a file guarded against a livelock of the host kernel.
//!
//! The stable fix of `shmem_free_swap` ("mm/shmem, swap: fix race of
//! truncate and swap entry split", in 6.18.y) skips a large swap entry that
//! reaches across the truncation's range, and `shmem_undo_range` then
//! retries it for ever when the entry begins below the new end: the first
//! loop leaves it (`find_lock_entries` omits it), `shmem_get_partial_folio`
//! cannot read it back past the new `i_size`, and nothing else frees it.
//! The task spins in the kernel, unkillable. It takes a shmem folio
//! swapped out whole (6.12+) and a truncation to an offset inside it
//! (`scenarios/swap/27`).
//!
//! The guard is a thread that waits while the call runs: if it has not
//! returned after [`GRACE`] and the calling thread's kernel stack is in
//! `shmem_undo_range` (`/proc/self/task/TID/stack`: a slow truncation is
//! left alone), the guard reads the byte below the new end through the same
//! descriptor, which reads the entry back (or splits it) and lets the
//! truncation finish; the step is then refused as unobservable on this
//! host (the read changed what the step would show).

use std::sync::mpsc;
use std::time::Duration;

use crate::protocol::{done, Answer, Refused};
use crate::sys::scenario as sys;

/// How long a truncation may run before the guard steps in.
const GRACE: Duration = Duration::from_secs(3);

/// `ftruncate(fd, size)` with the guard.
pub(crate) fn ftruncate(fd: u64, size: u64) -> Answer {
    let (finished, wait) = mpsc::channel::<()>();
    // "PID/task/TID": this thread's kernel stack is /proc/self/task/TID/stack.
    let me = std::fs::read_link("/proc/thread-self").ok();
    let stack = me.and_then(|p| p.file_name().map(|tid| format!("/proc/self/task/{}/stack", tid.to_string_lossy())));
    let guard = std::thread::spawn(move || {
        let mut rescued = false;
        while let Err(mpsc::RecvTimeoutError::Timeout) = wait.recv_timeout(GRACE) {
            let spinning = stack.as_ref().and_then(|s| std::fs::read_to_string(s).ok());
            // A truncation to 0 meets no entry that begins below its end.
            if size > 0 && spinning.is_some_and(|s| s.contains("shmem_undo_range")) {
                rescued |= sys::pread(fd, size - 1, 1).is_ok();
            }
        }
        rescued
    });
    let result = sys::ftruncate(fd, size);
    drop(finished);
    match guard.join() {
        Ok(true) => Err(Refused::Unobservable(format!(
            "the host kernel spun in shmem_undo_range truncating to {size} bytes (a large shmem swap entry across \
             the new end, a 6.18.y bug); reading the byte below the end freed it"
        ))),
        _ => done(result),
    }
}
