//! NUMA memory policies (`struct mempolicy`, include/linux/mempolicy.h)
//! and where an allocation under one goes (mm/mempolicy.c
//! `policy_nodemask`, `interleave_nid`, `alloc_pages_mpol`).
//!
//! Differs from Linux: a VMA's policy only (`mbind`); no task policy
//! (`set_mempolicy`), no shared policy of a shmem file, no
//! `MPOL_PREFERRED_MANY` or weighted interleave, no mode flags
//! (`MPOL_F_STATIC_NODES`...). Every model task runs on node 0.

use crate::arch::PMD_ORDER;
use crate::phys::{NodeMask, Placement};

/// A memory policy's mode and nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mempolicy {
    /// `MPOL_DEFAULT`: the local node, falling back to any.
    #[default]
    Default,
    /// `MPOL_PREFERRED`: this node first, falling back to any.
    Preferred(usize),
    /// `MPOL_BIND`: only these nodes, the nearest first.
    Bind(NodeMask),
    /// `MPOL_INTERLEAVE`: page by page (folio by folio) round the nodes.
    Interleave(NodeMask),
}

/// Nodes a policy can name: the bits below the mode's.
const MASK_BITS: u32 = 60;

impl Mempolicy {
    /// The `MPOL_*` mode number.
    pub fn mode(self) -> u32 {
        match self {
            Mempolicy::Default => 0,
            Mempolicy::Preferred(_) => 1,
            Mempolicy::Bind(_) => 2,
            Mempolicy::Interleave(_) => 3,
        }
    }

    /// The policy's nodes (empty for the default policy).
    pub fn nodes(self) -> NodeMask {
        match self {
            Mempolicy::Default => NodeMask(0),
            Mempolicy::Preferred(n) => NodeMask::of(n),
            Mempolicy::Bind(m) | Mempolicy::Interleave(m) => m,
        }
    }

    /// `mpol_new` + `mpol_set_nodemask` for mode `mode` and `nodes`, on a
    /// machine of `nr_nodes` nodes: the nodes without memory are dropped
    /// first. EINVAL for an unknown mode, nodes with the default policy,
    /// or no node left for the others; a preferred policy takes the first
    /// node given, and with none given is the local policy (`MPOL_LOCAL`,
    /// the default's placement).
    pub fn new(mode: u32, nodes: NodeMask, nr_nodes: usize) -> Result<Mempolicy, crate::Errno> {
        let online = NodeMask(nodes.0 & ((1u64 << nr_nodes.min(MASK_BITS as usize)) - 1));
        let first = online.first();
        match (mode, first) {
            (0, _) if nodes.0 == 0 => Ok(Mempolicy::Default),
            (1, None) if nodes.0 == 0 => Ok(Mempolicy::Default),
            (1, Some(n)) => Ok(Mempolicy::Preferred(n)),
            (2, Some(_)) => Ok(Mempolicy::Bind(online)),
            (3, Some(_)) => Ok(Mempolicy::Interleave(online)),
            _ => Err(crate::Errno::EINVAL),
        }
    }

    /// The policy as one word, for a VMA's atomic field.
    pub(crate) fn encode(self) -> u64 {
        (self.mode() as u64) << MASK_BITS | self.nodes().0
    }

    /// The policy [`Mempolicy::encode`] made the word of.
    pub(crate) fn decode(w: u64) -> Mempolicy {
        let nodes = NodeMask(w & ((1 << MASK_BITS) - 1));
        match w >> MASK_BITS {
            1 => Mempolicy::Preferred(nodes.first().unwrap_or(0)),
            2 => Mempolicy::Bind(nodes),
            3 => Mempolicy::Interleave(nodes),
            _ => Mempolicy::Default,
        }
    }

    /// Where a folio of `order` at interleave index `ilx` goes
    /// (`alloc_pages_mpol`): the local node for the default policy, the
    /// preferred node, the nearest allowed node of a bind policy (node 0 if
    /// allowed, else the first) with no fallback outside it, the `ilx`-th
    /// node round an interleave policy's. A PMD-sized THP under any but an
    /// interleave policy is tried on that node alone unless `may_reclaim`
    /// (Linux's `__GFP_THISNODE` for THPs, which only a direct-reclaim
    /// allocation retries remotely).
    pub fn placement(self, ilx: u64, order: u32, may_reclaim: bool) -> Placement {
        let place = match self {
            Mempolicy::Default => Placement::local(),
            Mempolicy::Preferred(n) => Placement { preferred: n, allowed: NodeMask::ALL },
            Mempolicy::Bind(m) => {
                let preferred = if m.contains(0) { 0 } else { m.first().unwrap_or(0) };
                Placement { preferred, allowed: m }
            }
            Mempolicy::Interleave(m) => {
                let target = ilx % m.0.count_ones().max(1) as u64;
                let nid = (0..MASK_BITS as usize).filter(|&n| m.contains(n)).nth(target as usize).unwrap_or(0);
                return Placement { preferred: nid, allowed: NodeMask::ALL };
            }
        };
        if order == PMD_ORDER && !may_reclaim && place.allowed.contains(place.preferred) {
            return Placement::this_node(place.preferred);
        }
        place
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_round_trip_and_place_as_linux_does() {
        for p in [
            Mempolicy::Default,
            Mempolicy::Preferred(1),
            Mempolicy::Bind(NodeMask(6)),
            Mempolicy::Interleave(NodeMask(3)),
        ] {
            assert_eq!(Mempolicy::decode(p.encode()), p);
        }
        assert_eq!(Mempolicy::new(2, NodeMask(0b100), 2), Err(crate::Errno::EINVAL), "node 2 has no memory");
        assert_eq!(Mempolicy::new(0, NodeMask(1), 2), Err(crate::Errno::EINVAL));
        assert_eq!(Mempolicy::new(2, NodeMask(0b110), 2), Ok(Mempolicy::Bind(NodeMask(0b10))));
        let bind = Mempolicy::Bind(NodeMask(0b10)).placement(0, 0, false);
        assert_eq!((bind.preferred, bind.allowed), (1, NodeMask(0b10)));
        let il = Mempolicy::Interleave(NodeMask(0b11));
        assert_eq!([0, 1, 2].map(|i| il.placement(i, 0, false).preferred), [0, 1, 0]);
        assert_eq!(Mempolicy::Preferred(1).placement(0, PMD_ORDER, false), Placement::this_node(1));
        assert_eq!(Mempolicy::Preferred(1).placement(0, PMD_ORDER, true).allowed, NodeMask::ALL);
    }
}
