//! The Raft log record and peer wire codecs side by side (issue 16 item 1): bytes per log
//! record and encode/decode time per command for a batch of gang commits, in the JSON
//! of older files and in postcard (what the log store and peers write now).

use std::hint::black_box;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use phalanx_statestore::log_store::record::{self, HEADER_BYTES, Record};
use phalanx_statestore::network::wire;
use phalanx_statestore::raft_types::Entry;
use phalanx_statestore::{GangPlacement, LedgerBatch, LedgerCommand, PodPlacement, ResourceVec};

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

type Encode = fn(&Record) -> Result<Vec<u8>, record::EncodeError>;

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

fn measure(record: &Record, encode: Encode, wire_bytes: usize, b: &CodecBench) -> Result<Figures> {
    let frame = encode(record).context("encoding the record")?;
    let back = record::decode(&frame[HEADER_BYTES..]).context("decoding the record")?;
    // The measured decode must be a real one: the record comes back equal.
    if serde_json::to_value(&back)? != serde_json::to_value(record)? {
        bail!("the record did not round-trip");
    }
    let encode_ns = median_ns(b.repeat, b.commands, || {
        black_box(encode(black_box(record)).expect("encoded once already"));
    });
    let decode_ns = median_ns(b.repeat, b.commands, || {
        black_box(record::decode(black_box(&frame[HEADER_BYTES..])).expect("decoded once"));
    });
    Ok(Figures {
        record_bytes: frame.len(),
        wire_bytes,
        encode_ns_per_command: encode_ns,
        decode_ns_per_command: decode_ns,
    })
}

/// Runs the comparison and prints a markdown table.
pub fn run(b: &CodecBench) -> Result<()> {
    if b.commands == 0 || b.pods_per_gang == 0 || b.gangs_per_command == 0 || b.repeat == 0 {
        bail!("--commands, --gangs-per-command, --pods-per-gang and --repeat must be > 0");
    }
    let batch = batch(b);
    let json_wire = wire::encode(&batch)?.len();
    let postcard_wire = wire::ledger_batch::to_wire(&batch)?.batch.len();
    let record = Record::Entry(Entry {
        log_id: openraft_log_id(),
        payload: openraft::EntryPayload::Normal(batch),
    });
    let json = measure(&record, record::encode_legacy_json, json_wire, b)?;
    let postcard = measure(&record, record::encode, postcard_wire, b)?;
    let pods = b.commands * b.gangs_per_command * b.pods_per_gang;
    println!(
        "batch: {} PlaceGangs × {} gangs × {} pods ({pods} pods); median of {} passes",
        b.commands, b.gangs_per_command, b.pods_per_gang, b.repeat
    );
    println!(
        "| codec | log record bytes | bytes / pod | proposal on the wire, bytes | encode ns / command | decode ns / command |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (name, f) in [("JSON (before)", &json), ("postcard (now)", &postcard)] {
        println!(
            "| {name} | {} | {:.1} | {} | {:.0} | {:.0} |",
            f.record_bytes,
            f.record_bytes as f64 / pods as f64,
            f.wire_bytes,
            f.encode_ns_per_command,
            f.decode_ns_per_command
        );
    }
    println!(
        "postcard / JSON: bytes {:.2}, encode {:.2}, decode {:.2}",
        postcard.record_bytes as f64 / json.record_bytes as f64,
        postcard.encode_ns_per_command / json.encode_ns_per_command,
        postcard.decode_ns_per_command / json.decode_ns_per_command
    );
    Ok(())
}

fn openraft_log_id() -> phalanx_statestore::raft_types::LogId {
    phalanx_statestore::raft_types::LogId::new(openraft::CommittedLeaderId::new(12, 2), 123_456)
}
