//! Seed 002's two programs: what an instance runs and where it maps, and
//! the programs on the host kernel: an instance per process, over one
//! hugetlbfs memfd, looping side by side as the model's instances do
//! (`workers::Loops::Overlapping`, through a counter in a shared page).

use std::os::fd::{AsFd, AsRawFd};
use std::time::Instant;

use anyhow::{ensure, Context, Result};
use foliomm::internals::machine::HugeSize;
use foliomm::internals::sync::cacheline::Transfers;
use foliomm_host::sys::{fork_child_that_exits, memfd, Map, Mapping, Workers};

use super::workers::{host_rates, Gate, Loops};

/// The 2 MiB huge pages the benchmark uses.
pub(super) const HPAGE: u64 = 1 << 21;

/// What an instance runs: the forking program or the faulting one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub(super) enum Program {
    Fork,
    Fault,
}

impl Program {
    pub(super) fn name(self) -> &'static str {
        match self {
            Program::Fork => "fork",
            Program::Fault => "fault",
        }
    }

    /// Its operations in one loop over an area of `size`: a fork, or a
    /// fault per huge page.
    pub(super) fn ops_per_loop(self, size: u64) -> f64 {
        match self {
            Program::Fork => 1.0,
            Program::Fault => (size / HPAGE) as f64,
        }
    }

    /// Its operations in `loops` loops over an area of `size`, the first
    /// of which skipped `skip` huge pages ([`first_skip`]).
    pub(super) fn ops(self, loops: u32, size: u64, skip: u64) -> f64 {
        (f64::from(loops) * self.ops_per_loop(size) - skip as f64).max(0.0)
    }

    /// Its table: forks per second, faults per second.
    pub(super) fn table(self) -> usize {
        self as usize
    }
}

/// What one round of a configuration measured: each instance's program
/// and rate, and (model only) the cache-line transfers and operations of
/// all instances.
pub(super) struct Round {
    pub rates: Vec<(Program, f64)>,
    pub transfers: Transfers,
    pub ops: f64,
}

/// Where instance `i` maps the area: the 1 GiB boundary, or `apart`
/// 2 MiB x (i + 1) past it.
pub(super) fn area_at(apart: bool, i: usize) -> u64 {
    (1 << 30) + if apart { (i as u64 % 511 + 1) * HPAGE } else { 0 }
}

/// How far into its first loop instance `i` of `programs` is when the
/// clock starts, in huge pages mapped and faulted before it: the j-th of
/// k faulting instances j/k of the way through the area, so that their
/// unmaps (each holding `i_mmap_rwsem` for write over a whole area's
/// entries) fall at spread times, as those of the seed's programs did
/// after long loops, rather than all at the end of a first loop they all
/// started together. Forking instances start at the beginning.
pub(super) fn first_skip(programs: &[Program], i: usize, size: u64) -> u64 {
    let faulting = |set: &[Program]| set.iter().filter(|&&p| p == Program::Fault).count() as u64;
    match programs[i] {
        Program::Fault => size / HPAGE * faulting(&programs[..i]) / faulting(programs),
        Program::Fork => 0,
    }
}

/// One round of `programs` on the host: a hugetlbfs memfd every instance
/// maps, the pool set to hold it (and restored), an instance per process.
/// `each`: every instance's least loops, the pages a forker touches, and
/// whether the instances map apart; `hvo`: the pool's pages made with
/// HVO on, else off (where the kernel has the sysctl; pages already in the
/// pool stay as they were made).
pub(super) fn host(programs: &[Program], size: u64, each: (u32, u64, bool), hvo: bool) -> Result<Round> {
    use foliomm_host::sysfs;
    let pool = || {
        if hvo || std::path::Path::new(sysfs::HVO_PATH).exists() {
            sysfs::set_hvo(hvo)?;
        }
        sysfs::set(&sysfs::hugetlb_path(HugeSize::Pmd, "nr_hugepages"), &(size / HPAGE).to_string())
    };
    let r = pool().map_err(anyhow::Error::msg).and_then(|()| host_round(programs, size, each));
    sysfs::restore_all();
    Ok(Round { rates: r?, transfers: Transfers::default(), ops: 0.0 })
}

fn host_round(
    programs: &[Program],
    size: u64,
    (loops, touched, apart): (u32, u64, bool),
) -> Result<Vec<(Program, f64)>> {
    let fd = memfd(c"foliomm-seed-002", size, true).context("memfd_create(MFD_HUGETLB)")?;
    // The instances' loop gate (workers::Gate), a word in a page they share.
    let gate = memfd(c"foliomm-seed-002-gate", 4096, false).context("memfd_create")?;
    // The file's pages exist before the clock starts (one untimed loop).
    let faulted = host_loop(fd.as_fd(), Program::Fault, (area_at(false, 0), size), 0, None);
    ensure!(faulted, "host: cannot fault the hugetlbfs file in");
    // Each instance opens the file anew through this process's descriptor.
    let path = |fd: &std::os::fd::OwnedFd| format!("/proc/{}/fd/{}", std::process::id(), fd.as_raw_fd());
    let (path, gate) = (path(&fd), path(&gate));
    let workers = Workers::fork(programs.len(), |i| {
        let skip = first_skip(programs, i, size).to_string();
        let words = [programs[i].name(), &path, &area_at(apart, i).to_string(), &size.to_string(), &skip];
        // This binary, even if rebuilt meanwhile; its errors on stderr.
        let run = std::process::Command::new("/proc/self/exe")
            .arg(PROGRAM_ARG)
            .args(words)
            .args([loops.to_string(), touched.to_string(), gate.clone(), programs.len().to_string()])
            .stderr(std::process::Stdio::inherit())
            .output();
        let out = run.ok().filter(|o| o.status.success());
        if out.is_none() {
            // It may have failed (or been killed) before it could count
            // itself: the others must not wait for it.
            release_gate(&gate, programs.len() as u32);
        }
        let rate = out.and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse::<f64>().ok());
        [rate.unwrap_or(-1.0).to_bits()]
    })
    .context("host fork")?;
    let rates = host_rates(workers, "host: an instance failed")?;
    Ok(rates.into_iter().map(|(i, rate)| (programs[i], rate)).collect())
}

