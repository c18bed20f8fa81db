//! Where a swap device's free slots are found (mm/swapfile.c's cluster
//! allocator as Linux 6.18 has it): the device is cut into clusters of 512
//! slots, and a cluster serves one folio order from its first allocation
//! until it is empty again, so that a large folio's naturally aligned run
//! is there to be had. A cluster is on one list at a time: free, nonfull
//! (slots were freed in it) or frag (allocated from, not full) of its
//! order, or full. An allocation of order k tries the cluster it last used
//! (the per-CPU `percpu_swap_cluster.offset[k]`) unless that has emptied
//! meanwhile (an empty cluster's swap table is freed with it), then the
//! nonfull clusters of order k, a free cluster, a frag cluster of order k,
//! and for order 0 any other order's frag and nonfull clusters. At swapon
//! the cluster holding the header (slot 0) is nonfull for order 0:
//! order-0 slots come from slot 1 on, so a run of order-0 pages swapped
//! out in address order is not aligned for a large swap-in.
//!
//! Differs from Linux: one "last used" cluster per order for the device
//! (Linux keeps one per CPU, and no cluster is taken off a list by
//! another CPU meanwhile); a slot only the swap cache holds is never
//! reclaimed to make room (Linux does once swap is half full); no discard;
//! every release allocates as 6.18 does. Earlier allocators differ: up to
//! 6.13 order-0 slots came from the first free cluster (from slot 512 on,
//! through the per-CPU slot cache from 6.12), and before 6.18 the cluster
//! last used was taken again once it had emptied. The alignment this
//! decides shows only where large folios are swapped in whole.

use std::collections::BTreeMap;

use crate::arch::PMD_ORDER;

/// Slots per cluster (`SWAPFILE_CLUSTER`): a large folio's slots lie in one.
pub const CLUSTER: u64 = 512;

/// Orders a cluster may serve (`SWAP_NR_ORDERS`).
const ORDERS: usize = PMD_ORDER as usize + 1;

/// The list a cluster is on (`CLUSTER_FLAG_*`), ordered so that one list's
/// members are a range of [`Clusters::lists`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum List {
    Free,
    Nonfull(u8),
    Frag(u8),
    Full,
}

/// `struct swap_cluster_info`: slots in use, the order it serves, and its
/// place on a list (off every list while an allocation scans it).
#[derive(Clone, Copy, Debug, Default)]
struct Cluster {
    count: u64,
    order: u8,
    on: Option<(List, u64)>,
}

/// The clusters of a device of `slots` slots and their lists.
pub struct Clusters {
    info: Vec<Cluster>,
    /// Every list's members in the order they were added (by list, then by
    /// a sequence number): a list's head is its first key.
    lists: BTreeMap<(List, u64), usize>,
    seq: u64,
    /// The slot after the last allocation of each order, if that cluster
    /// had room (0: none).
    next: [u64; ORDERS],
    slots: u64,
}

impl Clusters {
    /// `setup_clusters`: the header slot and the slots past the end count
    /// as used; a cluster with used slots is nonfull for order 0, the
    /// others free.
    pub fn new(slots: u64) -> Clusters {
        let n = slots.div_ceil(CLUSTER).max(1) as usize;
        let mut c =
            Clusters { info: vec![Cluster::default(); n], lists: BTreeMap::new(), seq: 0, next: [0; ORDERS], slots };
        c.info[0].count += 1;
        c.info[n - 1].count += n as u64 * CLUSTER - slots;
        for i in 0..n {
            let list = if c.info[i].count > 0 { List::Nonfull(0) } else { List::Free };
            c.move_to(i, list);
        }
        c
    }

