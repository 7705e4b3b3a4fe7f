//! The Raft log record and peer wire codecs side by side (issue 16 item 1): bytes per log
//! record and encode/decode time per command for a batch of gang commits, in the JSON
//! and the postcard of older files and as the log store and peers write now (postcard,
//! the batch as the bytes it was proposed in).

use std::hint::black_box;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use phalanx_statestore::log_store::legacy::LegacyRecord;
use phalanx_statestore::log_store::record::{self, HEADER_BYTES, Record};
use phalanx_statestore::network::wire;
use phalanx_statestore::raft_types::Entry;
use phalanx_statestore::{
    EncodedBatch, GangPlacement, LedgerBatch, LedgerCommand, PodPlacement, ResourceVec,
};

/// The batch measured.
#[derive(Debug, Clone, Copy)]
pub struct CodecBench {
    /// `PlaceGangs` commands in the batch (one Raft entry).
    pub commands: usize,
    /// Gangs per command.
    pub gangs_per_command: usize,
    /// Pods per gang.
    pub pods_per_gang: usize,
    /// Encode/decode passes per codec; the median pass is reported.
    pub repeat: usize,
}

/// A batch of gang commits as the scheduler proposes them: names as the simulator
/// writes them, cpu, memory and GPUs per pod, nodes spread over a 5,000-node pool.
fn batch(b: &CodecBench) -> LedgerBatch {
    let pod = |c: usize, g: usize, p: usize| PodPlacement {
        pod: format!("queue-{c:02}/job-{c}-{g}-{p}"),
        node: format!("node-{:04}", (c * 131 + g * 17 + p) % 5000),
        resources: ResourceVec::from_pairs([
            ("cpu", 16_000),
            ("memory", 128 << 30),
            ("nvidia.com/gpu", 1),
        ]),
    };
    let commands = (0..b.commands)
        .map(|c| LedgerCommand::PlaceGangs {
            shard: (c % 16) as u32,
            epoch: 7,
            gangs: (0..b.gangs_per_command)
                .map(|g| GangPlacement {
                    gang: format!("queue-{c:02}/job-{c}-{g}"),
                    pods: (0..b.pods_per_gang).map(|p| pod(c, g, p)).collect(),
                })
                .collect(),
        })
        .collect();
    LedgerBatch { commands }
}

/// One codec's figures.
struct Figures {
    record_bytes: usize,
    wire_bytes: usize,
    encode_ns_per_command: f64,
    decode_ns_per_command: f64,
}

/// Median of `repeat` passes of `f`, in ns per command.
fn median_ns(repeat: usize, commands: usize, mut f: impl FnMut()) -> f64 {
    let mut passes: Vec<f64> = (0..repeat)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_nanos() as f64 / commands as f64
        })
        .collect();
    passes.sort_by(f64::total_cmp);
    passes[passes.len() / 2]
}

/// One codec: how a batch becomes a log frame, and a frame becomes the batch again.
struct Codec<'a> {
    name: &'a str,
    encode: &'a dyn Fn(&LedgerBatch) -> Result<Vec<u8>>,
    decode: &'a dyn Fn(&[u8]) -> Result<LedgerBatch>,
    wire_bytes: usize,
}

fn measure(batch: &LedgerBatch, codec: &Codec<'_>, b: &CodecBench) -> Result<Figures> {
    let frame = (codec.encode)(batch).context("encoding the record")?;
    // The measured decode must be a real one: the batch comes back equal.
    if (codec.decode)(&frame).context("decoding the record")? != *batch {
        bail!("{}: the batch did not round-trip", codec.name);
    }
    let encode_ns = median_ns(b.repeat, b.commands, || {
        black_box((codec.encode)(black_box(batch)).expect("encoded once already"));
    });
    let decode_ns = median_ns(b.repeat, b.commands, || {
        black_box((codec.decode)(black_box(&frame)).expect("decoded once"));
    });
    Ok(Figures {
        record_bytes: frame.len(),
        wire_bytes: codec.wire_bytes,
        encode_ns_per_command: encode_ns,
        decode_ns_per_command: decode_ns,
    })
}

fn older_entry(batch: &LedgerBatch) -> LegacyRecord {
    LegacyRecord::Entry(openraft::Entry {
        log_id: openraft_log_id(),
        payload: openraft::EntryPayload::Normal(batch.clone()),
    })
}

