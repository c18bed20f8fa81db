//! `foliomm designs` prints each design's memmap space per folio order.

use std::process::Command;

#[test]
fn designs_prints_the_space_of_every_design_at_the_orders_asked() {
    let out =
        Command::new(env!("CARGO_BIN_EXE_foliomm")).args(["designs", "--orders", "2,10", "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 8 * 2, "seven designs and mm-id without page mapcounts, at two orders");
    let without = rows.iter().find(|r| r["design"] == "mm-id, page_mapcount off" && r["order"] == 10).unwrap();
    assert_eq!(without["page_mapcounts"], 0, "CONFIG_NO_PAGE_MAPCOUNT keeps no per-page counts");
    let rmap_id_10 = rows.iter().find(|r| r["design"] == "rmap-id" && r["order"] == 10).unwrap();
    let values = rmap_id_10["fields"].as_array().unwrap().iter().find(|f| f[0] == "rmap values").unwrap();
    assert_eq!(values[1], 32, "seed 000: 32 bytes of rmap values at order 10");
    assert_eq!(rmap_id_10["page_mapcounts"], 4096);
    let bad = Command::new(env!("CARGO_BIN_EXE_foliomm")).args(["designs", "--orders", "0"]).output().unwrap();
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("--orders"));
}
