//! `--backend guest` end to end: scenarios compared against Linux 6.1 in a
//! qemu guest, the model under `subpage` (6.1's design). Skipped, with the
//! reason, where qemu or a 6.1 kernel is not installed
//! (`apt-get install qemu-system-x86 linux-image-6.1.0-47-amd64-unsigned`).

use std::path::Path;
use std::process::Command;

mod common;
use common::thp_knobs;

/// Why the guest cannot run here, if it cannot.
fn unavailable() -> Option<String> {
    if Command::new("qemu-system-x86_64").arg("--version").output().is_err() {
        return Some("qemu-system-x86_64 is not installed".into());
    }
    let kernels = std::fs::read_dir("/boot")
        .map(|d| d.flatten().any(|e| e.file_name().to_string_lossy().starts_with("vmlinuz-6.1.")));
    (!kernels.unwrap_or(false)).then(|| "no /boot/vmlinuz-6.1.*".into())
}

/// Scenarios of base pages that 6.1 runs as 6.18 does, compared in one
/// guest boot; the host's THP, shmem and hugetlb knobs stay as they were.
/// Not scenario 07 (reuse of a small folio after the child exits): on the
/// two-CPU guest, 6.1 sometimes copies instead (about one run in five),
/// likely an LRU-batch reference held on the other CPU, which
/// `do_wp_page`'s local `lru_add_drain` cannot drop; a referee's
/// nondeterminism for issue 34 to classify, not a model disagreement.
#[test]
fn base_page_scenarios_agree_with_linux_6_1_and_touch_no_host_setting() {
    if let Some(why) = unavailable() {
        eprintln!("skipping: the guest backend cannot run here: {why}");
        return;
    }
    let files = [
        "scenarios/01-anon-4k.fmm",
        "scenarios/05-fork-child-writes.fmm",
        "scenarios/10-three-share-small.fmm",
        "scenarios/26-partial-failures.fmm",
        "scenarios/cow/base--child-writes.fmm",
        "scenarios/cow/base--parent-writes.fmm",
    ];
    let before = thp_knobs();
    let out = Command::new(env!("CARGO_BIN_EXE_foliomm"))
        .args(["compare", "--backend", "guest", "-q"])
        .args(files)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(text.contains("guest Linux 6.1"), "{text}");
    assert!(text.contains("compared 6 of 6 files: 6 agree, 0 differ"), "{text}");
    assert!(out.status.success(), "{text}");
    assert_eq!(thp_knobs(), before, "a guest run changes none of the host's settings");
}
