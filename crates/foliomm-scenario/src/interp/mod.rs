//! The interpreter: runs parsed steps on a [`Backend`], keeps the reference
//! byte model of every process beside it (every read is compared with it),
//! records observations, evaluates `expect` lines and, when asked, runs the
//! backend's invariant checker after every step. It stops at the first failure
//! (with [`RunOptions::keep_going`], at the first that is not an `expect`).
//!
//! `state` holds what a run keeps between steps and dispatches each step,
//! `process` runs the steps of a process against the backend and the
//! reference, and `expect` records observations and evaluates `expect` lines.

mod contention;
mod expect;
mod file_cmd;
mod mapping_cmd;
pub mod now;
mod parallel;
mod process;
mod shm_cmd;
mod state;
mod trace;
mod uffd_cmd;
mod uffd_state;

use crate::backend::Backend;
use crate::error::StepError;
use crate::lang::{Cmd, Step};
use crate::observation::Observation;
pub use contention::Contention;
use foliomm::internals::check::Scope;
use state::State;
pub use trace::TracePage;

/// Options of a run.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOptions {
    /// Run the invariant checker after every step (a `set check` line
    /// overrides): over what the step could have changed, in full after
    /// the last step and every `check_every` steps, or when due
    /// ([`Scope::Due`]).
    pub check: bool,
    /// Every check in full (`run --check=full`).
    pub check_full: bool,
    /// Steps between full checks; 0: when due.
    pub check_every: usize,
    /// Record each step's [`TracePage`]s.
    pub trace: bool,
    /// Record what the reference model expected each read to return
    /// ([`StepOutcome::expected`]): for a C reproducer that checks bytes
    /// without foliomm.
    pub expected_reads: bool,
    /// Go on after a failed `expect` line (each is recorded in
    /// [`Outcome::failed_expects`]); any other failure still stops the run.
    pub keep_going: bool,
}

/// What one step did.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct StepOutcome {
    pub line: usize,
    pub text: String,
    pub result: String,
    /// What an `observe` step recorded.
    pub observed: Option<Observation>,
    /// With [`RunOptions::trace`]: the touched pages after the step.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trace: Vec<TracePage>,
    /// With [`RunOptions::expected_reads`], for a `read` or `verify`: the
    /// bytes the reference model expected, as runs of (count, value), in
    /// the order the read compares them (every byte for `verify`, the byte
    /// at the read's address and every 4 KiB after it for `read`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expected: Vec<(u64, u8)>,
}

impl StepOutcome {
    /// What `step` did, as `result`, with nothing observed, traced or expected.
    fn plain(step: &Step, result: String) -> StepOutcome {
        StepOutcome {
            line: step.line,
            text: step.text.clone(),
            result,
            observed: None,
            trace: Vec::new(),
            expected: Vec::new(),
        }
    }
}

/// Why a run stopped early.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Failure {
    pub line: usize,
    pub kind: FailureKind,
    pub message: String,
}

/// What kind of failure stopped a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// What the scenario says did not hold: a result or errno, an `expect`,
    /// a byte read, or a mistake in the scenario itself.
    Scenario,
    /// The invariant checker found violations after a step.
    Invariant,
    /// The backend cannot run this scenario (a setting, a GUP kind, an
    /// errno foliomm does not model): it is skipped on that backend.
    Unsupported,
    /// The backend's machinery broke (a dead worker, a closed socket).
    Backend,
}

/// A step's failure inside the interpreter.
#[derive(Debug)]
struct Failed {
    kind: FailureKind,
    message: String,
}

impl Failed {
    /// The same failure, its message prefixed with what was being done.
    fn context(self, what: &str) -> Failed {
        Failed { kind: self.kind, message: format!("{what}: {}", self.message) }
    }
}

impl From<String> for Failed {
    fn from(message: String) -> Failed {
        Failed { kind: FailureKind::Scenario, message }
    }
}

impl From<&str> for Failed {
    fn from(message: &str) -> Failed {
        message.to_string().into()
    }
}

impl From<StepError> for Failed {
    fn from(e: StepError) -> Failed {
        let kind = match e {
            StepError::Errno(_) | StepError::Hangs(_) => FailureKind::Scenario,
            StepError::Machinery(_) => FailureKind::Backend,
            StepError::Unsupported(_) => FailureKind::Unsupported,
        };
        Failed { kind, message: e.to_string() }
    }
}

/// The result of a run.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    pub backend: String,
    /// The `set` lines in force when the machine was built, the command
    /// line's included (as `set` lines).
    #[serde(default)]
    pub settings: Vec<String>,
    /// Every machine setting the run's machine had, defaults included, as
    /// `set` lines (the model's; empty on a kernel).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub in_effect: Vec<String>,
    /// The mapcount design and the Linux release the run followed.
    #[serde(default)]
    pub design: String,
    #[serde(default)]
    pub kernel: String,
    pub steps: Vec<StepOutcome>,
    pub observations: Vec<(String, Observation)>,
    /// The backend's counters after the run, in its order (an object in JSON).
    #[serde(with = "crate::named_values")]
    pub counters: Vec<(String, u64)>,
    pub measures: Vec<Measure>,
    pub failure: Option<Failure>,
    /// With [`RunOptions::keep_going`]: every `expect` line that failed, in
    /// order (the first is also the `failure` unless something else stopped
    /// the run earlier).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_expects: Vec<Failure>,
    /// What the reader should know about the run: counters that read as
    /// Linux's own accounting anomalies do, each with its line.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// A `measure` block's result: time spent in the backend by its steps
