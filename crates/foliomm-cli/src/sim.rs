//! `foliomm sim calibrate`: a cost profile for simulated CPUs
//! (`foliomm::internals::sync::sim::Profile`) measured on this machine,
//! saved as JSON for `bench vma-lock-scaling --sim-profile FILE`.
//!
//! Measured: a modified line's transfer between two threads (an atomic
//! ping-pong: a round trip is two transfers; the median of batches, the
//! machine being shared), a load from memory (a pointer chase through a
//! random cycle of 256 MiB), a host page fault of anonymous memory and the
//! zeroing inside it (writing every line of a faulted page), and a system
//! call (`madvise(MADV_NOHUGEPAGE)` of one page), and a wake-up (two
//! threads that park and wake each other in turn: a futex round trip is
//! two wake-ups; the median of batches), and a locked RMW beyond a plain
//! add (`fetch_add` on one word against a plain add). Derived, not measured: a
//! hit (1 ns), a clean line from another core (two thirds of a transfer),
//! an invalidation (half of one) and a round of spinning (a third); the
//! sockets from `/sys/devices/system/cpu`. A fork's fixed work is a fork
//! of this small process whose child exits at once, reaped (the median of
//! batches).

use std::sync::atomic::{AtomicU64, Ordering::*};
use std::time::Instant;

use anyhow::{Context, Result};
use foliomm::internals::sync::cacheline::Aligned;
use foliomm::internals::sync::sim::Profile;
use foliomm_host::sys::{fork_child_that_exits, Advice, Map};

#[derive(clap::Subcommand)]
pub enum SimCommand {
    /// Measure this machine's costs into a profile (JSON) for
    /// `bench vma-lock-scaling --sim-profile FILE`.
    Calibrate {
        /// Where to write the profile.
        #[arg(long, default_value = "foliomm-sim-profile.json")]
        out: std::path::PathBuf,
    },
}

/// Runs a `sim` subcommand.
pub fn run(cmd: &SimCommand) -> Result<()> {
    let SimCommand::Calibrate { out } = cmd;
    eprintln!("foliomm sim calibrate: measuring (a few seconds)");
    let hitm = transfer_ps();
    let (fault, zero_page) = fault_ps()?;
    let p = Profile {
        name: format!("calibrated on {}", hostname()),
        hit: 1_000,
        memory: memory_ps(),
        clean_read: hitm * 2 / 3,
        hitm,
        remote_hitm: hitm,
        invalidate: hitm / 2,
        spin: hitm / 3,
        atomic: atomic_ps(),
        wakeup: wakeup_ps(),
        fault,
        zero_page,
        syscall: syscall_ps()?,
        fork: fork_ps()?,
        subid_calc: Profile::default_subid_calc(),
        pt_step: Profile::default_pt_step(),
        hugetlb_fault: Profile::default_hugetlb_fault(),
        lru_folio: Profile::default_lru_folio(),
        cpus_per_socket: 0,
        nodes: 0,
        adjacent_prefetch: false,
    };
    std::fs::write(out, serde_json::to_string_pretty(&p)?).with_context(|| format!("writing {}", out.display()))?;
    println!("{}", serde_json::to_string_pretty(&p)?);
    println!(
        "written to {} (use: bench vma-lock-scaling --sim-cpus ... --sim-profile {})",
        out.display(),
        out.display()
    );
    Ok(())
}

/// The profile `name` names: a built-in one (`two-socket-server`,
/// `cheap-atomics`), or a file `sim calibrate` wrote.
pub fn profile(name: &str) -> Result<Profile> {
    if let Some(p) = Profile::builtin(name) {
        return Ok(p);
    }
    let text = std::fs::read_to_string(name).with_context(|| {
        format!("--sim-profile: expected two-socket-server, cheap-atomics or a file of `sim calibrate`, found '{name}'")
    })?;
    serde_json::from_str(&text).with_context(|| format!("--sim-profile {name}: not a profile"))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map_or("this machine".into(), |h| h.trim().to_string())
}

/// A modified line's transfer: the median over batches of a ping-pong's
/// round trip, halved.
fn transfer_ps() -> u64 {
    const ROUNDS: u64 = 20_000;
    let mut batches: Vec<u64> = (0..9)
        .map(|_| {
            let word = Aligned(AtomicU64::new(0));
            let t = Instant::now();
            std::thread::scope(|s| {
                for side in 0..2 {
                    let w = &word.0;
                    s.spawn(move || {
                        for i in 0..ROUNDS {
                            while w.load(Acquire) != 2 * i + side {
                                std::hint::spin_loop();
                            }
                            w.store(2 * i + side + 1, Release);
                        }
                    });
                }
            });
            t.elapsed().as_nanos() as u64 * 1000 / (2 * ROUNDS)
        })
        .collect();
    batches.sort_unstable();
    batches[batches.len() / 2]
}

