//! `run --check` checks what each step changed and `run --check=full`
//! everything: a model broken on purpose (`set debug reuse-shared`: a COW
//! fault reuses a folio a fork child still maps) fails both at the same
//! step, with the same violations.

use foliomm_scenario::interp::{FailureKind, RunOptions};
use foliomm_scenario::{parse, run, ModelBackend};

const SCENARIO: &str = "\
set debug reuse-shared
set thp enabled=never 64K=always
Q: q = mmap 1M rw
Q: write q = 7
P: a = mmap 256K rw
P: write a = 1
P: fork C
P: write a[0] = 2
P: read a
C: read a
";

#[test]
fn the_step_check_and_the_full_check_fail_the_same_step_alike() {
    let steps = parse(SCENARIO).unwrap();
    let fail = |opts: RunOptions| run(&steps, &mut ModelBackend::new(), opts).failure.expect("the run fails");
    let changed = fail(RunOptions { check: true, ..RunOptions::default() });
    let full = fail(RunOptions { check: true, check_full: true, ..RunOptions::default() });
    assert_eq!((changed.kind, changed.line), (FailureKind::Invariant, 8), "{}", changed.message);
    assert_eq!((full.kind, full.line), (changed.kind, changed.line));
    let sorted = |m: &str| {
        let mut lines: Vec<String> = m.lines().skip(1).map(str::to_string).collect();
        lines.sort();
        lines
    };
    assert_eq!(sorted(&changed.message), sorted(&full.message));
}