    /// `cluster_alloc_swap_entry` after `swap_alloc_fast`: the first slot
    /// of a naturally aligned run of 2^`order` slots, all `free`, in one
    /// cluster serving `order`; None if there is none.
    pub fn alloc(&mut self, order: u32, free: impl Fn(u64) -> bool) -> Option<u64> {
        assert!(order <= PMD_ORDER, "no swap cluster serves order {order}");
        let order = order as u8;
        let next = self.next[order as usize];
        if next != 0 {
            let i = (next / CLUSTER) as usize;
            let ci = self.info[i];
            // cluster_is_usable: not full, not empty (its swap table freed
            // with it), and serving this order (order 0 may use any).
            let full = matches!(ci.on, Some((List::Full, _)));
            if !full && ci.count > 0 && (ci.order == order || order == 0) {
                if let Some(found) = self.scan(i, next, order, &free) {
                    return Some(found);
                }
            }
        }
        let below_pmd = (order as u32) < PMD_ORDER;
        let mut tries = Vec::new();
        if below_pmd {
            tries.push((List::Nonfull(order), true));
        }
        tries.push((List::Free, false));
        if below_pmd {
            tries.push((List::Frag(order), false));
        }
        if order == 0 {
            (1..ORDERS as u8).for_each(|o| tries.extend([(List::Frag(o), true), (List::Nonfull(o), true)]));
        }
        tries.into_iter().find_map(|(list, all)| self.scan_list(list, order, all, &free))
    }

    /// `swap_entries_free` for one slot: the cluster's count drops; an
    /// empty cluster is free again (`free_cluster`), another one nonfull
    /// (`partial_free_cluster`).
    pub fn free(&mut self, offset: u64) {
        debug_assert!(offset != 0, "the header slot is never freed");
        let i = (offset / CLUSTER) as usize;
        self.info[i].count -= 1;
        if self.info[i].count == 0 {
            self.info[i].order = 0;
            self.move_to(i, List::Free);
        } else if !matches!(self.info[i].on, Some((List::Nonfull(_), _))) {
            self.move_to(i, List::Nonfull(self.info[i].order));
        }
    }

    /// `alloc_swap_scan_list`: the head of `list` taken off it and scanned,
    /// and with `all` the next one while none had room.
    fn scan_list(&mut self, list: List, order: u8, all: bool, free: &impl Fn(u64) -> bool) -> Option<u64> {
        loop {
            let (&key, &i) = self.lists.range((list, 0)..=(list, u64::MAX)).next()?;
            self.lists.remove(&key);
            self.info[i].on = None;
            if let Some(found) = self.scan(i, i as u64 * CLUSTER, order, free) {
                return Some(found);
            }
            if !all {
                return None;
            }
        }
    }

    /// `alloc_swap_scan_cluster`: the first free aligned run from `from` to
    /// the cluster's end, taken for `order`; then the cluster goes on the
    /// list its count says (`relocate_cluster`), and the order's next slot
    /// is noted.
    fn scan(&mut self, i: usize, from: u64, order: u8, free: &impl Fn(u64) -> bool) -> Option<u64> {
        let nr = 1u64 << order;
        let end = ((i as u64 + 1) * CLUSTER).min(self.slots);
        let room = self.info[i].count + nr <= CLUSTER && end >= nr;
        let empty = self.info[i].count == 0;
        let found = (from..=end.saturating_sub(nr))
            .step_by(nr as usize)
            .filter(|_| room)
            .find(|&o| empty || (o..o + nr).all(free));
        if found.is_some() {
            // cluster_alloc_range: the first allocation gives the cluster
            // its order (order 0 stealing leaves it).
            if empty {
                self.info[i].order = order;
            }
            self.info[i].count += nr;
        }
        let after = found.map_or(0, |o| o + nr);
        self.next[order as usize] =
            if self.info[i].count < CLUSTER && after != 0 && after + nr <= end { after } else { 0 };
        let list = match self.info[i].count {
            0 => List::Free,
            CLUSTER => List::Full,
            _ => List::Frag(self.info[i].order),
        };
        if self.info[i].on.map(|(l, _)| l) != Some(list) {
            self.move_to(i, list);
        }
        found
    }

    /// Takes cluster `i` off its list.
    fn take_off(&mut self, i: usize) {
        if let Some(key) = self.info[i].on.take() {
            self.lists.remove(&key);
        }
    }

