//! The state of a run: the backend, the machine settings, the mappings and
//! processes with their reference byte models, observations, pins and the
//! timing of `measure` blocks; and the dispatch of each step.

use std::any::Any;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use foliomm::internals::check::reference::{RefFiles, RefSpace};
use foliomm::internals::machine::HugeSize;

use super::{Contention, Failed, Measure, StepResult, ThreadOps};
use crate::backend::{Backend, Thread};
use crate::error::{BackendResult, StepError};
use crate::lang::{Cmd, MachineSetting, Place, Step, Tunable};
use crate::observation::Observation;
use crate::op::{Op, Reply};

/// A `measure` block being timed.
pub(super) struct OpenMeasure {
    pub(super) name: String,
    /// The backend time when it opened.
    start: Duration,
    /// Per thread ("P/tid"): lines run and their time in the backend.
    ops: BTreeMap<String, (u64, Duration)>,
    /// Its `parallel` blocks' contention on simulated CPUs, summed.
    pub(super) contention: Option<Contention>,
}

/// What a run keeps between steps.
pub(super) struct State<'b> {
    pub(super) backend: &'b dyn Backend,
    pub(super) started: bool,
    /// Machine settings in force, with the line that set each (0: the command line).
    pub(super) settings: Vec<(usize, MachineSetting)>,
    /// The line a failure belongs to when it is not the current step's.
    pub(super) failed_line: Option<usize>,
    pub(super) check: bool,
    /// With [`super::RunOptions::expected_reads`]: the current step's
    /// expected bytes so far, as runs.
    pub(super) expected_reads: Option<Vec<(u64, u8)>>,
    /// What the reference model says a read chunk holds, kept from chunk
    /// to chunk (a fresh buffer each time would fault in fresh host memory).
    pub(super) want: Vec<u8>,
    pub(super) maps: HashMap<String, (u64, u64)>,
    /// Mappings and files of hugetlb pages by name, with their page size
    /// (MADV_DONTNEED on them acts on whole huge pages only).
    pub(super) hugetlb: HashMap<String, HugeSize>,
    /// Each file by name: the backend's handle (a descriptor every process
    /// forked after its creation holds too) and the reference model's id.
    pub(super) files: HashMap<String, (u64, u64)>,
    /// System V segments by name: the backend's id, the reference model's
    /// file id and the segment's size.
    pub(super) segments: HashMap<String, (u64, u64, u64)>,
    /// What the run's reader should know: counters that read as Linux's
    /// own accounting anomalies, each with its line ([`super::Outcome::notes`]).
    pub(super) notes: Vec<String>,
    /// The processes holding a descriptor of each file: its creator and the
    /// children forked after.
    pub(super) holders: HashMap<String, HashSet<String>>,
    /// The files' bytes in the reference model, shared by the processes.
    pub(super) ref_files: RefFiles,
    pub(super) live: HashSet<String>,
    /// Processes made empty by their first line (no fork made them) while
    /// another existed, with that line: an EFAULT of theirs gets a hint.
    pub(super) created_empty: HashMap<String, usize>,
    /// Named threads of each process: their numbers, `None` once exited.
    pub(super) threads: HashMap<String, HashMap<String, Option<u32>>>,
    pub(super) exited: HashSet<String>,
    pub(super) refs: HashMap<String, RefSpace>,
    pub(super) obs: Vec<(String, Observation)>,
    /// Pins by name: the backend's handle and the thread that took it.
    pub(super) pins: HashMap<String, (u64, String, u32)>,
    /// The userfaultfds, their rules and registrations.
    pub(super) uffds: super::uffd_state::Uffds,
    /// Time spent inside the backend's calls.
    pub(super) backend_time: Duration,
    /// The open `measure` block.
    pub(super) measure: Option<OpenMeasure>,
    pub(super) measures: Vec<Measure>,
    /// While a `parallel` block's threads run: every backend result, kept
    /// to be replayed (see [`super::parallel`]).
    pub(super) record: Option<Vec<Box<dyn Any + Send>>>,
    /// While a `parallel` block's steps are checked: the results to return
    /// instead of calling the backend.
    pub(super) replay: Option<VecDeque<Box<dyn Any + Send>>>,
}

