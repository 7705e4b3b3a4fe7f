//! `phalanx-bench heap-top`: where a heap profile's memory was at its peak. Reads the file
//! a replica built with `--features heap-profile` writes when it exits (dhat's format,
//! version 2: program points with their bytes at the global maximum, `gb`, and at the end,
//! `eb`, each naming its frames in a shared table), and prints the heaviest sites twice:
//! grouped by the innermost frame of the workspace's own code (which part of phalanx holds
//! the memory; found by file name, [`workspace_files`]), and as the heaviest single
//! backtraces, past the allocator's own frames.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// One allocation site of the profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Site {
    /// Bytes live at the profile's global maximum.
    pub peak_bytes: u64,
    pub peak_blocks: u64,
    /// Bytes live when the profile was written.
    pub end_bytes: u64,
    /// Frames, innermost first.
    pub frames: Vec<String>,
}

/// The sites of a dhat heap profile (`dhatFileVersion` 2, `mode` `rust-heap`).
pub fn parse(text: &str) -> Result<(u64, Vec<Site>)> {
    let v: Value = serde_json::from_str(text).context("not JSON")?;
    let version = v["dhatFileVersion"].as_u64();
    if version != Some(2) || v["mode"] != "rust-heap" {
        bail!(
            "not a dhat heap profile of version 2: dhatFileVersion {:?}, mode {}",
            version,
            v["mode"]
        );
    }
    let table: Vec<&str> = v["ftbl"]
        .as_array()
        .context("no frame table (ftbl)")?
        .iter()
        .map(|f| f.as_str().unwrap_or("?"))
        .collect();
    let mut sites = Vec::new();
    for (i, pp) in v["pps"]
        .as_array()
        .context("no program points (pps)")?
        .iter()
        .enumerate()
    {
        let field = |k: &str| {
            pp[k]
                .as_u64()
                .with_context(|| format!("program point {i}: no field {k}"))
        };
        let frames = pp["fs"]
            .as_array()
            .with_context(|| format!("program point {i}: no frames (fs)"))?
            .iter()
            .map(|f| {
                let at = f.as_u64().and_then(|n| table.get(n as usize));
                at.map(|s| s.to_string())
                    .with_context(|| format!("program point {i}: frame {f} not in the table"))
            })
            .collect::<Result<Vec<_>>>()?;
        sites.push(Site {
            peak_bytes: field("gb")?,
            peak_blocks: field("gbk")?,
            end_bytes: field("eb")?,
            frames,
        });
    }
    let peak: u64 = sites.iter().map(|s| s.peak_bytes).sum();
    Ok((peak, sites))
}

/// The function a frame names, without its address and source location
/// (`0x1234: snapshot (scheduler/src/cluster/kube/mod.rs:10:5)` -> `snapshot`).
fn function(frame: &str) -> &str {
    let f = frame.split_once(": ").map_or(frame, |(_, f)| f);
    f.rsplit_once(" (").map_or(f, |(f, _)| f)
}

/// The source location a frame names (`scheduler/src/cluster/kube/mod.rs:10:5`).
fn location(frame: &str) -> Option<&str> {
    frame
        .rsplit_once(" (")
        .and_then(|(_, l)| l.strip_suffix(')'))
}

/// The workspace's own source files as a profile names them: dhat keeps the last three
/// components of a path (`/work/main/scheduler/src/cluster/kube/mod.rs` ->
/// `cluster/kube/mod.rs`), and with line tables only an inlined frame's function has no
/// crate path, so a frame is the workspace's when its file is one of these.
pub fn workspace_files(root: &Path) -> Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in
            std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))?
        {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() && !name.starts_with('.') && name != "target" {
                dirs.push(path);
            } else if name.ends_with(".rs") {
                let parts: Vec<_> = path.components().collect();
                let tail = &parts[parts.len().saturating_sub(3)..];
                let tail: std::path::PathBuf = tail.iter().collect();
                out.insert(tail.display().to_string());
            }
        }
    }
    Ok(out)
}

