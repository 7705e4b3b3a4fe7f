//! The fragmentation figure: how much of the free GPU capacity is stranded for the work
//! that is actually asked for.
//!
//! The *most common gang shape* is the per-pod request that most GPU gangs have (ties: the
//! larger GPU count, then the text of the request, so the choice is stable). A free GPU is
//! *fragmented* when it sits on a node whose free resources cannot host one pod of that
//! shape: it is free, yet the common work cannot use it. The *largest gang that fits now*
//! is how many pods of that shape the free resources hold, node by node.

use crate::framework::SessionState;
use crate::model::Resources;

/// The figure for one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fragmentation {
    /// The most common per-pod GPU request among the gangs; `None`: no gang asks for GPUs.
    pub shape: Option<Resources>,
    /// Free GPUs on schedulable nodes.
    pub free_gpus: i64,
    /// Of those, the GPUs on nodes that cannot host one pod of `shape`.
    pub fragmented_gpus: i64,
    /// Pods of `shape` that fit in the free resources now (0 without a shape).
    pub largest_gang_pods: i64,
}

impl Fragmentation {
    /// `fragmented_gpus / free_gpus`; 0 when nothing is free or no gang asks for GPUs.
    pub fn ratio(&self) -> f64 {
        if self.free_gpus <= 0 || self.shape.is_none() {
            return 0.0;
        }
        self.fragmented_gpus as f64 / self.free_gpus as f64
    }
}

/// The figure from each schedulable node's free resources and each gang's per-pod request.
pub fn fragmentation(free: &[Resources], gang_shapes: &[Resources]) -> Fragmentation {
    let free_gpus: i64 = free.iter().map(|f| f.gpus().max(0)).sum();
    let Some(shape) = most_common_shape(gang_shapes) else {
        return Fragmentation {
            free_gpus,
            ..Fragmentation::default()
        };
    };
    let fragmented_gpus = free
        .iter()
        .filter(|f| !shape.fits_in(f))
        .map(|f| f.gpus().max(0))
        .sum();
    let largest_gang_pods = free.iter().map(|f| copies_that_fit(&shape, f)).sum();
    Fragmentation {
        shape: Some(shape),
        free_gpus,
        fragmented_gpus,
        largest_gang_pods,
    }
}

/// The per-pod request most gangs asking for GPUs have.
fn most_common_shape(shapes: &[Resources]) -> Option<Resources> {
    let mut counts: Vec<(&Resources, usize)> = Vec::new();
    for shape in shapes.iter().filter(|s| s.gpus() > 0) {
        match counts.iter_mut().find(|(s, _)| *s == shape) {
            Some((_, n)) => *n += 1,
            None => counts.push((shape, 1)),
        }
    }
    counts
        .into_iter()
        .max_by(|(a, n), (b, m)| {
            n.cmp(m)
                .then(a.gpus().cmp(&b.gpus()))
                .then_with(|| b.to_string().cmp(&a.to_string()))
        })
        .map(|(s, _)| s.clone())
}

/// How many pods asking for `shape` fit in `free` (each resource asked for bounds it).
fn copies_that_fit(shape: &Resources, free: &Resources) -> i64 {
    shape
        .iter()
        .filter(|(_, want)| *want > 0)
        .map(|(name, want)| free.get(name.as_str()).max(0) / want)
        .min()
        .unwrap_or(0)
}

/// The figure for a session's state: free resources of the schedulable nodes, and the
/// per-pod request of each gang (its first task that asks for something).
pub fn of_state(state: &SessionState) -> Fragmentation {
    let free: Vec<Resources> = state
        .nodes
        .iter()
        .filter(|n| !n.node.unschedulable)
        .map(|n| n.idle.clone())
        .collect();
    let shapes: Vec<Resources> = state
        .jobs
        .iter()
        .filter(|j| !j.shadow)
        .filter_map(|j| {
            j.tasks
                .iter()
                .map(|&t| &state.tasks[t])
                .find(|t| !t.is_best_effort())
                .map(|t| t.resreq().clone())
        })
        .collect();
    fragmentation(&free, &shapes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(cpu_milli: i64, gpu: i64) -> Resources {
        Resources::from_pairs([("cpu", cpu_milli), ("nvidia.com/gpu", gpu)])
    }

    #[test]
    fn free_gpus_on_nodes_too_small_for_the_common_shape_are_fragmented() {
        // Common shape: 4 GPUs per pod (two gangs) over one 1-GPU gang.
        let shapes = [gpus(1000, 4), gpus(1000, 4), gpus(1000, 1)];
        // Node a: 8 free (two pods); b: 3 free (none); c: 2 free (none).
        let free = [gpus(8000, 8), gpus(8000, 3), gpus(8000, 2)];
        let f = fragmentation(&free, &shapes);
        assert_eq!(f.shape, Some(gpus(1000, 4)));
        assert_eq!(f.free_gpus, 13);
        assert_eq!(f.fragmented_gpus, 5);
        assert_eq!(f.largest_gang_pods, 2);
        assert!((f.ratio() - 5.0 / 13.0).abs() < 1e-12);
    }

    #[test]
    fn a_node_short_of_cpu_strands_its_gpus_too() {
        let shapes = [gpus(4000, 2)];
        // 8 GPUs free but only 2 CPUs: no pod of the shape fits there.
        let free = [gpus(2000, 8), gpus(8000, 2)];
        let f = fragmentation(&free, &shapes);
        assert_eq!(f.fragmented_gpus, 8);
        assert_eq!(f.largest_gang_pods, 1);
        assert!((f.ratio() - 0.8).abs() < 1e-12);
    }

    #[test]
    fn a_cluster_whose_free_gpus_all_fit_the_shape_is_not_fragmented() {
        let f = fragmentation(&[gpus(16000, 8), gpus(16000, 8)], &[gpus(1000, 8)]);
        assert_eq!((f.fragmented_gpus, f.largest_gang_pods), (0, 2));
        assert_eq!(f.ratio(), 0.0);
    }

    #[test]
    fn without_gpu_gangs_or_free_gpus_the_ratio_is_zero() {
        let cpu_only = Resources::from_pairs([("cpu", 1000)]);
        let f = fragmentation(&[gpus(8000, 4)], &[cpu_only]);
        assert_eq!((f.shape.clone(), f.free_gpus, f.ratio()), (None, 4, 0.0));
        let full = fragmentation(&[gpus(8000, 0)], &[gpus(1000, 1)]);
        assert_eq!(
            (full.free_gpus, full.largest_gang_pods, full.ratio()),
            (0, 0, 0.0)
        );
    }

    #[test]
    fn a_tie_between_shapes_picks_the_larger_gpu_request() {
        let shapes = [gpus(1000, 1), gpus(1000, 2)];
        let f = fragmentation(&[gpus(8000, 3)], &shapes);
        assert_eq!(f.shape, Some(gpus(1000, 2)));
        assert_eq!((f.fragmented_gpus, f.largest_gang_pods), (0, 1));
    }
}
