//! `InstallSnapshotRequest` (one chunk) / `Result<InstallSnapshotResponse, RaftError>` <->
//! `RaftRequest` / `RaftReply`. Chunk size is bounded by `Config::snapshot_max_chunk_size`.

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{InstallSnapshotRequest, InstallSnapshotResponse};
use phalanx_proto::raft::{RaftReply, RaftRequest};

use super::{WireError, decode, decode_reply, reply, request};
use crate::raft_types::{NodeId, TypeConfig};

/// The reply type carried back.
pub type Reply = Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>;

/// Request to wire.
pub fn to_wire(req: &InstallSnapshotRequest<TypeConfig>) -> Result<RaftRequest, WireError> {
    request(req)
}

/// Wire to request.
pub fn from_wire(req: &RaftRequest) -> Result<InstallSnapshotRequest<TypeConfig>, WireError> {
    decode(req.encoding, &req.payload)
}

/// Reply to wire.
pub fn reply_to_wire(r: &Reply) -> Result<RaftReply, WireError> {
    reply(r)
}

/// Wire to reply.
pub fn reply_from_wire(r: &RaftReply) -> Result<Reply, WireError> {
    decode_reply(r.encoding, &r.payload)
}
