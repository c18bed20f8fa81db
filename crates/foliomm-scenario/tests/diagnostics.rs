//! The messages a scenario's typical mistakes get: each says what is
//! wrong, where, and how to write it instead.

use foliomm_scenario::{parse, run, ModelBackend, RunOptions};

/// The parser's message for `src`, with its line and column.
fn parse_error(src: &str) -> String {
    let e = parse(src).expect_err("the scenario should not parse");
    format!("line {}, column {}: {}", e.line, e.col, e.msg)
}

/// The message the run of `src` failed with.
fn failure(src: &str) -> String {
    let steps = parse(src).unwrap();
    let out = run(&steps, &mut ModelBackend::new(), RunOptions::default());
    out.failure.expect("the run should fail").message
}

#[test]
fn a_mistyped_command_gets_the_closest_one() {
    let e = parse_error("P: a = mmap 4K\nP: mprotcet a r\n");
    assert!(e.starts_with("line 2, column 4: expected a command, found 'mprotcet': did you mean 'mprotect'?"), "{e}");
    assert!(e.contains("unpin") && e.contains("NAME = mmap |"), "{e}");
    let e = parse_error("P: a = mmap 4K\nexpcet a\n");
    assert!(e.contains("found 'expcet': did you mean 'expect'?"), "{e}");
}

#[test]
fn a_command_in_the_wrong_form_is_told_the_right_one() {
    let e = parse_error("P: mmap a 64K rw\n");
    assert!(e.contains("'mmap' names what it makes: write 'PROCESS: NAME = mmap ...'"), "{e}");
    let e = parse_error("P: a = munmap b\n");
    assert!(e.contains("'munmap' makes nothing to name: write 'PROCESS: munmap ...'"), "{e}");
    let e = parse_error("P: a = mmap 4K\nmunmap a\n");
    assert!(e.contains("'munmap' is a process's command, write 'PROCESS: munmap ...'"), "{e}");
    let e = parse_error("P: a = mmap 4K\nP.t2: repeat 200\n");
    assert!(e.contains("'repeat' is not a process's command: write the line without 'PROCESS:'"), "{e}");
}

#[test]
fn a_length_without_a_unit_that_is_not_whole_pages_is_refused() {
    let e = parse_error("P: a = mmap 64 rw\n");
    assert!(e.starts_with("line 1, column 13: a length of 64 bytes is not a whole number of pages: write 64K"), "{e}");
    assert!(parse("P: a = mmap 8192 rw\n").is_ok(), "whole pages in bytes are fine");
}

#[test]
fn a_mistyped_field_observation_or_counter_gets_the_closest() {
    let obs = "P: a = mmap 4K\nP: write a\nP: observe a as x\n";
    let e = failure(&format!("{obs}expect x.foliio_order == 0\n"));
    assert!(e.starts_with("no field 'foliio_order': did you mean 'folio_order'?"), "{e}");
    let e = failure(&format!("{obs}expect before.folio_order == 0\n"));
    assert!(e.contains("no observation named 'before'") && e.contains("made so far: x"), "{e}");
    let e = failure(&format!("{obs}expect stat.cow_copys == 0\n"));
    assert!(e.contains("no counter 'cow_copys' on the model backend: did you mean 'cow_copy'?"), "{e}");
    let e = parse_error("P: a = mmap 4K\nP: observe a as x except folio_ordr\n");
    assert!(e.contains("found 'folio_ordr': did you mean 'folio_order'?"), "{e}");
}

#[test]
fn a_process_no_fork_made_is_named_as_such() {
    let e = failure("P: a = mmap 64K rw\nP: write a\nC: write a\n");
    assert!(e.contains("EFAULT") && e.contains("process C was made empty by its first line, 3, not by a fork"), "{e}");
    let e = failure("P: a = mmap 64K rw\nP: wait C\n");
    assert_eq!(e, "wait: there is no process C (no fork made it)");
    let e = failure("P: fork C\nP: wait C\n");
    assert!(e.contains("process C has not exited (give it an 'exit' line first)"), "{e}");
}

#[test]
fn enomem_says_how_much_ram_the_model_has() {
    let e = failure("set memory 16M\nP: a = mmap 64M rw\nP: write a\n");
    assert!(e.contains("ENOMEM") && e.contains("the model's RAM is 'set memory 16M'"), "{e}");
    assert!(e.contains("--memory SIZE gives it more"), "{e}");
}

/// A hugetlb pool that runs out is not the model's RAM: no hint to add RAM.
#[test]
fn an_empty_hugetlb_pool_does_not_blame_the_ram() {
    let src = "set hugetlb pages=1\nP: h = mmap 2M rw hugetlb\nP: write h\nP: p = pin h write longterm\nP: fork C\n";
    let e = failure(src);
    assert!(e.contains("ENOMEM") && !e.contains("the model's RAM"), "{e}");
}

