//! Placement: the partition of a session key, which partitions a node should hold, and
//! which nodes keep a copy of a partition (its replica set).
//!
//! Both are pure functions of their inputs, so every node that sees the same live nodes and
//! owners computes the same answer, and no node needs to agree with another to decide what
//! to try: the leases (compare-and-set in JetStream) settle who actually holds what.

use std::collections::{BTreeMap, BTreeSet};

/// A partition number, `0..partitions`.
pub type Partition = u32;

/// The partition of `session_key`: CRC-32 (IEEE) of its UTF-8 bytes modulo `partitions`.
/// Fixed by design — std's hasher is seeded per process, and a hash that changed between
/// nodes or versions would put one session on two owners. `partitions` is at least 1 (the
/// config refuses 0); 0 is treated as 1 rather than dividing by zero.
pub fn partition_of(session_key: &str, partitions: u32) -> Partition {
    crc32fast::hash(session_key.as_bytes()) % partitions.max(1)
}

/// How many partitions `me` should hold: `partitions` split evenly over the live nodes, the
/// remainder going one each to the first nodes in id order. So every node holds
/// `floor(partitions / n)` or `ceil(partitions / n)`, the shares add up to `partitions`,
/// and all nodes compute the same shares. `me` counts as live even if `live` lacks it.
pub fn target(me: &str, live: &BTreeSet<String>, partitions: u32) -> u32 {
    let (index, count) = position(me, live);
    let base = partitions / count;
    let extra = partitions % count;
    base + u32::from(index < extra)
}

/// The nodes that keep a copy of `partition`: its owner (if it has one) first, then the live
/// nodes ranked by rendezvous (highest-random-weight) hashing of (partition, node id), until
/// there are `replicas` (or no more live nodes). Rendezvous hashing needs no coordination
/// and moves little: a node joining takes only the places where it outranks a current
/// standby, a node leaving gives up only its own, and each node ranks first for about the
/// same share of partitions. `replicas` 0 counts as 1.
pub fn replica_set(
    partition: Partition,
    owner: Option<&str>,
    live: &BTreeSet<String>,
    replicas: u32,
) -> Vec<String> {
    let want = replicas.max(1) as usize;
    let mut set: Vec<String> = owner.map(str::to_string).into_iter().collect();
    let mut ranked: Vec<(u64, &String)> = live
        .iter()
        .filter(|n| Some(n.as_str()) != owner)
        .map(|n| (weight(partition, n), n))
        .collect();
    // Highest weight first; the id breaks (astronomically unlikely) ties the same everywhere.
    ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    for (_, node) in ranked {
        if set.len() >= want {
            break;
        }
        set.push(node.clone());
    }
    set
}

/// Whether `me` keeps a copy of `partition` (see [`replica_set`]).
pub fn replicates(
    me: &str,
    partition: Partition,
    owner: Option<&str>,
    live: &BTreeSet<String>,
    replicas: u32,
) -> bool {
    replica_set(partition, owner, live, replicas)
        .iter()
        .any(|n| n == me)
}

