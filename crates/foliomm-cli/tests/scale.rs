//! `bench scale` measures every axis up to its flag, each point in a
//! process of its own.

use std::process::Command;

#[test]
fn scale_measures_each_axis_up_to_its_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_foliomm"))
        .args(["bench", "scale", "--max-procs", "10", "--max-vmas", "2000", "--max-ram", "256M"])
        .args(["--max-threads", "2", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let points: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let n_of = |axis: &str| -> Vec<u64> {
        let rows = points.as_array().unwrap().iter().filter(|p| p["axis"] == axis);
        rows.map(|p| p["n"].as_u64().unwrap()).collect()
    };
    assert_eq!(n_of("processes"), [1, 10]);
    assert_eq!(n_of("vmas"), [1000, 2000]);
    assert_eq!(n_of("ram"), [256 << 20]);
    assert_eq!(n_of("hugetlb-ram"), [256 << 20]);
    assert_eq!(n_of("threads"), [1, 2]);
    // A frame holding a byte costs its state word, not 4 KiB: a byte
    // written in each page of 256M grows the host's resident memory by the
    // memmap (4 MiB), the state and generation words and the page tables,
    // about 2% of what the model holds, never as much.
    let ram = points.as_array().unwrap().iter().find(|p| p["axis"] == "ram").unwrap();
    let grown = ram["grown_kib"].as_u64().unwrap();
    assert!((4 << 10..8 << 10).contains(&grown), "grown by {grown} KiB");
    // In 2 MiB hugetlb pages with HVO, the memmap keeps one page per huge
    // page: under 1% of what the model holds (without HVO it is 1.7%).
    let hugetlb = points.as_array().unwrap().iter().find(|p| p["axis"] == "hugetlb-ram").unwrap();
    let grown = hugetlb["grown_kib"].as_u64().unwrap();
    assert!(grown < (256 << 10) / 100, "hugetlb-ram grew by {grown} KiB");
}
