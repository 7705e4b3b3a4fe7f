//! The run's history: one JSON object a line, in the order the harness saw things happen
//! (watch events from the API server, and the faults it injected). The checkers read
//! nothing else, so a history file from a failed run can be checked again offline.

use std::io::{BufRead, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// One line of the history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Milliseconds since the run began (the harness's monotonic clock).
    pub t_ms: u64,
    #[serde(flatten)]
    pub event: Event,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A node as the API server shows it: its allocatable GPUs.
    Node { node: String, gpus: i64 },
    /// A pod as the API server shows it (after every change to it, and once deleted).
    Pod {
        pod: String,
        node: Option<String>,
        gpus: i64,
        group: Option<String>,
        phase: Option<String>,
        #[serde(default)]
        deleted: bool,
        /// The replica that bound it (`phalanx.dev/bound-by`), when known.
        #[serde(default)]
        bound_by: Option<String>,
    },
    /// A PodGroup: its minMember, and the shard of its queue.
    Group {
        group: String,
        min_member: i64,
        queue: String,
        shard: u32,
        #[serde(default)]
        deleted: bool,
    },
    /// A fault began: its kind, its parameters, its victim and the shards the victim owned.
    FaultStart {
        fault: String,
        detail: String,
        victim: u64,
        shards: Vec<u32>,
    },
    /// The fault was healed (the victim restarted or resumed).
    FaultEnd { fault: String, victim: u64 },
}

impl Record {
    pub fn new(t_ms: u64, event: Event) -> Self {
        Self { t_ms, event }
    }
}

/// Appends records as JSON lines.
#[derive(Debug)]
pub struct Writer {
    out: std::io::BufWriter<std::fs::File>,
}

impl Writer {
    pub fn create(path: &Path) -> anyhow::Result<Self> {
        let file = std::fs::File::create(path)
            .map_err(|e| anyhow::anyhow!("creating the history {}: {e}", path.display()))?;
        Ok(Self {
            out: std::io::BufWriter::new(file),
        })
    }

    pub fn write(&mut self, r: &Record) -> anyhow::Result<()> {
        serde_json::to_writer(&mut self.out, r)?;
        self.out.write_all(b"\n")?;
        Ok(())
    }

    pub fn flush(&mut self) -> anyhow::Result<()> {
        self.out.flush()?;
        Ok(())
    }
}

/// Reads a history file, in time order; a bad line is an error naming its line number.
pub fn read(path: &Path) -> anyhow::Result<Vec<Record>> {
    let file = std::fs::File::open(path)
        .map_err(|e| anyhow::anyhow!("opening the history {}: {e}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let r: Record = serde_json::from_str(&line)
            .map_err(|e| anyhow::anyhow!("{} line {}: {e}", path.display(), i + 1))?;
        out.push(r);
    }
    // The file is in arrival order; records are stamped when sent, a few ms apart at most.
    out.sort_by_key(|r| r.t_ms);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_written_as_json_lines_reads_back_the_same() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("h.jsonl");
        let records = vec![
            Record::new(
                1,
                Event::Node {
                    node: "n1".into(),
                    gpus: 8,
                },
            ),
            Record::new(
                2,
                Event::Pod {
                    pod: "ns/p".into(),
                    node: Some("n1".into()),
                    gpus: 2,
                    group: Some("ns/g".into()),
                    phase: Some("Running".into()),
                    deleted: false,
                    bound_by: Some("2".into()),
                },
            ),
            Record::new(
                3,
                Event::FaultStart {
                    fault: "leader-kill".into(),
                    detail: "restart after 500 ms".into(),
                    victim: 2,
                    shards: vec![0, 3],
                },
            ),
        ];
        let mut w = Writer::create(&path).expect("create");
        for r in &records {
            w.write(r).expect("write");
        }
        w.flush().expect("flush");
        assert_eq!(read(&path).expect("read"), records);
    }

    #[test]
    fn a_bad_history_line_is_an_error_naming_the_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("h.jsonl");
        std::fs::write(
            &path,
            "{\"t_ms\":1,\"event\":\"node\",\"node\":\"a\",\"gpus\":8}\n{oops\n",
        )
        .expect("write");
        let err = read(&path).expect_err("a bad line").to_string();
        assert!(err.contains("line 2"), "{err}");
    }
}
