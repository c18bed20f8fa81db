//! NUMA nodes (`struct pglist_data`): the frames are cut into `N` runs of
//! whole max-order blocks, one per node, each with a zone of its own (its
//! buddy free lists and lock) and its own per-CPU lists, as each Linux
//! node has its zones and each zone its `per_cpu_pageset`. An allocation
//! names where it may go ([`Placement`]): the preferred node first, then
//! the other allowed nodes in ascending order after it (the zonelist when
//! every distance is equal).
//!
//! Differs from Linux: one zone per node (`ZONE_MOVABLE`/`ZONE_NORMAL` are
//! not told apart), equal node distances, and a node's size is a share of
//! the model's memory (the last node takes what does not divide).

use super::buddy::FreeArea;
use super::pcp::{self, PerCpuPages};
use super::PhysMem;
use crate::arch::{Pfn, MAX_PAGE_ORDER};
use crate::sync::Mutex;
use crate::Errno;

/// The most nodes the model has (`MAX_NUMNODES` with `NODES_SHIFT` 6).
pub const MAX_NUMNODES: usize = 64;

/// A set of nodes (`nodemask_t`), bit `n` for node `n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct NodeMask(pub u64);

impl NodeMask {
    /// Every node.
    pub const ALL: NodeMask = NodeMask(u64::MAX);

    /// Only node `nid`.
    pub fn of(nid: usize) -> NodeMask {
        NodeMask(1 << nid)
    }

    /// Whether `nid` is in the set (`node_isset`).
    pub fn contains(self, nid: usize) -> bool {
        nid < MAX_NUMNODES && self.0 >> nid & 1 == 1
    }

    /// The lowest node in the set (`first_node`), if any.
    pub fn first(self) -> Option<usize> {
        (self.0 != 0).then(|| self.0.trailing_zeros() as usize)
    }
}

/// Where an allocation may take its frames (the `preferred_zoneref` and
/// `nodemask` of `struct alloc_context`): the preferred node first, then
/// the other nodes of `allowed` in ascending order from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub preferred: usize,
    pub allowed: NodeMask,
}

thread_local! {
    /// The node of the CPU this thread runs on (`numa_node_id`).
    static LOCAL_NODE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Makes `nid` the node this thread's CPU is on, from now on: its
/// allocations' local node. A model task runs on node 0 but for a
/// simulated CPU its benchmark places on another (`--sim-nodes`); `nid`
/// must be a node of the machine the thread allocates from.
pub fn set_local_node(nid: usize) {
    LOCAL_NODE.set(nid);
}

impl Placement {
    /// The local node (node 0, or the one [`set_local_node`] set), every
    /// node allowed: a task's default.
    pub fn local() -> Placement {
        Placement { preferred: LOCAL_NODE.get(), allowed: NodeMask::ALL }
    }

    /// Node `nid` only (`__GFP_THISNODE`), as migration allocates its
    /// targets (`alloc_migration_target`).
    pub fn this_node(nid: usize) -> Placement {
        Placement { preferred: nid, allowed: NodeMask::of(nid) }
    }
}

/// One node: its frames `[start, start + nr_frames)`, its zone's buddy free
/// lists and its per-CPU lists. Line-aligned, so that the simulated
/// coherence costs of its zone lock do not depend on where the allocator
/// put the nodes.
#[repr(align(64))]
pub(super) struct Node {
    pub(super) start: Pfn,
    pub(super) nr_frames: u64,
    pub(super) zone: Mutex<FreeArea>,
    pub(super) pcp: Box<[Mutex<PerCpuPages>]>,
}

/// `nodes` nodes sharing `nr_frames` frames (a multiple of the max-order
/// block); EINVAL when a node would have no whole block.
pub(super) fn new_nodes(nr_frames: u64, nodes: usize) -> Result<Box<[Node]>, Errno> {
    if nodes == 0 || nodes > MAX_NUMNODES {
        return Err(Errno::EINVAL);
    }
    let block = 1u64 << MAX_PAGE_ORDER;
    let per = nr_frames / block / nodes as u64 * block;
    if per == 0 {
        return Err(Errno::EINVAL);
    }
    Ok((0..nodes as u64)
        .map(|n| Node {
            start: n * per,
            nr_frames: if n + 1 == nodes as u64 { nr_frames - n * per } else { per },
            zone: Mutex::new(FreeArea::new()),
            pcp: pcp::new_lists(),
        })
        .collect())
}

impl PhysMem {
    /// The number of nodes (`nr_online_nodes`).
    pub fn nr_nodes(&self) -> usize {
        self.nodes.len()
    }

    /// The node frame `pfn` belongs to (`pfn_to_nid`, `folio_nid`): every
    /// node but the last has the first's size.
    pub fn nid(&self, pfn: Pfn) -> usize {
        ((pfn / self.nodes[0].nr_frames) as usize).min(self.nodes.len() - 1)
    }

    /// Frames of node `nid` (`node_present_pages`); 0 past the last node.
    pub fn node_frames(&self, nid: usize) -> u64 {
        self.nodes.get(nid).map_or(0, |n| n.nr_frames)
    }

    /// The nodes `place` may use, in the order an allocation tries them.
    pub fn zonelist(&self, place: Placement) -> impl Iterator<Item = usize> + '_ {
        let n = self.nodes.len();
        (0..n).map(move |i| (place.preferred + i) % n).filter(move |&nid| place.allowed.contains(nid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::phys::MigrateType;

    #[test]
    fn nodes_share_the_frames_and_allocations_stay_where_placed() {
        let phys = PhysMem::new_numa(12 << 20, 2, false).unwrap();
        assert_eq!((phys.nr_nodes(), phys.node_frames(0), phys.node_frames(1)), (2, 1024, 2048));
        assert_eq!((phys.nid(1023), phys.nid(1024)), (0, 1));
        let a = phys.alloc_pages_on(Placement::this_node(1), 0, MigrateType::Movable).unwrap();
        assert_eq!(phys.nid(a), 1);
        assert_eq!(phys.nr_free_node(1), 2047);
        phys.free_pages(a, 0);
        assert_eq!(phys.nr_free_node(1), 2048);
        // Node 0 full: the local allocation falls back to node 1, a
        // this-node one fails.
        assert_eq!(phys.nid(phys.alloc_pages(MAX_PAGE_ORDER).unwrap()), 0);
        assert_eq!(phys.nid(phys.alloc_pages(0).unwrap()), 1);
        let thisnode = phys.alloc_pages_on(Placement::this_node(0), 0, MigrateType::Movable);
        assert_eq!(thisnode, Err(Errno::ENOMEM));
        assert_eq!(PhysMem::new_numa(4 << 20, 2, false).err(), Some(Errno::EINVAL), "a node without a block");
        assert_eq!(PhysMem::new_numa(4 << 20, 0, false).err(), Some(Errno::EINVAL), "no node");
    }

    #[test]
    fn a_thread_on_another_node_allocates_there_first() {
        let phys = PhysMem::new_numa(12 << 20, 2, false).unwrap();
        let on = |nid| {
            std::thread::scope(|s| {
                s.spawn(|| {
                    set_local_node(nid);
                    phys.nid(phys.alloc_pages(0).unwrap())
                })
                .join()
                .unwrap()
            })
        };
        assert_eq!([on(1), on(0)], [1, 0]);
        assert_eq!(phys.nid(phys.alloc_pages(0).unwrap()), 0, "a thread starts on node 0");
    }
}
