//! How `phalanx status` and `phalanx explain` print the admin service's replies: a table
//! by default, JSON with `-o json` (field names as in admin.proto, for scripts).

use std::fmt::Write as _;

use phalanx_proto::admin::{ExplainReply, StatusReply};
use serde_json::{Value, json};

/// The reply as JSON: one object, field names as in admin.proto.
pub fn status_json(r: &StatusReply) -> Value {
    json!({
        "answered_by": r.answered_by,
        "forwarded_by": r.forwarded_by,
        "term": r.term,
        "replicas": r.replicas.iter().map(|x| json!({
            "id": x.id, "up": x.up, "leader": x.leader, "voter": x.voter, "lag": x.lag,
        })).collect::<Vec<_>>(),
        "shards": r.shards.iter().map(|s| json!({
            "id": s.id, "owner": s.owner, "epoch": s.epoch, "queues": s.queues, "nodes": s.nodes,
        })).collect::<Vec<_>>(),
        "queues": r.queues.iter().map(|q| json!({
            "name": q.name, "weight": q.weight, "shard": q.shard, "deserved": q.deserved,
            "allocated": q.allocated, "capability": q.capability, "pending_gangs": q.pending_gangs,
        })).collect::<Vec<_>>(),
        "pending": r.pending.iter().map(|p| json!({
            "namespace": p.namespace, "name": p.name, "queue": p.queue, "shard": p.shard,
            "age_seconds": p.age_seconds, "message": p.message,
        })).collect::<Vec<_>>(),
    })
}

/// Rows of cells as a left-aligned table, columns two spaces apart.
fn table(out: &mut String, header: &[&str], rows: &[Vec<String>]) {
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |cells: Vec<String>| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(&width).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(cell);
            } else {
                let _ = write!(l, "{cell:<w$}  ");
            }
        }
        let _ = writeln!(out, "{}", l.trim_end());
    };
    line(header.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row.clone());
    }
}

fn yes(b: bool) -> String {
    if b { "yes" } else { "no" }.to_string()
}

fn age(seconds: u64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s => format!("{}h{}m", s / 3600, (s % 3600) / 60),
    }
}

/// The reply as four tables: replicas, shards, queues, pending PodGroups (oldest first).
pub fn status_table(r: &StatusReply) -> String {
    let mut out = String::new();
    let via = match r.forwarded_by {
        0 => String::new(),
        f => format!(", through replica {f}"),
    };
    let _ = writeln!(
        out,
        "answered by replica {} (Raft term {}){via}",
        r.answered_by, r.term
    );
    let _ = writeln!(out);
    let rows: Vec<Vec<String>> = r
        .replicas
        .iter()
        .map(|x| {
            let lag = if x.lag < 0 {
                "-".to_string()
            } else {
                x.lag.to_string()
            };
            vec![
                x.id.to_string(),
                yes(x.up),
                yes(x.leader),
                yes(x.voter),
                lag,
            ]
        })
        .collect();
    table(
        &mut out,
        &["REPLICA", "UP", "LEADER", "VOTER", "LAG"],
        &rows,
    );
    let _ = writeln!(out);
    let rows: Vec<Vec<String>> = r
        .shards
        .iter()
        .map(|s| {
            let owner = if s.owner == 0 {
                "-".to_string()
            } else {
                s.owner.to_string()
            };
            let queues = if s.queues.is_empty() {
                "-".to_string()
            } else {
                s.queues.join(",")
            };
            vec![
                s.id.to_string(),
                owner,
                s.epoch.to_string(),
                s.nodes.to_string(),
                queues,
            ]
        })
        .collect();
    table(
        &mut out,
        &["SHARD", "OWNER", "EPOCH", "NODES", "QUEUES"],
        &rows,
    );
    let _ = writeln!(out);
    let rows: Vec<Vec<String>> = r
        .queues
        .iter()
        .map(|q| {
            vec![
                q.name.clone(),
                q.weight.to_string(),
                q.shard.to_string(),
                q.pending_gangs.to_string(),
                q.allocated.clone(),
                q.deserved.clone(),
                q.capability.clone(),
            ]
        })
        .collect();
    let header = [
        "QUEUE",
        "WEIGHT",
        "SHARD",
        "PENDING",
        "ALLOCATED",
        "DESERVED",
        "CAPABILITY",
    ];
    table(&mut out, &header, &rows);
    let _ = writeln!(out);
    if r.pending.is_empty() {
        let _ = writeln!(out, "no pending PodGroups");
        return out;
    }
    let rows: Vec<Vec<String>> = r
        .pending
        .iter()
        .map(|p| {
            vec![
                format!("{}/{}", p.namespace, p.name),
                p.queue.clone(),
                p.shard.to_string(),
                age(p.age_seconds),
                p.message.clone(),
            ]
        })
        .collect();
    table(
        &mut out,
        &["PENDING PODGROUP", "QUEUE", "SHARD", "AGE", "MESSAGE"],
        &rows,
    );
    out
}