fn entry(batch: EncodedBatch) -> Record {
    Record::Entry(Entry {
        log_id: openraft_log_id(),
        payload: openraft::EntryPayload::Normal(batch),
    })
}

/// The batch of a decoded entry record (`decode` of an older record encodes it on the way).
fn batch_of(frame: &[u8]) -> Result<LedgerBatch> {
    match record::decode(&frame[HEADER_BYTES..])? {
        Record::Entry(Entry {
            payload: openraft::EntryPayload::Normal(batch),
            ..
        }) => Ok(batch.decode()?),
        other => bail!("not an entry with a batch: {other:?}"),
    }
}

/// Runs the comparison and prints a markdown table.
pub fn run(b: &CodecBench) -> Result<()> {
    if b.commands == 0 || b.pods_per_gang == 0 || b.gangs_per_command == 0 || b.repeat == 0 {
        bail!("--commands, --gangs-per-command, --pods-per-gang and --repeat must be > 0");
    }
    let batch = batch(b);
    let json_wire = wire::encode(&batch)?.len();
    let postcard_wire = wire::ledger_batch::to_wire(&batch)?.batch.len();
    // The older codecs' decode timed without the encoding `record::decode` does for
    // older files today: what a replica of that build did.
    let older = |f: &[u8]| -> Result<LedgerBatch> {
        match record::decode_older(&f[HEADER_BYTES..])? {
            LegacyRecord::Entry(openraft::Entry {
                payload: openraft::EntryPayload::Normal(batch),
                ..
            }) => Ok(batch),
            other => bail!("not an entry with a batch: {other:?}"),
        }
    };
    let codecs = [
        Codec {
            name: "JSON (older files)",
            encode: &|b| Ok(record::encode_legacy_json(&older_entry(b))?),
            decode: &older,
            wire_bytes: json_wire,
        },
        Codec {
            name: "postcard, batch as a structure (older files)",
            encode: &|b| Ok(record::encode_legacy_postcard(&older_entry(b))?),
            decode: &older,
            wire_bytes: postcard_wire,
        },
        Codec {
            name: "postcard, batch as its bytes (now)",
            encode: &|b| Ok(record::encode(&entry(EncodedBatch::encode(b)?))?),
            decode: &batch_of,
            wire_bytes: postcard_wire,
        },
    ];
    let figures = codecs
        .iter()
        .map(|c| measure(&batch, c, b))
        .collect::<Result<Vec<_>>>()?;
    let pods = b.commands * b.gangs_per_command * b.pods_per_gang;
    println!(
        "batch: {} PlaceGangs × {} gangs × {} pods ({pods} pods); median of {} passes",
        b.commands, b.gangs_per_command, b.pods_per_gang, b.repeat
    );
    println!(
        "| codec | log record bytes | bytes / pod | proposal on the wire, bytes | encode ns / command | decode ns / command |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (c, f) in codecs.iter().zip(&figures) {
        println!(
            "| {} | {} | {:.1} | {} | {:.0} | {:.0} |",
            c.name,
            f.record_bytes,
            f.record_bytes as f64 / pods as f64,
            f.wire_bytes,
            f.encode_ns_per_command,
            f.decode_ns_per_command
        );
    }
    print_copy_cost(&batch, b)
}

/// What an AppendEntries and a log write cost now, per command: the entry's record
/// encoded and decoded around a batch already in bytes (the batch itself is encoded once
/// by its proposer and decoded once per replica, when applied: the rows above).
fn print_copy_cost(batch: &LedgerBatch, b: &CodecBench) -> Result<()> {
    let record = entry(EncodedBatch::encode(batch)?);
    let frame = record::encode(&record)?;
    let encode_ns = median_ns(b.repeat, b.commands, || {
        black_box(record::encode(black_box(&record)).expect("encoded once already"));
    });
    let decode_ns = median_ns(b.repeat, b.commands, || {
        black_box(record::decode(black_box(&frame[HEADER_BYTES..])).expect("decoded once"));
    });
    println!(
        "per AppendEntries or log write now (record around the batch's bytes): encode {encode_ns:.0} ns / command, decode {decode_ns:.0} ns / command"
    );
    Ok(())
}

fn openraft_log_id() -> phalanx_statestore::raft_types::LogId {
    phalanx_statestore::raft_types::LogId::new(openraft::CommittedLeaderId::new(12, 2), 123_456)
}
