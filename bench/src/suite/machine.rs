//! What the suite says about the run: the machine, the time, the commit, the command and
//! how loaded the machine was. Read from `/proc` (Linux) and git, never assumed.

use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

/// The `model name` of the first processor in a `/proc/cpuinfo` text, and the count of
/// `processor` entries.
pub fn parse_cpuinfo(text: &str) -> (Option<String>, usize) {
    let value = |l: &str| l.split_once(':').map(|(_, v)| v.trim().to_string());
    let model = text
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(value);
    let count = text
        .lines()
        .filter(|l| l.split(':').next().is_some_and(|k| k.trim() == "processor"))
        .count();
    (model, count)
}

/// `MemTotal` of a `/proc/meminfo` text, in KiB.
pub fn parse_mem_total_kib(text: &str) -> Option<u64> {
    crate::rss::parse_status_kib(text, "MemTotal")
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// One line: CPU model, cores (and how many this process may use when fewer), memory,
/// kernel.
pub fn describe() -> String {
    let (model, cores) = read("/proc/cpuinfo")
        .map(|t| parse_cpuinfo(&t))
        .unwrap_or((None, 0));
    let usable = std::thread::available_parallelism().map_or(0, usize::from);
    let cores = match (cores, usable) {
        (0, u) => format!("{u} cores"),
        (c, u) if u != 0 && u < c => format!("{c} cores ({u} usable by this process)"),
        (c, _) => format!("{c} cores"),
    };
    let mem = read("/proc/meminfo")
        .and_then(|t| parse_mem_total_kib(&t))
        .map_or_else(
            || "memory unknown".to_string(),
            |k| format!("{:.1} GiB", k as f64 / 1024.0 / 1024.0),
        );
    let kernel = read("/proc/sys/kernel/osrelease").map_or_else(
        || "kernel unknown".to_string(),
        |k| format!("Linux {}", k.trim()),
    );
    format!(
        "{}, {cores}, {mem} memory, {kernel}",
        model.unwrap_or_else(|| "CPU model unknown".into())
    )
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` shows them.
pub fn load_average() -> String {
    read("/proc/loadavg")
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant's
/// `civil_from_days`): enough for a date line without a calendar crate.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// `2026-12-04 09:30:00 UTC` for seconds since the epoch.
pub fn utc(secs: u64) -> String {
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    )
}

pub fn now_utc() -> String {
    utc(SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()))
}

/// `git rev-parse --short HEAD`, marked when tracked files differ from it (the figures
/// are then of a tree no commit names).
pub fn git_commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        None => "unknown (not in a git checkout)".into(),
        Some(head) => match git(&["status", "--porcelain", "--untracked-files=no"]) {
            Some(s) if !s.is_empty() => format!("{head} with uncommitted changes"),
            _ => head,
        },
    }
}

/// The command line as given, each word quoted when the shell would split or expand it.
pub fn command_line(args: &[String]) -> String {
    let plain = |a: &str| {
        !a.is_empty()
            && a.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=,:@+%".contains(c))
    };
    args.iter()
        .map(|a| {
            if plain(a) {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// How this binary was built: debug binaries are several times slower, and CI runs them.
pub fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug build (debug assertions on)"
    } else {
        "release build"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_and_meminfo_are_read() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n\nprocessor\t: 1\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n";
        assert_eq!(
            parse_cpuinfo(cpuinfo),
            (Some("Intel(R) Xeon(R) CPU @ 2.20GHz".to_string()), 2)
        );
        assert_eq!(parse_cpuinfo(""), (None, 0));
        assert_eq!(
            parse_mem_total_kib("MemTotal:       8137324 kB\nMemFree: 1 kB\n"),
            Some(8_137_324)
        );
    }

    #[test]
    fn dates_are_utc_calendar_dates() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        // 2000-02-29 (a leap day of a century leap year) 12:34:56.
        assert_eq!(utc(951_827_696), "2000-02-29 12:34:56 UTC");
        assert_eq!(utc(1_798_761_599), "2026-12-31 23:59:59 UTC");
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
    }

    #[test]
    fn the_command_line_quotes_what_a_shell_would_split() {
        let args = [
            "phalanx-bench",
            "suite",
            "--out",
            "/tmp/a b.md",
            "--only=cycle,kube",
            "it's",
        ]
        .map(String::from);
        assert_eq!(
            command_line(&args),
            r"phalanx-bench suite --out '/tmp/a b.md' --only=cycle,kube 'it'\''s'"
        );
    }
}
