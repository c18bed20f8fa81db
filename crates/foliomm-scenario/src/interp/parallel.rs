//! `parallel` ... `end`: each thread's lines run on an OS thread of their
//! own, all threads starting together, and the block ends when every one
//! has finished.
//!
//! The reference byte model is sequential, so a block must not depend on
//! timing: before anything runs, its lines are checked pairwise, and two
//! threads of one process may not touch overlapping bytes where either
//! writes or changes the mapping, nor write or change mappings while
//! another forks (a `madvise dontneed` that changes no byte, by the
//! reference model, counts as a read). The block then runs in two phases. First every thread
//! runs its lines against a scratch copy of the run's state, and every
//! backend result is recorded. Then the lines are run again, in line
//! order, against the real state, with the recorded results replayed
//! instead of calling the backend: results, errors and bytes are checked
//! exactly as for sequential lines.

use foliomm::internals::sync::sim::{self, CpuReport, Profile};
use foliomm::internals::sync::{thread, Barrier};
use std::any::Any;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::contention::Contention;
use super::state::State;
use super::{Failed, StepResult};
use crate::lang::{Cmd, Place, Step};
use foliomm::internals::mm::Advice;

/// The lines of one thread in a block, as indices into the block.
struct Group {
    proc: String,
    tid: u32,
    lines: Vec<usize>,
}

/// What one line does to its process's address space, for the timing check.
#[derive(Default)]
struct Footprint {
    /// Byte ranges read, written or remapped: `(start, end, changes)`.
    ranges: Vec<(u64, u64, bool)>,
    /// Mapping names the line binds.
    binds: Vec<String>,
    /// Mapping names the line uses.
    uses: Vec<String>,
    forks: bool,
}

type Log = Vec<Box<dyn Any + Send>>;

