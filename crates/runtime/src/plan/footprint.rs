//! What a plan's channels cost in memory before any record flows, checked against the machine
//! when the job is planned (`weir validate`, `weir run`, a server's submit).
//!
//! A subtask costs little (a task, its operator, a few buffers): a job of 1,024 subtasks per
//! node chained by forward edges runs in 51 MB. The channels between subtasks are what grows:
//! an exchange (a `key-by`, or a change of parallelism) links every subtask of one side to
//! every subtask of the other, so its channels are the product of the two parallelisms, a
//! million at 1,024 into 1,024. Each is a bounded queue allocated whole when the job starts,
//! its slots included, and a receiver's bookkeeping: about 1.7 KiB at the default
//! `channel-capacity` of 8 (`weir run` of a generator job with one exchange: 75 MB at
//! parallelism 128, 162 MB at 256, 498 MB at 512, 1.84 GB at 1,024; the growth is the
//! channels'). So the plan's channels are counted and a job whose channels would take more than
//! a quarter of the machine's memory is refused, naming the widest exchange, rather than left
//! to take the machine's memory and be killed.

use super::Plan;
use crate::api::Message;
use crate::config::units::{ByteSize, group};

/// What one channel takes beyond its slots: the queue's shared state (its head and tail on
/// cache lines of their own, the wakers of both ends) and the receiving gate's entry.
/// Measured with the slots: 1,747 bytes per channel at capacity 8 (the module's figures).
const CHANNEL_OVERHEAD: u64 = 1_200;

/// The share of the machine's memory a job's channels may take.
const MEMORY_SHARE: u64 = 4;

/// The channels of a plan and the widest exchange among them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Channels {
    /// Every channel between two subtasks.
    pub count: u64,
    /// The exchange with the most: the consuming node, its producer's parallelism and its own.
    pub widest: Option<(String, usize, usize)>,
}

/// How the subtasks of an edge's two sides are linked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wiring {
    /// The two nodes run in one task: calls, no channel.
    Chained,
    /// Subtask i to subtask i, one channel each (no key, the same parallelism).
    Forward,
    /// Every subtask of one side to every subtask of the other (a key, or a change of
    /// parallelism).
    Exchange,
}

/// How input `k` of node `v` is linked: the one rule `exec::instantiate` makes the channels
/// by and [`channels`] counts them by.
pub fn wiring(plan: &Plan, v: usize, k: usize) -> Wiring {
    let chained = plan
        .chains
        .chained
        .get(v)
        .and_then(|c| c.get(k))
        .copied()
        .unwrap_or(false);
    let node = &plan.nodes[v];
    match node.inputs.get(k) {
        _ if chained => Wiring::Chained,
        Some(edge)
            if edge.key.is_none() && plan.nodes[edge.from].parallelism == node.parallelism =>
        {
            Wiring::Forward
        }
        _ => Wiring::Exchange,
    }
}

/// Counts the channels `plan` makes when it starts: one per subtask on a forward edge, the
/// product of the two sides' parallelisms on an exchange, none on a chained edge (by
/// [`wiring`], as `exec::instantiate` makes them).
pub fn channels(plan: &Plan) -> Channels {
    let mut count = 0u64;
    let mut widest: Option<(String, usize, usize, u64)> = None;
    for (v, node) in plan.nodes.iter().enumerate() {
        for (k, edge) in node.inputs.iter().enumerate() {
            let up = plan.nodes[edge.from].parallelism;
            let n = match wiring(plan, v, k) {
                Wiring::Chained => continue,
                Wiring::Forward => up as u64,
                Wiring::Exchange => (up as u64).saturating_mul(node.parallelism as u64),
            };
            count = count.saturating_add(n);
            if wiring(plan, v, k) == Wiring::Exchange && widest.as_ref().is_none_or(|w| n > w.3) {
                widest = Some((node.name.clone(), up, node.parallelism, n));
            }
        }
    }
    Channels {
        count,
        widest: widest.map(|(name, up, down, _)| (name, up, down)),
    }
}

/// The bytes `count` channels of `capacity` slots take before any record flows.
pub fn channel_bytes(count: u64, capacity: u32) -> u64 {
    let slot = std::mem::size_of::<Message>() as u64 + 8;
    count.saturating_mul(CHANNEL_OVERHEAD + u64::from(capacity) * slot)
}

