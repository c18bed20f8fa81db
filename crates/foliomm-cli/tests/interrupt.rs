//! A run interrupted with Ctrl-C says which file and step it was at, and
//! exits with 128 + SIGINT.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn an_interrupted_run_says_where_it_was() {
    let file = std::env::temp_dir().join(format!("foliomm-interrupt-model-{}.fmm", std::process::id()));
    std::fs::write(&file, "P: a = mmap 64G rw\nP: write a[0] = 1\nrepeat 1000\nP: verify a\nend\n").unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_foliomm"))
        .args(["run", "-q"])
        .arg(&file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Until the run is inside its long step (the model's first steps are quick).
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    assert!(Command::new("kill").args(["-s", "INT", &child.id().to_string()]).status().unwrap().success());
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&file);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(start.elapsed() < Duration::from_secs(30), "the run went on after SIGINT");
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted by SIGINT while running") && err.contains("at line 4: P: verify a"), "{err}");
}
