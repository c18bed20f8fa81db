//! Forked worker processes for the benchmarks' process modes: started
//! together through one pipe, reporting through another, ended together.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};

use rustix::process::{Pid, Signal, WaitOptions};

/// `n` forked workers, each reporting `N` words. Dropping them lets the
/// workers end and reaps them.
pub struct Workers<const N: usize> {
    pids: Vec<Pid>,
    go: File,
    reports: File,
    release: Option<File>,
}

impl<const N: usize> Workers<N> {
    /// Forks `n` workers that die with this process (`PR_SET_PDEATHSIG`).
    /// Worker `i` waits for [`Workers::start`], runs `body(i)`, reports the
    /// words it returns, and ends with `_exit` once the `Workers` are
    /// dropped (it runs no destructor of this process's copy).
    ///
    /// `body` runs in the child of a process that may have other threads:
    /// it must not wait for a lock such a thread could have held at the
    /// fork (glibc's malloc is safe; foliomm's model locks are not).
    /// A fork by another thread meanwhile copies the pipes: a worker's
    /// death is then seen only once that copy is closed too.
    pub fn fork(n: usize, body: impl Fn(usize) -> [u64; N]) -> io::Result<Workers<N>> {
        const { assert!((N + 2) * 8 <= libc::PIPE_BUF, "a report must be one atomic pipe write") };
        let (go_r, go_w) = rustix::pipe::pipe()?;
        let (rep_r, rep_w) = rustix::pipe::pipe()?;
        let (rel_r, rel_w) = rustix::pipe::pipe()?;
        let parent = rustix::process::getpid();
        let mut pids = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: the child runs only `worker`, which ends in _exit;
            // the caller vouches for `body` (see above).
            match unsafe { libc::fork() } {
                -1 => return Err(io::Error::last_os_error()),
                0 => worker(parent, i, [&go_w, &rep_r, &rel_w], [&go_r, &rep_w, &rel_r], &body),
                pid => pids.push(Pid::from_raw(pid).expect("fork returns a positive PID")),
            }
        }
        let workers = Workers { pids, go: go_w.into(), reports: rep_r.into(), release: Some(rel_w.into()) };
        // The parent's copies go: a worker that dies closes the last
        // writer of the reports, and `reports` sees the end.
        drop((go_r, rep_w, rel_r));
        Ok(workers)
    }

    /// Lets every worker run its body.
    pub fn start(&mut self) -> io::Result<()> {
        self.go.write_all(&vec![1u8; self.pids.len()])
    }

    /// Every worker's index and words, in the order they came; an error if
    /// a worker's body panicked or a worker died before reporting.
    pub fn reports(&mut self) -> io::Result<Vec<(usize, [u64; N])>> {
        let mut out = Vec::with_capacity(self.pids.len());
        for _ in 0..self.pids.len() {
            let mut buf = vec![0u8; (N + 2) * 8];
            self.reports.read_exact(&mut buf).map_err(|_| io::Error::other("a worker process died"))?;
            let word = |k: usize| u64::from_ne_bytes(buf[k * 8..k * 8 + 8].try_into().expect("8 bytes"));
            if word(1) != 1 {
                return Err(io::Error::other(format!("worker {} failed", word(0))));
            }
            out.push((word(0) as usize, std::array::from_fn(|k| word(k + 2))));
        }
        Ok(out)
    }
}

impl<const N: usize> Drop for Workers<N> {
    fn drop(&mut self) {
        // The release pipe's end: every worker's read returns, and it ends.
        self.release = None;
        for &pid in &self.pids {
            let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
        }
    }
}

/// A worker's life after the fork; never returns.
fn worker<const N: usize>(
    parent: Pid,
    i: usize,
    parents_ends: [&OwnedFd; 3],
    ends: [&OwnedFd; 3],
    body: &impl Fn(usize) -> [u64; N],
) -> ! {
    let ok = rustix::process::set_parent_process_death_signal(Some(Signal::KILL)).is_ok()
        && rustix::process::getppid() == Some(parent);
    for fd in parents_ends {
        // SAFETY: closes this process's copies of the parent's ends; the
        // OwnedFds holding them are never dropped here (the worker ends
        // in _exit), so nothing closes or uses them again.
        unsafe { libc::close(fd.as_raw_fd()) };
    }
    let [go, report, release] = ends;
    let started = ok && rustix::io::read(go, &mut [0u8][..]).is_ok_and(|n| n == 1);
    let words = started.then(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(i))).ok()).flatten();
    let mut msg = Vec::with_capacity((N + 2) * 8);
    for w in [i as u64, words.is_some() as u64].into_iter().chain(words.unwrap_or([0; N])) {
        msg.extend_from_slice(&w.to_ne_bytes());
    }
    // One write of at most PIPE_BUF bytes: it arrives whole.
    let _ = rustix::io::write(report, &msg);
    // SAFETY: this process's copy of the reports' write end, never used
    // again: once every worker has reported or died, the parent reads the
    // end of the pipe instead of waiting.
    unsafe { libc::close(report.as_raw_fd()) };
    let _ = rustix::io::read(release, &mut [0u8][..]);
    // SAFETY: ends the worker without running the parent's destructors or
    // atexit handlers, which belong to the parent's copy of the state.
    unsafe { libc::_exit(0) }
}

/// Makes this process die with its parent (`PR_SET_PDEATHSIG`): for a
/// helper a worker starts, which must not outlive a killed benchmark.
pub fn die_with_parent() -> io::Result<()> {
    Ok(rustix::process::set_parent_process_death_signal(Some(Signal::KILL))?)
}

/// Forks a child that ends at once, and reaps it: the cost of copying the
/// address space at fork and tearing it down at exit.
pub fn fork_child_that_exits() -> io::Result<()> {
    // SAFETY: the child only calls _exit.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        // SAFETY: see above.
        0 => unsafe { libc::_exit(0) },
        pid => {
            rustix::process::waitpid(Pid::from_raw(pid), WaitOptions::empty())?;
            Ok(())
        }
    }
}
