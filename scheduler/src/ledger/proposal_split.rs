//! Proposals that fit the replicated ledger's limits.
//!
//! One Raft entry holds at most `MAX_COMMANDS_PER_BATCH` commands and
//! `MAX_PROPOSAL_BYTES` (2 MiB) of serialized batch; the ledger's client refuses a larger
//! one outright ("split the plan"). A cycle's plan on a large cluster (12,000 gangs on
//! 20,000 nodes) is larger than that, and the refusal came back every round for the same
//! plan: the run never ended. [`split`] cuts a list of commands into batches under both
//! limits, cutting a command itself where it alone is too large (`PlaceGangs` by gangs,
//! `MarkBound` / `Release` by pods: each gang and each pod is judged on its own, so the
//! pieces mean what the whole meant); [`merge`] gives back one response per command.

use phalanx_statestore::network::MAX_PROPOSAL_BYTES;
use phalanx_statestore::{GangDecision, GangOutcome, LedgerCommand, LedgerResponse};

use super::LedgerError;

/// Room left in a proposal for the batch's own framing (`{"commands":[...]}`).
const FRAMING_BYTES: usize = 64;

/// A piece of command `index` of the caller's list (the whole command, or a part of it).
#[derive(Clone, Debug, PartialEq)]
pub struct Piece {
    pub index: usize,
    pub command: LedgerCommand,
}

/// `commands` in batches of at most `max_commands` commands and `max_bytes` serialized
/// bytes each, in order.
pub fn split(
    commands: Vec<LedgerCommand>,
    max_commands: usize,
    max_bytes: usize,
) -> Result<Vec<Vec<Piece>>, LedgerError> {
    let budget = max_bytes.saturating_sub(FRAMING_BYTES).max(1);
    let mut batches: Vec<Vec<Piece>> = Vec::new();
    let (mut current, mut current_bytes) = (Vec::new(), 0usize);
    for (index, command) in commands.into_iter().enumerate() {
        for command in pieces_of(command, budget)? {
            // One byte for the comma between two commands.
            let bytes = encoded_len(&command)? + 1;
            if !current.is_empty()
                && (current.len() >= max_commands.max(1) || current_bytes + bytes > budget)
            {
                batches.push(std::mem::take(&mut current));
                current_bytes = 0;
            }
            current.push(Piece { index, command });
            current_bytes += bytes;
        }
    }
    if !current.is_empty() {
        batches.push(current);
    }
    Ok(batches)
}

/// [`split`] with the ledger's own limits.
pub fn split_for_ledger(
    commands: Vec<LedgerCommand>,
    max_commands: usize,
) -> Result<Vec<Vec<Piece>>, LedgerError> {
    split(commands, max_commands, MAX_PROPOSAL_BYTES)
}

fn encoded_len(command: &LedgerCommand) -> Result<usize, LedgerError> {
    serde_json::to_vec(command)
        .map(|v| v.len())
        .map_err(|e| LedgerError::Unexpected(format!("a ledger command does not serialize: {e}")))
}

/// `command` cut into pieces of at most `budget` bytes each, halving its list of gangs or
/// pods until each piece fits. A command that cannot be cut (one gang, one pod, any other
/// kind) is returned whole: the ledger then refuses it, naming its size.
fn pieces_of(command: LedgerCommand, budget: usize) -> Result<Vec<LedgerCommand>, LedgerError> {
    if encoded_len(&command)? <= budget {
        return Ok(vec![command]);
    }
    let halves = match command {
        LedgerCommand::PlaceGangs {
            shard,
            epoch,
            mut gangs,
        } if gangs.len() > 1 => {
            let back = gangs.split_off(gangs.len() / 2);
            [gangs, back].map(|gangs| LedgerCommand::PlaceGangs {
                shard,
                epoch,
                gangs,
            })
        }
        LedgerCommand::MarkBound {
            shard,
            epoch,
            mut pods,
        } if pods.len() > 1 => {
            let back = pods.split_off(pods.len() / 2);
            [pods, back].map(|pods| LedgerCommand::MarkBound { shard, epoch, pods })
        }
        LedgerCommand::Release {
            shard,
            epoch,
            mut pods,
            reason,
        } if pods.len() > 1 => {
            let back = pods.split_off(pods.len() / 2);
            [pods, back].map(|pods| LedgerCommand::Release {
                shard,
                epoch,
                pods,
                reason,
            })
        }
        whole => return Ok(vec![whole]),
    };
    let mut out = Vec::new();
    for half in halves {
        out.extend(pieces_of(half, budget)?);
    }
    Ok(out)
}

