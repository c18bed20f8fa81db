//! `bench zap-batching --tradeoffs`: the batched zap against a gather capped
//! at 512 pages and against init_on_free, with the pages freed per flush.

use std::process::Command;

#[test]
fn the_cap_bounds_the_pages_per_flush_and_init_on_free_keeps_the_batching() {
    let args = ["bench", "zap-batching", "--size", "8M", "--runs", "2", "--no-host", "--tradeoffs", "--json"];
    let out = Command::new(env!("CARGO_BIN_EXE_foliomm")).args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let table = &run["tables"][2];
    assert_eq!(table["name"], "batched zap: gather cap and init_on_free");
    let rows = table["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 9, "a row per folio size");
    let per_flush = |row: &serde_json::Value, series: &str| {
        let s = row["series"].as_array().unwrap().iter().find(|s| s["name"] == series).unwrap();
        s["counters"]["pages_per_flush"].as_f64().unwrap()
    };
    for row in rows {
        // 8 MiB is 2048 pages: one gather without the cap, at most 512
        // pages a flush with it.
        assert!(per_flush(row, "cap 512 pages") <= 512.0, "{row}");
        assert!(per_flush(row, "batched") > 512.0, "{row}");
        // init_on_free changes what a free costs, not how the zap batches.
        assert_eq!(per_flush(row, "init_on_free"), per_flush(row, "batched"), "{row}");
    }
}
