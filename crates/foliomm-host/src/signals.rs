//! SIGINT, SIGTERM and SIGHUP during a host run: the workers are ended
//! and everything this process changed on the host is put back before it
//! exits. Each module that changes the host registers how to undo it
//! ([`on_signal`]: the settings, the run's memory cgroup, its debugfs
//! mount); the first registration installs the handler.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};

static UNDO: Mutex<Vec<fn()>> = Mutex::new(Vec::new());
static INSTALLED: Once = Once::new();
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Whether a signal is putting the host back: nothing may be changed any
/// more (the process exits once the undo is done; a change made after the
/// undo would outlive it).
pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Registers `undo` (once) to run on SIGINT, SIGTERM or SIGHUP, after the
/// workers have been ended, in the order of registration.
pub(crate) fn on_signal(undo: fn()) {
    {
        let mut list = UNDO.lock().unwrap();
        if !list.contains(&undo) {
            list.push(undo);
        }
    }
    INSTALLED.call_once(|| {
        if let Ok(mut signals) = signal_hook::iterator::Signals::new([libc::SIGINT, libc::SIGTERM, libc::SIGHUP]) {
            std::thread::spawn(move || {
                if let Some(sig) = signals.forever().next() {
                    INTERRUPTED.store(true, Ordering::SeqCst);
                    // Workers still holding huge pages would keep a 1 GiB
                    // pool from shrinking (Linux turns no gigantic page in
                    // use into a surplus one): they go first.
                    end_descendants();
                    let undo: Vec<fn()> = UNDO.lock().unwrap().clone();
                    undo.iter().for_each(|f| f());
                    std::process::exit(128 + sig);
                }
            });
        }
    });
}

/// Whether a handler that puts the host back and exits is installed (a
/// host run has changed something): a caller's own handler then leaves the
/// exit to it.
pub fn handles_signals() -> bool {
    INSTALLED.is_completed()
}

/// Whether process `pid` is alive: it exists and is not a zombie (a
/// killed run whose parent has not reaped it yet is gone for our purpose).
pub(crate) fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    // The state follows the command name, which ends with the last ')'.
    stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).is_some_and(|s| s != "Z")
}

/// Kills every descendant of this process (the host workers and the
/// processes they forked, a guest's qemu) and waits, up to two seconds,
/// until none is alive.
pub fn end_descendants() {
    let parent_of = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
    };
    let pids: Vec<u32> = std::fs::read_dir("/proc")
        .map(|d| d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
        .unwrap_or_default();
    let me = std::process::id();
    let mut ours = vec![me];
    // Parents before children is not guaranteed: repeat until nothing joins.
    loop {
        let joined: Vec<u32> = pids
            .iter()
            .copied()
            .filter(|&p| !ours.contains(&p) && parent_of(p).is_some_and(|pp| ours.contains(&pp)))
            .collect();
        if joined.is_empty() {
            break;
        }
        ours.extend(joined);
    }
    ours.retain(|&p| p != me);
    for pid in ours.iter().filter_map(|&p| rustix::process::Pid::from_raw(p as i32)) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while ours.iter().any(|&p| alive(p)) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}
