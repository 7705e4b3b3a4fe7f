//! Settings of the whole process that the binaries make first thing in `main`.

/// Turns transparent huge pages off for this process (`prctl(PR_SET_THP_DISABLE)`), on
/// Linux; elsewhere, or if the kernel refuses, nothing changes.
///
/// mimalloc, the binaries' allocator, asks for huge pages on its large regions. A huge page
/// is resident as a whole once one byte of it is touched, so a replica whose heap is many
/// small objects spread over them held a quarter more resident memory than with glibc: 431
/// against 351 MiB for `phalanx serve` at 500 nodes and 20,000 pods, and 311 MiB with huge
/// pages off (docs/adr/0004-mimalloc.md). The simulator ran no slower without them.
pub fn disable_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::thread::disable_transparent_huge_pages(true) {
        tracing::debug!(error = %e, "transparent huge pages stay as the kernel sets them");
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn transparent_huge_pages_are_off_after_the_call() {
        super::disable_transparent_huge_pages();
        assert!(rustix::thread::transparent_huge_pages_are_disabled().expect("prctl answers"));
    }
}
