//! CPU time of the calling thread, for the per-replica planning figures.
//!
//! Read from `/proc/thread-self/schedstat` (first field: nanoseconds this thread ran on a
//! CPU). `clock_gettime(CLOCK_THREAD_CPUTIME_ID)` would need `unsafe` (libc), which the
//! workspace forbids; the kernel's schedstat counter is the same per-thread runtime, in
//! nanoseconds, without it. `None` where the file does not exist (not Linux, or a kernel
//! without `CONFIG_SCHED_INFO`).

/// Nanoseconds of CPU the calling thread has used so far.
pub fn thread_cpu_ns() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    text.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_cpu_time_grows_with_work_done_on_the_thread() {
        let Some(before) = thread_cpu_ns() else {
            return; // no per-thread CPU clock here
        };
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(x);
        let after = thread_cpu_ns().expect("read before");
        assert!(after > before, "{before} -> {after}");
    }
}
