//! Safe types over the host kernel's system calls that map memory, fork
//! and time: what the benchmarks' host columns call, so that the command
//! line has no `unsafe` of its own. Callers get types whose misuse is a
//! compile error, an `io::Error` or a panic, never undefined behaviour.
//! The scenario worker's calls are in `scenario`, GUP references in
//! [`gup`], `PAGEMAP_SCAN` in [`pagemap_scan`], userfaultfd's in
//! `userfaultfd`. Outside
//! `foliomm::internals::phys`, this module is foliomm's only `unsafe` code.

mod clock;
pub mod gup;
mod mapping;
mod pagemap_scan;
pub(crate) mod scenario;
pub(crate) mod userfaultfd;
mod workers;

pub use clock::{minor_faults, process_cpu_time, thread_cpu_time};
pub use mapping::{memfd, Advice, Map, Mapping};
pub use pagemap_scan::{pagemap_scan, PageRegion};
pub use workers::{die_with_parent, fork_child_that_exits, Workers};

/// The CPUs the calling thread may run on that are node 0's (all of them
/// where no node list can be read or none of them is node 0's): where the
/// machine has several NUMA nodes, a task on them takes its memory from
/// node 0, as a model task does.
pub fn node0_cpus() -> std::io::Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is an empty set; the kernel fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: `set` is a valid cpu_set_t of `size` bytes.
    if unsafe { libc::sched_getaffinity(0, size, &mut set) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let node0 = cpu_list("/sys/devices/system/node/node0/cpulist");
    // SAFETY: CPU_ISSET reads the set we own; the index is below CPU_SETSIZE.
    let allowed: Vec<usize> =
        (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect();
    let chosen: Vec<usize> = allowed.iter().copied().filter(|c| node0.is_empty() || node0.contains(c)).collect();
    Ok(if chosen.is_empty() { allowed } else { chosen })
}

/// Keeps the calling thread (and the threads and children it makes from
/// now on) on `cpus` (`sched_setaffinity`).
pub fn run_on(cpus: &[usize]) -> std::io::Result<()> {
    set_affinity(cpus)
}

/// Keeps the calling thread (and the threads and children it makes from
/// now on) on online CPU number `n`, counted from the first
/// (`sched_setaffinity`); an error names the CPUs online when there is no
/// such CPU, and the CPU when the kernel refuses it (a cpuset without it).
pub fn run_on_cpu(n: u32) -> Result<(), String> {
    let path = "/sys/devices/system/cpu/online";
    let online = cpu_list(path);
    if online.is_empty() {
        return Err(format!("cannot read the online CPUs from {path}"));
    }
    let &cpu =
        online.get(n as usize).ok_or_else(|| format!("the host has {} CPUs online, no CPU {n}", online.len()))?;
    set_affinity(&[cpu]).map_err(|e| format!("sched_setaffinity to CPU {cpu}: {e}"))
}

/// The CPUs of a kernel CPU list file ("0-3,8"); none if it cannot be read.
fn cpu_list(path: &str) -> Vec<usize> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let range = |r: &str| -> Vec<usize> {
        match r.split_once('-') {
            Some((a, b)) => match (a.parse(), b.parse()) {
                (Ok(a), Ok(b)) => (a..=b).collect(),
                _ => Vec::new(),
            },
            None => r.parse().into_iter().collect(),
        }
    };
    text.trim().split(',').flat_map(range).collect()
}

/// `sched_setaffinity(0, cpus)` for the calling thread; EINVAL for a CPU
/// a `cpu_set_t` cannot name.
fn set_affinity(cpus: &[usize]) -> std::io::Result<()> {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    if cpus.iter().any(|&c| c >= libc::CPU_SETSIZE as usize) {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: a zeroed cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: CPU_SET writes the set we own; `c` is below CPU_SETSIZE
        // (checked above).
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of `size` bytes.
    match unsafe { libc::sched_setaffinity(0, size, &set) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// `swapon(2)` (`on`) or `swapoff(2)` of the block device at `dev`.
pub fn swap_device(dev: &std::ffi::CStr, on: bool) -> std::io::Result<()> {
    // SAFETY: a NUL-terminated path and no flags; the kernel validates both.
    let r = unsafe {
        if on {
            libc::swapon(dev.as_ptr(), 0)
        } else {
            libc::swapoff(dev.as_ptr())
        }
    };
    match r {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Restores the default action of SIGPIPE (the Rust runtime ignores it), so
/// that a command whose reader goes away (`foliomm run | head`) ends quietly.
pub fn default_sigpipe() {
    // SAFETY: setting a signal's action to SIG_DFL has no preconditions and
    // replaces no handler of foliomm's.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// Whether this program's executable lives on tmpfs or ramfs (the guest's
/// initramfs), where its own pages count as shmem (`statfs`).
pub fn program_on_shmem() -> bool {
    // SAFETY: statfs into a zeroed buffer, of a NUL-terminated path.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the kernel validates the path.
    let ok = unsafe { libc::statfs(c"/proc/self/exe".as_ptr(), &mut st) } == 0;
    // RAMFS_MAGIC, which libc does not name.
    const RAMFS_MAGIC: libc::c_long = 0x8584_58f6;
    ok && (st.f_type == libc::TMPFS_MAGIC || st.f_type == RAMFS_MAGIC)
}
