//! `AppendEntriesRequest` / `Result<AppendEntriesResponse, RaftError>` <-> `RaftRequest` / `RaftReply`.

use openraft::error::RaftError;
use openraft::raft::{AppendEntriesRequest, AppendEntriesResponse};
use phalanx_proto::raft::{RaftReply, RaftRequest};

use phalanx_proto::raft::Encoding;

use super::{WireError, decode, decode_reply, encode_postcard, reply};
use crate::log_store::legacy::{LegacyConfig, upgrade_entry};
use crate::raft_types::{NodeId, TypeConfig};

/// The reply type carried back.
pub type Reply = Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>;

/// Request to wire: postcard, each entry's batch as its bytes (copied, not re-encoded).
pub fn to_wire(req: &AppendEntriesRequest<TypeConfig>) -> Result<RaftRequest, WireError> {
    Ok(RaftRequest {
        encoding: Encoding::PostcardEncodedBatch as i32,
        payload: encode_postcard(req)?,
    })
}

/// Wire to request, from this build or an older one (whose entries carry their batches as
/// structures: a leader not yet upgraded, during a rolling upgrade).
pub fn from_wire(req: &RaftRequest) -> Result<AppendEntriesRequest<TypeConfig>, WireError> {
    if req.encoding == Encoding::PostcardEncodedBatch as i32 {
        return decode(Encoding::Postcard as i32, &req.payload);
    }
    let older: AppendEntriesRequest<LegacyConfig> = decode(req.encoding, &req.payload)?;
    upgrade(older)
}

fn upgrade(
    older: AppendEntriesRequest<LegacyConfig>,
) -> Result<AppendEntriesRequest<TypeConfig>, WireError> {
    let entries = older
        .entries
        .into_iter()
        .map(upgrade_entry)
        .collect::<Result<_, _>>()?;
    Ok(AppendEntriesRequest {
        vote: older.vote,
        prev_log_id: older.prev_log_id,
        leader_commit: older.leader_commit,
        entries,
    })
}

/// Reply to wire.
pub fn reply_to_wire(r: &Reply) -> Result<RaftReply, WireError> {
    reply(r)
}

/// Wire to reply.
pub fn reply_from_wire(r: &RaftReply) -> Result<Reply, WireError> {
    decode_reply(r.encoding, &r.payload)
}
