//! Which nodes run chained in one task, and which edges become channels.
//!
//! An edge `u → v` is *chained* when chaining is on, the edge is not partitioned by key, `u`
//! and `v` have the same parallelism, and `v` reads nothing else. Chained nodes run in the same
//! task, one call apart. Every other edge becomes bounded channels: one per pair of subtasks that
//! can exchange records (`i → i` for forward edges, all pairs otherwise).

use super::PlanNode;

/// Which task each node runs in.
#[derive(Clone, Debug)]
pub struct Chaining {
    /// Per node: its chain.
    pub chain_of: Vec<usize>,
    /// Per chain: its nodes in topological order (the first is the root).
    pub members: Vec<Vec<usize>>,
    /// Per node, per input edge: whether the edge is chained.
    pub chained: Vec<Vec<bool>>,
}

/// Decides the chains of a plan.
pub fn chaining(chaining_on: bool, nodes: &[PlanNode]) -> Chaining {
    let mut chain_of = vec![0; nodes.len()];
    let mut members: Vec<Vec<usize>> = Vec::new();
    let mut chained = Vec::with_capacity(nodes.len());
    for (v, node) in nodes.iter().enumerate() {
        let edge_chained: Vec<bool> = node
            .inputs
            .iter()
            .map(|e| {
                chaining_on
                    && node.inputs.len() == 1
                    && e.key.is_none()
                    && nodes[e.from].parallelism == node.parallelism
            })
            .collect();
        if let (Some(true), Some(e)) = (edge_chained.first(), node.inputs.first()) {
            chain_of[v] = chain_of[e.from];
            members[chain_of[v]].push(v);
        } else {
            chain_of[v] = members.len();
            members.push(vec![v]);
        }
        chained.push(edge_chained);
    }
    Chaining {
        chain_of,
        members,
        chained,
    }
}