/// The allocator's own frames (dhat's, the standard library's `alloc` and `core`), which
/// the backtraces printed skip.
const ALLOCATOR_DIRS: [&str; 3] = ["dhat-", "alloc/src/", "core/src/"];

/// The innermost frame in the workspace's own code (`function (file:line:col)`), or the
/// innermost frame at all when none is.
pub fn owner(site: &Site, ours: &BTreeSet<String>) -> String {
    let in_ours =
        |f: &&String| location(f).is_some_and(|l| ours.contains(l.split(':').next().unwrap_or(l)));
    match site.frames.iter().find(in_ours).or(site.frames.first()) {
        Some(f) => match location(f) {
            Some(l) => format!("{:.80} ({l})", function(f)),
            None => function(f).to_string(),
        },
        None => "[unknown]".to_string(),
    }
}

/// Peak bytes and blocks by [`owner`], heaviest first.
pub fn by_owner(sites: &[Site], ours: &BTreeSet<String>) -> Vec<(String, u64, u64)> {
    let mut sum: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for s in sites {
        let e = sum.entry(owner(s, ours)).or_default();
        e.0 += s.peak_bytes;
        e.1 += s.peak_blocks;
    }
    let mut rows: Vec<_> = sum
        .into_iter()
        .map(|(o, (b, k))| (o.to_string(), b, k))
        .collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    rows
}

/// The parts of a replica a site's memory is counted to, in the order they are tried: the
/// first whose pattern some frame of the site contains (function or file) takes it. The
/// pod cache comes before the other watch caches (both are filled by kube's reflector),
/// and the ledger before the model (a ledger read runs inside the serve loop's frames).
pub const PARTS: [(&str, &[&str]); 6] = [
    ("sled (the snapshot store until 9591fa9)", &["sled"]),
    (
        "the pod watch cache (`SlimPod`)",
        &["SlimPod", "cluster/kube/slim.rs"],
    ),
    (
        "the Node, PodGroup and Queue watch caches",
        &["spawn_stream"],
    ),
    (
        "the ledger: state machine, Raft log, serve's mirror",
        &[
            "phalanx_statestore",
            "statestore/src/",
            "src/ledger/",
            "openraft",
        ],
    ),
    (
        "the model the snapshot converts the caches into",
        &["manifest/convert/", "cluster/kube/mod.rs", "src/model/"],
    ),
    ("the rest (sessions, plans, gRPC and HTTP buffers)", &[""]),
];

