//! `parallel` blocks: what the parser refuses, what the timing check
//! refuses, and that failures inside a block name their own line.

use foliomm_scenario::{parse, run, FailureKind, ModelBackend, RunOptions};

fn run_src(src: &str) -> foliomm_scenario::Outcome {
    let steps = parse(src).expect("scenario parses");
    run(&steps, &mut ModelBackend::new(), RunOptions { check: true, ..RunOptions::default() })
}

#[test]
fn a_block_holds_process_lines_only_and_must_be_closed() {
    let e = parse("P: a = mmap 4K rw\nparallel\nP.t1: write a\nexpect stat.pgfault == 1\nend\n").unwrap_err();
    assert_eq!((e.line, e.col), (4, 1), "{e}");
    assert!(e.msg.contains("only process lines"), "{e}");
    let e = parse("P: a = mmap 4K rw\nparallel\nP.t1: write a\n").unwrap_err();
    assert_eq!(e.line, 2);
    assert!(e.msg.contains("closing this parallel block"), "{e}");
    let e = parse("parallel\nend\n").unwrap_err();
    assert!(e.msg.contains("empty parallel block"), "{e}");
    let e = parse("parallel\nP.t1: a = mmap 4K rw\nparallel\nend\nend\n").unwrap_err();
    assert_eq!(e.line, 3, "{e}");
}

#[test]
fn threads_touching_the_same_bytes_are_refused_before_anything_runs() {
    let out = run_src("P: a = mmap 8K rw\nparallel\nP.t1: write a[0..8K]\nP.t2: read a[4K]\nend\n");
    let f = out.failure.expect("refused");
    assert_eq!(f.kind, FailureKind::Scenario);
    assert_eq!(f.line, 4);
    assert!(f.message.contains("depend on timing"), "{}", f.message);
    // Reads of the same bytes, and writes to different bytes, may run together.
    let out = run_src(
        "P: a = mmap 8K rw\nparallel\nP.t1: read a\nP.t2: read a\nP.t3: write a[4K] = 7\nP.t4: write a[0] = 8\nend\n",
    );
    assert!(out.failure.is_some(), "t3 writes what t1 reads");
    let out = run_src("P: a = mmap 8K rw\nparallel\nP.t1: read a[0]\nP.t2: read a[0]\nP.t3: write a[4K] = 7\nend\nP: observe a[4K] as x\nexpect x.byte == 7\n");
    assert!(out.failure.is_none(), "{:?}", out.failure);
    // A fork while another thread of the process writes is timing-dependent.
    let out = run_src("P: a = mmap 8K rw\nparallel\nP.t1: write a[0]\nP.t2: fork C\nend\n");
    assert!(out.failure.unwrap().message.contains("forks while"));
    // A zap that changes no byte (the memory holds zeros) counts as a read;
    // one that would change bytes clashes with a read of them.
    let zap = "parallel\nP.t1: read a\nP.t2: madvise a dontneed\nend\n";
    let out = run_src(&format!("P: a = mmap 8K rw\nP: fill a = 0\n{zap}"));
    assert!(out.failure.is_none(), "{:?}", out.failure);
    let out = run_src(&format!("P: a = mmap 8K rw\nP: write a[4K] = 1\n{zap}"));
    assert!(out.failure.unwrap().message.contains("depend on timing"));
    // Threads of different processes never clash.
    let out = run_src("P: a = mmap 8K rw\nQ: a2 = mmap 8K rw\nparallel\nP.t1: write a\nQ.t1: write a2\nend\n");
    assert!(out.failure.is_none(), "{:?}", out.failure);
}

#[test]
fn a_failure_inside_a_block_names_its_own_line() {
    let out =
        run_src("P: a = mmap 8K rw\nparallel\nP.t1: write a\nP.t2: b = mmap 4K rw\nP.t2: read b fails EFAULT\nend\n");
    let f = out.failure.expect("the read succeeds");
    assert_eq!(f.line, 5);
    assert!(f.message.contains("expected it to fail"), "{}", f.message);
    let out = run_src("P: a = mmap 8K rw\nparallel\nP.t1: write a\nP.t2: exit\nend\n");
    assert!(out.failure.unwrap().message.contains("cannot exit: it never started"));
}

#[test]
fn a_measure_counts_each_threads_lines() {
    let src = "P: a = mmap 64K rw\nP: b = mmap 64K rw\nmeasure m\nrepeat 3\nparallel\nP.t1: write a\nP.t2: write b\nP.t2: read b\nend\nend\nP: read a\nend\n";
    let out = run_src(src);
    assert!(out.failure.is_none(), "{:?}", out.failure);
    let m = &out.measures[0];
    assert_eq!(m.ops, 10);
    let lines: Vec<(String, u64)> = m.threads.iter().map(|t| (t.thread.clone(), t.ops)).collect();
    assert_eq!(lines, vec![("P/0".into(), 1), ("P/1".into(), 3), ("P/2".into(), 6)]);
    assert!(m.ops_per_second() > 0.0);
}
