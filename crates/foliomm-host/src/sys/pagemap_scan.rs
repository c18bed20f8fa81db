//! The `PAGEMAP_SCAN` ioctl of `/proc/self/pagemap` (Linux 6.7+): page
//! categories of a range in one call.

use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;

/// One region the scan reports (`struct page_region`,
/// include/uapi/linux/fs.h, not in older libc headers).
#[repr(C)]
#[derive(Default, Clone, Copy)]
pub struct PageRegion {
    /// The region's first address.
    pub start: u64,
    /// The address past its end.
    pub end: u64,
    /// Its `PAGE_IS_*` categories, as asked for.
    pub categories: u64,
}

/// `struct pm_scan_arg`.
#[repr(C)]
#[derive(Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: u64 = 0xC060_6610;

/// Scans `[start, end)` through `pagemap` (the process's own
/// `/proc/self/pagemap`) for the categories in `return_mask`, filling
/// `regions`; returns how many it filled and where the walk ended (a walk
/// that ran out of regions ends early). An error on a kernel without the
/// ioctl.
pub fn pagemap_scan(
    pagemap: &File,
    start: u64,
    end: u64,
    return_mask: u64,
    regions: &mut [PageRegion],
) -> io::Result<(usize, u64)> {
    let mut arg = PmScanArg {
        size: std::mem::size_of::<PmScanArg>() as u64,
        start,
        end,
        vec: regions.as_mut_ptr() as u64,
        vec_len: regions.len() as u64,
        return_mask,
        ..Default::default()
    };
    // SAFETY: PAGEMAP_SCAN reads `arg` and writes at most `vec_len`
    // regions into `regions`, which outlives the call.
    let n = unsafe { libc::ioctl(pagemap.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg as *mut PmScanArg) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok((n as usize, arg.walk_end))
    }
}
