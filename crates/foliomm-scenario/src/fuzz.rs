//! What the fuzz targets (`fuzz/`) and the stable CI run of them check: any
//! text either parses or is refused with an error, never a panic; a parsed
//! scenario, run on the model with the checker after every step, may fail
//! as a scenario may (a false `expect`, an unexpected errno), but never
//! with an invariant violation, a backend failure, or a data-integrity
//! failure the reference model can follow.

use crate::lang::{Cmd, MachineSetting, Step};
use crate::{parse, run, FailureKind, ModelBackend, Outcome, RunOptions};

/// Model memory for fuzzed scenarios: small, so the checker is quick.
pub const FUZZ_MEMORY: u64 = 32 << 20;
/// Longest scenario (in steps, after unrolling) a fuzz run executes.
pub const FUZZ_STEPS: usize = 400;

/// Parses `src` and, if it is a scenario of at most [`FUZZ_STEPS`] steps,
/// runs it on a model of [`FUZZ_MEMORY`]; an error describes a bug found.
pub fn check(src: &str) -> Result<(), String> {
    let Ok(mut steps) = parse(src) else { return Ok(()) };
    if steps.len() > FUZZ_STEPS || steps.iter().any(|s| matches!(s.cmd, Cmd::Parallel(_))) {
        return Ok(());
    }
    // The machine is bounded whatever the text asks.
    steps.retain(|s| {
        !matches!(
            s.cmd,
            Cmd::SetMachine(
                MachineSetting::Memory(_)
                    | MachineSetting::MemoryAtLeast(_)
                    | MachineSetting::MemoryLimit(_)
                    | MachineSetting::Tlb(_)
            )
        )
    });
    let memory = MachineSetting::Memory(FUZZ_MEMORY);
    let first = Step {
        line: 0,
        text: "(fuzz)".into(),
        proc: None,
        thread: None,
        cmd: Cmd::SetMachine(memory),
        fails: None,
        fails_only: Default::default(),
    };
    steps.insert(0, first);
    let out = run(&steps, &mut ModelBackend::new(), RunOptions { check: true, ..RunOptions::default() });
    broke_the_model(&out).map_or(Ok(()), Err)
}

/// How a model run (with the checker) broke the model itself, if it did:
/// an invariant violation, a backend failure, or bytes the reference model
/// disagrees with. A scenario's own failures (a false `expect`, an
/// unexpected errno) do not count, nor lost bytes after ENOMEM part way
/// through an access (the reference cannot know which pages were written:
/// a known limit).
pub fn broke_the_model(out: &Outcome) -> Option<String> {
    let f = out.failure.as_ref()?;
    let enomem = out.steps.iter().any(|s| s.result.contains("ENOMEM")) || f.message.contains("ENOMEM");
    let broken = match f.kind {
        FailureKind::Invariant | FailureKind::Backend => true,
        FailureKind::Scenario => f.message.starts_with("data integrity") && !enomem,
        _ => false,
    };
    broken.then(|| format!("line {}: {}", f.line, f.message))
}
