//! The hostile-input corpus (`tests/hostile/`): scenario files, saved runs,
//! fuzz findings and command lines that are wrong in every way we thought
//! of (bad bytes, huge and negative numbers, impossible settings, unclosed
//! blocks, reused names, truncated and mistyped JSON, ...). Each must end
//! within its bound with a result or a clear error (exit 0, 1 or 2), never
//! a panic, an abort, a hang or a data-integrity alarm (the scenarios are
//! hostile, not the model: a byte alarm would be a false one).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long one command may take.
const BOUND: Duration = Duration::from_secs(60);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs the binary with `args` from the workspace root, killing it past
/// [`BOUND`]; panics naming the command if it hangs, panics, aborts or
/// raises a byte alarm.
fn survives(args: &[String]) {
    // Files, not pipes: a child writing more than a pipe holds would wait
    // for a reader that waits for it.
    let dir = std::env::temp_dir().join(format!("foliomm-hostile-out-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (out_path, err_path) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_foliomm"))
        .current_dir(root())
        .args(args)
        .stdout(Stdio::from(std::fs::File::create(&out_path).unwrap()))
        .stderr(Stdio::from(std::fs::File::create(&err_path).unwrap()))
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > BOUND {
            child.kill().unwrap();
            panic!("foliomm {} ran past {BOUND:?}", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = child.wait().unwrap();
    let read = |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned();
    let (stdout, stderr) = (read(&out_path), read(&err_path));
    let what = format!("foliomm {}: exit {:?}\n{stdout}\n{stderr}", args.join(" "), status.code());
    assert!(matches!(status.code(), Some(0..=2)), "{what}");
    assert!(!stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"), "{what}");
    assert!(!stdout.contains("data integrity"), "{what}");
}

/// The files of `dir` under `tests/hostile/`, in name order.
fn corpus(dir: &str) -> Vec<String> {
    let path = root().join("tests/hostile").join(dir);
    let mut files: Vec<String> = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| format!("tests/hostile/{dir}/{}", e.unwrap().file_name().to_string_lossy()))
        .collect();
    files.sort();
    files
}

#[test]
fn hostile_scenarios_end_in_a_result_or_a_clear_error() {
    let files = corpus("scenarios");
    assert!(files.len() >= 60, "the corpus has {} scenario files", files.len());
    for f in files {
        survives(&["run".into(), "--check".into(), "-q".into(), f]);
    }
}

#[test]
fn hostile_saved_runs_and_findings_are_refused_clearly() {
    for f in corpus("runs") {
        survives(&["compare-runs".into(), f.clone(), f.clone()]);
        let out = std::env::temp_dir().join(format!("foliomm-hostile-{}.html", std::process::id()));
        survives(&["report".into(), f, "-o".into(), out.display().to_string()]);
        let _ = std::fs::remove_file(out);
    }
    for f in corpus("findings") {
        survives(&["fuzz".into(), "reproducer".into(), f]);
    }
}

#[test]
fn hostile_command_lines_end_in_a_result_or_a_clear_error() {
    let text = std::fs::read_to_string(root().join("tests/hostile/cli.txt")).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).collect();
    assert!(lines.len() >= 15);
    for line in lines {
        survives(&line.split_whitespace().map(String::from).collect::<Vec<_>>());
    }
}
