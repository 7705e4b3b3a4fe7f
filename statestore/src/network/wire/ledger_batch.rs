//! `LedgerBatch` <-> `ProposeRequest`, and `BatchResponse` + log index <-> `CommittedBatch`.

use phalanx_proto::ledger::{CommittedBatch, ProposeRequest};
use phalanx_proto::raft::Encoding;

use super::{WireError, decode, encode, encode_postcard};
use crate::raft_types::{BatchResponse, LedgerBatch};

/// Batch to wire (postcard, as the Raft log will store it).
pub fn to_wire(batch: &LedgerBatch) -> Result<ProposeRequest, WireError> {
    Ok(ProposeRequest {
        encoding: Encoding::Postcard as i32,
        batch: encode_postcard(batch)?,
    })
}

/// Wire to batch.
pub fn from_wire(req: &ProposeRequest) -> Result<LedgerBatch, WireError> {
    decode(req.encoding, &req.batch)
}

/// Committed responses to wire.
pub fn committed_to_wire(
    responses: &BatchResponse,
    log_index: u64,
) -> Result<CommittedBatch, WireError> {
    Ok(CommittedBatch {
        encoding: Encoding::Json as i32,
        responses: encode(responses)?,
        log_index,
    })
}

/// Wire to committed responses and their log index.
pub fn committed_from_wire(c: &CommittedBatch) -> Result<(BatchResponse, u64), WireError> {
    Ok((decode(c.encoding, &c.responses)?, c.log_index))
}