/// One response per original command from the responses to its pieces, given as
/// `(index, gang names of the piece, response)` in order. A command proposed whole keeps
/// its response. A cut `PlaceGangs` answers every gang of every piece (a piece refused as
/// a whole refuses each of its gangs; all refused alike stays one refusal); a cut
/// `MarkBound` / `Release` sums its counts, or is refused if any piece was.
pub fn merge(
    count: usize,
    answered: Vec<(usize, Vec<String>, LedgerResponse)>,
) -> Vec<LedgerResponse> {
    let mut parts: Vec<Vec<(Vec<String>, LedgerResponse)>> = vec![Vec::new(); count];
    for (index, gangs, response) in answered {
        if let Some(p) = parts.get_mut(index) {
            p.push((gangs, response));
        }
    }
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(merge_one)
        .collect()
}

fn merge_one(mut parts: Vec<(Vec<String>, LedgerResponse)>) -> LedgerResponse {
    if parts.len() == 1 {
        return parts.remove(0).1;
    }
    let refusals: Vec<&LedgerResponse> = parts
        .iter()
        .map(|(_, r)| r)
        .filter(|r| matches!(r, LedgerResponse::Refused(_)))
        .collect();
    if refusals.len() == parts.len() || !parts.iter().any(|(_, r)| is_gangs(r)) {
        if let Some(first) = refusals.first() {
            return (*first).clone();
        }
        return sum_pods(&parts);
    }
    let mut outcomes: Vec<GangOutcome> = Vec::new();
    for (gangs, response) in parts {
        match response {
            LedgerResponse::Gangs(g) => outcomes.extend(g),
            LedgerResponse::Refused(reason) => {
                outcomes.extend(gangs.into_iter().map(|gang| GangOutcome {
                    gang,
                    decision: GangDecision::Refused(reason.clone()),
                }))
            }
            other => return other,
        }
    }
    LedgerResponse::Gangs(outcomes)
}

fn is_gangs(r: &LedgerResponse) -> bool {
    matches!(r, LedgerResponse::Gangs(_))
}

fn sum_pods(parts: &[(Vec<String>, LedgerResponse)]) -> LedgerResponse {
    let (mut changed, mut unchanged) = (0u32, 0u32);
    for (_, r) in parts {
        match r {
            LedgerResponse::Pods {
                changed: c,
                unchanged: u,
            } => {
                changed = changed.saturating_add(*c);
                unchanged = unchanged.saturating_add(*u);
            }
            other => return other.clone(),
        }
    }
    LedgerResponse::Pods { changed, unchanged }
}