/// (a `parallel` block counts its wall time), and the lines each thread
/// ran with their own time in the backend, for throughput.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Measure {
    pub name: String,
    pub seconds: f64,
    /// Process lines run inside the block (each repetition counts).
    pub ops: u64,
    pub threads: Vec<ThreadOps>,
    /// Its `parallel` blocks' contention report, on simulated CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contention: Option<Contention>,
}

impl Measure {
    /// Lines per second over the block's time.
    pub fn ops_per_second(&self) -> f64 {
        self.ops as f64 / self.seconds.max(f64::MIN_POSITIVE)
    }
}

/// One thread's share of a [`Measure`].
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ThreadOps {
    /// `P/tid`.
    pub thread: String,
    pub ops: u64,
    /// Its time in the backend.
    pub seconds: f64,
}

impl ThreadOps {
    /// Lines per second of this thread's own time.
    pub fn ops_per_second(&self) -> f64 {
        self.ops as f64 / self.seconds.max(f64::MIN_POSITIVE)
    }
}

type StepResult = Result<String, Failed>;

/// The invariant checker's violations as a failure, if any.
fn violations(bad: &[foliomm::internals::check::Violation]) -> Result<(), Failed> {
    if bad.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = bad.iter().map(|v| format!("[{}] {v}", v.kind.name())).collect();
    let message = format!("invariant checker after this step:\n  {}", lines.join("\n  "));
    Err(Failed { kind: FailureKind::Invariant, message })
}

/// Runs `steps` on `backend`.
pub fn run(steps: &[Step], backend: &mut dyn Backend, opts: RunOptions) -> Outcome {
    let mut st = State::new(&*backend, opts.check);
    st.expected_reads = opts.expected_reads.then(Vec::new);
    let mut outcomes = Vec::new();
    let mut failure = None;
    let mut failed_expects = Vec::new();
    let scope = |n: usize| match (opts.check_full, opts.check_every) {
        (true, _) => Scope::Full,
        (false, 0) => Scope::Due,
        (false, every) if n.is_multiple_of(every) => Scope::Base,
        _ => Scope::Changed,
    };
    let (mut checks, mut last_full) = (0usize, true);
    for step in steps {
        now::enter(step.line, &step.text);
        let before = if opts.trace && st.started { st.trace_all() } else { Vec::new() };
        let r = st.step(step).and_then(|msg| {
            if st.check && st.started && st.measure.is_none() {
                let scope = scope(checks);
                (checks, last_full) = (checks + 1, matches!(scope, Scope::Full | Scope::Base));
                violations(&st.backend.check(scope))?;
            }
            Ok(msg)
        });
        match r {
            Ok(result) => {
                let observed = matches!(step.cmd, Cmd::Observe { .. } | Cmd::ObservePin { .. } | Cmd::Query { .. })
                    .then(|| st.obs.last().map(|(_, o)| *o))
                    .flatten();
                let trace = if opts.trace { st.trace(step, &before) } else { Vec::new() };
                let expected = st.expected_reads.as_mut().map(std::mem::take).unwrap_or_default();
                outcomes.push(StepOutcome {
                    line: step.line,
                    text: step.text.clone(),
                    result,
                    observed,
                    trace,
                    expected,
                })
            }
            Err(Failed { kind: FailureKind::Scenario, message })
                if opts.keep_going && matches!(step.cmd, Cmd::Expect { .. }) =>
            {
                outcomes.push(StepOutcome::plain(step, format!("FAIL: {message}")));
                failed_expects.push(Failure { line: step.line, kind: FailureKind::Scenario, message });
            }
            Err(Failed { kind, message }) => {
                failure = Some(Failure { line: st.failed_line.unwrap_or(step.line), kind, message });
                break;
            }
        }
    }
    if let (false, None, Some(last)) = (last_full, &failure, steps.last()) {
        if let Err(Failed { kind, message }) = violations(&st.backend.check(Scope::Full)) {
            failure = Some(Failure { line: last.line, kind, message: message.replace("this step", "the last step") });
        }
    }
    // Processes still alive at the end exit, so leaks show in the counters.
    let mut live: Vec<String> = st.live.drain().collect();
    live.sort();
    for p in live {
        if let Err(e) = st.backend.perform(crate::backend::Thread::main(&p), crate::op::Op::Exit) {
            let f = Failure {
                line: steps.last().map_or(0, |s| s.line),
                kind: FailureKind::Backend,
                message: e.to_string(),
            };
            failure.get_or_insert(f);
        }
    }
    if let (Some(open), None) = (&st.measure, &failure) {
        let name = &open.name;
        failure = Some(Failure {
            line: steps.last().map_or(0, |s| s.line),
            kind: FailureKind::Scenario,
            message: format!("measure {name} has no 'end'"),
        });
    }
    if let (None, Some(first)) = (&failure, failed_expects.first()) {
        failure = Some(first.clone());
    }
    let crate::lang::Run { design, release: kernel, .. } = st.run_kind();
    Outcome {
        backend: st.backend.name().into(),
        settings: st.settings.iter().map(|(_, s)| s.to_string()).collect(),
        in_effect: st.backend.in_effect().iter().map(ToString::to_string).collect(),
        design: design.name().into(),
        kernel: kernel.to_string(),
        steps: outcomes,
        observations: st.obs,
        counters: st.backend.counters(),
        measures: st.measures,
        failure,
        failed_expects,
        notes: st.notes,
    }
}