#[test]
fn a_thread_whose_first_line_is_its_exit_is_told_why() {
    let e = failure("P: a = mmap 4K\nparallel\nP.t1: write a\nP.t2: exit\nend\n");
    assert!(e.starts_with("thread P.t2 cannot exit: it never started"), "{e}");
}

#[test]
fn a_folio_smaller_than_allowed_because_of_its_vma_gets_a_hint() {
    let result = |src: &str| {
        let out = run(&parse(src).unwrap(), &mut ModelBackend::new(), RunOptions::default());
        out.steps.last().unwrap().result.clone()
    };
    let misaligned =
        result("set thp 64K=always\nP: a = mmap 64K rw at 0x10001000 fixed\nP: write a\nP: observe a as x\n");
    assert!(misaligned.contains("order 0") && misaligned.contains("note: 64K folios are allowed here"), "{misaligned}");
    assert!(misaligned.contains("[0x10001000, 0x10011000) (map it with 'align 64K'"), "{misaligned}");
    let aligned = result("set thp 64K=always\nP: a = mmap 64K rw align 64K\nP: write a\nP: observe a as x\n");
    assert!(aligned.contains("order 4") && !aligned.contains("note:"), "{aligned}");
}

#[test]
fn a_message_quoting_a_huge_token_is_cut() {
    let e = parse(&format!("P: a = mmap 4K rw {}\n", "x".repeat(100_000))).unwrap_err().to_string();
    assert!(e.len() < 1000 && e.contains("… (cut: ") && e.starts_with("line 1, column 19:"), "{}", &e[..200]);
}

#[test]
fn a_userfaultfd_fault_no_rule_answers_is_named_as_a_wait_forever() {
    let src = "P: a = mmap 16K rw\nP: u = userfaultfd\nP: uffd_register u a missing\nP: write a[4K]\n";
    let e = failure(src);
    assert!(e.starts_with("the step would wait forever: the missing fault at 0x"), "{e}");
    assert!(e.contains("has no rule for it (give it one: 'PROCESS: on NAME missing copy BYTE'"), "{e}");
    let wp =
        "P: a = mmap 16K rw\nP: write a\nP: u = userfaultfd\nP: uffd_register u a wp\nP: uffd_wp u a on\nP: write a\n";
    assert!(failure(wp).contains("the write-protect fault at 0x"), "{}", failure(wp));
}

#[test]
fn userfaultfd_lines_say_what_they_expected() {
    let e = parse_error("P: a = mmap 16K rw\nP: u = userfaultfd\nP: uffd_register u a\n");
    assert_eq!(e, "line 3, column 21: expected at least one mode after the place: missing, wp or minor");
    let e = parse_error("P: a = mmap 16K rw\nP: u = userfaultfd\nP: uffd_register u a misssing\n");
    assert!(e.starts_with("line 3, column 22: expected a mode (missing, wp or minor), found 'misssing'"), "{e}");
    let e = parse_error("P: u = userfaultfd\nP: on u missing unprotect\n");
    assert!(
        e.contains(
            "expected missing copy BYTE, missing zeropage, wp unprotect or minor continue, found 'missing unprotect'"
        ),
        "{e}"
    );
    let e = parse_error("P: a = mmap 16K rw\nP: u = userfaultfd\nP: uffd_copy u a\n");
    assert!(e.contains("expected '= BYTE' after the place"), "{e}");
    let e = failure("P: a = mmap 16K rw\nP: uffd_register v a missing\n");
    assert!(e.starts_with("no userfaultfd v in process P: make it first ('P: v = userfaultfd')"), "{e}");
    let e = parse_error("P: u = userfaultfdd\n");
    assert!(e.contains("did you mean 'userfaultfd'?"), "{e}");
}

#[test]
fn an_expect_list_names_stages_it_leaves_out_and_refuses_unknown_ones() {
    let e = parse_error("P: a = mmap 4K\nP: observe a as x\nexpect [rmap-id, !all-pmt] x.rss_kb == 0\n");
    assert!(e.starts_with("line 3, column"), "{e}");
    assert!(e.contains("expected a stage of the rmap-id designs after '!', found 'all-pmt'"), "{e}");
    // Left out at its stage, the line is skipped (it would fail); other
    // stages and designs without stages check it.
    let src = |stage: &str| {
        format!("set mapcount rmap-id\nset rmap_id_stage {stage}\nP: a = mmap 4K rw\nP: write a\nP: observe a as x\nexpect [!all-pmd] x.rss_kb == 0\n")
    };
    let out = run(&parse(&src("all-pmd")).unwrap(), &mut ModelBackend::new(), RunOptions::default());
    assert!(out.failure.is_none(), "{:?}", out.failure);
    assert!(failure(&src("all")).contains("x.rss_kb (= 4) == 0"), "{}", failure(&src("all")));
}
