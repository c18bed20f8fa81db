//! The interpreter: runs parsed steps on a [`Backend`], keeps the reference
//! byte model of every process beside it (every read is compared with it),
//! records observations, evaluates `expect` lines and, when asked, runs the
//! backend's invariant checker after every step. It stops at the first failure.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use foliomm::check::reference::RefSpace;
use foliomm::mm::Advice;
use foliomm::Errno;

use crate::backend::{Access, Backend, Observation};
use crate::lang::{Cmd, MachineSetting, Operand, Place, Step};

/// Options of a run.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOptions {
    /// Run the invariant checker after every step (a `set check` line overrides).
    pub check: bool,
}

/// What one step did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StepOutcome {
    pub line: usize,
    pub text: String,
    pub result: String,
    /// What an `observe` step recorded.
    pub observed: Option<Observation>,
}

/// Why a run stopped early.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Failure {
    pub line: usize,
    pub message: String,
}

/// The result of a run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Outcome {
    pub backend: String,
    pub steps: Vec<StepOutcome>,
    pub observations: Vec<(String, Observation)>,
    pub counters: Vec<(String, u64)>,
    pub measures: Vec<Measure>,
    pub failure: Option<Failure>,
}

struct State<'b> {
    backend: &'b mut dyn Backend,
    started: bool,
    /// Machine settings in force, with the line that set each (0: the command line).
    settings: Vec<(usize, MachineSetting)>,
    /// The line a failure belongs to when it is not the current step's.
    failed_line: Option<usize>,
    check: bool,
    maps: HashMap<String, (u64, u64)>,
    live: HashSet<String>,
    exited: HashSet<String>,
    refs: HashMap<String, RefSpace>,
    obs: Vec<(String, Observation)>,
    pins: HashMap<String, u64>,
    /// Time spent inside the backend's calls.
    backend_time: Duration,
    /// The open `measure` block: its name and the backend time at its start.
    measure: Option<(String, Duration)>,
    measures: Vec<Measure>,
}

/// A `measure` block's result: time spent in the backend by its steps.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Measure {
    pub name: String,
    pub seconds: f64,
}

type StepResult = Result<String, String>;

/// Runs `steps` on `backend`.
pub fn run(steps: &[Step], backend: &mut dyn Backend, opts: RunOptions) -> Outcome {
    let mut st = State {
        backend,
        started: false,
        settings: Vec::new(),
        failed_line: None,
        check: opts.check,
        maps: HashMap::new(),
        live: HashSet::new(),
        exited: HashSet::new(),
        refs: HashMap::new(),
        obs: Vec::new(),
        pins: HashMap::new(),
        backend_time: Duration::ZERO,
        measure: None,
        measures: Vec::new(),
    };
    let mut outcomes = Vec::new();
    let mut failure = None;
    for step in steps {
        let r = st.step(step).and_then(|msg| {
            if st.check && st.started && st.measure.is_none() {
                let bad = st.backend.check();
                if !bad.is_empty() {
                    return Err(format!("invariant checker after this step:\n  {}", bad.join("\n  ")));
                }
            }
            Ok(msg)
        });
        match r {
            Ok(result) => {
                let observed = matches!(step.cmd, Cmd::Observe { .. } | Cmd::ObservePin { .. })
                    .then(|| st.obs.last().map(|(_, o)| *o))
                    .flatten();
                outcomes.push(StepOutcome { line: step.line, text: step.text.clone(), result, observed })
            }
            Err(message) => {
                failure = Some(Failure { line: st.failed_line.unwrap_or(step.line), message });
                break;
            }
        }
    }
    // Processes still alive at the end exit, so leaks show in the counters.
    let mut live: Vec<String> = st.live.drain().collect();
    live.sort();
    for p in live {
        st.backend.exit(&p);
    }
    if let (Some((name, _)), None) = (&st.measure, &failure) {
        failure =
            Some(Failure { line: steps.last().map_or(0, |s| s.line), message: format!("measure {name} has no 'end'") });
    }
    Outcome {
        backend: st.backend.name().into(),
        steps: outcomes,
        observations: st.obs,
        counters: st.backend.counters(),
        measures: st.measures,
        failure,
    }
}