impl<'b> State<'b> {
    pub(super) fn new(backend: &'b dyn Backend, check: bool) -> Self {
        State {
            backend,
            started: false,
            settings: Vec::new(),
            failed_line: None,
            check,
            expected_reads: None,
            want: Vec::new(),
            maps: HashMap::new(),
            hugetlb: HashMap::new(),
            files: HashMap::new(),
            segments: HashMap::new(),
            holders: HashMap::new(),
            notes: Vec::new(),
            ref_files: RefFiles::default(),
            live: HashSet::new(),
            created_empty: HashMap::new(),
            threads: HashMap::new(),
            exited: HashSet::new(),
            refs: HashMap::new(),
            obs: Vec::new(),
            pins: HashMap::new(),
            uffds: Default::default(),
            backend_time: Duration::ZERO,
            measure: None,
            measures: Vec::new(),
            record: None,
            replay: None,
        }
    }

    /// Calls the backend, adding the time it takes to `backend_time`;
    /// records the result, or returns a recorded one instead of calling.
    pub(super) fn timed<T: Clone + Send + 'static>(&mut self, f: impl FnOnce(&dyn Backend) -> T) -> T {
        if let Some(log) = &mut self.replay {
            let r = log.pop_front().expect("a replayed step makes the calls it made when it ran");
            return *r.downcast::<T>().expect("a replayed call returns what it returned when it ran");
        }
        let t = Instant::now();
        let r = f(self.backend);
        self.backend_time += t.elapsed();
        if let Some(log) = &mut self.record {
            log.push(Box::new(r.clone()));
        }
        r
    }

    /// Performs `op` as thread `t`, timed (see [`State::timed`]).
    pub(super) fn perform(&mut self, t: Thread, op: Op) -> BackendResult<Reply> {
        self.timed(|b| b.perform(t, op))
    }

    /// A copy of what process `proc`'s lines read and change, calling the
    /// same backend: where a `parallel` thread runs its lines.
    pub(super) fn scratch(&self, proc: &str) -> State<'b> {
        let mut s = State::new(self.backend, false);
        s.started = true;
        s.maps = self.maps.clone();
        s.hugetlb = self.hugetlb.clone();
        s.files = self.files.clone();
        s.segments = self.segments.clone();
        s.holders = self.holders.clone();
        // The scratch copy writes files of its own, not the run's.
        s.ref_files = self.ref_files.snapshot();
        s.live = self.live.clone();
        s.threads = self.threads.clone();
        s.exited = self.exited.clone();
        s.pins = self.pins.clone();
        s.uffds = self.uffds.clone();
        let refs = self.refs.get(proc).map(|r| (proc.to_string(), r.with_files_of(&s.ref_files)));
        s.refs = refs.into_iter().collect();
        s
    }

    /// Counts `n` lines of `thread` that spent `time` in the backend
    /// towards the open `measure` block, if any.
    pub(super) fn count_ops(&mut self, thread: String, n: u64, time: Duration) {
        if let Some(m) = &mut self.measure {
            let e = m.ops.entry(thread).or_default();
            e.0 += n;
            e.1 += time;
        }
    }

    fn start(&mut self) -> Result<(), Failed> {
        if !self.started {
            for (line, s) in &self.settings {
                if let Some(why) = self.backend.refusal(s) {
                    self.failed_line = Some(*line);
                    let why = if *line == 0 { format!("{why} (from the command line)") } else { why };
                    return Err(StepError::Unsupported(why).into());
                }
            }
            let settings: Vec<MachineSetting> = self.settings.iter().map(|(_, s)| s.clone()).collect();
            self.backend.start(&settings)?;
            self.started = true;
        }
        Ok(())
    }

    /// The backend handle and the reference model's id of file `name`,
    /// which process `p` must hold a descriptor of.
    pub(super) fn file(&self, name: &str, p: &str) -> Result<(u64, u64), String> {
        let ids = *self.files.get(name).ok_or_else(|| format!("unknown file '{name}'"))?;
        if !self.holders.get(name).is_some_and(|ps| ps.contains(p)) {
            return Err(format!(
                "process {p} holds no descriptor of file '{name}' (it is inherited by children forked after the memfd)"
            ));
        }
        Ok(ids)
    }

    pub(super) fn place(&self, p: &Place) -> Result<(u64, u64), String> {
        let &(start, len) = self.maps.get(&p.map).ok_or_else(|| format!("unknown mapping '{}'", p.map))?;
        match p.range {
            None => Ok((start, len)),
            Some((s, e)) if e <= len => Ok((start + s, e - s)),
            Some((_, e)) => Err(format!("range end {e:#x} lies beyond mapping '{}' of {len:#x} bytes", p.map)),
        }
    }

    fn proc(&mut self, name: &str, line: usize) -> Result<(), Failed> {
        if self.exited.contains(name) {
            return Err(format!("process {name} has exited").into());
        }
        let others = !self.live.is_empty() || !self.exited.is_empty();
        if self.live.insert(name.to_string()) {
            if others {
                self.created_empty.insert(name.to_string(), line);
            }
            self.backend
                .perform(Thread::main(name), Op::Spawn)
                .map_err(|e| Failed::from(e).context(&format!("cannot create process {name}")))?;
            self.refs.insert(name.to_string(), RefSpace::with_files(self.ref_files.clone()));
        }
        Ok(())
    }

    /// Runs one step: settings and `measure` blocks here, the rest once the
    /// machine is started, as a process's step or a global one.
    pub(super) fn step(&mut self, step: &Step) -> StepResult {
        match &step.cmd {
            Cmd::SetMachine(setting) => {
                if self.started {
                    let names = crate::lang::settings::names(Some(crate::lang::settings::When::Machine));
                    let why = format!("machine settings ({names}) must come before the first step that uses the machine (set thp, or a process step)");
                    return Err(why.into());
                }
                // A later line (or a command-line override) wins over an earlier one.
                if !matches!(setting, MachineSetting::Debug(_)) {
                    self.settings.retain(|(_, s)| std::mem::discriminant(s) != std::mem::discriminant(setting));
                }
                self.settings.push((step.line, setting.clone()));
                return Ok(setting.to_string());
            }
            Cmd::Measure(name) => {
                if let Some(open) = &self.measure {
                    return Err(format!("measure {name} inside measure {}: blocks do not nest", open.name).into());
                }
                self.measure = Some(OpenMeasure {
                    name: name.clone(),
                    start: self.backend_time,
                    ops: BTreeMap::new(),
                    contention: None,
                });
                return Ok(format!("measuring {name}"));
            }
            Cmd::End => {
                let Some(m) = self.measure.take() else {
                    return Err("'end' without a 'measure'".into());
                };
                let seconds = (self.backend_time - m.start).as_secs_f64();
                let threads: Vec<ThreadOps> = m
                    .ops
                    .into_iter()
                    .map(|(thread, (ops, t))| ThreadOps { thread, ops, seconds: t.as_secs_f64() })
                    .collect();
                let ops = threads.iter().map(|t| t.ops).sum();
                let done = format!("{}: {seconds:.6} s in the backend, {ops} lines", m.name);
                self.measures.push(Measure { name: m.name, seconds, ops, threads, contention: m.contention });
                return Ok(done);
            }
            Cmd::Parallel(body) => {
                self.start()?;
                return self.parallel(body);
            }
            Cmd::SetCheck(on) => {
                self.check = *on;
                return Ok(format!("checker {}", if *on { "on" } else { "off" }));
            }
            _ => {}
        }
        self.start()?;
        let Some(p) = step.proc.clone() else {
            return self.global(step);
        };
        let tid = self.thread_of(step, &p)?;
        let before = self.backend_time;
        let r = self.process(step, p.clone(), tid).map_err(|e| self.hint(&p, step, e))?;
        self.count_ops(format!("{p}/{tid}"), 1, self.backend_time - before);
        Ok(r)
    }

    /// `e` of a step of process `p`, with a hint: an EFAULT of a process its
    /// first line made empty says so (it was probably meant to be forked);
    /// an ENOMEM of the model where its RAM ran out (not an mmap's or a
    /// mapping change's, which are about address space and VMAs, nor one
    /// with a tenth of the RAM free: a hugetlb pool's or a reservation's)
    /// says how much RAM it has and how to give more.
    fn hint(&self, p: &str, step: &Step, e: Failed) -> Failed {
        let mapping = matches!(
            step.cmd,
            Cmd::Mmap { .. } | Cmd::Mremap { .. } | Cmd::Mprotect(..) | Cmd::Munmap(_) | Cmd::Mlock(..)
        );
        let memory = self.settings.iter().rev().find_map(|(_, s)| match s {
            MachineSetting::Memory(b) | MachineSetting::MemoryLimit(b) | MachineSetting::MemoryAtLeast(b) => {
                Some((*b, format!("'{s}'")))
            }
            _ => None,
        });
        let (bytes, memory) = memory.unwrap_or((4 << 30, "the default 4G".to_string()));
        let full = || {
            let counters = self.backend.counters();
            let frames = counters.iter().find(|(n, _)| n == "frames_in_use").map_or(0, |&(_, v)| v);
            frames * 4096 >= bytes / 10 * 9
        };
        if e.message.contains("ENOMEM") && self.backend.name() == "model" && !mapping && full() {
            let message = format!(
                "{} (the model's RAM is {memory}: 'set memory SIZE' or --memory SIZE gives it more, 'set swap SIZE' \
                 a swap device)",
                e.message
            );
            return Failed { message, ..e };
        }
        match self.created_empty.get(p) {
            Some(line) if e.message.contains("EFAULT") => Failed {
                message: format!(
                    "{} (process {p} was made empty by its first line, {line}, not by a fork: it maps only \
                     what it mapped itself; 'PARENT: fork {p}' before it shares the parent's mappings)",
                    e.message
                ),
                ..e
            },
            _ => e,
        }
    }

    /// The number of the thread that runs `step` of process `p`, starting
    /// the process and the thread if they do not exist yet.
    pub(super) fn thread_of(&mut self, step: &Step, p: &str) -> Result<u32, Failed> {
        self.proc(p, step.line)?;
        match &step.thread {
            None => Ok(0),
            Some(name) => self.thread(p, name, matches!(step.cmd, Cmd::Exit)),
        }
    }

    /// The number of thread `name` of process `p`, started at its first line
    /// (unless that line is its `exit`).
    fn thread(&mut self, p: &str, name: &str, exiting: bool) -> Result<u32, Failed> {
        let threads = self.threads.entry(p.to_string()).or_default();
        match threads.get(name) {
            Some(Some(tid)) => return Ok(*tid),
            Some(None) => return Err(format!("thread {p}.{name} has exited").into()),
            None if exiting => {
                let why = format!(
                    "thread {p}.{name} cannot exit: it never started (a thread starts at its first line, and this \
                     'exit' is its first; inside 'parallel', a thread that only exits has nothing to run while the \
                     block waits for it)"
                );
                return Err(why.into());
            }
            None => {}
        }
        // Numbers are never reused: 0 is the first thread, named threads count from 1.
        let tid = threads.len() as u32 + 1;
        threads.insert(name.to_string(), Some(tid));
        self.perform(Thread { proc: p, tid }, Op::SpawnThread)
            .map_err(|e| Failed::from(e).context(&format!("cannot start thread {p}.{name}")))?;
        Ok(tid)
    }

    fn global(&mut self, step: &Step) -> StepResult {
        match &step.cmd {
            Cmd::Tune(t) => {
                self.backend.tune(t)?;
                Ok(match t {
                    Tunable::Thp { .. } => "thp set".into(),
                    Tunable::Shmem { .. } => "shmem set".into(),
                    Tunable::Hugetlb { pages, size, .. } => format!("{pages} huge pages of {}", size.name()),
                    Tunable::Khugepaged(_) => "khugepaged set".into(),
                    Tunable::HugetlbVmemmap(on) => format!("hugetlb_optimize_vmemmap {}", *on as u8),
                })
            }
            Cmd::Scan(daemon, passes) => {
                self.backend.scan(*daemon, *passes)?;
                Ok(format!("{passes} full scan{}", if *passes == 1 { "" } else { "s" }))
            }
            Cmd::Expect { lhs, op, rhs, only } => self.expect(step.line, lhs, *op, rhs, only),
            _ => unreachable!("process commands have a process"),
        }
    }
}