/// A locked RMW's cost beyond a plain store to a line this CPU holds:
/// `fetch_add` against a volatile-ish add (`black_box`) on one word,
/// the median of batches.
fn atomic_ps() -> u64 {
    const OPS: u64 = 2_000_000;
    let mut batches: Vec<u64> = (0..9)
        .map(|_| {
            let word = AtomicU64::new(0);
            let t = Instant::now();
            for _ in 0..OPS {
                word.fetch_add(1, Relaxed);
            }
            let locked = t.elapsed().as_nanos() as u64;
            let mut plain = 0u64;
            let t = Instant::now();
            for _ in 0..OPS {
                plain = std::hint::black_box(plain + 1);
            }
            let unlocked = t.elapsed().as_nanos() as u64;
            locked.saturating_sub(unlocked) * 1000 / OPS
        })
        .collect();
    batches.sort_unstable();
    batches[batches.len() / 2]
}

/// A wake-up of a sleeping thread: the median over batches of a
/// park/unpark ping-pong's round trip, halved.
fn wakeup_ps() -> u64 {
    const ROUNDS: u64 = 2_000;
    let mut batches: Vec<u64> = (0..9)
        .map(|_| {
            let (turn, main) = (AtomicU64::new(0), std::thread::current());
            // Waits, parked, until `turn` reaches `n`.
            let until = |n| {
                while turn.load(Acquire) != n {
                    std::thread::park();
                }
            };
            std::thread::scope(|s| {
                let other = s.spawn(|| {
                    for i in 0..ROUNDS {
                        until(2 * i + 1);
                        turn.store(2 * i + 2, Release);
                        main.unpark();
                    }
                });
                let t = Instant::now();
                for i in 0..ROUNDS {
                    turn.store(2 * i + 1, Release);
                    other.thread().unpark();
                    until(2 * i + 2);
                }
                t.elapsed().as_nanos() as u64 * 1000 / (2 * ROUNDS)
            })
        })
        .collect();
    batches.sort_unstable();
    batches[batches.len() / 2]
}

/// A dependent load from memory: a pointer chase through a random cycle
/// of 256 MiB.
fn memory_ps() -> u64 {
    let n = (256 << 20) / 8;
    let mut next: Vec<usize> = (0..n).collect();
    // Sattolo's shuffle: one cycle through every slot.
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in (1..n).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        next.swap(i, x as usize % i);
    }
    let (loads, t) = (4_000_000u64, Instant::now());
    let mut at = 0;
    for _ in 0..loads {
        at = next[at];
    }
    std::hint::black_box(at);
    t.elapsed().as_nanos() as u64 * 1000 / loads
}

/// A host page fault of anonymous memory, the zeroing inside it
/// excluded, and the zeroing of a page: faults over 64 MiB, then every
/// line of the faulted pages written again.
fn fault_ps() -> Result<(u64, u64)> {
    let len = 64 << 20;
    let pages = (len / 4096) as u64;
    let m = Map::anon().map(len).context("mmap")?;
    m.advise(0..len, Advice::NoHugePage)?;
    let t = Instant::now();
    m.write_every(0..len, 4096, 1);
    let faulted = t.elapsed().as_nanos() as u64 * 1000 / pages;
    let t = Instant::now();
    m.write_every(0..len, 64, 0);
    let zero = t.elapsed().as_nanos() as u64 * 1000 / pages;
    Ok((faulted.saturating_sub(zero), zero))
}

/// A fork of this process whose child exits at once, reaped
/// (`fork_child_that_exits`): the median of 10 batches of 20.
fn fork_ps() -> Result<u64> {
    let mut batches = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        for _ in 0..20 {
            fork_child_that_exits().context("fork")?;
        }
        batches.push(t.elapsed().as_nanos() as u64 * 1000 / 20);
    }
    batches.sort_unstable();
    Ok(batches[batches.len() / 2])
}

/// A system call: `madvise(MADV_NOHUGEPAGE)` of one page, repeated.
fn syscall_ps() -> Result<u64> {
    let m = Map::anon().map(4096).context("mmap")?;
    let (calls, t) = (100_000u64, Instant::now());
    for _ in 0..calls {
        m.advise(0..4096, Advice::NoHugePage)?;
    }
    Ok(t.elapsed().as_nanos() as u64 * 1000 / calls)
}
