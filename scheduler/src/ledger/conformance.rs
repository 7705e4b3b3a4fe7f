//! The contract of the [`PlacementLedger`] seam, one suite for every implementation: the
//! in-process state machine (one replica) and the replicated ledger (Raft on loopback) must
//! answer the same way, so `--replicas` never changes what is placed.

use super::{PlacementLedger, ReleaseReason, Verdict, check_ledger};
use crate::framework::{GangPlacement, Placement};
use crate::model::{Node, ObjectKey, Pod, Resources};

fn gpu(n: i64) -> Resources {
    Resources::from_pairs([("nvidia.com/gpu", n)])
}

fn gang(name: &str, pods: &[(&str, &str)]) -> GangPlacement {
    GangPlacement {
        gang: ObjectKey::new("default", name),
        placements: pods
            .iter()
            .map(|(pod, node)| Placement {
                pod: ObjectKey::new("default", *pod),
                node: (*node).to_string(),
                resources: gpu(1),
            })
            .collect(),
    }
}

fn key(name: &str) -> ObjectKey {
    ObjectKey::new("default", name)
}

/// Runs every check against a fresh ledger; returns the failures (empty = conforms).
pub fn check(ledger: &mut dyn PlacementLedger) -> Vec<String> {
    let mut failures = Vec::new();
    let mut expect = |what: &str, ok: bool, detail: String| {
        if !ok {
            failures.push(format!("{what}: {detail}"));
        }
    };
    let nodes = [Node::new("n1", gpu(2)), Node::new("n2", gpu(1))];
    let mut running = Pod::new(key("x"), gpu(1));
    running.node_name = Some("n2".into());
    let node_refs: Vec<&Node> = nodes.iter().collect();
    let loaded = ledger.load(&node_refs, &[&running]);
    expect(
        "load nodes and a running pod",
        loaded.as_ref().is_ok_and(Vec::is_empty),
        format!("{loaded:?}"),
    );

    let v = ledger.commit(&[gang("g1", &[("a", "n1"), ("b", "n1")])]);
    expect(
        "a gang that fits is accepted whole",
        v.as_ref().is_ok_and(|v| v == &[Verdict::Accepted]),
        format!("{v:?}"),
    );
    let r = ledger.mark_bound(&[key("a"), key("b")]);
    expect("binds are recorded", r.is_ok(), format!("{r:?}"));
    let r = ledger.mark_bound(&[key("b")]);
    expect(
        "recording a bind twice is a no-op",
        r.is_ok(),
        format!("{r:?}"),
    );

    let v = ledger.commit(&[gang("g2", &[("c", "n2")])]);
    let refused = |v: &Result<Vec<Verdict>, _>, needle: &str| matches!(v, Ok(v) if matches!(&v[..], [Verdict::Refused(why)] if why.contains(needle)));
    expect(
        "a pod on a node full of another scheduler's pod is refused, naming the resource",
        refused(&v, "nvidia.com/gpu"),
        format!("{v:?}"),
    );
    let v = ledger.commit(&[gang("g1", &[("a", "n1"), ("b", "n1")])]);
    expect(
        "a pod placed twice is refused",
        matches!(&v, Ok(v) if matches!(&v[..], [Verdict::Refused(_)])),
        format!("{v:?}"),
    );
    let v = ledger.commit(&[gang("g3", &[("d", "n1"), ("e", "n2")])]);
    expect(
        "a gang is refused whole when one pod does not fit",
        matches!(&v, Ok(v) if matches!(&v[..], [Verdict::Refused(_)])),
        format!("{v:?}"),
    );

    let r = ledger.release(&[key("a")], ReleaseReason::Finished);
    expect(
        "a finished pod's placement is released",
        r.is_ok(),
        format!("{r:?}"),
    );
    let r = ledger.release(&[key("nobody")], ReleaseReason::Finished);
    expect(
        "releasing an unknown pod is a no-op",
        r.is_ok(),
        format!("{r:?}"),
    );
    let v = ledger.commit(&[gang("g4", &[("d", "n1")])]);
    expect(
        "released capacity can be placed again",
        v.as_ref().is_ok_and(|v| v == &[Verdict::Accepted]),
        format!("{v:?}"),
    );

    match ledger.state() {
        Ok(state) => {
            let mut held: Vec<&String> = state.placements.keys().collect();
            held.sort();
            expect(
                "the ledger holds exactly the live placements",
                held == ["default/b", "default/d", "default/x"],
                format!("{held:?}"),
            );
            let problems = check_ledger(&state);
            expect(
                "the ledger's own checks hold",
                problems.is_empty(),
                format!("{problems:?}"),
            );
        }
        Err(e) => expect("the state can be read", false, e.to_string()),
    }
    failures
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{LocalLedger, RaftLedger};

    #[test]
    fn the_in_process_ledger_conforms() {
        let failures = check(&mut LocalLedger::new());
        assert!(failures.is_empty(), "{failures:#?}");
    }

    #[test]
    fn the_replicated_ledger_conforms() {
        let mut ledger = RaftLedger::start(3).expect("three replicas start on loopback");
        let failures = check(&mut ledger);
        assert!(failures.is_empty(), "{failures:#?}");
    }
}