/// The first argument that makes the foliomm binary run one host instance
/// of seed 002's programs: `__seed-002-program fork|fault FILE AT SIZE
/// SKIP LOOPS TOUCHED GATE INSTANCES`, which prints its operations per
/// second (it starts SKIP huge pages into its first loop: [`first_skip`]).
/// It loops as [`Loops::Overlapping`] says, with the counter at the start
/// of the file GATE, which all INSTANCES share.
pub const PROGRAM_ARG: &str = "__seed-002-program";

/// One host instance, run as a process of its own, small as the seed's C
/// programs were: a fork copies the forking process's page tables, and a
/// copy of this benchmark (which has run model machines) forked at a
/// tenth of the seed's rate. Returns false for arguments it does not take
/// or a failed system call.
pub fn program_main(args: &[std::ffi::OsString]) -> bool {
    let fail = |why: &str| {
        eprintln!("foliomm {PROGRAM_ARG}: {why}");
        false
    };
    if let Err(e) = foliomm_host::sys::die_with_parent() {
        return fail(&format!("PR_SET_PDEATHSIG: {e}"));
    }
    let words: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let [program, path, at, size, skip, loops, touched, gate, instances] = &words[..] else {
        return fail("expected: fork|fault FILE AT SIZE SKIP LOOPS TOUCHED GATE INSTANCES");
    };
    let program = match program.as_str() {
        "fork" => Program::Fork,
        "fault" => Program::Fault,
        other => return fail(&format!("expected fork or fault, found '{other}'")),
    };
    let open = |path: &str| std::fs::OpenOptions::new().read(true).write(true).open(path);
    let numbers = (at.parse(), size.parse(), skip.parse(), loops.parse::<u32>(), touched.parse(), instances.parse());
    let (Ok(file), Ok(gate), (Ok(at), Ok(size), Ok(skip), Ok(loops), Ok(touched), Ok(workers))) =
        (open(path), open(gate), numbers)
    else {
        return fail(&format!(
            "cannot open {path} or {gate}, or AT, SIZE, SKIP, LOOPS, TOUCHED or INSTANCES is not a number"
        ));
    };
    let Ok(shared) = Map::file(Some((gate.as_fd(), 0))).shared(true).map(4096) else {
        return fail("cannot map the gate");
    };
    let gate = Gate { loops: Loops::Overlapping(loops), workers, through: shared.word(0) };
    let mut started = None;
    if skip > 0 {
        match map_area(file.as_fd(), (at, size)) {
            Ok(m) => {
                m.write_every(0..(skip * HPAGE) as usize, HPAGE as usize, 1);
                started = Some((m, skip));
            }
            Err(e) => return fail(&format!("mmap: {e}")),
        }
    }
    let t = Instant::now();
    let step = |_: &mut ()| match host_loop(file.as_fd(), program, (at, size), touched, started.take()) {
        true => Ok(()),
        false => Err(anyhow::anyhow!("a system call of the {} program failed", program.name())),
    };
    let loops = match gate.run(&mut (), &mut { step }) {
        Ok(made) => made,
        Err(e) => return fail(&e.to_string()),
    };
    let ops = program.ops(loops, size, skip);
    println!("{}", ops / t.elapsed().as_secs_f64());
    true
}

/// Releases the instances waiting at the gate in the file `path` for one
/// of `workers` that failed (best effort: a gate that cannot be mapped has
/// no waiter).
fn release_gate(path: &str, workers: u32) {
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path);
    let Ok(file) = file else { return };
    if let Ok(shared) = Map::file(Some((file.as_fd(), 0))).shared(true).map(4096) {
        let through = shared.word(0);
        Gate { loops: Loops::Overlapping(0), workers, through }.release();
    }
}

/// The host side of the model's loop (`seed_002::model_loop`) over the
/// hugetlbfs file `file`; `started`: the area mapped and faulted up to
/// this huge page already. False if a system call failed.
fn host_loop(
    file: std::os::fd::BorrowedFd<'_>,
    program: Program,
    (at, size): (u64, u64),
    touched: u64,
    started: Option<(Mapping, u64)>,
) -> bool {
    let (m, from) = match started {
        Some(s) => s,
        None => match map_area(file, (at, size)) {
            Ok(m) => (m, 0),
            Err(_) => return false,
        },
    };
    let faulted = if program == Program::Fault { size } else { touched * HPAGE };
    m.write_every((from * HPAGE) as usize..faulted as usize, HPAGE as usize, 1);
    (program != Program::Fork || fork_child_that_exits().is_ok()) && m.unmap().is_ok()
}

/// `mmap(at, size, MAP_SHARED)` of the hugetlbfs file `file`.
fn map_area(file: std::os::fd::BorrowedFd<'_>, (at, size): (u64, u64)) -> std::io::Result<Mapping> {
    Map::file(Some((file, 0))).shared(true).near(at as usize).map(size as usize)
}