impl State<'_> {
    /// Runs a `parallel` block (see the module documentation).
    pub(super) fn parallel(&mut self, body: &[Step]) -> StepResult {
        let groups = self.groups(body)?;
        self.check_timing(body, &groups)?;
        let started = Instant::now();
        let (logs, busy, simulated) = self.run_threads(body, &groups)?;
        self.backend_time += started.elapsed();
        let mut logs: Vec<VecDeque<Log>> = logs.into_iter().map(VecDeque::from).collect();
        let group_of = |i: usize| groups.iter().position(|g| g.lines.contains(&i)).unwrap();
        for (i, step) in body.iter().enumerate() {
            let g = group_of(i);
            let fail = |f: Failed, st: &mut Self| {
                st.failed_line = Some(step.line);
                Err(f)
            };
            let Some(log) = logs[g].pop_front() else {
                return fail(
                    format!("thread {}/{} stopped before this line when it ran", groups[g].proc, groups[g].tid).into(),
                    self,
                );
            };
            self.replay = Some(log.into());
            let r = self.process(step, groups[g].proc.clone(), groups[g].tid);
            self.replay = None;
            if let Err(f) = r {
                return fail(f, self);
            }
        }
        let mut threads = Vec::new();
        for (g, b) in groups.iter().zip(&busy) {
            let name = format!("{}/{}", g.proc, g.tid);
            threads.push(format!("{name} {:.6} s", b.as_secs_f64()));
            self.count_ops(name, g.lines.len() as u64, *b);
        }
        let report = match simulated.map(|r| Contention::of(&r)) {
            Some(c) => {
                if let Some(m) = &mut self.measure {
                    m.contention.get_or_insert_with(Contention::default).add(&c);
                }
                format!("; {c}")
            }
            None => String::new(),
        };
        Ok(format!("{} lines in {} threads ({}){report}", body.len(), groups.len(), threads.join(", ")))
    }

    /// The block's lines grouped by thread, in order of first appearance;
    /// starts processes and threads that do not exist yet.
    fn groups(&mut self, body: &[Step]) -> Result<Vec<Group>, Failed> {
        let mut groups: Vec<Group> = Vec::new();
        let mut ended: Vec<(String, u32)> = Vec::new();
        for (i, step) in body.iter().enumerate() {
            let p = step.proc.clone().expect("the parser lets only process lines into a block");
            let fail = |st: &mut Self, m: String| {
                st.failed_line = Some(step.line);
                Err(Failed::from(m))
            };
            if step.thread.is_none() && matches!(step.cmd, Cmd::Exit) {
                return fail(self, format!("process {p} cannot exit inside a parallel block"));
            }
            let tid = self.thread_of(step, &p).inspect_err(|_| self.failed_line = Some(step.line))?;
            if ended.contains(&(p.clone(), tid)) {
                return fail(self, format!("a line of thread {p}/{tid} after its exit in the same block"));
            }
            if matches!(step.cmd, Cmd::Exit) {
                ended.push((p.clone(), tid));
            }
            match groups.iter_mut().find(|g| g.proc == p && g.tid == tid) {
                Some(g) => g.lines.push(i),
                None => groups.push(Group { proc: p, tid, lines: vec![i] }),
            }
        }
        Ok(groups)
    }

    /// Refuses a block whose outcome could depend on how its threads interleave.
    fn check_timing(&mut self, body: &[Step], groups: &[Group]) -> Result<(), Failed> {
        let mut prints: Vec<Footprint> = Vec::new();
        for (i, step) in body.iter().enumerate() {
            // Names the same thread bound earlier in the block are its own.
            let g = groups.iter().find(|g| g.lines.contains(&i)).unwrap();
            let own: Vec<&String> = g.lines.iter().take_while(|&&j| j < i).flat_map(|&j| &prints[j].binds).collect();
            let f = self.footprint(step, &own)?;
            prints.push(f);
        }
        for (a, ga) in groups.iter().enumerate() {
            for gb in groups.iter().skip(a + 1).filter(|gb| gb.proc == ga.proc) {
                for &i in &ga.lines {
                    for &j in &gb.lines {
                        if let Some(why) = clash(&prints[i], &prints[j]) {
                            self.failed_line = Some(body[j].line);
                            return Err(format!(
                                "lines {} and {} run in different threads of {} and {why}: the result would depend on timing",
                                body[i].line, body[j].line, ga.proc
                            )
                            .into());
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The ranges and names a line touches, resolved against the mappings
    /// as they are before the block, except for names in `own` (bound by
    /// the line's thread earlier in the block).
    fn footprint(&self, step: &Step, own: &[&String]) -> Result<Footprint, Failed> {
        let mut f = Footprint::default();
        let touch = |pl: &Place, changes: bool, f: &mut Footprint| -> Result<(), Failed> {
            f.uses.push(pl.map.clone());
            if self.maps.contains_key(&pl.map) && !own.contains(&&pl.map) {
                let (a, l) = self.place(pl)?;
                f.ranges.push((a, a.saturating_add(l), changes));
            }
            Ok(())
        };
        match &step.cmd {
            Cmd::Mmap { name, len, at, .. } => {
                f.binds.push(name.clone());
                if let Some(a) = at {
                    f.ranges.push((*a, a.saturating_add(*len), true));
                }
            }
            Cmd::Madvise(pl, Advice::DontNeed) if self.zap_keeps_bytes(step, pl) => touch(pl, false, &mut f)?,
            Cmd::Munmap(pl) | Cmd::Mprotect(pl, _) | Cmd::Madvise(pl, _) | Cmd::Mlock(pl, _) | Cmd::Split(pl, ..) => {
                touch(pl, true, &mut f)?
            }
            Cmd::MovePages(m) => touch(&m.place, true, &mut f)?,
            Cmd::Mbind(m) => touch(&m.place, true, &mut f)?,
            Cmd::NumaScan(pl) => touch(pl, true, &mut f)?,
            Cmd::Mremap { name, from, to, .. } => {
                touch(from, true, &mut f)?;
                if let Some(t) = to {
                    touch(&Place { map: t.clone(), range: None }, true, &mut f)?;
                }
                f.binds.push(name.clone());
            }
            Cmd::Write { place, .. } | Cmd::Pattern { place, .. } => touch(place, true, &mut f)?,
            Cmd::Read { place, .. } | Cmd::Observe { place, .. } | Cmd::Pin { place, .. } => {
                touch(place, false, &mut f)?
            }
            Cmd::Fork(_) => f.forks = true,
            Cmd::CreateFile { .. }
            | Cmd::Close(_)
            | Cmd::Unlink(_)
            | Cmd::Seal { .. }
            | Cmd::ShmGet { .. }
            | Cmd::ShmAt { .. }
            | Cmd::ShmDt(_)
            | Cmd::ShmRm(_)
            | Cmd::Truncate { .. }
            | Cmd::Punch { .. }
            | Cmd::Fallocate { .. }
            | Cmd::Pwrite { .. }
            | Cmd::Pread { .. } => return Err("file and segment commands cannot run inside a parallel block".into()),
            _ => {}
        }
        Ok(f)
    }

    /// Whether `MADV_DONTNEED` of `pl` leaves every byte reading as before
    /// (private memory that holds only zeros, or shared file pages): then it
    /// counts as a read, and may race other reads of its range (a stale TLB
    /// entry read in that race is what the free-before-flush switch breaks).
    fn zap_keeps_bytes(&self, step: &Step, pl: &Place) -> bool {
        let (Some(rs), Ok((addr, len))) = (step.proc.as_ref().and_then(|p| self.refs.get(p)), self.place(pl)) else {
            return false;
        };
        let mut after = rs.clone();
        after.zap(addr, len);
        matches!((rs.clone().read(addr, len), after.read(addr, len)), (Ok(a), Ok(b)) if a == b)
    }

    /// Phase one: every group on its own OS thread against a scratch copy
    /// of the state, all released together (or, with simulated CPUs, one
    /// at a time in virtual time: [`Self::run_simulated`]); each line's
    /// recorded results, and each thread's time in the backend.
    fn run_threads(&self, body: &[Step], groups: &[Group]) -> Result<Phase, Failed> {
        if let Some(cpus) = self.backend.simulated_cpus() {
            return self.run_simulated(body, groups, cpus);
        }
        let barrier = Barrier::new(groups.len());
        let (logs, busy) = thread::scope(|s| {
            let handles: Vec<_> = groups
                .iter()
                .map(|g| {
                    let mut scratch = self.scratch(&g.proc);
                    let barrier = &barrier;
                    s.spawn(move || {
                        barrier.wait();
                        run_lines(&mut scratch, body, g)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("a parallel thread panicked")).unzip()
        });
        Ok((logs, busy, None))
    }

    /// [`Self::run_threads`] on `cpus` simulated CPUs, a thread each
    /// ([`sim`]: the seed 1, the two-socket profile); the block's
    /// CPUs' reports come back for the block's contention report.
    fn run_simulated(&self, body: &[Step], groups: &[Group], cpus: usize) -> Result<Phase, Failed> {
        if groups.len() > cpus {
            return Err(format!(
                "a block of {} threads needs as many simulated CPUs (set sim_cpus {cpus})",
                groups.len()
            )
            .into());
        }
        let scratches: Vec<_> = groups.iter().map(|g| std::sync::Mutex::new(Some(self.scratch(&g.proc)))).collect();
        let (results, reports) = sim::run(groups.len(), Profile::two_socket_server(), 1, 0, |i| {
            let mut scratch = scratches[i].lock().unwrap().take().expect("each CPU runs once");
            run_lines(&mut scratch, body, &groups[i])
        });
        let (logs, busy) = results.into_iter().unzip();
        Ok((logs, busy, Some(reports)))
    }
}

/// Phase one's outcome: each thread's logs and backend time, and with
/// simulated CPUs their reports.
type Phase = (Vec<Vec<Log>>, Vec<Duration>, Option<Vec<CpuReport>>);

/// Runs group `g`'s lines against `scratch`, recording each line's results,
/// until one fails; the logs and the time spent in the backend.
fn run_lines(scratch: &mut State, body: &[Step], g: &Group) -> (Vec<Log>, Duration) {
    let mut logs = Vec::new();
    for &i in &g.lines {
        scratch.record = Some(Vec::new());
        let r = scratch.process(&body[i], g.proc.clone(), g.tid);
        logs.push(scratch.record.take().unwrap());
        if r.is_err() {
            break;
        }
    }
    (logs, scratch.backend_time)
}

/// Why lines `a` and `b` of two threads of one process cannot run
/// together, if they cannot.
fn clash(a: &Footprint, b: &Footprint) -> Option<String> {
    let binds_used =
        |x: &Footprint, y: &Footprint| x.binds.iter().find(|n| y.uses.contains(n) || y.binds.contains(n)).cloned();
    if let Some(n) = binds_used(a, b).or_else(|| binds_used(b, a)) {
        return Some(format!("one binds mapping '{n}' the other uses"));
    }
    let changes = |f: &Footprint| f.ranges.iter().any(|r| r.2) || !f.binds.is_empty();
    if (a.forks && changes(b)) || (b.forks && changes(a)) {
        return Some("one forks while the other writes or changes mappings".into());
    }
    for &(s1, e1, c1) in &a.ranges {
        for &(s2, e2, c2) in &b.ranges {
            if s1 < e2 && s2 < e1 && (c1 || c2) {
                return Some(format!("both touch [{:#x}, {:#x}) and one changes it", s1.max(s2), e1.min(e2)));
            }
        }
    }
    None
}