/// The rendezvous weight of `node` for `partition`: FNV-1a (64 bits) of the node id and the
/// partition's bytes, then SplitMix64's finaliser to spread FNV's weak high bits. Fixed by
/// design, like [`partition_of`]: every node and version must rank the same way.
fn weight(partition: Partition, node: &str) -> u64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = FNV_OFFSET;
    for byte in node.bytes().chain([0xff]).chain(partition.to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash = (hash ^ (hash >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    hash = (hash ^ (hash >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    hash ^ (hash >> 31)
}

/// What one balancing step asks of a node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Free partitions to try to acquire, in the order to try them.
    pub acquire: Vec<Partition>,
    /// Held partitions to give up.
    pub release: Vec<Partition>,
}

/// One balancing step for `me`: with `mine` held and `owners` the partitions others hold
/// (by node id; an entry naming `me` that is not in `mine` is someone else's, e.g. an earlier
/// run of this node, and waits for its lease to expire), acquire free partitions up to
/// [`target`] or release the surplus beyond it.
///
/// Each node scans the partitions from its own offset (`index * partitions / n`), so nodes
/// going for free partitions at the same time mostly try different ones; it releases the
/// partitions last in that order, so it keeps the ones it would have picked first. Free
/// partitions in `standby` (those `me` keeps a copy of, so has mostly applied already) come
/// first: a takeover by a standby waits for little catching up.
pub fn plan(
    me: &str,
    live: &BTreeSet<String>,
    owners: &BTreeMap<Partition, String>,
    mine: &BTreeSet<Partition>,
    standby: &BTreeSet<Partition>,
    partitions: u32,
) -> Plan {
    let want = target(me, live, partitions);
    let (index, count) = position(me, live);
    let offset = (u64::from(index) * u64::from(partitions) / u64::from(count)) as u32;
    let order = (0..partitions)
        .map(|k| ((u64::from(offset) + u64::from(k)) % u64::from(partitions.max(1))) as u32);
    let held = mine.len() as u32;
    let mut result = Plan::default();
    if held < want {
        let mut free: Vec<Partition> = order
            .filter(|p| !mine.contains(p) && !owners.contains_key(p))
            .collect();
        // Stable: within each group the offset order stays.
        free.sort_by_key(|p| !standby.contains(p));
        free.truncate((want - held) as usize);
        result.acquire = free;
    } else if held > want {
        let mut in_order: Vec<Partition> = order.filter(|p| mine.contains(p)).collect();
        // Partitions held beyond `partitions` (a config change) go first.
        in_order.extend(mine.iter().copied().filter(|p| *p >= partitions));
        result.release = in_order
            .into_iter()
            .rev()
            .take((held - want) as usize)
            .collect();
    }
    result
}

/// `me`'s index among the live nodes (with `me` added) and their count (at least 1).
fn position(me: &str, live: &BTreeSet<String>) -> (u32, u32) {
    let below = live.iter().filter(|n| n.as_str() < me).count() as u32;
    let count = live.len() as u32 + u32::from(!live.contains(me));
    (below, count.max(1))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn nodes(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn the_partition_is_crc32_of_the_key() {
        // CRC-32/IEEE's published check value: the hash must never change.
        assert_eq!(crc32fast::hash(b"123456789"), 0xCBF4_3926);
        assert_eq!(partition_of("123456789", 64), 0xCBF4_3926 % 64);
        assert_eq!(partition_of("123456789", 0xCBF4_3927), 0xCBF4_3926);
        assert_eq!(partition_of("anything", 1), 0);
        assert_eq!(partition_of("anything", 0), 0);
    }

    #[test]
    fn shares_split_the_partitions_over_the_live_nodes() {
        let live = nodes(&["a", "b", "c"]);
        let shares: Vec<u32> = ["a", "b", "c"]
            .iter()
            .map(|n| target(n, &live, 10))
            .collect();
        assert_eq!(shares, vec![4, 3, 3]);
        assert_eq!(target("b", &live, 12), 4);
        // A node not yet in the view counts itself.
        assert_eq!(target("d", &live, 12), 3);
        assert_eq!(target("a", &BTreeSet::new(), 12), 12);
        assert_eq!(target("c", &live, 2), 0);
    }

    #[test]
    fn a_node_takes_free_partitions_from_its_offset_and_gives_up_the_last_ones() {
        let live = nodes(&["a", "b"]);
        let owners: BTreeMap<Partition, String> = (0..2).map(|p| (p, "a".to_string())).collect();
        // b starts at 8 / 2 * 1 = 4.
        let step = plan("b", &live, &owners, &BTreeSet::new(), &BTreeSet::new(), 8);
        assert_eq!(step.acquire, vec![4, 5, 6, 7]);
        assert!(step.release.is_empty());
        let all: BTreeSet<Partition> = (0..8).collect();
        let step = plan("a", &live, &BTreeMap::new(), &all, &BTreeSet::new(), 8);
        assert_eq!(step.release, vec![7, 6, 5, 4]);
        assert!(step.acquire.is_empty());
        // A standby's partitions go first, the rest in offset order.
        let standby: BTreeSet<Partition> = [1, 6].into();
        let step = plan("b", &live, &owners, &BTreeSet::new(), &standby, 8);
        assert_eq!(step.acquire, vec![6, 4, 5, 7]);
    }

    #[test]
    fn the_replica_set_is_the_owner_then_the_highest_weights() {
        let live = nodes(&["a", "b", "c", "d"]);
        for p in 0..64 {
            let set = replica_set(p, Some("c"), &live, 2);
            assert_eq!(set.len(), 2);
            assert_eq!(set[0], "c");
            assert_ne!(set[1], "c");
            // The same answer every time, and from a view listing the nodes in any order.
            assert_eq!(set, replica_set(p, Some("c"), &live.clone(), 2));
            let unowned = replica_set(p, None, &live, 2);
            assert_eq!(unowned.len(), 2);
            assert!(replicates(&unowned[1], p, None, &live, 2));
            // One replica: the owner alone; more than the live nodes: all of them.
            assert_eq!(replica_set(p, Some("c"), &live, 1), vec!["c".to_string()]);
            assert_eq!(replica_set(p, Some("c"), &live, 9).len(), 4);
            // An owner the view does not list as live still comes first.
            assert_eq!(replica_set(p, Some("z"), &live, 2)[0], "z");
        }
        // The weights are fixed: a change would move every standby of a running cluster.
        assert_eq!(weight(0, "a"), weight(0, "a"));
        assert_ne!(weight(0, "a"), weight(1, "a"));
        assert_ne!(weight(0, "a"), weight(0, "b"));
    }

    #[test]
    fn standbys_are_balanced_and_move_little() {
        let names: Vec<String> = (0..5).map(|i| format!("node-{i}")).collect();
        let live: BTreeSet<String> = names.iter().cloned().collect();
        let partitions = 1000;
        let mut firsts: BTreeMap<String, u32> = BTreeMap::new();
        for p in 0..partitions {
            let set = replica_set(p, None, &live, 1);
            *firsts.entry(set[0].clone()).or_default() += 1;
        }
        // 200 each expected; a fair hash stays well within ±25 %.
        for n in &names {
            let share = firsts.get(n).copied().unwrap_or(0);
            assert!((150..=250).contains(&share), "{n}: {share} of {partitions}");
        }
        // A node joining or leaving changes only the sets it enters or leaves.
        let mut bigger = live.clone();
        bigger.insert("node-new".into());
        let mut smaller = live.clone();
        smaller.remove("node-2");
        let (mut joined, mut left) = (0, 0);
        for p in 0..partitions {
            let before = replica_set(p, None, &live, 2);
            let after_join = replica_set(p, None, &bigger, 2);
            if before != after_join {
                joined += 1;
                assert!(after_join.contains(&"node-new".to_string()), "{p}");
            }
            let after_leave = replica_set(p, None, &smaller, 2);
            if before != after_leave {
                left += 1;
                assert!(before.contains(&"node-2".to_string()), "{p}");
            }
            for n in &before {
                if n != "node-2" {
                    assert!(after_leave.contains(n), "{p}: {n} moved");
                }
            }
        }
        // About 2/6 of the sets gain the new node, 2/5 lose node-2.
        assert!(joined < partitions / 2, "{joined}");
        assert!(left < partitions / 2, "{left}");
    }

    /// Applies plans node by node with a consistent view until nobody changes anything.
    fn settle(names: &[String], partitions: u32) -> BTreeMap<Partition, String> {
        let live: BTreeSet<String> = names.iter().cloned().collect();
        let mut owners: BTreeMap<Partition, String> = BTreeMap::new();
        for _round in 0..=(names.len() * 2 + 2) {
            let mut changed = false;
            for me in names {
                let mine: BTreeSet<Partition> = owners
                    .iter()
                    .filter(|(_, o)| *o == me)
                    .map(|(p, _)| *p)
                    .collect();
                let others: BTreeMap<Partition, String> = owners
                    .iter()
                    .filter(|(_, o)| *o != me)
                    .map(|(p, o)| (*p, o.clone()))
                    .collect();
                let step = plan(me, &live, &others, &mine, &BTreeSet::new(), partitions);
                for p in &step.release {
                    assert_eq!(owners.remove(p).as_deref(), Some(me.as_str()));
                }
                for p in &step.acquire {
                    assert!(owners.insert(*p, me.clone()).is_none(), "{p} was taken");
                }
                changed |= !step.acquire.is_empty() || !step.release.is_empty();
            }
            if !changed {
                return owners;
            }
        }
        panic!("no fixpoint for {names:?} over {partitions}");
    }

    proptest! {
        #[test]
        fn plans_only_touch_what_they_may(
            partitions in 1u32..200,
            others in proptest::collection::btree_map(0u32..200, 0usize..4, 0..100),
            mine in proptest::collection::btree_set(0u32..200, 0..100),
            live_count in 1usize..5,
        ) {
            let names = ["n0", "n1", "n2", "n3", "n4"];
            let live: BTreeSet<String> = names[..live_count].iter().map(|n| n.to_string()).collect();
            let owners: BTreeMap<Partition, String> = others
                .into_iter()
                .filter(|(p, _)| *p < partitions && !mine.contains(p))
                .map(|(p, n)| (p, names[n + 1].to_string()))
                .collect();
            let standby: BTreeSet<Partition> = (0..partitions).filter(|p| p % 3 == 0).collect();
            let step = plan("n0", &live, &owners, &mine, &standby, partitions);
            prop_assert_eq!(&step, &plan("n0", &live, &owners, &mine, &standby, partitions));
            let want = target("n0", &live, partitions) as usize;
            for p in &step.acquire {
                prop_assert!(*p < partitions && !owners.contains_key(p) && !mine.contains(p));
            }
            for p in &step.release {
                prop_assert!(mine.contains(p));
            }
            prop_assert!(step.acquire.is_empty() || step.release.is_empty());
            let after = mine.len() + step.acquire.len() - step.release.len();
            let free = (0..partitions).filter(|p| !owners.contains_key(p) && !mine.contains(p)).count();
            prop_assert_eq!(after, want.min(mine.len() + free));
        }

        #[test]
        fn nodes_with_one_view_settle_on_even_shares(
            partitions in 1u32..300,
            count in 1usize..7,
        ) {
            let names: Vec<String> = (0..count).map(|i| format!("node-{i}")).collect();
            let owners = settle(&names, partitions);
            prop_assert_eq!(owners.len() as u32, partitions);
            let live: BTreeSet<String> = names.iter().cloned().collect();
            for n in &names {
                let held = owners.values().filter(|o| *o == n).count() as u32;
                prop_assert_eq!(held, target(n, &live, partitions));
                prop_assert!(held == partitions / count as u32 || held == partitions.div_ceil(count as u32));
            }
        }
    }
}
