//! A swap device for a run that says `set swap SIZE`: `zram0` sized, given
//! a swap signature (as `mkswap` writes it) and swapped on. Its size is a
//! changed setting of [`crate::sysfs`], which at the end puts it back by
//! swapping off and resetting. zram is a synchronous device
//! (`SWP_SYNCHRONOUS_IO`), as the model's.

use crate::sysfs::{self, ZRAM_DISKSIZE as DISKSIZE};

const DEVICE: &std::ffi::CStr = c"/dev/zram0";

/// Why the host cannot give a run a swap device, if it cannot: no zram0,
/// or zram0 in use (sized already, or swapped on by someone else).
pub fn unavailable() -> Option<String> {
    let size = std::fs::read_to_string(DISKSIZE).map_err(|e| format!("no zram0 ({DISKSIZE}: {e})"));
    match size.map(|s| s.trim().to_string()) {
        Err(why) => Some(why),
        Ok(s) if s != "0" => Some(format!("zram0 is in use (disksize {s})")),
        Ok(_) => None,
    }
}

/// Sizes zram0 to `bytes`, writes a swap signature and swaps it on.
pub fn start(bytes: u64) -> Result<(), String> {
    sysfs::set(DISKSIZE, &bytes.to_string())?;
    std::fs::write("/dev/zram0", header(bytes / 4096)).map_err(|e| format!("cannot write /dev/zram0: {e}"))?;
    crate::sys::swap_device(DEVICE, true).map_err(|e| format!("swapon /dev/zram0: {e}"))
}

/// The first page of a swap device of `pages` pages, as `mkswap` writes it
/// (`union swap_header`): version 1, the last usable page, no bad pages, and
/// the signature `SWAPSPACE2` at the page's end.
fn header(pages: u64) -> Vec<u8> {
    let mut page = vec![0u8; 4096];
    page[1024..1028].copy_from_slice(&1u32.to_ne_bytes());
    page[1028..1032].copy_from_slice(&(pages as u32 - 1).to_ne_bytes());
    page[4086..].copy_from_slice(b"SWAPSPACE2");
    page
}
