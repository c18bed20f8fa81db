//! The clocks and counters a host benchmark reads around its loops.

use std::time::Duration;

use rustix::time::{clock_gettime, ClockId};

/// CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`).
pub fn thread_cpu_time() -> Duration {
    cpu_time(ClockId::ThreadCPUTime)
}

/// CPU time of the calling process (`CLOCK_PROCESS_CPUTIME_ID`).
pub fn process_cpu_time() -> Duration {
    cpu_time(ClockId::ProcessCPUTime)
}

fn cpu_time(clock: ClockId) -> Duration {
    let ts = clock_gettime(clock);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Minor faults the calling thread has taken so far (`getrusage`'s
/// `RUSAGE_THREAD`), with no allocation: safe in a forked worker.
pub fn minor_faults() -> u64 {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes the rusage it is given; RUSAGE_THREAD is
    // valid on Linux, so it cannot fail.
    unsafe {
        libc::getrusage(libc::RUSAGE_THREAD, ru.as_mut_ptr());
        ru.assume_init().ru_minflt as u64
    }
}
