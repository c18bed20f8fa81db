//! The kernel-version axis for GUP (mm/gup.c).

use super::KernelVersion;

impl KernelVersion {
    /// Whether the slow path a longterm `pin_user_pages_fast` falls back to
    /// touches what it pins (FOLL_TOUCH: a write pin dirties a folio whose
    /// PTE is clean), as every other fallback does: 6.3 on by our reading
    /// (the GUP entry points consolidated, each fallback adding FOLL_TOUCH),
    /// unsure of the exact release. Before, `__gup_longterm_unlocked` took a
    /// longterm pin through `__gup_longterm_locked` without FOLL_TOUCH.
    pub fn longterm_pin_fallback_touches(self) -> bool {
        self >= KernelVersion::new(6, 3)
    }
}
