//! `bench zap-batching --tradeoffs`: the batched zap against a gather capped
//! at 512 pages and against init_on_free (on the seed's kernel and on 6.9),
//! with the pages freed per reschedule point.

use std::process::Command;

#[test]
fn the_cap_and_6_9s_init_on_free_bound_the_pages_per_reschedule_point() {
    let args = ["bench", "zap-batching", "--size", "8M", "--runs", "2", "--no-host", "--tradeoffs", "--json"];
    let out = Command::new(env!("CARGO_BIN_EXE_foliomm")).args(args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let run: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let table = &run["tables"][2];
    assert_eq!(table["name"], "batched zap: gather cap and init_on_free");
    let rows = table["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 9, "a row per folio size");
    let per_point = |row: &serde_json::Value, series: &str| {
        let s = row["series"].as_array().unwrap().iter().find(|s| s["name"] == series).unwrap();
        s["counters"]["pages_per_resched"].as_f64().unwrap()
    };
    for row in rows {
        // A chunk ends at 512 pages with the cap, and on 6.9 with init_on_free.
        assert!(per_point(row, "cap 512 pages") <= 512.0, "{row}");
        assert!(per_point(row, "init_on_free, 6.9") <= 512.0, "{row}");
        // On the seed's kernel init_on_free changes what a free costs, not
        // how the gather chunks.
        assert_eq!(per_point(row, "init_on_free"), per_point(row, "batched"), "{row}");
    }
    // 8 MiB of 2 MiB folios: four entries, one chunk of 2048 pages.
    assert_eq!(per_point(&rows[8], "batched"), 2048.0, "{}", rows[8]);
}