/// Peak bytes by [`PARTS`], in their order.
pub fn by_part(sites: &[Site]) -> Vec<(&'static str, u64)> {
    let mut sum = vec![0u64; PARTS.len()];
    for s in sites {
        let part = PARTS
            .iter()
            .position(|(_, patterns)| {
                patterns
                    .iter()
                    .any(|p| s.frames.iter().any(|f| f.contains(p)))
            })
            .unwrap_or(PARTS.len() - 1);
        sum[part] += s.peak_bytes;
    }
    PARTS.iter().map(|(name, _)| *name).zip(sum).collect()
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Prints the `top` heaviest owners and backtraces (`frames` frames each) of `file`, the
/// owners found among the source files under `workspace`.
pub fn report(file: &Path, workspace: &Path, top: usize, frames: usize) -> Result<()> {
    let ours = workspace_files(workspace)?;
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let (peak, mut sites) = parse(&text).with_context(|| format!("{}", file.display()))?;
    let end: u64 = sites.iter().map(|s| s.end_bytes).sum();
    println!(
        "{}: {:.1} MiB live at the peak, {:.1} MiB at exit, {} sites",
        file.display(),
        mib(peak),
        mib(end),
        sites.len()
    );
    println!(
        "\n| innermost frame in phalanx's code | MiB at the peak | share | blocks |\n|---|---:|---:|---:|"
    );
    for (o, b, k) in by_owner(&sites, &ours).into_iter().take(top) {
        let share = 100.0 * b as f64 / peak.max(1) as f64;
        println!("| `{o}` | {:.1} | {share:.1} % | {k} |", mib(b));
    }
    println!("\n| part of the replica | MiB at the peak |\n|---|---:|");
    for (part, b) in by_part(&sites) {
        println!("| {part} | {:.1} |", mib(b));
    }
    sites.sort_by_key(|s| std::cmp::Reverse(s.peak_bytes));
    println!("\nheaviest backtraces at the peak:");
    for s in sites.iter().take(top) {
        println!("{:8.1} MiB in {} blocks", mib(s.peak_bytes), s.peak_blocks);
        let past_the_allocator = s.frames.iter().skip_while(|f| {
            location(f).is_some_and(|l| ALLOCATOR_DIRS.iter().any(|d| l.starts_with(d)))
        });
        for f in past_the_allocator.take(frames) {
            let (fun, at) = (function(f), location(f).unwrap_or("?"));
            println!("           {fun:.100} ({at})");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROFILE: &str = r#"{"dhatFileVersion":2,"mode":"rust-heap","verb":"Allocated",
      "pps":[
        {"tb":900,"tbk":9,"mb":700,"mbk":7,"gb":600,"gbk":6,"eb":100,"ebk":1,"fs":[1,2,3]},
        {"tb":50,"tbk":5,"mb":40,"mbk":4,"gb":300,"gbk":3,"eb":0,"ebk":0,"fs":[1,4]},
        {"tb":10,"tbk":1,"mb":10,"mbk":1,"gb":100,"gbk":1,"eb":10,"ebk":1,"fs":[5]}
      ],
      "ftbl":["[root]",
        "0x1: alloc::raw_vec::finish_grow (alloc/src/raw_vec.rs:1:1)",
        "0x2: cache<k8s_openapi::Pod> (cluster/kube/mod.rs:9:5)",
        "0x3: main (scheduler/src/main.rs:1:1)",
        "0x4: append (statestore/src/log.rs:4:2)",
        "0x5: alloc (hashbrown-0.15.0/src/raw/alloc.rs:1:1)"]}"#;

    #[test]
    fn the_peak_is_summed_over_sites_and_grouped_by_the_innermost_phalanx_frame() {
        let (peak, sites) = parse(PROFILE).unwrap();
        let ours = [
            "cluster/kube/mod.rs",
            "scheduler/src/main.rs",
            "statestore/src/log.rs",
        ]
        .map(String::from)
        .into();
        assert_eq!(peak, 1000);
        assert_eq!(sites[0].end_bytes, 100);
        assert_eq!(
            by_owner(&sites, &ours),
            vec![
                (
                    "cache<k8s_openapi::Pod> (cluster/kube/mod.rs:9:5)".to_string(),
                    600,
                    6
                ),
                ("append (statestore/src/log.rs:4:2)".to_string(), 300, 3),
                (
                    "alloc (hashbrown-0.15.0/src/raw/alloc.rs:1:1)".to_string(),
                    100,
                    1
                ),
            ]
        );
    }

    /// Each site goes to the first part one of its frames names, and every byte to one.
    #[test]
    fn every_site_is_counted_once_to_the_first_part_its_frames_name() {
        let (peak, sites) = parse(PROFILE).unwrap();
        let parts = by_part(&sites);
        // Site 0 names cluster/kube/mod.rs (the model), site 1 statestore (the ledger),
        // which comes first in the order; site 2 nothing: the rest.
        let got: Vec<u64> = parts.iter().map(|(_, b)| *b).collect();
        assert_eq!(got, [0, 0, 0, 300, 600, 100]);
        assert_eq!(got.iter().sum::<u64>(), peak);
    }

    #[test]
    fn a_file_that_is_not_a_dhat_heap_profile_is_refused_with_what_it_is() {
        let e = parse(r#"{"dhatFileVersion":2,"mode":"rust-ad-hoc"}"#).unwrap_err();
        assert!(format!("{e:#}").contains("mode \"rust-ad-hoc\""), "{e:#}");
        let e = parse(&PROFILE.replace("\"fs\":[5]", "\"fs\":[9]")).unwrap_err();
        assert!(
            format!("{e:#}").contains("program point 2: frame 9 not in the table"),
            "{e:#}"
        );
    }
}