/// Why `plan`'s channels do not fit a machine of `memory` bytes, if they do not.
pub fn refusal(plan: &Plan, memory: u64) -> Option<String> {
    let channels = channels(plan);
    let bytes = channel_bytes(channels.count, plan.spec.channel_capacity);
    let allowed = memory / MEMORY_SHARE;
    if bytes <= allowed {
        return None;
    }
    let widest = match &channels.widest {
        Some((node, up, down)) => format!(
            " (the widest: {up} subtasks into {down} at `{node}`, {} channels)",
            group(*up as u64 * *down as u64)
        ),
        None => String::new(),
    };
    Some(format!(
        "the job's subtasks would be linked by {} channels{widest}, about {} of memory before \
         any record flows, more than a quarter of this machine's {}: lower `parallelism` (an \
         exchange, a `key-by` or a change of parallelism, links every subtask of one side to \
         every subtask of the other, so its channels are the product of the two), or \
         `channel-capacity`",
        group(channels.count),
        ByteSize(bytes),
        ByteSize(memory)
    ))
}

/// The memory this process may use: the machine's (`MemTotal`), or its control group's limit
/// when that is lower. `None` where neither can be read (not Linux): nothing is refused then.
pub fn machine_memory() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|rest| rest.trim().strip_suffix("kB"))
                .and_then(|kb| kb.trim().parse::<u64>().ok())
        })
        .map(|kb| kb.saturating_mul(1024));
    // cgroup v2: the limit, or "max" for none.
    let limit = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok());
    match (total, limit) {
        (Some(t), Some(l)) => Some(t.min(l)),
        (t, l) => t.or(l),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(text: &str) -> Plan {
        let loaded = crate::spec::load::parse_str("wide.yaml", text, &[]).unwrap();
        crate::plan::build(&loaded).unwrap()
    }

    const JOB: &str = "name: wide
parallelism: 64
sources:
  nexmark: {kind: nexmark, events: 10}
transforms:
  by: {kind: key-by, from: nexmark.bid, keys: [auction]}
  counts: {kind: aggregate, from: by, aggregates: {n: count(*)}}
  narrow: {kind: filter, from: counts, where: n > 1, parallelism: 2}
  same: {kind: filter, from: narrow, where: n > 2, parallelism: 2}
sinks:
  out: {kind: blackhole, from: same}
";

    #[test]
    fn exchanges_cost_the_product_of_their_sides_and_forward_edges_one_per_subtask() {
        let p = plan(JOB);
        let c = channels(&p);
        // Counted by hand: the local aggregate is chained to the source; nexmark→counts is
        // 64×64; counts→narrow changes parallelism, 64×2; narrow→out changes it back (the
        // sink has the job's), 2×64; narrow→same is chained (forward, equal parallelism).
        assert_eq!(c.count, 64 * 64 + 64 * 2 + 2 * 64, "{c:?}");
        assert_eq!(c.widest, Some(("counts".into(), 64, 64)));
        // Unchained, the forward edges count one channel per subtask: the source into the
        // local aggregate, 64, and narrow into same, 2.
        let unchained = channels(&plan(
            &JOB.replace("parallelism: 64\n", "parallelism: 64\nchaining: false\n"),
        ));
        assert_eq!(unchained.count, c.count + 64 + 2, "{unchained:?}");
    }

    #[test]
    fn a_job_whose_channels_take_more_than_a_quarter_of_memory_is_refused() {
        let p = plan(JOB);
        let bytes = channel_bytes(channels(&p).count, p.spec.channel_capacity);
        assert!(refusal(&p, bytes * 4).is_none());
        let why = refusal(&p, bytes * 4 - 4).expect("refused");
        assert!(why.contains("64 subtasks into 64 at `counts`"), "{why}");
        assert!(why.contains("`parallelism`"), "{why}");
        assert!(why.contains("4,352 channels"), "{why}");
        let explained = p.explain();
        let header = explained.lines().next().unwrap_or_default();
        assert!(
            header.ends_with(&format!(
                "after chaining, 4,352 channels between subtasks (about {})",
                ByteSize(channel_bytes(4352, 8))
            )),
            "{header}"
        );
    }

    #[test]
    fn this_machines_memory_is_read() {
        if cfg!(target_os = "linux") {
            assert!(machine_memory().is_some_and(|m| m > 1 << 20));
        }
    }
}
