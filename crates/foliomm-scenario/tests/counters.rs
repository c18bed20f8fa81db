//! The counter glossary (`foliomm counters`) covers every counter a run on
//! the model prints, and says something of each.

use foliomm_scenario::{parse, run, ModelBackend, RunOptions};

#[test]
fn every_counter_a_run_prints_is_in_the_glossary() {
    let glossary = foliomm_scenario::model::counter_glossary();
    // Families print one counter per size, result or consumer.
    // Per-node counters print one per node (node0_..., node1_...).
    let family = |name: &str| {
        let name = match name.strip_prefix("node").map(|r| r.trim_start_matches(|c: char| c.is_ascii_digit())) {
            Some(rest) if rest.starts_with('_') => format!("node<N>{rest}"),
            _ => name.to_string(),
        };
        name.split_once('[').map_or(name.clone(), |(n, _)| format!("{n}["))
    };
    let known: Vec<String> = glossary.iter().map(|c| family(&c.name)).collect();
    // A run that swaps, splits, collapses and uses a pool, so that the
    // families show up too.
    let src =
        "set nodes 2\nset swap 64M\nset hugetlb pages=2\nset thp 64K=always\nP: a = mmap 2M rw align 2M\nP: write a\n\
               P: madvise a collapse\nP: fork C\nC: write a\nP: madvise a pageout\nP: read a\n\
               P: h = mmap 2M rw shared hugetlb\nP: write h\n";
    let out = run(&parse(src).unwrap(), &mut ModelBackend::new(), RunOptions::default());
    assert!(out.failure.is_none(), "{:?}", out.failure);
    assert!(out.counters.iter().any(|(n, _)| n.contains('[')), "no family was printed: {:?}", out.counters);
    assert!(out.counters.iter().any(|(n, _)| n == "node1_hugepages_total"), "no node's counters were printed");
    for (name, _) in &out.counters {
        assert!(known.contains(&family(name)), "counter {name} is not in the glossary");
    }
    for c in &glossary {
        assert!(c.meaning.len() > 10, "{} has no meaning: {c:?}", c.name);
        assert!(c.linux.as_deref().is_none_or(|l| !l.contains(' ')), "{c:?}");
    }
    // The Linux name and the needs come from the doc comments.
    let pswpout = glossary.iter().find(|c| c.name == "pswpout").unwrap();
    assert_eq!((pswpout.linux.as_deref(), pswpout.needs.as_deref()), (Some("pswpout"), Some("set swap")));
}