/// The gang names a piece carries (for answering a cut `PlaceGangs` refused as a whole).
pub fn gang_names(command: &LedgerCommand) -> Vec<String> {
    match command {
        LedgerCommand::PlaceGangs { gangs, .. } => gangs.iter().map(|g| g.gang.clone()).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use phalanx_statestore::ledger::ReleaseReason;
    use phalanx_statestore::{GangPlacement, PodPlacement, Refusal, ResourceVec};

    fn gang(i: usize, pods: usize) -> GangPlacement {
        GangPlacement {
            gang: format!("default/job-{i:05}"),
            pods: (0..pods)
                .map(|p| PodPlacement {
                    pod: format!("default/job-{i:05}-worker-{p}"),
                    node: format!("node-{:05}", (i + p) % 20_000),
                    resources: ResourceVec::from_pairs([("nvidia.com/gpu", 1)]),
                })
                .collect(),
        }
    }

    fn place(gangs: Vec<GangPlacement>) -> LedgerCommand {
        LedgerCommand::PlaceGangs {
            shard: 0,
            epoch: 1,
            gangs,
        }
    }

    fn batch_bytes(batch: &[Piece]) -> usize {
        let commands: Vec<LedgerCommand> = batch.iter().map(|p| p.command.clone()).collect();
        serde_json::to_vec(&phalanx_statestore::LedgerBatch { commands })
            .expect("serializes")
            .len()
    }

    #[test]
    fn a_plan_larger_than_a_proposal_is_cut_into_batches_under_the_limit_in_order() {
        // 12 commands of 1,024 gangs of 8 pods: about 9 MB, over two proposals' worth.
        let commands: Vec<LedgerCommand> = (0..12)
            .map(|c| place((0..1024).map(|g| gang(c * 1024 + g, 8)).collect()))
            .collect();
        let total: usize = commands.iter().map(|c| encoded_len(c).expect("ok")).sum();
        assert!(total > 2 * MAX_PROPOSAL_BYTES, "{total}");
        let batches = split_for_ledger(commands, 256).expect("splits");
        assert!(batches.len() >= 3, "{}", batches.len());
        let mut names = Vec::new();
        for b in &batches {
            assert!(batch_bytes(b) <= MAX_PROPOSAL_BYTES, "{}", batch_bytes(b));
            names.extend(b.iter().flat_map(|p| gang_names(&p.command)));
        }
        let expected: Vec<String> = (0..12 * 1024)
            .map(|i| format!("default/job-{i:05}"))
            .collect();
        assert_eq!(names, expected, "every gang once, in order");
    }

    #[test]
    fn one_command_over_the_limit_is_cut_by_gangs_and_answered_as_one() {
        let command = place((0..64).map(|g| gang(g, 64)).collect());
        let size = encoded_len(&command).expect("ok");
        let batches = split(vec![command], 256, size / 3).expect("splits");
        let pieces: Vec<&Piece> = batches.iter().flatten().collect();
        assert!(pieces.len() >= 3, "{}", pieces.len());
        assert!(pieces.iter().all(|p| p.index == 0));
        // The second piece is refused as a whole (a stale epoch): its gangs are refused,
        // the others keep their verdicts, in order.
        let stale = Refusal::StaleEpoch {
            shard: 0,
            proposed: 1,
            current: 2,
        };
        let answered: Vec<(usize, Vec<String>, LedgerResponse)> = pieces
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let names = gang_names(&p.command);
                let response = if i == 1 {
                    LedgerResponse::Refused(stale.clone())
                } else {
                    LedgerResponse::Gangs(
                        names
                            .iter()
                            .map(|gang| GangOutcome {
                                gang: gang.clone(),
                                decision: GangDecision::Accepted,
                            })
                            .collect(),
                    )
                };
                (p.index, names, response)
            })
            .collect();
        let merged = merge(1, answered);
        let [LedgerResponse::Gangs(outcomes)] = &merged[..] else {
            panic!("{merged:?}")
        };
        assert_eq!(outcomes.len(), 64);
        let refused = outcomes.iter().filter(|o| !o.is_accepted()).count();
        assert_eq!(refused, gang_names(&pieces[1].command).len());
    }

    #[test]
    fn a_cut_release_sums_its_counts_and_small_commands_stay_whole() {
        let pods: Vec<String> = (0..1000).map(|i| format!("default/pod-{i}")).collect();
        let release = LedgerCommand::Release {
            shard: 3,
            epoch: 2,
            pods,
            reason: ReleaseReason::Finished,
        };
        let expire = LedgerCommand::ExpireAt { now_ms: 5 };
        let batches = split(vec![release, expire.clone()], 256, 8_000).expect("splits");
        let pieces: Vec<&Piece> = batches.iter().flatten().collect();
        assert!(pieces.len() >= 4);
        assert_eq!(pieces.last().map(|p| &p.command), Some(&expire));
        let answered = pieces
            .iter()
            .map(|p| {
                let r = match &p.command {
                    LedgerCommand::Release { pods, .. } => LedgerResponse::Pods {
                        changed: u32::try_from(pods.len()).expect("small"),
                        unchanged: 0,
                    },
                    _ => LedgerResponse::Expired {
                        aborted: Vec::new(),
                    },
                };
                (p.index, Vec::new(), r)
            })
            .collect();
        let merged = merge(2, answered);
        assert_eq!(
            merged[0],
            LedgerResponse::Pods {
                changed: 1000,
                unchanged: 0
            }
        );
        assert!(matches!(merged[1], LedgerResponse::Expired { .. }));
    }
}