/// The explanation with who computed it, and through whom.
pub fn explain_text(r: &ExplainReply) -> String {
    let via = match r.forwarded_by {
        0 => String::new(),
        f => format!(", forwarded by replica {f}"),
    };
    format!(
        "{}(answered by replica {}, owner of shard {} at epoch {}{via})\n",
        r.text, r.answered_by, r.shard, r.epoch
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use phalanx_proto::admin::{PendingGroup, QueueStatus, ReplicaStatus, ShardStatus};

    fn reply() -> StatusReply {
        StatusReply {
            answered_by: 1,
            forwarded_by: 3,
            term: 4,
            replicas: vec![
                ReplicaStatus {
                    id: 1,
                    up: true,
                    leader: true,
                    voter: true,
                    lag: 0,
                },
                ReplicaStatus {
                    id: 2,
                    up: false,
                    leader: false,
                    voter: true,
                    lag: -1,
                },
            ],
            shards: vec![
                ShardStatus {
                    id: 0,
                    owner: 1,
                    epoch: 2,
                    queues: vec!["a".into(), "b".into()],
                    nodes: 4,
                },
                ShardStatus {
                    id: 1,
                    owner: 0,
                    epoch: 0,
                    queues: vec![],
                    nodes: 0,
                },
            ],
            queues: vec![QueueStatus {
                name: "a".into(),
                weight: 2,
                shard: 0,
                deserved: "nvidia.com/gpu 8".into(),
                allocated: "nvidia.com/gpu 4".into(),
                capability: "unlimited".into(),
                pending_gangs: 1,
            }],
            pending: vec![PendingGroup {
                namespace: "ns".into(),
                name: "big".into(),
                queue: "a".into(),
                shard: 0,
                age_seconds: 7500,
                message: "17 pods need nvidia.com/gpu 136".into(),
            }],
        }
    }

    #[test]
    fn the_status_table_lines_up_every_section() {
        let text = status_table(&reply());
        let expected = "\
answered by replica 1 (Raft term 4), through replica 3

REPLICA  UP   LEADER  VOTER  LAG
1        yes  yes     yes    0
2        no   no      yes    -

SHARD  OWNER  EPOCH  NODES  QUEUES
0      1      2      4      a,b
1      -      0      0      -

QUEUE  WEIGHT  SHARD  PENDING  ALLOCATED         DESERVED          CAPABILITY
a      2       0      1        nvidia.com/gpu 4  nvidia.com/gpu 8  unlimited

PENDING PODGROUP  QUEUE  SHARD  AGE   MESSAGE
ns/big            a      0      2h5m  17 pods need nvidia.com/gpu 136
";
        assert_eq!(text, expected);
    }

    #[test]
    fn no_pending_podgroups_is_said_in_words() {
        let mut r = reply();
        r.pending.clear();
        assert!(status_table(&r).ends_with("\nno pending PodGroups\n"));
    }

    #[test]
    fn the_status_json_has_the_proto_field_names_and_values() {
        let v = status_json(&reply());
        assert_eq!(v["answered_by"], 1);
        assert_eq!(v["replicas"][1]["lag"], -1);
        assert_eq!(v["replicas"][0]["leader"], true);
        assert_eq!(v["shards"][0]["queues"], json!(["a", "b"]));
        assert_eq!(v["shards"][1]["owner"], 0);
        assert_eq!(v["queues"][0]["deserved"], "nvidia.com/gpu 8");
        assert_eq!(v["pending"][0]["age_seconds"], 7500);
        let text = serde_json::to_string(&v).expect("serializes");
        let back: Value = serde_json::from_str(&text).expect("parses back");
        assert_eq!(back, v);
    }

    #[test]
    fn an_explanation_says_who_answered_and_through_whom() {
        let r = ExplainReply {
            text: "PodGroup ns/big: phase Pending\n".into(),
            answered_by: 2,
            shard: 5,
            epoch: 3,
            forwarded_by: 1,
        };
        assert_eq!(
            explain_text(&r),
            "PodGroup ns/big: phase Pending\n(answered by replica 2, owner of shard 5 at epoch 3, forwarded by replica 1)\n"
        );
        let direct = ExplainReply {
            forwarded_by: 0,
            ..r
        };
        assert!(explain_text(&direct).ends_with("at epoch 3)\n"));
    }
}
