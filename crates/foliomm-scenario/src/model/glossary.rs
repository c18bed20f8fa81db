//! The counter glossary of the model backend (`foliomm counters`).

use foliomm::internals::kernel::stats::CounterDoc;

/// Every counter the model backend gives (`stat.NAME` in an `expect`),
/// with what it counts: the kernel's, then the machine's lines.
pub fn counter_glossary() -> Vec<CounterDoc> {
    let mut out = foliomm::internals::kernel::stats::glossary();
    let pools = [("hugepages", "2 MiB"), ("hugepages_1g", "1 GiB")];
    let lines = [
        ("total", "nr_hugepages", "Huge pages in the pool of {size} pages"),
        ("free", "free_hugepages", "Free huge pages in the pool of {size} pages"),
        ("rsvd", "resv_hugepages", "Huge pages of {size} promised to mappings and not yet faulted"),
        ("surp", "surplus_hugepages", "Surplus huge pages of {size} (above nr_hugepages, from overcommit)"),
    ];
    for (prefix, size) in pools {
        for (name, linux, what) in lines {
            let doc = format!("{} (`{linux}`). Needs: set hugetlb.", what.replace("{size}", size));
            out.push(CounterDoc::new(format!("{prefix}_{name}"), &doc));
        }
    }
    let node_lines = [("total", "nr_hugepages"), ("free", "free_hugepages"), ("surp", "surplus_hugepages")];
    for ((prefix, size), (name, linux)) in pools.into_iter().flat_map(|p| node_lines.map(|l| (p, l))) {
        let doc = format!(
            "The pool of {size} pages on node N: its pages, free ones or surplus ones \
             (node<N>/hugepages/..., `{linux}`); printed on machines of several nodes. Needs: set nodes and set hugetlb."
        );
        out.push(CounterDoc::new(format!("node<N>_{prefix}_{name}"), &doc));
    }
    for (name, line) in [
        ("total", "HugePages_Total"),
        ("free", "HugePages_Free"),
        ("rsvd", "HugePages_Rsvd"),
        ("surp", "HugePages_Surp"),
    ] {
        let doc = format!("The 2 MiB pool as /proc/meminfo shows it (`{line}`). Needs: set hugetlb.");
        out.push(CounterDoc::new(format!("meminfo_hugepages_{name}"), &doc));
    }
    out.push(CounterDoc::new(
        "meminfo_hugetlb_kb".into(),
        "Every pool's pages in KiB, as /proc/meminfo shows them (`Hugetlb`). Needs: set hugetlb.",
    ));
    for (name, line) in [("total", "SwapTotal"), ("free", "SwapFree"), ("cached", "SwapCached")] {
        let doc = format!("The swap device in KiB, as /proc/meminfo shows it (`{line}`). Needs: set swap.");
        out.push(CounterDoc::new(format!("meminfo_swap_{name}_kb"), &doc));
    }
    for (name, kind, line) in [("nr_anon_pages", "Anonymous", "AnonPages"), ("nr_mapped", "File", "Mapped")] {
        let doc = format!(
            "{kind} pages page tables map now, from what each rmap update reported (`{name}` in /proc/vmstat, \
             `{line}` in /proc/meminfo; a gauge, not an event count; whole large folios under page_mapcount off)."
        );
        out.push(CounterDoc::new(name.into(), &doc));
    }
    out.push(CounterDoc::new(
        "frames_in_use".into(),
        "Frames of the model's RAM not free: folios, page tables, the zero pages.",
    ));
    out
}
