//! KSM's stable tree as the rmap sees it (mm/ksm.c `struct ksm_stable_node`,
//! `struct ksm_rmap_item`, `rmap_walk_ksm`): a KSM folio's `folio->mapping`
//! names its stable node, and the node lists the rmap items of the pages
//! merged into it, each with the MM, the address and the anon_vma of the
//! VMA it was merged in. An rmap walk from a KSM folio visits, for each
//! item, every VMA of that anon_vma's tree that spans the item's address
//! (fork children's too, whose VMAs joined the tree).
//!
//! ksmd's own memory of what it scanned ([`Ksm::scanned`]: each page's
//! last checksum and stable node) lives here too, beside the tree.
//!
//! Differs from Linux: the nodes are kept in a map by identity, not in a
//! red-black tree ordered by content (a search compares the content of
//! every node's folio); there are no stable-node chains
//! (`max_page_sharing`) and no per-NUMA-node trees.

use std::collections::{BTreeMap, HashMap};

use super::anon_vma::AnonVma;
use crate::arch::{Pfn, PAGE_SIZE};
use crate::sync::{Arc, Mutex};

/// `struct ksm_rmap_item` of a page merged into a stable node.
#[derive(Clone, Debug)]
pub struct RmapItem {
    /// The serial of the MM that mapped the page.
    pub mm: u64,
    /// Where the page was mapped (`rmap_item->address`).
    pub addr: u64,
    /// The anon_vma of the VMA it was mapped in, kept alive by the item
    /// (`get_anon_vma`).
    pub anon_vma: Arc<AnonVma>,
}

/// `struct ksm_stable_node`: the KSM folio's frame and its rmap items.
#[derive(Clone, Debug)]
pub struct StableNode {
    pub kpfn: Pfn,
    pub items: Vec<RmapItem>,
}

/// KSM's state: the stable tree and ksmd's rmap items by (MM serial,
/// address) (`ksm/full_scans` is the `ksm_full_scans` counter).
#[derive(Debug, Default)]
pub struct Ksm {
    pub stable: StableTree,
    pub scanned: Mutex<HashMap<(u64, u64), Scanned>>,
    /// The `ksm_merging_pages` a fork child copied from its parent (before
    /// 6.15), by MM serial.
    pub inherited: Mutex<HashMap<u64, u64>>,
}

/// What ksmd remembers of a page it scanned (the rest of `struct
/// ksm_rmap_item`): the checksum it saw last (`oldchecksum`) and the stable
/// node it merged the page into, if any.
#[derive(Clone, Copy, Debug, Default)]
pub struct Scanned {
    pub checksum: u64,
    pub stable: Option<u64>,
}

/// Every stable node by identity (what a KSM folio's `folio->mapping`
/// holds). Identities start at 1 and are never reused.
#[derive(Debug, Default)]
pub struct StableTree {
    nodes: Mutex<BTreeMap<u64, StableNode>>,
}

impl StableTree {
    /// `stable_tree_insert`: a new node for the KSM folio at `kpfn`;
    /// returns its identity.
    pub fn insert(&self, kpfn: Pfn) -> u64 {
        let mut nodes = self.nodes.lock().unwrap();
        let id = nodes.last_key_value().map_or(1, |(&id, _)| id + 1);
        nodes.insert(id, StableNode { kpfn, items: Vec::new() });
        id
    }

    /// The node `id`, if it still stands.
    pub fn get(&self, id: u64) -> Option<StableNode> {
        self.nodes.lock().unwrap().get(&id).cloned()
    }

    /// Every node with its identity, in identity order.
    pub fn all(&self) -> Vec<(u64, StableNode)> {
        self.nodes.lock().unwrap().iter().map(|(&id, n)| (id, n.clone())).collect()
    }

    /// Every node's identity and frame, in identity order (what a search
    /// by content walks, without the rmap items).
    pub fn frames(&self) -> Vec<(u64, Pfn)> {
        self.nodes.lock().unwrap().iter().map(|(&id, n)| (id, n.kpfn)).collect()
    }

    /// `stable_tree_append`: adds `item` to node `id`.
    pub fn append(&self, id: u64, item: RmapItem) {
        if let Some(n) = self.nodes.lock().unwrap().get_mut(&id) {
            n.items.push(item);
        }
    }

    /// `remove_rmap_item_from_tree` for a stable item: takes the item of
    /// `mm` at `addr` off node `id`.
    pub fn remove_item(&self, id: u64, mm: u64, addr: u64) {
        if let Some(n) = self.nodes.lock().unwrap().get_mut(&id) {
            n.items.retain(|i| (i.mm, i.addr) != (mm, addr));
        }
    }

    /// `set_page_stable_node` of a migrated KSM folio: node `id` now
    /// names the frame `kpfn` (`ksm_migrate_folio`).
    pub fn set_kpfn(&self, id: u64, kpfn: Pfn) {
        if let Some(n) = self.nodes.lock().unwrap().get_mut(&id) {
            n.kpfn = kpfn;
        }
    }

    /// `remove_node_from_stable_tree` of every node `stale` says is stale
    /// (its folio freed: `ksm_get_folio` finds another mapping there).
    pub fn prune(&self, stale: impl Fn(u64, &StableNode) -> bool) {
        self.nodes.lock().unwrap().retain(|&id, n| !stale(id, n));
    }

    /// The rmap items of MM `mm` in every node.
    pub fn items_of(&self, mm: u64) -> u64 {
        self.nodes.lock().unwrap().values().map(|n| n.items.iter().filter(|i| i.mm == mm).count() as u64).sum()
    }

    /// The VMAs an rmap walk from node `id` visits (`rmap_walk_ksm`): for
    /// each item, each record of its anon_vma's tree spanning the item's
    /// address, with the one-page range there.
    pub fn walk_ranges(&self, id: u64) -> Vec<(super::VmaRecord, u64, u64)> {
        let Some(node) = self.get(id) else { return Vec::new() };
        let mut out = Vec::new();
        for item in &node.items {
            let tree = item.anon_vma.tree.read();
            for rec in tree.iter() {
                let end = rec.start + rec.pages * PAGE_SIZE;
                if (rec.start..end).contains(&item.addr) {
                    out.push((*rec, item.addr, item.addr + PAGE_SIZE));
                }
            }
        }
        out
    }
}
