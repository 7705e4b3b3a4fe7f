//! `LedgerClient`: a typed gRPC client that finds the leader, forwards proposals to it
//! and does linearizable reads (ReadIndex through openraft's `ensure_linearizable`).
//!
//! Retry policy (bounded by `ClientConfig::max_attempts`): a proposal is retried only
//! when it surely was not appended: the replica answered "not leader" (with or without
//! a hint) or could not be reached (`Unavailable`). A timeout or an internal error is
//! ambiguous (the entry may commit later) and is returned as `ClientError::Ambiguous`
//! so the caller can read the ledger; the ledger's own checks make a blind retry
//! harmless anyway (a re-proposed placement is refused as "already placed").

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use phalanx_proto::ledger::ledger_service_client::LedgerServiceClient;
use phalanx_proto::ledger::{LeaderHint, ReadRequest, changes_reply, propose_reply, read_reply};
use tonic::transport::{Channel, Endpoint};

use crate::ledger::{Epoch, GangOutcome, GangPlacement, LedgerCommand, LedgerResponse, ShardId};
use crate::network::wire::ledger_changes::{self, ChangesQuery, ChangesRead};
use crate::network::wire::ledger_read::LedgerRead;
use crate::network::wire::{self, WireError};
use crate::network::{MAX_MESSAGE_BYTES, MAX_PROPOSAL_BYTES};
use crate::raft_types::{LedgerBatch, MAX_COMMANDS_PER_BATCH, NodeId};
use crate::tls::Transport;

/// Client limits.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Most attempts (over all replicas) for one call.
    pub max_attempts: u32,
    /// Deadline of one attempt.
    pub rpc_timeout: Duration,
    /// Pause after an attempt that found no leader (grows x2 up to `max_backoff`).
    pub backoff: Duration,
    /// Largest pause.
    pub max_backoff: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        Self {
            max_attempts: 100,
            rpc_timeout: Duration::from_secs(5),
            backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(40),
        }
    }
}

/// Client failures.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Every attempt found no leader or no reachable replica.
    #[error("no leader reachable after {attempts} attempts; last: {last}")]
    NoLeader {
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// The proposal may or may not have committed; read the ledger to know.
    #[error("outcome unknown: {0}")]
    Ambiguous(String),
    /// The batch is over `MAX_COMMANDS_PER_BATCH`.
    #[error("{0} commands in one batch, limit {MAX_COMMANDS_PER_BATCH}")]
    BatchTooLarge(usize),
    /// The server refused the request before it reached Raft: malformed, over a bound,
    /// or from a caller whose certificate may not propose (nothing was applied).
    #[error("rejected: {0}")]
    Rejected(String),
    /// A reply could not be decoded.
    #[error("wire: {0}")]
    Wire(#[from] WireError),
    /// No replica address given.
    #[error("no replicas configured")]
    NoReplicas,
    /// A paged read never settled at one index: every round changed more than a page.
    #[error("the ledger changed faster than {rounds} rounds of paged reads could follow")]
    Unsettled {
        /// Rounds tried.
        rounds: u32,
    },
    /// A call to one given replica (not to whichever leads) failed; `id` is not in the
    /// client's replicas, did not answer, or answered an error.
    #[error("replica {id}: {reason}")]
    Replica {
        /// The replica asked.
        id: NodeId,
        /// What failed.
        reason: String,
    },
}

/// A committed batch: one response per command, and the log index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// Responses, in command order.
    pub responses: Vec<LedgerResponse>,
    /// Raft log index of the entry.
    pub log_index: u64,
}

/// The typed ledger client. Cheap to share behind an `Arc`; methods take `&self`.
#[derive(Debug)]
pub struct LedgerClient {
    replicas: BTreeMap<NodeId, String>,
    config: ClientConfig,
    /// Plaintext or mutual TLS (each replica must prove its id).
    transport: Transport,
    /// Leader hint and cached channels; the lock is never held across an `.await`.
    cache: Mutex<ClientCache>,
}

#[derive(Debug, Default)]
struct ClientCache {
    leader: Option<NodeId>,
    channels: BTreeMap<String, Channel>,
}

enum Attempt<T> {
    Done(T),
    Forward(LeaderHint),
    Retry(String),
}

impl LedgerClient {
    /// A client over `replicas` (id -> `host:port`).
    pub fn new(replicas: impl IntoIterator<Item = (NodeId, String)>) -> Self {
        Self::with_config(replicas, ClientConfig::default())
    }

