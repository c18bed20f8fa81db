//! `run` as a daily tool: a design matrix from flags given `all`, every
//! `expect` evaluated with `--keep-going`, the verdict before the details,
//! and directories of scenarios.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs the binary from the workspace root; (exit code, stdout, stderr).
fn foliomm(args: &[&str]) -> (i32, String, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let out = Command::new(env!("CARGO_BIN_EXE_foliomm")).current_dir(root).args(args).output().unwrap();
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (out.status.code().unwrap_or(-1), text(out.stdout), text(out.stderr))
}

/// A fresh directory for this test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("foliomm-matrix-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The cells of the row of `what` in a matrix's differences.
fn row(out: &str, what: &str) -> Vec<String> {
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{what} ")))
        .unwrap_or_else(|| panic!("no row {what}:\n{out}"));
    line.split_whitespace().skip(what.split_whitespace().count()).map(str::to_string).collect()
}

#[test]
fn every_mapcount_design_answers_the_reuse_question_in_one_command() {
    let (code, out, err) = foliomm(&["run", "--mapcount", "all", "scenarios/08-reuse-64k.fmm"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("(7 configurations of mapcount): 7 pass, 0 do not"), "{out}");
    // Columns in Design::ALL's order: the four designs before mm-id copy,
    // the rmap-ID designs and mm-id reuse the 64K folio.
    let header = out.lines().skip_while(|l| !l.contains("what differs:")).nth(1).unwrap_or_default();
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        ["subpage", "compound-locked", "nr-mapped", "large-mapcount", "rmap-id", "rmap-id-powersum", "mm-id"]
    );
    assert_eq!(row(&out, "after.folio_order"), ["0", "0", "0", "0", "4", "4", "4"]);
    assert_eq!(row(&out, "counter pgreuse"), ["0", "0", "0", "0", "1", "1", "1"]);
    // What is the same everywhere is not listed.
    assert!(!out.contains("before.folio_order"), "{out}");
}

#[test]
fn two_axes_give_their_product_and_json_keeps_every_run() {
    let (code, out, err) =
        foliomm(&["run", "--mapcount", "all", "--vma-lock", "all", "--json", "scenarios/01-anon-4k.fmm"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let configs = v[0]["configurations"].as_array().unwrap();
    assert_eq!(configs.len(), 21);
    assert_eq!(configs[0]["configuration"], "subpage mmap-lock");
    assert_eq!(configs[20]["configuration"], "mm-id vma-refcount");
    let settings = configs[1]["outcome"]["settings"].as_array().unwrap();
    assert!(settings.iter().any(|s| s == "set vma_lock vma-rwsem"), "{settings:?}");
    // Every setting in effect, defaults included.
    let in_effect = configs[1]["outcome"]["in_effect"].as_array().unwrap();
    for line in ["set mapcount subpage", "set vma_lock vma-rwsem", "set zap batched", "set tlb 2048"] {
        assert!(in_effect.iter().any(|s| s == line), "{line} not in {in_effect:?}");
    }
    assert!(v[0]["differences"].is_array());
}

#[test]
fn a_matrix_runs_on_the_model_only() {
    let (code, _, err) = foliomm(&["run", "--mapcount", "all", "--backend", "host", "scenarios/01-anon-4k.fmm"]);
    assert_eq!(code, 2);
    assert!(err.contains("runs a design matrix on the model") && err.contains("use `compare`"), "{err}");
}

#[test]
fn keep_going_reports_every_failed_expect_after_the_verdict() {
    let dir = scratch("keep-going");
    let file = dir.join("three.fmm");
    let text = "P: a = mmap 64K rw\nP: write a = 1\nP: observe a as x\nexpect x.present == 0\n\
                expect x.byte == 1\nexpect x.rss_kb == 4\n";
    std::fs::write(&file, text).unwrap();
    let (code, out, _) = foliomm(&["run", "--keep-going", file.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[1].starts_with("  FAIL at line 4:") && lines[1].contains("and 1 more failed expect"), "{out}");
    assert!(out.contains("also FAIL at line 6: expectation failed: x.rss_kb (= 64) == 4"), "{out}");
    // Without it, the run stops at the first.
    let (_, out, _) = foliomm(&["run", file.to_str().unwrap()]);
    assert!(!out.contains("line 6"), "{out}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_directory_runs_its_scenario_files_in_name_order() {
    let dir = scratch("dir");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("b.fmm"), "P: a = mmap 4K rw\nP: write a = 1\n").unwrap();
    std::fs::write(dir.join("sub/a.fmm"), "P: a = mmap 4K rw\nP: read a\n").unwrap();
    std::fs::write(dir.join("notes.txt"), "not a scenario").unwrap();
    let (code, out, err) = foliomm(&["run", "-q", dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("2 files: 2 passed, 0 failed"), "{out}");
    let empty = scratch("empty");
    let (code, _, err) = foliomm(&["run", empty.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("is a directory without scenario files (*.fmm) in it"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(empty);
}
