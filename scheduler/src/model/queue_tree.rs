//! The queue hierarchy of Volcano's `capacity` plugin: `spec.parent` links every queue to
//! the queue above it, and a queue without one hangs under `root` (which a workload need
//! not declare). Built and checked in one place so that the loader (an error naming the
//! queue, the field and the value) and a running scheduler (the plugin refuses to schedule
//! and says why, as Volcano's does) agree on what a valid hierarchy is.

use super::queue::{Queue, ROOT_QUEUE};
use super::resources::Resources;

/// Index of a queue in the slice the tree was built from.
pub type QueueIndex = usize;

/// Parents and children by index; `None` as a parent is `root` itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueTree {
    /// The declared `root` queue, if the workload has one.
    pub root: Option<QueueIndex>,
    /// Per queue: its parent (`None` for `root` and for children of an undeclared `root`).
    pub parent: Vec<Option<QueueIndex>>,
    /// Per queue: its children, in index order.
    pub children: Vec<Vec<QueueIndex>>,
    /// Children of `root`, declared or not.
    pub top: Vec<QueueIndex>,
}

/// A hierarchy that cannot be scheduled: which queue, which field, which value, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HierarchyError {
    pub queue: String,
    pub field: String,
    pub value: String,
    pub problem: String,
}

impl std::fmt::Display for HierarchyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Queue {}, {} {:?}: {}",
            self.queue, self.field, self.value, self.problem
        )
    }
}

impl QueueTree {
    /// Links the queues; refuses a parent that names no queue, a `root` with a parent, and
    /// a cycle of parents.
    pub fn build(queues: &[Queue]) -> Result<Self, HierarchyError> {
        let index = |name: &str| queues.iter().position(|q| q.name == name);
        let root = index(ROOT_QUEUE);
        let mut parent = vec![None; queues.len()];
        for (i, q) in queues.iter().enumerate() {
            let Some(p) = q.parent.as_deref() else {
                continue;
            };
            let error = |problem: String| HierarchyError {
                queue: q.name.clone(),
                field: "spec.parent".into(),
                value: p.to_string(),
                problem,
            };
            if q.name == ROOT_QUEUE {
                return Err(error("the root queue has no parent".into()));
            }
            match index(p) {
                Some(j) if j == i => return Err(error("a queue cannot be its own parent".into())),
                Some(j) => parent[i] = Some(j),
                None => return Err(error("names no Queue".into())),
            }
        }
        for (i, q) in queues.iter().enumerate() {
            if root != Some(i) && parent[i].is_none() {
                parent[i] = root;
            }
            let mut path = vec![i];
            let mut at = parent[i];
            while let Some(j) = at {
                if path.contains(&j) {
                    let names: Vec<&str> = path
                        .iter()
                        .chain(std::iter::once(&j))
                        .map(|&k| queues[k].name.as_str())
                        .collect();
                    return Err(HierarchyError {
                        queue: q.name.clone(),
                        field: "spec.parent".into(),
                        value: q.parent.clone().unwrap_or_default(),
                        problem: format!("the parents form a cycle: {}", names.join(" -> ")),
                    });
                }
                path.push(j);
                at = parent[j];
            }
        }
        let mut children = vec![Vec::new(); queues.len()];
        let mut top = Vec::new();
        for (i, p) in parent.iter().enumerate() {
            match *p {
                Some(p) => children[p].push(i),
                None if root != Some(i) => top.push(i),
                None => {}
            }
        }
        if let Some(r) = root {
            top = children[r].clone();
        }
        Ok(Self {
            root,
            parent,
            children,
            top,
        })
    }

    /// Ancestors of `queue`, nearest first, ending with the declared `root` if any.
    pub fn ancestors(&self, queue: QueueIndex) -> Vec<QueueIndex> {
        let mut out = Vec::new();
        let mut at = self.parent[queue];
        while let Some(p) = at {
            out.push(p);
            at = self.parent[p];
        }
        out
    }