    /// A client with explicit limits.
    pub fn with_config(
        replicas: impl IntoIterator<Item = (NodeId, String)>,
        config: ClientConfig,
    ) -> Self {
        Self {
            replicas: replicas.into_iter().collect(),
            config,
            transport: Transport::Plaintext,
            cache: Mutex::new(ClientCache::default()),
        }
    }

    /// The same client over `transport`.
    pub fn with_transport(mut self, transport: Transport) -> Self {
        self.transport = transport;
        self
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, ClientCache> {
        self.cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn channel(&self, id: NodeId, addr: &str) -> Result<Channel, String> {
        let mut cache = self.cache();
        if let Some(c) = cache.channels.get(addr) {
            return Ok(c.clone());
        }
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| format!("bad address {addr}: {e}"))?
            .connect_timeout(Duration::from_millis(500))
            .tcp_nodelay(true);
        let ch = self.transport.channel(endpoint, addr, id);
        cache.channels.insert(addr.to_string(), ch.clone());
        Ok(ch)
    }

    /// The replica to try on attempt `n`: the known leader, else round robin.
    fn target(&self, n: u32) -> Option<(NodeId, String)> {
        let leader = self.cache().leader;
        if let Some((id, addr)) = leader.and_then(|id| self.replicas.get(&id).map(|a| (id, a))) {
            return Some((id, addr.clone()));
        }
        let len = self.replicas.len();
        if len == 0 {
            return None;
        }
        self.replicas
            .iter()
            .nth(n as usize % len)
            .map(|(id, a)| (*id, a.clone()))
    }

    fn client(&self, id: NodeId, addr: &str) -> Result<LedgerServiceClient<Channel>, String> {
        Ok(LedgerServiceClient::new(self.channel(id, addr)?)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// Runs `attempt` against the leader, following hints, bounded.
    async fn with_leader<T, F, Fut>(&self, mut attempt: F) -> Result<T, ClientError>
    where
        F: FnMut(LedgerServiceClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<Attempt<T>, ClientError>>,
    {
        let mut backoff = self.config.backoff;
        let mut last = String::from("no attempt made");
        for n in 0..self.config.max_attempts {
            let Some((id, addr)) = self.target(n) else {
                return Err(ClientError::NoReplicas);
            };
            let client = match self.client(id, &addr) {
                Ok(c) => c,
                Err(e) => {
                    last = e;
                    continue;
                }
            };
            match attempt(client).await? {
                Attempt::Done(v) => {
                    self.cache().leader = Some(id);
                    return Ok(v);
                }
                Attempt::Forward(hint) => {
                    let known = hint.leader_id != 0
                        && hint.leader_id != id
                        && self.replicas.contains_key(&hint.leader_id);
                    self.cache().leader = known.then_some(hint.leader_id);
                    last = format!("replica {id} is not the leader (hint {})", hint.leader_id);
                    if known {
                        continue; // a fresh hint: try it at once
                    }
                }
                Attempt::Retry(why) => {
                    self.cache().leader = None;
                    last = format!("replica {id}: {why}");
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(self.config.max_backoff);
        }
        Err(ClientError::NoLeader {
            attempts: self.config.max_attempts,
            last,
        })
    }

    /// Proposes a batch as one Raft entry; returns one response per command once the
    /// entry is committed and applied.
    pub async fn propose(&self, batch: &LedgerBatch) -> Result<Committed, ClientError> {
        if batch.commands.len() > MAX_COMMANDS_PER_BATCH {
            return Err(ClientError::BatchTooLarge(batch.commands.len()));
        }
        let request = wire::ledger_batch::to_wire(batch)?;
        if request.batch.len() > MAX_PROPOSAL_BYTES {
            return Err(ClientError::Rejected(format!(
                "proposal of {} bytes, limit {MAX_PROPOSAL_BYTES}; split the plan",
                request.batch.len()
            )));
        }
        let timeout = self.config.rpc_timeout;
        self.with_leader(|mut client| {
            let mut req = tonic::Request::new(request.clone());
            req.set_timeout(timeout);
            async move {
                match tokio::time::timeout(timeout, client.propose(req)).await {
                    Err(_) => Err(ClientError::Ambiguous(format!(
                        "no reply within {timeout:?}"
                    ))),
                    Ok(Err(status)) => match status.code() {
                        tonic::Code::Unavailable => {
                            Ok(Attempt::Retry(status.message().to_string()))
                        }
                        // Both are refused before Raft sees the batch: not ambiguous.
                        tonic::Code::InvalidArgument | tonic::Code::PermissionDenied => {
                            Err(ClientError::Rejected(status.message().to_string()))
                        }
                        _ if refused_unprocessed(&status) => {
                            Ok(Attempt::Retry(format!("connection closing: {status}")))
                        }
                        _ => Err(ClientError::Ambiguous(status.to_string())),
                    },
                    Ok(Ok(resp)) => match resp.into_inner().outcome {
                        Some(propose_reply::Outcome::Committed(c)) => {
                            let (r, log_index) = wire::ledger_batch::committed_from_wire(&c)?;
                            Ok(Attempt::Done(Committed {
                                responses: r.responses,
                                log_index,
                            }))
                        }
                        Some(propose_reply::Outcome::Forward(h)) => Ok(Attempt::Forward(h)),
                        None => Err(WireError::Missing("outcome").into()),
                    },
                }
            }
        })
        .await
    }

    /// Proposes one command.
    pub async fn propose_one(&self, cmd: LedgerCommand) -> Result<LedgerResponse, ClientError> {
        let c = self.propose(&LedgerBatch::one(cmd)).await?;
        c.responses
            .into_iter()
            .next()
            .ok_or(ClientError::Wire(WireError::Missing("response")))
    }

    /// Proposes `PlaceGangs` and returns the per-gang outcomes (a fenced-out proposer gets
    /// every gang refused with the stale-epoch reason).
    pub async fn place_gangs(
        &self,
        shard: ShardId,
        epoch: Epoch,
        gangs: Vec<GangPlacement>,
    ) -> Result<Vec<GangOutcome>, ClientError> {
        let names: Vec<String> = gangs.iter().map(|g| g.gang.clone()).collect();
        let r = self
            .propose_one(LedgerCommand::PlaceGangs {
                shard,
                epoch,
                gangs,
            })
            .await?;
        Ok(match r {
            LedgerResponse::Gangs(g) => g,
            LedgerResponse::Refused(reason) => names
                .into_iter()
                .map(|gang| GangOutcome {
                    gang,
                    decision: crate::ledger::GangDecision::Refused(reason.clone()),
                })
                .collect(),
            other => {
                return Err(ClientError::Rejected(format!(
                    "unexpected response to PlaceGangs: {other:?}"
                )));
            }
        })
    }

    /// Linearizable read of the whole ledger (the leader confirms its leadership with a
    /// quorum, then serves from its applied state), in one message: it fails once the
    /// state passes `MAX_MESSAGE_BYTES`. `LedgerMirror::refresh` reads any size, and only
    /// what changed.
    pub async fn read(&self) -> Result<LedgerRead, ClientError> {
        self.read_inner(true).await
    }

    /// Linearizable read of the applied index and state fingerprint only.
    pub async fn read_fingerprint(&self) -> Result<LedgerRead, ClientError> {
        self.read_inner(false).await
    }

    /// One linearizable page of a full or incremental read (see `crate::mirror`, which
    /// assembles pages into a state consistent at one index).
    pub async fn read_changes(&self, query: &ChangesQuery) -> Result<ChangesRead, ClientError> {
        let request = ledger_changes::request_to_wire(query)?;
        let timeout = self.config.rpc_timeout;
        self.with_leader(|mut client| {
            let mut req = tonic::Request::new(request.clone());
            req.set_timeout(timeout);
            async move {
                match tokio::time::timeout(timeout, client.read_changes(req)).await {
                    Err(_) => Ok(Attempt::Retry(format!("no reply within {timeout:?}"))),
                    Ok(Err(status)) => Ok(Attempt::Retry(status.to_string())),
                    Ok(Ok(resp)) => match resp.into_inner().outcome {
                        Some(changes_reply::Outcome::Page(p)) => {
                            Ok(Attempt::Done(ledger_changes::page_from_wire(&p)?))
                        }
                        Some(changes_reply::Outcome::Forward(h)) => Ok(Attempt::Forward(h)),
                        None => Err(WireError::Missing("outcome").into()),
                    },
                }
            }
        })
        .await
    }

    /// Replica `id`'s own applied index and state fingerprint, read from it alone and not
    /// linearizable (see `ReadRequest.local`): for comparing replicas with each other.
    pub async fn read_local_fingerprint(&self, id: NodeId) -> Result<LedgerRead, ClientError> {
        let failed = |reason: String| ClientError::Replica { id, reason };
        let addr = self
            .replicas
            .get(&id)
            .ok_or_else(|| failed("not among the client's replicas".into()))?;
        let mut client = self.client(id, addr).map_err(failed)?;
        let timeout = self.config.rpc_timeout;
        let mut req = tonic::Request::new(ReadRequest {
            include_state: false,
            local: true,
        });
        req.set_timeout(timeout);
        let reply = tokio::time::timeout(timeout, client.read(req))
            .await
            .map_err(|_| failed(format!("no reply within {timeout:?}")))?
            .map_err(|status| failed(status.to_string()))?;
        match reply.into_inner().outcome {
            Some(read_reply::Outcome::State(s)) => Ok(wire::ledger_read::from_wire(&s)?),
            Some(read_reply::Outcome::Forward(_)) | None => {
                Err(WireError::Missing("state of a local read").into())
            }
        }
    }

    async fn read_inner(&self, include_state: bool) -> Result<LedgerRead, ClientError> {
        let timeout = self.config.rpc_timeout;
        self.with_leader(|mut client| {
            let mut req = tonic::Request::new(ReadRequest {
                include_state,
                local: false,
            });
            req.set_timeout(timeout);
            async move {
                match tokio::time::timeout(timeout, client.read(req)).await {
                    Err(_) => Ok(Attempt::Retry(format!("no reply within {timeout:?}"))),
                    Ok(Err(status)) => Ok(Attempt::Retry(status.to_string())),
                    Ok(Ok(resp)) => match resp.into_inner().outcome {
                        Some(read_reply::Outcome::State(s)) => {
                            Ok(Attempt::Done(wire::ledger_read::from_wire(&s)?))
                        }
                        Some(read_reply::Outcome::Forward(h)) => Ok(Attempt::Forward(h)),
                        None => Err(WireError::Missing("outcome").into()),
                    },
                }
            }
        })
        .await
    }
}

/// Whether a failed call surely never reached the service, so a proposal that failed so
/// was not appended and may be sent to another replica:
/// - the server was closing the connection gracefully (an HTTP/2 GOAWAY without error, as
///   a replica that stops sends) and refused this stream: HTTP/2 fails with GOAWAY only
///   the streams above the last one the server says it processed;
/// - hyper dropped the request unsent because its connection had closed (`Canceled`:
///   "dropped before it can be dispatched to the connection").
///
/// Any other transport failure stays ambiguous.
fn refused_unprocessed(status: &tonic::Status) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(e) = cause {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            return h2.is_go_away() && h2.is_remote() && h2.reason() == Some(h2::Reason::NO_ERROR);
        }
        if let Some(hyper) = e.downcast_ref::<hyper::Error>()
            && hyper.is_canceled()
        {
            return true;
        }
        cause = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{PodPlacement, ResourceVec};

    #[tokio::test]
    async fn an_oversized_proposal_is_refused_before_it_is_sent() {
        // Nothing listens there: the refusal must come before any connection attempt.
        let client = LedgerClient::new([(1, "127.0.0.1:9".to_string())]);
        let gangs = (0..8)
            .map(|g| GangPlacement {
                gang: format!("ns/g{g}"),
                pods: (0..4096)
                    .map(|p| PodPlacement {
                        pod: format!("some-namespace/a-rather-long-pod-name-{g}-{p}"),
                        node: format!("node-with-a-long-name-{p}"),
                        resources: ResourceVec::from_pairs([("cpu", 1000), ("memory", 1 << 30)]),
                    })
                    .collect(),
            })
            .collect();
        let batch = LedgerBatch::one(LedgerCommand::PlaceGangs {
            shard: 1,
            epoch: 1,
            gangs,
        });
        let err = client.propose(&batch).await.unwrap_err();
        assert!(matches!(err, ClientError::Rejected(_)), "{err:?}");
        let too_many = LedgerBatch {
            commands: vec![LedgerCommand::ExpireAt { now_ms: 0 }; MAX_COMMANDS_PER_BATCH + 1],
        };
        assert!(matches!(
            client.propose(&too_many).await,
            Err(ClientError::BatchTooLarge(_))
        ));
    }
}