fn errno(e: Errno) -> String {
    e.name().to_string()
}

/// Compares a backend result with the reference's, given the expected failure.
fn outcome<T>(step: &Step, r: Result<T, Errno>) -> Result<Option<T>, String> {
    match (r, step.fails) {
        (Ok(v), None) => Ok(Some(v)),
        (Err(e), Some(want)) if e == want => Ok(None),
        (Err(e), Some(want)) => Err(format!("failed with {}, expected {}", errno(e), errno(want))),
        (Err(e), None) => Err(format!("failed with {e}")),
        (Ok(_), Some(want)) => Err(format!("succeeded, expected it to fail with {}", errno(want))),
    }
}

impl State<'_> {
    /// Calls the backend, adding the time it takes to `backend_time`.
    fn timed<T>(&mut self, f: impl FnOnce(&mut dyn Backend) -> T) -> T {
        let t = Instant::now();
        let r = f(&mut *self.backend);
        self.backend_time += t.elapsed();
        r
    }

    fn start(&mut self) -> Result<(), String> {
        if !self.started {
            for (line, s) in &self.settings {
                if let Some(why) = self.backend.refusal(s) {
                    self.failed_line = Some(*line);
                    return Err(if *line == 0 { format!("{why} (from the command line)") } else { why });
                }
            }
            let settings: Vec<MachineSetting> = self.settings.iter().map(|(_, s)| s.clone()).collect();
            self.backend.start(&settings).map_err(|e| e.0)?;
            self.started = true;
        }
        Ok(())
    }

    fn place(&self, p: &Place) -> Result<(u64, u64), String> {
        let &(start, len) = self.maps.get(&p.map).ok_or_else(|| format!("unknown mapping '{}'", p.map))?;
        match p.range {
            None => Ok((start, len)),
            Some((s, e)) if e <= len => Ok((start + s, e - s)),
            Some((_, e)) => Err(format!("range end {e:#x} lies beyond mapping '{}' of {len:#x} bytes", p.map)),
        }
    }

    fn proc(&mut self, name: &str) -> Result<(), String> {
        if self.exited.contains(name) {
            return Err(format!("process {name} has exited"));
        }
        if self.live.insert(name.to_string()) {
            self.backend.spawn(name).map_err(|e| format!("cannot create process {name}: {e}"))?;
            self.refs.insert(name.to_string(), RefSpace::default());
        }
        Ok(())
    }

    fn step(&mut self, step: &Step) -> StepResult {
        match &step.cmd {
            Cmd::SetMachine(setting) => {
                if self.started {
                    return Err(
                        "machine settings (memory, mapcount, zap, tlb, mm_ids, debug) must come before the first step that uses the machine (set thp, or a process step)".into(),
                    );
                }
                // A later line (or a command-line override) wins over an earlier one.
                if !matches!(setting, MachineSetting::Debug(_)) {
                    self.settings.retain(|(_, s)| std::mem::discriminant(s) != std::mem::discriminant(setting));
                }
                self.settings.push((step.line, setting.clone()));
                return Ok(format!("{setting:?}"));
            }
            Cmd::Measure(name) => {
                if let Some((open, _)) = &self.measure {
                    return Err(format!("measure {name} inside measure {open}: blocks do not nest"));
                }
                self.measure = Some((name.clone(), self.backend_time));
                return Ok(format!("measuring {name}"));
            }
            Cmd::End => {
                let Some((name, start)) = self.measure.take() else {
                    return Err("'end' without a 'measure'".into());
                };
                let seconds = (self.backend_time - start).as_secs_f64();
                self.measures.push(Measure { name: name.clone(), seconds });
                return Ok(format!("{name}: {seconds:.6} s in the backend"));
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
        self.proc(&p)?;
        match &step.cmd {
            Cmd::Mmap { name, len, prot, populate, at, fixed, align } => {
                // With `align`, map `len + align` and unmap what lies outside
                // the aligned part, as the kernel selftests do.
                let extra = align.unwrap_or(0);
                let got = self.timed(|b| b.mmap(&p, *at, len + extra, *prot, *fixed, *populate));
                let Some(raw) = outcome(step, got)? else { return Ok("failed as expected".into()) };
                let addr = align.map_or(raw, |a| raw.div_ceil(a) * a);
                let trim = |e: Errno| format!("trimming the aligned mapping failed with {e}");
                if addr > raw {
                    self.timed(|b| b.munmap(&p, raw, addr - raw)).map_err(trim)?;
                }
                if raw + len + extra > addr + len {
                    self.timed(|b| b.munmap(&p, addr + len, raw + len + extra - (addr + len))).map_err(trim)?;
                }
                self.maps.insert(name.clone(), (addr, *len));
                self.refs.get_mut(&p).unwrap().map(addr, *len, *prot);
                Ok(format!("{name} = {addr:#x}"))
            }
            Cmd::Munmap(pl) => {
                let (a, l) = self.place(pl)?;
                if outcome(step, self.timed(|b| b.munmap(&p, a, l)))?.is_some() {
                    self.refs.get_mut(&p).unwrap().unmap(a, l);
                }
                Ok("ok".into())
            }
            Cmd::Mprotect(pl, prot) => {
                let (a, l) = self.place(pl)?;
                if outcome(step, self.timed(|b| b.mprotect(&p, a, l, *prot)))?.is_some() {
                    self.refs.get_mut(&p).unwrap().protect(a, l, *prot);
                }
                Ok("ok".into())
            }
            Cmd::Madvise(pl, adv) => {
                let (a, l) = self.place(pl)?;
                let r = self.timed(|b| b.madvise(&p, a, l, *adv));
                if *adv == Advice::DontNeed {
                    self.refs.get_mut(&p).unwrap().zap(a, l);
                }
                outcome(step, r)?;
                Ok("ok".into())
            }
            Cmd::Mremap { name, from, size, to } => {
                let (a, l) = self.place(from)?;
                let new_len = size.unwrap_or(l);
                let target = match to {
                    Some(t) => Some(self.place(&Place { map: t.clone(), range: None })?.0),
                    None => None,
                };
                let Some(n) = outcome(step, self.timed(|b| b.mremap(&p, a, l, new_len, target)))? else {
                    return Ok("failed as expected".into());
                };
                let rs = self.refs.get_mut(&p).unwrap();
                if target.is_some() {
                    rs.unmap(n, new_len);
                }
                rs.remap(a, l.min(new_len), n, new_len);
                if n != a {
                    rs.unmap(a, l);
                }
                self.maps.insert(name.clone(), (n, new_len));
                Ok(format!("{name} = {n:#x}"))
            }
            Cmd::Fork(child) => {
                if self.live.contains(child) || self.exited.contains(child) {
                    return Err(format!("process {child} already exists"));
                }
                if outcome(step, self.timed(|b| b.fork(&p, child)))?.is_some() {
                    let copy = self.refs[&p].clone();
                    self.refs.insert(child.clone(), copy);
                    self.live.insert(child.clone());
                }
                Ok(format!("{child} forked"))
            }
            Cmd::Exit => {
                self.timed(|b| b.exit(&p));
                self.live.remove(&p);
                self.refs.remove(&p);
                self.exited.insert(p.clone());
                Ok("exited".into())
            }
            Cmd::Wait(child) => {
                if self.exited.contains(child) {
                    Ok(format!("{child} reaped"))
                } else {
                    Err(format!("wait: process {child} has not exited"))
                }
            }
            Cmd::Write { place, val, every_byte } => {
                let (a, l) = self.place(place)?;
                let val = val.unwrap_or((step.line % 251 + 1) as u8);
                let r = self.timed(|b| b.access(&p, a, l, Access::Write { val, every_byte: *every_byte }));
                if outcome(step, r)?.is_some() {
                    let rs = self.refs.get_mut(&p).unwrap();
                    let expected = if *every_byte { rs.fill(a, l, val) } else { rs.write_byte_per_page(a, l, val) };
                    if let Err(e) = expected {
                        return Err(format!("the write succeeded but the reference model says it fails with {e}"));
                    }
                }
                Ok(format!("wrote {val:#04x}"))
            }
            Cmd::Pattern { place, seed } => {
                let (a, l) = self.place(place)?;
                let origin = self.maps[&place.map].0;
                if outcome(step, self.timed(|b| b.access(&p, a, l, Access::Pattern { origin, seed: *seed })))?.is_some()
                {
                    let data = crate::backend::pattern_bytes(origin, a, l, *seed);
                    let rs = self.refs.get_mut(&p).unwrap();
                    rs.write(a, &data)
                        .map_err(|e| format!("the write succeeded but the reference model says it fails with {e}"))?;
                }
                Ok(format!("wrote pattern {seed}"))
            }
            Cmd::Read { place, every_byte } => {
                let (a, l) = self.place(place)?;
                let got = self.timed(|b| b.access(&p, a, l, Access::Read { every_byte: *every_byte }));
                let Some(got) = outcome(step, got)? else {
                    return Ok("failed as expected".into());
                };
                let rs = self.refs.get_mut(&p).unwrap();
                let want = if *every_byte { rs.read(a, l) } else { rs.read_byte_per_page(a, l) };
                let want =
                    want.map_err(|e| format!("the read succeeded but the reference model says it fails with {e}"))?;
                compare_bytes(a, *every_byte, &got, &want)?;
                Ok(format!("{} bytes as expected", got.len()))
            }
            Cmd::Observe { place, name } => {
                let (a, l) = self.place(place)?;
                let Some(o) = outcome(step, self.timed(|b| b.observe(&p, a, l)))? else {
                    return Ok("failed as expected".into());
                };
                Ok(self.record(name, o))
            }
            Cmd::Pin { name, place, kind } => {
                if !self.backend.supports_gup(*kind) {
                    return Err(format!(
                        "cannot honour {kind:?}: the {} backend cannot take that GUP reference",
                        self.backend.name()
                    ));
                }
                let (a, l) = self.place(place)?;
                let Some(id) = outcome(step, self.timed(|b| b.pin(&p, a, l, *kind)))? else {
                    return Ok("failed as expected".into());
                };
                self.pins.insert(name.clone(), id);
                Ok(format!("{name} pinned"))
            }
            Cmd::Unpin(name) => {
                let id = self.pins.remove(name).ok_or_else(|| format!("unknown pin '{name}'"))?;
                outcome(step, self.timed(|b| b.unpin(id)))?;
                Ok(format!("{name} unpinned"))
            }
            Cmd::ObservePin { pin, name } => {
                let id = *self.pins.get(pin).ok_or_else(|| format!("unknown pin '{pin}'"))?;
                let Some(o) = outcome(step, self.timed(|b| b.observe_pin(id)))? else {
                    return Ok("failed as expected".into());
                };
                Ok(self.record(name, o))
            }
            _ => unreachable!("global commands have no process"),
        }
    }

    fn global(&mut self, step: &Step) -> StepResult {
        match &step.cmd {
            Cmd::SetThp { enabled, sizes } => {
                self.backend.set_thp(*enabled, sizes).map_err(|e| e.0)?;
                Ok("thp set".into())
            }
            Cmd::Expect { lhs, op, rhs, designs } => {
                let design = self.design();
                if !designs.is_empty() && !designs.contains(&design) {
                    return Ok(format!("skipped: only for {} (this run: {design})", designs.join(", ")));
                }
                let is_stat = |o: &Operand| matches!(o, Operand::Field { obj, .. } if obj == "stat");
                if !self.backend.exact_counters() && (is_stat(lhs) || is_stat(rhs)) {
                    return Ok(format!("skipped: counters on the {} backend are system-wide", self.backend.name()));
                }
                let hidden = |o: &Operand| match o {
                    Operand::Field { obj, field }
                        if obj != "stat" && Observation::field_names().any(|f| f == field) =>
                    {
                        let via_gup = self.obs.iter().any(|(n, ob)| n == obj && ob.via_gup);
                        !if via_gup { self.backend.observes_through_gup(field) } else { self.backend.observes(field) }
                    }
                    _ => false,
                };
                if hidden(lhs) || hidden(rhs) {
                    return Ok(format!("skipped: the {} backend cannot observe that field", self.backend.name()));
                }
                let (a, an) = self.operand(lhs)?;
                let (b, bn) = self.operand(rhs)?;
                if op.holds(a, b) {
                    Ok(format!("{an} {} {bn}", op.symbol()))
                } else {
                    Err(format!("expectation failed: {an} {} {bn}", op.symbol()))
                }
            }
            _ => unreachable!("process commands have a process"),
        }
    }

    /// The mapcount design of this run: the last `set mapcount`, or the
    /// backend's own (the host kernel, and the model's default, are mm-id).
    fn design(&self) -> String {
        self.settings
            .iter()
            .rev()
            .find_map(|(_, s)| match s {
                MachineSetting::Mapcount(d) => Some(d.clone()),
                _ => None,
            })
            .unwrap_or_else(|| foliomm::machine::Config::default().mapcount)
    }

    /// Keeps an observation under `name`; returns a one-line summary.
    fn record(&mut self, name: &str, o: Observation) -> String {
        let pg = &o.page;
        let summary = format!(
            "{name}: frame {:#x} order {} {} {}{}rss {}K thp {}K",
            pg.pfn,
            pg.folio_order,
            if pg.present { "present" } else { "absent" },
            if pg.exclusive { "exclusive " } else { "" },
            if pg.pmd_mapped { "pmd " } else { "" },
            o.range.rss_kb,
            o.range.anon_huge_kb
        );
        self.obs.retain(|(n, _)| n != name);
        self.obs.push((name.to_string(), o));
        summary
    }

    /// The value of an operand and a description of it for messages.
    fn operand(&self, o: &Operand) -> Result<(u64, String), String> {
        match o {
            Operand::Num(n) => Ok((*n, n.to_string())),
            Operand::Bool(b) => Ok((*b as u64, b.to_string())),
            Operand::Field { obj, field } if obj == "stat" => {
                let v = self.backend.counters().into_iter().find(|(n, _)| n == field).map(|(_, v)| v);
                let v = v.ok_or_else(|| format!("no counter '{field}' on the {} backend", self.backend.name()))?;
                Ok((v, format!("stat.{field} (= {v})")))
            }
            Operand::Field { obj, field } => {
                let (_, ob) =
                    self.obs.iter().find(|(n, _)| n == obj).ok_or_else(|| format!("no observation named '{obj}'"))?;
                let v = ob.field(field).ok_or_else(|| {
                    format!(
                        "no field '{field}' (fields: {})",
                        Observation::field_names().collect::<Vec<_>>().join(", ")
                    )
                })?;
                let shown = if field == "frame" { format!("{v:#x}") } else { v.to_string() };
                Ok((v, format!("{obj}.{field} (= {shown})")))
            }
        }
    }
}

fn compare_bytes(addr: u64, every_byte: bool, got: &[u8], want: &[u8]) -> Result<(), String> {
    match got.iter().zip(want).position(|(g, w)| g != w) {
        None if got.len() == want.len() => Ok(()),
        None => Err(format!("read {} bytes, the reference has {}", got.len(), want.len())),
        Some(i) => {
            let at = addr + if every_byte { i as u64 } else { i as u64 * 4096 };
            Err(format!(
                "data integrity: the byte at {at:#x} reads {:#04x}, the reference model says {:#04x}",
                got[i], want[i]
            ))
        }
    }
}
