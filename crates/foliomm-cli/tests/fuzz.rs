//! `foliomm fuzz` end to end on the model: generated workloads break
//! nothing (the checker and the reference bytes agree), and a model broken
//! on purpose is found and minimized to a small scenario that still fails.

use std::process::Command;

fn fuzz(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_foliomm")).arg("fuzz").args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn generated_workloads_keep_the_model_whole() {
    let dir = std::env::temp_dir().join(format!("foliomm-fuzz-ok-{}", std::process::id()));
    let (ok, out) = fuzz(&["--seeds", "0..60", "--findings", dir.to_str().unwrap()]);
    assert!(ok, "{out}");
    assert!(out.contains("no findings"), "{out}");
    assert!(!dir.exists(), "no finding directory is made without a finding");
}

#[test]
fn a_broken_model_is_found_and_minimized() {
    let dir = std::env::temp_dir().join(format!("foliomm-fuzz-broken-{}", std::process::id()));
    let (ok, out) = fuzz(&["--seeds", "0..20", "--set", "debug reuse-shared", "--findings", dir.to_str().unwrap()]);
    assert!(!ok, "{out}");
    assert!(out.contains("model-broken"), "{out}");
    let finding = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
    let text = std::fs::read_to_string(finding.join("scenario.fmm")).unwrap();
    let steps = text.lines().filter(|l| !l.starts_with('#') && !l.starts_with("set ")).count();
    assert!(steps <= 10, "minimized to {steps} steps:\n{text}");
    // The minimized scenario still breaks the model (under the checker).
    let run = Command::new(env!("CARGO_BIN_EXE_foliomm"))
        .args(["run", "--check"])
        .arg(finding.join("scenario.fmm"))
        .output()
        .unwrap();
    assert!(!run.status.success(), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}
