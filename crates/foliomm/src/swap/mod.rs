//! Swap: one swap device with its slot counts and stored bytes
//! ([`swapfile`], mm/swapfile.c; where free slots are found: [`cluster`]), and the swap cache that ties a slot to
//! the folio being written out or read in (in the same device structure,
//! mm/swap_state.c). The page-table side (swap PTEs, `do_swap_page`,
//! swap-out through `try_to_unmap`) lives in `memory`.

pub mod cluster;
pub mod swapfile;

pub use swapfile::{SwapDevice, SwapStats};