    /// `move_cluster`: cluster `i` to the tail of `list`.
    fn move_to(&mut self, i: usize, list: List) {
        self.take_off(i);
        self.seq += 1;
        self.lists.insert((list, self.seq), i);
        self.info[i].on = Some((list, self.seq));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// Clusters of a device of `slots` slots and its used slots (the
    /// header's among them), as `SwapDevice` keeps its map.
    struct Device {
        clusters: Clusters,
        used: HashSet<u64>,
    }

    impl Device {
        fn new(slots: u64) -> Device {
            Device { clusters: Clusters::new(slots), used: HashSet::from([0]) }
        }

        fn alloc(&mut self, order: u32) -> Option<u64> {
            let used = &self.used;
            let first = self.clusters.alloc(order, |o| !used.contains(&o))?;
            self.used.extend(first..first + (1 << order));
            Some(first)
        }

        fn free(&mut self, first: u64, nr: u64) {
            for o in first..first + nr {
                assert!(self.used.remove(&o));
                self.clusters.free(o);
            }
        }
    }

    #[test]
    fn order_0_starts_beside_the_header_and_a_large_order_takes_a_free_cluster() {
        let mut d = Device::new(4 * CLUSTER);
        assert_eq!(d.alloc(4), Some(CLUSTER));
        assert_eq!(d.alloc(0), Some(1));
        assert_eq!(d.alloc(0), Some(2));
        assert_eq!(d.alloc(4), Some(CLUSTER + 16));
        // Order 2 does not share order 4's cluster: it takes the next free one.
        assert_eq!(d.alloc(2), Some(2 * CLUSTER));
    }

    #[test]
    fn a_cluster_serves_one_order_until_it_is_empty() {
        let mut d = Device::new(2 * CLUSTER);
        // Cluster 1 serves order 4 until it is full.
        let runs: Vec<u64> = (0..CLUSTER / 16).map(|_| d.alloc(4).unwrap()).collect();
        assert_eq!(runs.last(), Some(&(2 * CLUSTER - 16)));
        // No free cluster is left for order 3; cluster 0 serves order 0.
        assert_eq!(d.alloc(3), None);
        // Freed runs leave cluster 1 nonfull for order 4 only.
        d.free(runs[3], 16);
        assert_eq!(d.alloc(3), None);
        assert_eq!(d.alloc(4), Some(runs[3]));
        // Empty, it may serve another order.
        for &r in &runs {
            d.free(r, 16);
        }
        assert_eq!(d.alloc(3), Some(CLUSTER));
    }

    #[test]
    fn order_0_steals_from_a_large_order_s_cluster_when_nothing_else_is_left() {
        let mut d = Device::new(2 * CLUSTER);
        let run = d.alloc(4).unwrap();
        // Fill cluster 0 with order-0 slots (511 besides the header).
        for _ in 1..CLUSTER {
            assert!(d.alloc(0).unwrap() < CLUSTER);
        }
        // The first free slot of order 4's cluster, past its run.
        assert_eq!(run, CLUSTER);
        assert_eq!(d.alloc(0), Some(CLUSTER + 16));
        // The cluster still serves order 4, past the stolen slot.
        assert_eq!(d.alloc(4), Some(CLUSTER + 32));
    }

    #[test]
    fn an_emptied_cluster_goes_to_the_free_list_s_tail() {
        let mut d = Device::new(4 * CLUSTER);
        assert_eq!(d.alloc(4), Some(CLUSTER));
        d.free(CLUSTER, 16);
        // Not taken again as the order's last cluster: the free list's
        // head (cluster 2) comes first, cluster 1 after cluster 3.
        assert_eq!(d.alloc(4), Some(2 * CLUSTER));
        assert_eq!(d.alloc(3), Some(3 * CLUSTER));
        assert_eq!(d.alloc(2), Some(CLUSTER));
    }

    #[test]
    fn a_partial_last_cluster_ends_where_the_device_does() {
        // 700 slots: cluster 1 holds 188, and counts the other 324 used.
        let mut d = Device::new(700);
        assert_eq!(d.alloc(0), Some(1));
        // Order 4 has no free cluster (cluster 1 is nonfull for order 0).
        assert_eq!(d.alloc(4), None);
        for _ in 2..CLUSTER {
            assert!(d.alloc(0).unwrap() < CLUSTER);
        }
        let rest: Vec<u64> = (0..188).map(|_| d.alloc(0).unwrap()).collect();
        assert_eq!((rest[0], rest[187]), (CLUSTER, 699));
        assert_eq!(d.alloc(0), None);
    }
}
