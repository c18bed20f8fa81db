//! KSM against the invariant checker: the checker finds a KSM mapping that
//! ksmd recorded as merged but that no rmap item of its stable node
//! reaches, and a stable node that names another frame.

use foliomm::internals::mm::ksm::ksmd_scan;
use foliomm::internals::mm::Advice;
use foliomm::{Config, Machine, MmapFlags, Prot};

const K: u64 = 1024;

/// Two processes with two equal pages each, merged by two scans; returns
/// the machine, the processes and their addresses.
fn merged() -> (std::sync::Arc<Machine>, [std::sync::Arc<foliomm::Mm>; 2], [u64; 2]) {
    let m = Machine::new(Config { memory: 8 << 20, ..Config::default() }).unwrap();
    let (p, q) = (m.new_mm().unwrap(), m.new_mm().unwrap());
    let mut cpu = m.new_cpu();
    let mut at = [0; 2];
    for (i, mm) in [&p, &q].into_iter().enumerate() {
        at[i] = mm.mmap(0, 8 * K, Prot::RW, MmapFlags::default()).unwrap();
        cpu.write_byte_per_page(mm, at[i], 8 * K, 0x5a).unwrap();
        mm.madvise(at[i], 8 * K, Advice::Mergeable).unwrap();
    }
    ksmd_scan(&m.kernel, &m.mms, 2);
    assert!(m.check().is_empty(), "{:?}", m.check());
    assert!(p.page_info(at[0]).ksm && q.page_info(at[1]).ksm, "merged");
    (m, [p, q], at)
}

#[test]
fn a_merged_mapping_no_rmap_item_reaches_is_caught() {
    let (m, [p, _q], at) = merged();
    let nodes = m.mms.ksm.stable.all();
    assert_eq!(nodes.len(), 1, "one KSM page for four equal pages");
    m.mms.ksm.stable.remove_item(nodes[0].0, p.serial, at[0]);
    let bad: Vec<String> = m.check().iter().map(ToString::to_string).collect();
    assert!(bad.iter().any(|v| v.contains("no rmap item of the node reaches it")), "{bad:?}");
}

#[test]
fn a_stable_node_naming_another_frame_is_caught() {
    let (m, [_p, q], at) = merged();
    let (id, node) = m.mms.ksm.stable.all().remove(0);
    m.mms.ksm.stable.set_kpfn(id, node.kpfn + 1);
    let bad: Vec<String> = m.check().iter().map(ToString::to_string).collect();
    assert!(bad.iter().any(|v| v.contains("but its stable node")), "{bad:?}");
    drop((q, at));
}