    pub fn is_leaf(&self, queue: QueueIndex) -> bool {
        self.children[queue].is_empty()
    }

    /// Checks that the children of every queue but `root` together guarantee no more than
    /// it does (`root`'s guarantee is the sum of its children's, as in Volcano).
    pub fn check_guarantees(&self, queues: &[Queue]) -> Result<(), HierarchyError> {
        for (p, kids) in self.children.iter().enumerate() {
            if Some(p) == self.root || kids.is_empty() {
                continue;
            }
            let mut sum = Resources::new();
            for &k in kids {
                sum.add(&queues[k].guarantee);
            }
            let own = &queues[p].guarantee;
            if let Some((name, want, have)) = sum.first_shortage(own) {
                let names: Vec<&str> = kids.iter().map(|&k| queues[k].name.as_str()).collect();
                return Err(HierarchyError {
                    queue: queues[p].name.clone(),
                    field: format!("spec.guarantee.resource.{name}"),
                    value: crate::model::resources::format_amount(name.as_str(), have),
                    problem: format!(
                        "its children ({}) guarantee {} together, more than it does",
                        names.join(", "),
                        crate::model::resources::format_amount(name.as_str(), want)
                    ),
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue(name: &str, parent: Option<&str>) -> Queue {
        let mut q = Queue::new(name);
        q.parent = parent.map(str::to_string);
        q
    }

    #[test]
    fn queues_without_a_parent_hang_under_an_undeclared_root() {
        let qs = [queue("a", None), queue("b", Some("a")), queue("c", None)];
        let tree = QueueTree::build(&qs).expect("valid");
        assert_eq!(tree.top, vec![0, 2]);
        assert_eq!(tree.children[0], vec![1]);
        assert_eq!(tree.ancestors(1), vec![0]);
        assert!(tree.is_leaf(1) && !tree.is_leaf(0));
    }

    #[test]
    fn a_declared_root_is_every_top_queues_parent() {
        let qs = [queue("root", None), queue("a", None), queue("b", Some("a"))];
        let tree = QueueTree::build(&qs).expect("valid");
        assert_eq!(tree.top, vec![1]);
        assert_eq!(tree.ancestors(2), vec![1, 0]);
    }

    #[test]
    fn a_missing_parent_is_an_error_naming_queue_field_and_value() {
        let err = QueueTree::build(&[queue("a", Some("nope"))]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Queue a, spec.parent \"nope\": names no Queue"
        );
    }

    #[test]
    fn a_cycle_of_parents_is_an_error_listing_the_cycle() {
        let qs = [queue("a", Some("b")), queue("b", Some("a"))];
        let err = QueueTree::build(&qs).unwrap_err();
        assert_eq!(err.queue, "a");
        assert!(err.problem.contains("a -> b -> a"), "{err}");
    }

    #[test]
    fn children_guaranteeing_more_than_their_parent_is_an_error() {
        use crate::model::resources::CPU;
        let mut parent = queue("p", None);
        parent.guarantee = Resources::from_pairs([(CPU, 4_000)]);
        let mut a = queue("a", Some("p"));
        a.guarantee = Resources::from_pairs([(CPU, 3_000)]);
        let mut b = queue("b", Some("p"));
        b.guarantee = Resources::from_pairs([(CPU, 2_000)]);
        let qs = [parent, a, b];
        let tree = QueueTree::build(&qs).expect("links are valid");
        let err = tree.check_guarantees(&qs).unwrap_err();
        assert_eq!(err.queue, "p");
        assert_eq!(err.field, "spec.guarantee.resource.cpu");
        assert_eq!(err.value, "4");
        assert!(err.problem.contains("5"), "{err}");
        // Within the parent's guarantee it is fine.
        let mut ok = qs.clone();
        ok[2].guarantee = Resources::from_pairs([(CPU, 1_000)]);
        assert!(QueueTree::build(&ok).unwrap().check_guarantees(&ok).is_ok());
    }
}
